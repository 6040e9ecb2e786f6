"""Review 13: smaller contract breaks of #12 — empty ids, base exceptions out of
open_system / open_runtime, lease bounds, findings' structure, question and answer times,
Crash's type as a field."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from tests.executions._kit import Gate, agent, plan_of, runtime, stored, tasks_of, tool

_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.anyio


async def test_start_refuses_an_empty_execution_id_and_stores_nothing(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(ms.storage.InvalidId):
            await rt.start("g", plan_of(tool("a", "inc")), execution_id="")
        assert await rt.executions() == []


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
async def test_a_base_exception_leaves_open_runtime_unwrapped_and_the_run_resumable(
    tmp_path: Path, error: type[BaseException]
) -> None:
    gate = Gate()
    ids: list[str] = []
    with pytest.raises(error) as caught:  # noqa: PT012
        async with runtime(tmp_path, tools={"gate": gate}) as rt:
            handle = await rt.start("g", plan_of(tool("g1", "gate")))
            ids.append(handle.execution_id)
            await gate.entered.wait()
            raise error(3) if error is SystemExit else error()
    assert type(caught.value) is error
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel | ms.Shutdown)
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    record = store.get(ids[0])
    assert record is not None
    assert record.status == "running"
    assert record.lease is None or record.lease.owner == ""  # released: recoverable at once


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
async def test_a_base_exception_leaves_open_system_unwrapped_with_nothing_running(
    error: type[BaseException],
) -> None:
    stopped: list[ms.CancelReason] = []

    class Sleeper(ms.Actor):
        async def receive(self, message: Any) -> None:
            await anyio.sleep_forever()

        async def on_stop(self, reason: ms.CancelReason) -> None:
            stopped.append(reason)

    with pytest.raises(error) as caught:  # noqa: PT012
        async with ms.open_system(shutdown_timeout=0.2) as system:
            ref = await system.spawn(Sleeper, name="s")
            await ref.tell("go")
            await anyio.lowlevel.checkpoint()
            raise error(3) if error is SystemExit else error()
    assert type(caught.value) is error
    assert not ref.is_alive
    assert len(stopped) == 1


@pytest.mark.parametrize("ttl", [True, "5", math.nan, math.inf, 0.999, 600.001, -1, 0, None, [5]])
async def test_lease_ttl_out_of_bounds_or_not_a_number_is_refused_clearly(
    tmp_path: Path, ttl: Any
) -> None:
    with pytest.raises((ValueError, TypeError), match="lease_ttl"):
        async with runtime(tmp_path, lease_ttl=ttl):
            pass  # pragma: no cover


@pytest.mark.parametrize("ttl", [1, 1.0, 600, 600.0])
async def test_lease_ttl_at_its_bounds_is_accepted(tmp_path: Path, ttl: Any) -> None:
    async with runtime(tmp_path, lease_ttl=ttl) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "inc")))).wait()
    assert result.status == "completed"


async def test_heartbeat_interval_nan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="heartbeat_interval"):
        async with runtime(tmp_path, heartbeat_interval=math.nan):
            pass  # pragma: no cover


async def test_findings_carry_structure_ids_provenance_and_status(tmp_path: Path) -> None:
    async def finder(ctx: ms.AgentContext, input: Any) -> str:
        ctx.report_finding(
            "the wind is strong",
            evidence=[{"kind": "file", "ref": "notes.md", "detail": "line 3", "step_id": "read"}],
            confidence=0.8,
        )
        ctx.report_finding("old claim", status="superseded", superseded_by=f"{ctx.task_id}.f1")
        for bad in (
            {"evidence": ["a plain string"]},
            {"evidence": [{"ref": "no kind"}]},
            {"evidence": [{"kind": "file", "extra": 1}]},
            {"status": "bogus"},
            {"provenance": {"execution_id": "x", "plan_version": 1}},
            {"task_id": "someone-else"},
        ):
            try:
                ctx.report_finding("bad", **bad)
            except (TypeError, ValueError):
                continue
            raise AssertionError(f"accepted {bad}")
        return "found"

    async with runtime(tmp_path, agents={"finder": finder}) as rt:
        result = await (await rt.start("g", plan_of(agent("f", "finder")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    (task,) = tasks_of(record)
    first, second = task.findings
    assert first.evidence == (
        ms.storage.Evidence(kind="file", ref="notes.md", detail="line 3", step_id="read"),
    )
    assert (first.agent_id, first.task_id) == ("finder", task.id)
    assert first.provenance == ms.storage._seam.Provenance(
        execution_id=result.execution_id, plan_version=1
    )
    assert first.status == "active"
    assert (second.status, second.superseded_by) == ("superseded", first.id)
    assert [f.id for f in result.findings] == [first.id, second.id]


async def test_question_and_answer_times_and_the_answer_digest(tmp_path: Path) -> None:
    answer = "yes, with token ghp_" + "Z" * 36

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("go on?")

    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        first = await (await rt.start("g", plan_of(agent("q", "curious")))).wait()
        assert first.pending is not None
        asked = first.pending.asked_at
        assert asked is not None
        assert asked > 0
        (waiting,) = tasks_of(stored(rt, first.execution_id))
        assert waiting.pending_question_at == asked
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, answer=answer)).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    (task,) = tasks_of(record)
    digest = hashlib.sha256(answer.encode()).hexdigest()
    assert task.answer_sha256 == digest
    assert task.answered_at is not None
    assert task.answered_at >= asked
    (line,) = [c for c in record.controls if c.action == "answer"]
    assert line.answer_sha256 == digest
    assert "Z" * 36 not in str(record)


async def test_an_outer_question_has_its_time_too(tmp_path: Path) -> None:
    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if "Clarification" not in goal:
            raise ms.ClarificationNeeded("which city?")
        return plan_of(tool("a", "inc"))

    async with runtime(tmp_path, planner=planner) as rt:
        first = await (await rt.start("g")).wait()
        assert first.pending is not None
        assert first.pending.asked_at is not None
        assert first.pending.asked_at > 0
        done = await (await rt.resume(first.execution_id, answer="Paris")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    (line,) = [c for c in record.controls if c.action == "answer"]
    assert line.answer_sha256 == hashlib.sha256(b"Paris").hexdigest()


async def test_Crash_keeps_the_error_type_as_fields() -> None:
    class Outer:
        class Broken(Exception):
            pass

    class Crasher(ms.Actor):
        async def receive(self, message: Any) -> None:
            raise Outer.Broken("boom")

    async with ms.open_system() as system:
        ref = await system.spawn(Crasher)
        with pytest.raises(ms.ActorFailed):
            await ref.ask("go")
        reason = await ref.wait_stopped()
    assert isinstance(reason, ms.Crash)
    assert reason.error_type == Outer.Broken.__qualname__
    assert reason.module == __name__
    assert "boom" in reason.error
    import pickle

    assert pickle.loads(pickle.dumps(reason)) == reason


async def test_Crash_of_a_step_is_matchable_from_the_failed_steps_reason(tmp_path: Path) -> None:
    """A Crash built directly (as users do in tests) has its error_type from the text."""
    crash = ms.Crash.from_exception(KeyError("k"))
    assert (crash.error_type, crash.module) == ("KeyError", "builtins")


_RAISES_IN_AN_ACTOR = """
import sys, anyio, mainspring as ms
kind = SystemExit if sys.argv[1] == "SystemExit" else KeyboardInterrupt
class Boom(ms.Actor):
    async def receive(self, message):
        raise kind(3) if kind is SystemExit else kind()
async def main():
    async with ms.open_system(shutdown_timeout=0.5, stop_timeout=0.5) as system:
        ref = await system.spawn(Boom)
        await ref.tell("go")
        await anyio.sleep_forever()
anyio.run(main, backend=sys.argv[2])
"""

_RAISES_IN_A_TOOL = """
import sys, anyio, mainspring as ms
kind = SystemExit if sys.argv[1] == "SystemExit" else KeyboardInterrupt
async def bad(**_):
    raise kind(3) if kind is SystemExit else kind()
async def main():
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="b", tool="bad"),))
    async with ms.open_runtime(store=sys.argv[3], tools={"bad": bad}) as rt:
        await (await rt.start("g", plan)).wait()
anyio.run(main, backend=sys.argv[2])
"""


@pytest.mark.parametrize("where", ["actor", "tool"])
@pytest.mark.parametrize("error", ["SystemExit", "KeyboardInterrupt"])
async def test_a_base_exception_raised_inside_an_actor_ends_the_program_instead_of_hanging(
    tmp_path: Path, anyio_backend: Any, error: str, where: str
) -> None:
    """Ctrl-C on asyncio raises KeyboardInterrupt in whatever code runs, often an actor's
    (a tool's) code; sys.exit() in a tool is the same. The system must shut down and let it
    out — never wait forever for the actor whose task it killed."""
    import subprocess
    import sys

    backend = anyio_backend[0] if isinstance(anyio_backend, tuple) else anyio_backend
    script = _RAISES_IN_AN_ACTOR if where == "actor" else _RAISES_IN_A_TOOL
    argv = [sys.executable, "-c", script, error, backend, str(tmp_path / "s.sqlite3")]
    root = str(_ROOT)
    proc = await anyio.open_process(
        argv, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with anyio.move_on_after(10):
            await proc.wait()
    finally:
        hung = proc.returncode is None
        if hung:
            proc.kill()
            await proc.wait()
    assert not hung, "the program hung after the exception"
    assert proc.returncode != 0


async def test_a_findings_provenance_names_the_plan_version_it_ran_under(tmp_path: Path) -> None:
    async def finder(ctx: ms.AgentContext, input: Any) -> str:
        ctx.report_finding("seen", evidence=[{"kind": "note", "detail": "v"}])
        return "ok"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return plan_of(agent("f", "finder", n=2))

    plan = plan_of(agent("f", "finder", n=1), tool("broken", "fail"))
    options: dict[str, Any] = {"agents": {"finder": finder}, "planner": planner, "max_replans": 1}
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    versions = sorted(
        (f.provenance.plan_version, t.plan_version)
        for t in tasks_of(record)
        for f in t.findings
        if f.provenance is not None
    )
    assert versions == [(1, 1), (2, 2)]


async def test_the_next_waiting_question_keeps_its_own_time(tmp_path: Path) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask(f"question {input['n']}?")

    plan = plan_of(agent("q1", "curious", n=1), agent("q2", "curious", n=2))
    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.pending is not None
        tasks = {t.step_id: t for t in tasks_of(stored(rt, first.execution_id))}
        holder = next(t for t in tasks.values() if t.id == first.pending.agent_task_id)
        other = next(t for t in tasks.values() if t.id != holder.id)
        assert first.pending.asked_at == holder.pending_question_at
        second = await (await rt.resume(first.execution_id, answer="a")).wait()
    if second.status == "waiting_for_clarification":
        assert second.pending is not None
        assert second.pending.agent_task_id == other.id
        assert second.pending.asked_at == other.pending_question_at
