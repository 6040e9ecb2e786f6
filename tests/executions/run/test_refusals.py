"""V3: a reason crosses processes intact. Two runtimes on one store stand in for two processes
(tests/executions/facade/test_record_controls.py does it with real ones): code stopped by a control
issued in the other runtime sees that control's reason, with its detail and who issued it;
``LeaseLost`` only when another owner really holds the lease."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import mainspring as ms
from tests._cli_kit import run_cli

from .._kit import FAST, Gate, agent, plan_of, runtime, statuses, stored, tasks_of, tool

pytestmark = pytest.mark.anyio


async def test_V3_a_cancel_from_elsewhere_reaches_a_tool_as_ParentCancel_of_that_Cancel(
    tmp_path: Path,
) -> None:
    gate = Gate()
    plan = plan_of(tool("g1", "gate"), tool("after", "inc", "g1"))
    async with (
        runtime(tmp_path, tools={"gate": gate}, **FAST) as a,
        runtime(tmp_path, **FAST) as b,
    ):
        handle = await a.start("g", plan)
        await gate.entered.wait()
        await b.cancel(handle.execution_id, reason="operator says stop")
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel)
    root = seen.root
    assert isinstance(root, ms.Cancel)
    assert (root.detail, root.source) == ("operator says stop", b.owner)
    assert isinstance(result.stopped_by, ms.Cancel)
    assert result.stopped_by.source == b.owner
    assert result.status == "cancelled"
    # The records say it too: who cancelled and why. (A step's start is not committed on
    # its own, so B's record knows g1 only as not finished: "skipped".)
    observations = {o.step_id: o for o in record.observations}
    assert observations["g1"].error is not None
    assert observations["g1"].error.endswith(
        f"the execution was cancelled by {b.owner}: operator says stop"
    )
    assert record.controls[-1].by == b.owner


async def test_V3_the_same_cancel_issued_here_reads_the_same(tmp_path: Path) -> None:
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        await rt.cancel(handle.execution_id, reason="operator says stop")
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel)
    assert isinstance(seen.root, ms.Cancel)
    assert (seen.root.detail, seen.root.source) == ("operator says stop", rt.owner)


async def test_V3_a_pause_from_elsewhere_reaches_an_agent_as_that_Pause(tmp_path: Path) -> None:
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", gate)
        return "done"

    async with (
        runtime(tmp_path, agents={"worker": worker}, **FAST) as a,
        runtime(tmp_path, **FAST) as b,
    ):
        handle = await a.start("g", plan_of(agent("w", "worker")))
        await gate.entered.wait()
        await b.pause(handle.execution_id, reason="lunch break")
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    (seen,) = gate.reasons
    assert isinstance(seen, ms.Pause)
    assert (seen.detail, seen.source) == ("lunch break", b.owner)
    assert isinstance(result.stopped_by, ms.Pause)
    (task,) = tasks_of(record)
    assert task.interruption is not None
    assert (task.interruption.kind, task.interruption.detail) == ("pause", "lunch break")


async def test_V3_LeaseLost_names_the_owner_that_really_took_the_lease(tmp_path: Path) -> None:
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        store = rt.store
        assert store.release(handle.execution_id, rt.owner)
        assert store.acquire(handle.execution_id, "thief:1:x", ttl=60).acquired
        with anyio.fail_after(30):
            result = await handle.wait()
    (seen,) = gate.reasons
    assert isinstance(seen, ms.LeaseLost)
    assert seen.owner == "thief:1:x"
    assert isinstance(result.stopped_by, ms.LeaseLost)


async def test_V3_a_lease_that_nobody_holds_any_more_is_not_blamed_on_an_owner(
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        assert rt.store.release(handle.execution_id, rt.owner)  # as if it had lapsed
        with anyio.fail_after(30):
            result = await handle.wait()
    (seen,) = gate.reasons
    assert isinstance(seen, ms.LeaseLost)
    assert seen.owner == ""
    assert "lapsed or was released" in seen.detail
    assert isinstance(result.stopped_by, ms.LeaseLost)


# ----------------------------------------------------------------------
# Reasons survive the trip between processes (V3). Two runtimes on one store
# stand in for two processes; the command (``mainspring cancel/pause/stop-task --store``) runs
# in a worker thread with its own event loop, as a separate process would.

# A GitHub token's shape: redact() masks it wherever it appears.
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def _store_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())


async def _cli(*argv: str) -> tuple[int, str]:
    """The command, run as another process would: its own event loop, off ours."""
    return await anyio.to_thread.run_sync(lambda: run_cli(*argv))


async def test_V3_cli_cancel_reaches_the_running_tool_as_ParentCancel_of_that_Cancel(
    tmp_path: Path,
) -> None:
    gate = Gate()
    store = tmp_path / "store.sqlite3"
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as a:
        handle = await a.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        code, _ = await _cli(
            "--store", str(store), "cancel", handle.execution_id, "--reason", "from the shell"
        )
        assert code == 0
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel), seen
    assert isinstance(seen.root, ms.Cancel)
    issuer = record.controls[-1].by
    assert issuer != a.owner
    assert (seen.root.detail, seen.root.source) == ("from the shell", issuer)
    assert isinstance(result.stopped_by, ms.Cancel)
    assert result.status == "cancelled"


async def test_V3_cli_pause_reaches_the_running_tool_as_that_Pause(tmp_path: Path) -> None:
    gate = Gate()
    store = tmp_path / "store.sqlite3"
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as a:
        handle = await a.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        code, _ = await _cli(
            "--store", str(store), "pause", handle.execution_id, "--reason", "coffee"
        )
        assert code == 0
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    (seen,) = gate.reasons
    assert isinstance(seen, ms.Pause), seen
    assert seen.detail == "coffee"
    assert seen.source == record.controls[-1].by != a.owner
    assert isinstance(result.stopped_by, ms.Pause)
    assert record.status == "paused"


async def test_V3_cli_stop_task_reaches_the_agent_as_Cancel_naming_who_asked(
    tmp_path: Path,
) -> None:
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.step("park", gate)

    store = tmp_path / "store.sqlite3"
    plan = plan_of(agent("w", "worker"), tool("after", "inc", "w", x=1))
    async with runtime(tmp_path, agents={"worker": worker}, **FAST) as a:
        handle = await a.start("g", plan)
        await gate.entered.wait()
        (task,) = await a.agent_tasks(handle.execution_id)
        code, out = await _cli("--store", str(store), "--json", "stop-task", task.id)
        assert code == 0, out
        assert json.loads(out)["state"] == "stopping"
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    (seen,) = gate.reasons
    assert isinstance(seen, ms.Cancel), seen
    requesters = {c.by for c in record.controls if c.action == "stop-task"} - {a.owner}
    assert seen.source in requesters
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.stopped_steps == ("w",)


async def test_E5_a_secret_in_a_cancel_reason_never_reaches_disk_nor_the_other_runner(
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with (
        runtime(tmp_path, tools={"gate": gate}, **FAST) as a,
        runtime(tmp_path, **FAST) as b,
    ):
        handle = await a.start("g", plan_of(tool("g1", "gate"), tool("g2", "inc", "g1")))
        await gate.entered.wait()
        await b.cancel(handle.execution_id, reason=f"leaked {SECRET} oops")
        with anyio.fail_after(30):
            await handle.wait()
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel)
    assert SECRET not in seen.root.detail
    assert "oops" in seen.root.detail
    assert SECRET.encode() not in _store_bytes(tmp_path)


async def test_E5_a_secret_in_a_pause_reason_never_reaches_disk_nor_the_other_runner(
    tmp_path: Path,
) -> None:
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.step("park", gate)

    async with (
        runtime(tmp_path, agents={"worker": worker}, **FAST) as a,
        runtime(tmp_path, **FAST) as b,
    ):
        handle = await a.start("g", plan_of(agent("w", "worker")))
        await gate.entered.wait()
        await b.pause(handle.execution_id, reason=f"pause {SECRET}")
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    (seen,) = gate.reasons
    assert isinstance(seen, ms.Pause)
    assert SECRET not in seen.detail
    assert SECRET not in str(result.stopped_by)
    (task,) = tasks_of(record)
    assert task.interruption is not None
    assert SECRET not in task.interruption.detail
    assert SECRET.encode() not in _store_bytes(tmp_path)


async def test_E5_cli_cancel_with_a_secret_reason_keeps_it_off_disk(tmp_path: Path) -> None:
    gate = Gate()
    store = tmp_path / "store.sqlite3"
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as a:
        handle = await a.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        code, out = await _cli(
            "--store", str(store), "cancel", handle.execution_id, "--reason", SECRET
        )
        assert code == 0
        assert SECRET not in out
        with anyio.fail_after(30):
            await handle.wait()
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel)
    assert SECRET not in seen.root.detail
    assert SECRET.encode() not in _store_bytes(tmp_path)


async def test_V3_pause_then_cancel_from_elsewhere_reaches_the_running_tool_as_the_cancel(
    tmp_path: Path,
) -> None:
    """B pauses, then cancels, before A looks (A's heartbeat is slow): A's first commit
    after both meets a cancelled record, and its other running tool is told of the cancel."""
    first, second = Gate(), Gate()
    slow = {"lease_ttl": 600.0, "heartbeat_interval": 299.0}
    plan = plan_of(tool("g1", "first"), tool("g2", "second"))
    async with (
        runtime(tmp_path, tools={"first": first, "second": second}, **slow) as a,
        runtime(tmp_path, **FAST) as b,
    ):
        handle = await a.start("g", plan)
        await first.entered.wait()
        await second.entered.wait()
        await b.pause(handle.execution_id, reason="hold on")
        await b.cancel(handle.execution_id, reason="no, drop it")
        first.opened.set()  # A commits g1: refused, the record is cancelled
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    (seen,) = second.reasons
    assert isinstance(seen, ms.ParentCancel), seen
    assert isinstance(seen.root, ms.Cancel)
    assert (seen.root.detail, seen.root.source) == ("no, drop it", b.owner)
    assert isinstance(result.stopped_by, ms.Cancel)
    assert record.status == "cancelled"
    assert result.status == "cancelled"


async def test_V3_cancel_of_a_waiting_run_from_elsewhere_stamps_its_task_with_the_reason(
    tmp_path: Path,
) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    async with (
        runtime(tmp_path, agents={"curious": curious}, **FAST) as a,
        runtime(tmp_path, **FAST) as b,
    ):
        first = await (await a.start("g", plan_of(agent("q", "curious")))).wait()
        assert first.status == "waiting_for_clarification"
        result = await b.cancel(first.execution_id, reason="not needed")
        record = stored(a, first.execution_id)
    assert result.status == "cancelled"
    (task,) = tasks_of(record)
    assert task.state == "cancelled"
    assert task.interruption is not None
    assert (task.interruption.kind, task.interruption.detail) == ("parent-cancel", "not needed")
    assert record.controls[-1].by == b.owner
    assert record.pending is None


async def test_V3_a_stolen_lease_is_LeaseLost_naming_the_thief_not_a_cancel(
    tmp_path: Path,
) -> None:
    """The lease was taken by another owner (which then runs it): A's tool sees LeaseLost
    naming that owner, and A's result says so."""
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate"), tool("g2", "inc", "g1")))
        await gate.entered.wait()
        store = rt.store
        assert store.release(handle.execution_id, rt.owner)
        assert store.acquire(handle.execution_id, "thief:2:y", ttl=60).acquired
        with anyio.fail_after(30):
            result = await handle.wait()
    (seen,) = gate.reasons
    assert isinstance(seen, ms.LeaseLost)
    assert seen.owner == "thief:2:y"
    assert isinstance(result.stopped_by, ms.LeaseLost)
    assert result.stopped_by.owner == "thief:2:y"


async def test_E13_a_stop_task_is_audited_under_the_owner_that_asked(tmp_path: Path) -> None:
    """Controls are "who paused / resumed / cancelled / answered": a stop-task line names
    the owner that asked, like a pause's or a cancel's, not an operation id."""
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.step("park", gate)

    async with runtime(tmp_path, agents={"worker": worker}, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("w", "worker"), tool("t", "inc")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            await handle.wait()
        record = stored(rt, handle.execution_id)
    lines = [c for c in record.controls if c.action == "stop-task"]
    assert lines
    assert all(c.by == rt.owner for c in lines), [(c.by, c.reason) for c in lines]


async def test_E4_a_cancel_committed_during_the_final_write_is_told_as_that_cancel(
    tmp_path: Path,
) -> None:
    """B's cancel lands just before A's final commit (the store applies it first): A's run
    ends cancelled, told of B's cancel, never completed."""

    class CancelsFirst(ms.storage.SqliteStore):
        armed = True

        def commit_runs(self, commits: Any) -> Any:
            for execution, _ in commits:
                if self.armed and execution.status == "completed":
                    self.armed = False
                    from mainspring.executions._facade.record_controls import cancel_edit

                    self.edit(execution.id, cancel_edit("other:9:z", "late cancel"))
            return super().commit_runs(commits)

    store = CancelsFirst(tmp_path / "s.sqlite3")
    async with runtime(store) as rt:
        handle = await rt.start("g", plan_of(tool("a", "inc")))
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert record.status == "cancelled"
    assert result.status == "cancelled"
    assert isinstance(result.stopped_by, ms.Cancel)
    assert (result.stopped_by.detail, result.stopped_by.source) == ("late cancel", "other:9:z")


def _store_landing(path: Path, on_status: str, edit: Any) -> ms.storage.SqliteStore:
    """A store on which another process's control lands just before this runtime's commit
    writing ``on_status`` (once)."""

    class Landing(ms.storage.SqliteStore):
        armed = True

        def commit_runs(self, commits: Any) -> Any:
            for execution, _ in commits:
                if self.armed and execution.status == on_status:
                    self.armed = False
                    self.edit(execution.id, edit)
            return super().commit_runs(commits)

    return Landing(path)


async def test_R2_a_local_cancel_racing_a_pause_from_elsewhere_is_not_dropped(
    tmp_path: Path,
) -> None:
    """rt.cancel is final. Another process's pause lands just before this runtime writes
    the cancel: the cancel must still be applied (a paused record can be cancelled), never
    silently dropped while cancel() returns as if it had worked."""
    from mainspring.executions._facade.record_controls import pause_edit

    gate = Gate()
    store = _store_landing(tmp_path / "s.sqlite3", "cancelled", pause_edit("other:9:z", "hold"))
    async with runtime(store, tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        result = await rt.cancel(handle.execution_id, reason="for good")
        record = stored(rt, handle.execution_id)
    assert record.status == "cancelled", record.status
    assert result.status == "cancelled"


async def test_V3_a_local_pause_racing_a_cancel_from_elsewhere_reports_the_cancel(
    tmp_path: Path,
) -> None:
    """The other process's cancel wins on disk (E4); pause() must not report the run as
    still running."""
    from mainspring.executions._facade.record_controls import cancel_edit

    gate = Gate()
    store = _store_landing(tmp_path / "s.sqlite3", "paused", cancel_edit("other:9:z", "drop"))
    async with runtime(store, tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        result = await rt.pause(handle.execution_id, reason="hold")
        record = stored(rt, handle.execution_id)
    assert record.status == "cancelled"
    assert result.status == "cancelled", result.status


async def test_E4_a_pause_landing_during_the_final_write_is_told_as_that_pause(
    tmp_path: Path,
) -> None:
    from mainspring.executions._facade.record_controls import pause_edit

    store = _store_landing(tmp_path / "s.sqlite3", "completed", pause_edit("other:9:z", "wait"))
    async with runtime(store) as rt:
        handle = await rt.start("g", plan_of(tool("a", "inc")))
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert record.status == "paused"
    assert result.status == "paused"
    assert isinstance(result.stopped_by, ms.Pause)
    assert (result.stopped_by.detail, result.stopped_by.source) == ("wait", "other:9:z")


@pytest.mark.loop_guard(60)  # redacting 17 MB on the loop is heavy; not the point here
async def test_R2_a_cancel_with_a_huge_reason_still_cancels(tmp_path: Path) -> None:
    """A reason is free text: one too long to store must not leave the run stopped but
    'running' on disk (recover() would start it again) with cancel() raising."""
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        with anyio.fail_after(60):
            await rt.cancel(handle.execution_id, reason="x" * (17 * 1024 * 1024))
        record = stored(rt, handle.execution_id)
    assert record.status == "cancelled"


async def test_V3_a_lease_stolen_then_the_record_cancelled_is_told_as_the_cancel(
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with (
        runtime(tmp_path, tools={"gate": gate}, lease_ttl=600.0, heartbeat_interval=299.0) as a,
        runtime(tmp_path, **FAST) as b,
    ):
        handle = await a.start("g", plan_of(tool("g1", "gate"), tool("g2", "inc", "g1")))
        await gate.entered.wait()
        assert a.store.release(handle.execution_id, a.owner)
        assert a.store.acquire(handle.execution_id, "thief:3:q", ttl=60).acquired
        await b.cancel(handle.execution_id, reason="stop it all")
        gate.opened.set()  # A's next commit meets the cancelled record
        with anyio.fail_after(30):
            result = await handle.wait()
    assert isinstance(result.stopped_by, ms.Cancel)
    assert (result.stopped_by.detail, result.stopped_by.source) == ("stop it all", b.owner)
    assert result.status == "cancelled"


@pytest.mark.parametrize("control", ["cancel", "pause"])
async def test_V2_the_runners_event_stream_says_the_run_ended_when_stopped_from_elsewhere(
    tmp_path: Path, control: str
) -> None:
    """A server streams A's rt.events() to its clients (examples/fastapi_app.py). A run
    stopped from another process ends in A too: its stream must say so (ExecutionCancelled /
    ExecutionPaused), as it does when the control is issued in A."""
    from tests.executions._kit import recorded_events

    gate = Gate()
    async with (
        runtime(tmp_path, tools={"gate": gate}, **FAST) as a,
        runtime(tmp_path, **FAST) as b,
        recorded_events(a) as events,
    ):
        handle = await a.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        await getattr(b, control)(handle.execution_id, reason="elsewhere")
        with anyio.fail_after(30):
            await handle.wait()
    wanted = ms.events.ExecutionCancelled if control == "cancel" else ms.events.ExecutionPaused
    ends = [e for e in events if isinstance(e, wanted)]
    assert [e.execution_id for e in ends] == [handle.execution_id], [
        type(e).__name__ for e in events
    ]


async def test_V2_cancelling_a_waiting_run_is_announced_on_the_event_stream(tmp_path: Path) -> None:
    """A stopped task of a stored run is announced (AgentTaskStopped, StepFinished); a
    cancel of a stored (waiting) run must be too."""
    from tests.executions._kit import recorded_events

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        first = await (await rt.start("g", plan_of(agent("q", "curious")))).wait()
        assert first.status == "waiting_for_clarification"
        async with recorded_events(rt) as events:
            await rt.cancel(first.execution_id, reason="no longer needed")
    assert any(isinstance(e, ms.events.ExecutionCancelled) for e in events), events
