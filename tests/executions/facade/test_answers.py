"""An answer for a run that is still live in this runtime (another step keeps it going):
the asking task takes it at once and the run goes on, without waiting to end first (R8)."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import mainspring as ms
import mainspring.executions  # loaded before any event loop runs

from ..._postgres import (
    drop_schema,
    fresh_schema,
    postgres_url,  # noqa: F401 - a fixture
    require_server,
    with_schema,
)
from .. import _shared
from .._answer_host import Host, answerer

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", ["sqlite", "files"])
async def test_an_answer_reaches_the_task_of_a_run_live_here(tmp_path: Path, kind: str) -> None:
    release = anyio.Event()
    asked = anyio.Event()
    answers: list[str] = []

    async def busy() -> str:
        await release.wait()
        return "done"

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        asked.set()
        answer = await ctx.ask("which city?")
        answers.append(answer)
        release.set()  # the other step may finish only once the answer arrived
        return answer

    plan = ms.Plan(
        id="p",
        goal="g",
        steps=(ms.PlanStep(id="ask", agent="asker"), ms.PlanStep(id="busy", tool="busy")),
    )
    store = tmp_path / ("s.sqlite3" if kind == "sqlite" else "files")
    async with ms.open_runtime(store=store, tools={"busy": busy}, agents={"asker": asker}) as rt:
        handle = await rt.start("g", plan, execution_id="ex-live")
        await asked.wait()
        with anyio.fail_after(30):
            while True:
                tasks = await rt.agent_tasks("ex-live")
                if tasks and tasks[0].state == "waiting_for_clarification":
                    break
                await anyio.sleep(0.02)
        again = await rt.resume("ex-live", answer="Lisbon")
        assert again is handle  # the same live run, not a second one
        with anyio.fail_after(30):
            result = await handle.wait()
        record = await rt.get("ex-live")
    assert result.status == "completed", result
    assert result.outputs == {"ask": "Lisbon", "busy": "done"}
    assert answers == ["Lisbon"]
    assert record is not None
    assert [c.action for c in record.controls].count("answer") == 1


async def test_an_answer_with_no_question_open_is_refused_while_the_run_is_live(
    tmp_path: Path,
) -> None:
    release = anyio.Event()

    async def busy() -> str:
        await release.wait()
        return "done"

    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="busy", tool="busy"),))
    async with ms.open_runtime(store=tmp_path / "s.sqlite3", tools={"busy": busy}) as rt:
        handle = await rt.start("g", plan, execution_id="ex-live")
        with pytest.raises(ms.executions.NotWaiting):
            await rt.resume("ex-live", answer="nobody asked")
        release.set()
        assert (await handle.wait()).status == "completed"
        record = await rt.get("ex-live")
    assert record is not None
    assert record.answer_requests == ()


# -- Runtime.answer: from anywhere, for whichever runtime runs or next resumes the run ---------

SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Where two runtimes (two hosts) meet: a SQLite file, or a PostgreSQL schema."""
    from .._memory_kit import store_spec

    yield from (spec.target for spec in store_spec(request.param, tmp_path))


_ROOT = Path(__file__).resolve().parents[3]
FAST = {"lease_ttl": 5.0, "heartbeat_interval": 0.05}


async def _waiting_task(rt: ms.Runtime, execution_id: str) -> None:
    with anyio.fail_after(60):
        while True:
            tasks = await rt.agent_tasks(execution_id)
            if tasks and tasks[0].state == "waiting_for_clarification":
                return
            await anyio.sleep(0.02)


async def test_r8_an_answer_from_another_runtime_reaches_the_live_waiting_run(
    shared_store: Any,
) -> None:
    release = anyio.Event()
    answers: list[str] = []

    async def busy() -> str:
        await release.wait()
        return "done"

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        answer = await ctx.ask("which city?")
        answers.append(answer)
        release.set()
        return answer

    plan = ms.Plan(
        id="p",
        goal="g",
        steps=(ms.PlanStep(id="ask", agent="asker"), ms.PlanStep(id="busy", tool="busy")),
    )
    async with (
        ms.open_runtime(
            store=shared_store, tools={"busy": busy}, agents={"asker": asker}, **FAST
        ) as rt,
        ms.open_runtime(store=shared_store, **FAST) as other,  # no agents: just the store
    ):
        handle = await rt.start("g", plan, execution_id="ex-live")
        await _waiting_task(rt, "ex-live")
        await other.answer("ex-live", f"Lisbon {SECRET}")
        with anyio.fail_after(60):
            result = await handle.wait()
        record = await rt.get("ex-live")
    assert result.status == "completed", result
    assert answers == ["Lisbon [redacted github-token]"]  # E5: as stored
    assert record is not None
    assert SECRET not in repr(record)
    assert [c.action for c in record.controls].count("answer") == 1


@pytest.mark.parametrize("how", ["resume", "recover"])
async def test_r5_an_answer_stored_for_a_waiting_run_is_used_by_the_next_resume(
    shared_store: Any, how: str
) -> None:
    answers: list[str] = []

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        answer = await ctx.ask("which city?")
        answers.append(answer)
        return answer

    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="ask", agent="asker"),))
    # recover=False: the resume or recover() here is what gives the answer (with its own
    # recovery on, the runtime would take the answered run over by itself: see below).
    async with ms.open_runtime(
        store=shared_store, agents={"asker": asker}, recover=False, **FAST
    ) as rt:
        first = await (await rt.start("g", plan, execution_id="ex-w")).wait()
        assert first.status == "waiting_for_clarification"
        async with ms.open_runtime(store=shared_store, **FAST) as other:
            await other.answer("ex-w", "Porto")
        waiting = await rt.get("ex-w")
        assert waiting is not None
        assert waiting.status == "waiting_for_clarification"  # stored, nothing ran
        assert [r.answer for r in waiting.answer_requests] == ["Porto"]
        with anyio.fail_after(60):
            if how == "resume":
                result = await (await rt.resume("ex-w")).wait()
            else:
                (handle,) = await rt.recover()
                result = await handle.wait()
    assert result.status == "completed", result
    assert result.outputs == {"ask": "Porto"}
    assert answers == ["Porto"]


async def test_r10_an_answer_stored_for_the_runs_own_question_joins_the_goal(
    tmp_path: Path,
) -> None:
    goals: list[str] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        goals.append(goal)
        if "Clarification" not in goal:
            raise ms.ClarificationNeeded("which city?")
        return ms.Plan(id="p", goal=goal, steps=(ms.PlanStep(id="t", tool="noop"),))

    async def noop() -> str:
        return "ok"

    store = tmp_path / "s.sqlite3"
    async with ms.open_runtime(store=store, planner=planner, tools={"noop": noop}) as rt:
        first = await (await rt.start("book a hotel", execution_id="ex-o")).wait()
        assert first.status == "waiting_for_clarification"
        await rt.answer("ex-o", "Lisbon")
        with pytest.raises(ms.ExecutionBusy):  # one answer per question: not dropped
            await rt.answer("ex-o", "Faro")
        with anyio.fail_after(60):
            result = await (await rt.resume("ex-o")).wait()
        record = await rt.get("ex-o")
    assert result.status == "completed", result
    assert record is not None
    assert record.goal == "book a hotel\n\nClarification: Lisbon"
    assert goals[-1] == record.goal
    assert record.answer_requests == ()  # taken once: a later question is not answered by it


async def test_r4_an_answer_to_a_run_not_waiting_is_refused_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    release = anyio.Event()

    async def busy() -> str:
        await release.wait()
        return "done"

    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="busy", tool="busy"),))
    store = tmp_path / "s.sqlite3"
    async with ms.open_runtime(store=store, tools={"busy": busy}) as rt:
        # Running, no question open: refused here and from another runtime.
        handle = await rt.start("g", plan, execution_id="ex-run")
        async with ms.open_runtime(store=store) as other:
            with pytest.raises(ms.executions.NotWaiting) as refused:
                await other.answer("ex-run", "nobody asked")
            with pytest.raises(ms.executions.NotWaiting):
                await other.resume("ex-run", answer="nobody asked")
        assert refused.value.status in ("planned", "running")
        with pytest.raises(ms.executions.NotWaiting):
            await rt.answer("ex-run", "nobody asked")
        with pytest.raises(ms.executions.NotWaiting):
            await rt.resume("ex-run", answer="nobody asked")
        release.set()
        assert (await handle.wait()).status == "completed"
        # Completed: the answer is not silently dropped (R4 returns the result without one).
        with pytest.raises(ms.executions.NotWaiting) as done:
            await rt.resume("ex-run", answer="too late")
        assert (done.value.execution_id, done.value.status) == ("ex-run", "completed")
        with pytest.raises(ms.executions.NotWaiting):
            await rt.answer("ex-run", "too late")
        # Cancelled likewise.
        await rt.start("g", plan, execution_id="ex-c")
        await rt.cancel("ex-c")
        with pytest.raises(ms.executions.NotWaiting) as cancelled:
            await rt.answer("ex-c", "too late")
        assert cancelled.value.status == "cancelled"
        with pytest.raises(ms.executions.NotWaiting):
            await rt.resume("ex-c", answer="too late")
        with pytest.raises(ms.UnknownExecution):
            await rt.answer("ex-nope", "hello")
        records = [await rt.get("ex-run"), await rt.get("ex-c")]
    for record in records:
        assert record is not None
        assert record.answer_requests == ()
        assert "answer" not in [c.action for c in record.controls]


@pytest.mark.parametrize("shared_store", ["sqlite", "postgres"], indirect=True)
async def test_r8_l8_an_answer_from_the_shell_to_a_waiting_run_goes_on_by_itself(
    shared_store: Any,
) -> None:
    """The server's runtime holds the app; an operator answers from the shell
    (`mainspring answer`, another process, no --app): the run waiting in the server goes on
    with that answer, no request to the server needed (its recovery takes it, L8)."""
    import os
    import subprocess
    import sys

    answered = anyio.Event()
    answers: list[str] = []

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        answers.append(await ctx.ask("which city?"))
        answered.set()
        return answers[-1]

    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="ask", agent="asker"),))
    async with ms.open_runtime(store=shared_store, agents={"asker": asker}, **FAST) as rt:
        first = await (await rt.start("g", plan, execution_id="ex-sh")).wait()
        assert first.status == "waiting_for_clarification"
        where = str(shared_store)
        done = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mainspring.cli",
                    "answer",
                    "ex-sh",
                    "Oslo",
                    "--store",
                    where,
                ],
                env={**os.environ, "PYTHONPATH": str(_ROOT)},
                capture_output=True,
                text=True,
                timeout=120,
            )
        )
        assert done.returncode == 0, done.stderr
        with anyio.fail_after(60):
            await answered.wait()  # taken over by the runtime's own recovery
            (handle,) = await rt.recover()  # what it took since: reported once
            result = await handle.wait()
    assert answers == ["Oslo"]
    assert result.status == "completed"
    assert result.outputs == {"ask": "Oslo"}


# ----------------------------------------------------------------------
# ``Runtime.answer``'s input (``executions._answers``): an answer is text with a UTF-8
# form, refused before anything is read or written otherwise (R8, E5).


async def _asks(ctx: ms.AgentContext, input: Any) -> str:
    return await ctx.ask("which city?")


async def test_R8_an_answer_with_no_utf8_form_is_refused_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asks"),))
    async with ms.open_runtime(store=tmp_path / "s.sqlite3", agents={"asks": _asks}) as rt:
        result = await (await rt.start("g", plan, execution_id="ex-1")).wait()
        assert result.status == "waiting_for_clarification"
        before = await rt.get("ex-1")
        with pytest.raises(ValueError, match="UTF-8"):
            await rt.answer("ex-1", "caf\udce9")
        with pytest.raises(TypeError):
            await rt.answer("ex-1", b"Lisbon")  # type: ignore[arg-type]
        assert await rt.get("ex-1") == before
        await rt.answer("ex-1", "Lisbon")  # still open for a good answer
        done = await (await rt.resume("ex-1")).wait()
    assert (done.status, done.outputs) == ("completed", {"a": "Lisbon"})


async def test_E8_a_question_whose_task_record_is_unreadable_is_not_called_answered(
    tmp_path: Path,
) -> None:
    """The run waits on a question whose agent task's record no longer parses (E8: kept as
    an Unreadable). An answer is then not 'an answer already stored, waiting for its task'
    (ExecutionBusy, exit code 4 in the CLI: come back later): nothing was stored, and
    waiting never helps. Whatever the runtime decides, it must not say that."""
    import attrs

    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asks"),))
    store = ms.storage.SqliteStore(tmp_path / "s.sqlite3")
    async with ms.open_runtime(store=store, agents={"asks": _asks}) as rt:
        result = await (await rt.start("g", plan, execution_id="ex-1")).wait()
    assert result.status == "waiting_for_clarification"
    stored = store.get("ex-1")
    assert stored is not None
    (task,) = stored.agent_tasks
    assert type(task) is ms.storage.AgentTaskRecord
    raw = {**ms.storage._seam.unstructure(task), "written_by_a_newer_version": 1}
    unreadable = ms.storage.Unreadable(raw=raw, key=task.id)
    assert store.acquire("ex-1", "tester", 30).acquired
    assert store.replace(attrs.evolve(stored, agent_tasks=(unreadable,)), "tester")
    assert store.release("ex-1", "tester")
    async with ms.open_runtime(store=store, agents={"asks": _asks}) as rt:
        for attempt in (
            lambda: rt.answer("ex-1", "Lisbon"),
            lambda: rt.resume("ex-1", answer="Lisbon"),
        ):
            try:
                await attempt()
            except ms.ExecutionBusy as exc:
                pytest.fail(f"an unreadable task's question is called answered: {exc}")
            except ms.MainspringError:
                pass  # refused saying something else: fine


# ----------------------------------------------------------------------
# Answers for a run live in this runtime (``request_answer``), on SQLite and
# PostgreSQL: two agent tasks asking at once (R9: the slot passes on).


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "s.sqlite3")
        return
    url = require_server()
    schema = fresh_schema()
    try:
        yield with_schema(url, schema)
    finally:
        drop_schema(schema)


async def _waiting(rt: ms.Runtime, execution_id: str, n: int) -> list[Any]:
    with anyio.fail_after(30):
        while True:
            tasks = [
                t
                for t in await rt.agent_tasks(execution_id)
                if t.state == "waiting_for_clarification"
            ]
            if len(tasks) >= n:
                return tasks
            await anyio.sleep(0.02)


async def test_R9_two_tasks_asking_two_answers_in_a_row_reach_both_tasks(store: str) -> None:
    """Two agent tasks ask while a third step keeps the run live. The user answers the
    question shown (the first task's), then at once answers again: the second answer is for
    the question that now holds the slot (R9), the second task's. ``request_answer`` returns
    as soon as the first answer is written (before the runner took it and passed the slot
    on), so the second is written against the same, stale, pending slot: for the first task
    again, where it is dropped (same ask) — while the caller was handed the run as accepted.
    Either the second answer reaches the second task, or the caller is refused."""
    release = anyio.Event()
    answers: dict[str, str] = {}

    async def busy() -> str:
        await release.wait()
        return "done"

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        answer = await ctx.ask(f"question of {input['who']}")
        answers[input["who"]] = answer
        if len(answers) == 2:
            release.set()
        return answer

    plan = ms.Plan(
        id="p",
        goal="g",
        steps=(
            ms.PlanStep(id="one", agent="asker", input={"who": "one"}),
            ms.PlanStep(id="two", agent="asker", input={"who": "two"}),
            ms.PlanStep(id="busy", tool="busy"),
        ),
    )
    async with ms.open_runtime(store=store, tools={"busy": busy}, agents={"asker": asker}) as rt:
        handle = await rt.start("g", plan, execution_id="ex-two")
        await _waiting(rt, "ex-two", 2)
        waiting = await _waiting(rt, "ex-two", 2)
        first_asker = min(waiting, key=lambda t: (t.created_at, t.id))
        second_asker = next(t for t in waiting if t.id != first_asker.id)
        await rt.resume("ex-two", answer="first")
        await rt.resume("ex-two", answer="second")  # accepted: the caller is handed the run
        record = await rt.get("ex-two")
        assert record is not None
        targets = [r.task_id for r in record.answer_requests]
        if len(targets) == 2:  # both went through the record: the second must target task two
            assert targets == [first_asker.id, second_asker.id], targets
        with anyio.fail_after(30):
            await release.wait()  # set by the agent once both tasks have their answers
        with anyio.fail_after(30):
            result = await handle.wait()
    assert answers == {"one": "first", "two": "second"}
    assert result.status == "completed"


# ----------------------------------------------------------------------
# Answers for a run live on another host (R8 across hosts, ``_answers.py``).
#
# Host A (a process of its own, 60 s heartbeat) runs ``_shared.ASKING``: its agent asks while
# another step keeps the run live. A is frozen with SIGSTOP once the question is stored, so
# what the other hosts write lands before A's runner can take it; SIGCONT lets A go on.

ID = "ex-ask"


def _host(url: str) -> AbstractAsyncContextManager[ms.Runtime]:
    return ms.open_runtime(
        store=url, tools=_shared.TOOLS, agents=_shared.AGENTS, **_shared.SLOW_HEARTBEAT
    )


async def _until(rt: ms.Runtime, ok: Callable[[ms.storage.Execution], bool]) -> None:
    with anyio.fail_after(60):
        while True:
            record = await rt.get(ID)
            if record is not None and ok(record):
                return
            await anyio.sleep(0.05)


def _waiting_answers(record: ms.storage.Execution) -> bool:
    tasks, _ = ms.storage._seam.parse_agent_tasks(record)
    return bool(tasks) and tasks[0].state == "waiting_for_clarification"


@asynccontextmanager
async def _frozen_asker(url: str) -> AsyncIterator[Host]:
    """Host A with its question stored and its process frozen (SIGSTOP)."""
    a = Host(url, ID, plan="asking")
    try:
        assert await a.next_line() == "entered"
        async with _host(url) as watcher:
            await _until(watcher, _waiting_answers)
        os.kill(a.proc.pid, signal.SIGSTOP)
        yield a
    finally:
        if a.proc.poll() is None:
            os.kill(a.proc.pid, signal.SIGCONT)
        await anyio.to_thread.run_sync(a.finish)


async def test_R8_two_hosts_answering_one_question_only_one_answer_is_accepted(
    postgres_url: str,  # noqa: F811
) -> None:
    """B and C both answer A's one question. One answer is given to the agent; the other
    caller must be told its answer was not used (ExecutionBusy, as for an answer with no
    question open) and the audit must not say the question was answered twice. Today both
    writes are accepted (``answer_request_edit`` only checks the task still waits, not that
    an answer for that ask is already pending) and both callers get a handle back."""
    outcomes: dict[str, str] = {}
    async with _frozen_asker(postgres_url) as a, _host(postgres_url) as b, _host(postgres_url) as c:

        async def answer(rt: ms.Runtime, text: str) -> None:
            try:
                await rt.resume(ID, answer=text)
                outcomes[text] = "accepted"
            except ms.ExecutionBusy:
                outcomes[text] = "refused"

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer, b, "Lisbon")
            await _until(b, lambda r: len(r.answer_requests) == 1)
            tg.start_soon(answer, c, "Porto")
            # Either C's answer is refused at once, or (today) it is written too.
            with anyio.fail_after(60):
                while "Porto" not in outcomes:
                    record = await b.get(ID)
                    assert record is not None
                    if len(record.answer_requests) == 2:
                        break
                    await anyio.sleep(0.05)
            os.kill(a.proc.pid, signal.SIGCONT)
        assert await a.next_line() == "answered Lisbon"
        record = await b.get(ID)
        assert record is not None
        await b.cancel(ID, reason="done")
    assert outcomes == {"Lisbon": "accepted", "Porto": "refused"}
    assert [ctl.action for ctl in record.controls].count("answer") == 1


async def test_R5_an_answer_written_for_a_run_then_paused_is_applied_by_the_next_resume(
    postgres_url: str,  # noqa: F811
) -> None:
    """B answers while A is frozen (the answer is written to the record); C then pauses the
    run before A could take it; A wakes and pauses. ``_answers.py`` promises "If the runner
    ends before taking it, the next resume applies the stored request, so an answer is never
    lost". But ``_resume`` with no answer returns early for a paused run whose pending
    question belongs to an agent task (R5), before ``prepare_resume`` would apply the stored
    request: B's own follow-up resume (``how == "released"``) and every later one leave the run
    waiting, the answer unused."""
    async with _frozen_asker(postgres_url) as a, _host(postgres_url) as b, _host(postgres_url) as c:
        got: list[ms.ExecutionHandle] = []

        async def answer() -> None:
            got.append(await b.resume(ID, answer="Lisbon"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer)
            await _until(b, lambda r: len(r.answer_requests) == 1)
            paused = await c.pause(ID, reason="from C")
            assert paused.status == "paused"
            os.kill(a.proc.pid, signal.SIGCONT)
        assert await a.next_line() == "reason Pause"
        first = await got[0].wait()
        # The caller's answer went somewhere: either the run went on with it, or a resume
        # of the paused run does.
        if first.status != "completed":
            again = await (await b.resume(ID)).wait()
        else:
            again = first
        record = await b.get(ID)
        assert record is not None
    assert again.status == "completed", (first.status, again.status, record.pending)
    assert again.outputs["ask"] == "Lisbon"


async def test_L4_an_answer_from_a_host_whose_clock_is_ahead_is_not_reported_busy(
    postgres_url: str,  # noqa: F811
) -> None:
    """Host B's clock is an hour fast. B answers A's question (A frozen a moment, so B's
    check runs before A takes it). The answer is written, and A takes it once it wakes —
    yet B's call raises ExecutionBusy: ``wait_taken`` decides whether A's lease is live on
    B's clock (``holder(stored.lease, time.time())``, executions/_answers.py), sees it lapsed,
    treats it as released and resumes, which the server (its own clock) refuses. A caller told
    "busy" answers again, or gives up on an answer that was in fact used."""
    async with _frozen_asker(postgres_url) as a, _host(postgres_url) as watcher:
        b = answerer(postgres_url, ID, "Lisbon", skew=3600.0)
        try:
            await _until(watcher, lambda r: len(r.answer_requests) == 1)  # B's answer written
            os.kill(a.proc.pid, signal.SIGCONT)
            assert await a.next_line() == "answered Lisbon"  # A used it
            said = await anyio.to_thread.run_sync(lambda: b.communicate(timeout=120)[0])
        finally:
            if b.poll() is None:
                b.kill()
                b.wait()
        await watcher.cancel(ID, reason="done")
    assert said.strip().startswith("handle"), said
