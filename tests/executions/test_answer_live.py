"""An answer for a run that is still live in this runtime (another step keeps it going):
the asking task takes it at once and the run goes on, without waiting to end first (R8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
import mainspring.executions  # loaded before any event loop runs

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
    from ._memory_kit import store_spec

    yield from (spec.target for spec in store_spec(request.param, tmp_path))


_ROOT = Path(__file__).resolve().parents[2]
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
