"""Review 13: stopping one task leaves an honest run (S1, S2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import mainspring as ms
from tests._cli_kit import run_cli
from tests.executions._kit import (
    FAST,
    Gate,
    Ledger,
    agent,
    plan_of,
    runtime,
    statuses,
    stored,
    tasks_of,
    tool,
)

pytestmark = pytest.mark.anyio


def _parker(gate: Gate) -> Any:
    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", gate)
        return "worked"

    return worker


def _diamond() -> ms.Plan:
    # top -> (b: agent, c: tool) -> d
    return plan_of(
        tool("top", "inc", x=0),
        agent("b", "worker", "top"),
        tool("c", "inc", "top", x=1),
        tool("d", "inc", "b", "c", x=2),
    )


async def test_stop_in_a_diamond_lets_the_join_run_and_the_run_complete(tmp_path: Path) -> None:
    gate = Gate()
    ledger = Ledger()
    async with runtime(tmp_path, ledger, agents={"worker": _parker(gate)}) as rt:
        handle = await rt.start("g", _diamond())
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert stop.state == "stopping"
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert statuses(record) == {
        "top": "succeeded",
        "b": "stopped",
        "c": "succeeded",
        "d": "succeeded",
    }
    assert ledger.count("inc:2") == 1
    assert result.status == "completed"
    assert result.stopped_steps == ("b",)
    assert result.summary == "completed: 3 succeeded, 1 stopped of 4 steps"


async def test_cascade_in_a_diamond_cancels_the_join_and_fails_the_run(tmp_path: Path) -> None:
    gate = Gate()
    ledger = Ledger()
    async with runtime(tmp_path, ledger, agents={"worker": _parker(gate)}) as rt:
        handle = await rt.start("g", _diamond())
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id, cascade=True)
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert statuses(record) == {
        "top": "succeeded",
        "b": "cancelled",
        "c": "succeeded",
        "d": "cancelled",
    }
    assert ledger.count("inc:2") == 0
    assert result.status == "failed"
    assert record.status == "failed"
    assert result.error is not None
    assert "d" in result.error


async def test_stop_twice_and_after_the_end_say_what_happened(tmp_path: Path) -> None:
    gate = Gate()
    async with runtime(tmp_path, agents={"worker": _parker(gate)}) as rt:
        handle = await rt.start("g", plan_of(agent("w", "worker"), tool("t", "inc")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        first = await rt.stop_agent_task(task.id)
        again = await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            result = await handle.wait()
        after = await rt.stop_agent_task(task.id)
        record = stored(rt, handle.execution_id)
    assert (first.ok, first.state) == (True, "stopping")
    assert again.state in ("stopping", "cancelled")
    assert (after.ok, after.state) == (False, "cancelled")
    assert result.status == "completed"
    assert len([o for o in record.observations if o.step_id == "w"]) == 1


async def test_a_task_of_a_paused_run_stopped_then_resumed(tmp_path: Path) -> None:
    gate = Gate()
    ledger = Ledger()
    plan = plan_of(agent("w", "worker"), tool("after", "inc", "w", x=7))
    async with runtime(tmp_path, ledger, agents={"worker": _parker(gate)}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        paused = await rt.pause(handle.execution_id)
        assert paused.status == "paused"
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert (stop.ok, stop.state) == (True, "cancelled")
        between = stored(rt, handle.execution_id)
        assert between.status == "paused"
        assert between.lease is None or between.lease.owner == ""
        with anyio.fail_after(30):
            result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert gate.calls == 1  # the stopped agent was not run again
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.status == "completed"
    assert result.stopped_steps == ("w",)


async def test_a_task_waiting_for_budget_stopped_then_resumed(tmp_path: Path) -> None:
    ledger = Ledger()
    runs: list[int] = []

    async def spender(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        for i in range(5):
            await ctx.step(f"s{i}", ctx.call_skill, "model", f"p{i}")
        return "spent"

    plan = plan_of(agent("w", "spender"), tool("after", "inc", "w", x=3))
    async with runtime(tmp_path, ledger, agents={"spender": spender}, max_calls=2) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_budget"
        (task,) = await rt.agent_tasks(first.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert (stop.ok, stop.state) == (True, "cancelled")
        with anyio.fail_after(30):
            result = await (await rt.resume(first.execution_id)).wait()
        record = stored(rt, first.execution_id)
    assert len(runs) == 1
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.status == "completed"
    assert result.calls_used == 2
    assert result.pending is None


async def test_the_command_lists_stopped_steps(tmp_path: Path) -> None:
    gate = Gate()
    store = tmp_path / "store.sqlite3"
    async with runtime(tmp_path, agents={"worker": _parker(gate)}) as rt:
        handle = await rt.start("g", plan_of(agent("w", "worker"), tool("t", "inc")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            await handle.wait()
    code, out = await anyio.to_thread.run_sync(
        lambda: run_cli("--store", str(store), "--json", "ls")
    )
    assert code == 0
    (row,) = json.loads(out)
    assert row["stopped_steps"] == ["w"]
    code, out = await anyio.to_thread.run_sync(
        lambda: run_cli("--store", str(store), "show", handle.execution_id)
    )
    assert code == 0
    assert "stopped" in out


async def test_a_stopped_task_is_not_run_again_after_a_drift_replan(tmp_path: Path) -> None:
    """Stop during a replan: the run was paused with w queued, the workspace drifted, and
    while the planner works the user stops w. The new plan holds that exact step: the user's
    stop stands (the agent is not run again)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "in.txt").write_text("one")
    gate = Gate()
    planning = anyio.Event()
    release = anyio.Event()
    runs: list[int] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        if len(runs) == 1:
            await ctx.step("park", gate)
        return "ran"

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        planning.set()
        await release.wait()
        return plan_of(agent("w", "worker", path="in.txt"), tool("t", "inc", x=1))

    plan = plan_of(agent("w", "worker", path="in.txt"), tool("t", "inc", x=1))
    options: dict[str, Any] = {
        "agents": {"worker": worker},
        "planner": planner,
        "workspace": workspace,
    }
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (workspace / "in.txt").write_text("two")  # drift
        resumed = await rt.resume(handle.execution_id)
        with anyio.fail_after(30):
            await planning.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert stop.ok
        release.set()
        with anyio.fail_after(30):
            result = await resumed.wait()
    assert len(runs) == 1, "the stopped agent ran again"
    assert result.stopped_steps == ("w",)
    assert result.status == "completed", (result.status, result.error, result.summary)
    assert stop.state == "cancelled"


async def test_a_stop_under_way_is_not_undone_by_a_pause_from_elsewhere(tmp_path: Path) -> None:
    """S1/R11: stop_agent_task answered "stopping". While the task unwinds (its cleanup
    takes a moment), another process pauses the run. The stop must stand: on resume the
    stopped agent is not run again and its step is stopped."""
    cleaning = anyio.Event()
    go_on = anyio.Event()
    runs: list[int] = []

    async def slow_to_stop(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        if len(runs) > 1:
            return "ran again"
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                cleaning.set()
                await go_on.wait()
        return "unreachable"  # pragma: no cover

    plan = plan_of(agent("w", "slow"), tool("after", "inc", "w", x=4))
    agents = {"slow": slow_to_stop}
    async with (
        runtime(tmp_path, agents=agents, **FAST) as a,
        runtime(tmp_path, agents=agents, **FAST) as b,
    ):
        handle = await a.start("g", plan)
        with anyio.fail_after(30):
            while not await a.agent_tasks(handle.execution_id):
                await anyio.lowlevel.checkpoint()
        (task,) = await a.agent_tasks(handle.execution_id)
        stop = await a.stop_agent_task(task.id)
        assert (stop.ok, stop.state) == (True, "stopping")
        with anyio.fail_after(30):
            await cleaning.wait()
        await b.pause(handle.execution_id, reason="hold")
        go_on.set()
        with anyio.fail_after(30):
            await handle.wait()
        between = stored(b, handle.execution_id)
        with anyio.fail_after(30):
            result = await (await b.resume(handle.execution_id)).wait()
        record = stored(b, handle.execution_id)
    assert len(runs) == 1, "the stopped agent ran again"
    (stopped,) = [t for t in tasks_of(between) if t.id == task.id]
    assert stopped.state == "cancelled", stopped.state
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.stopped_steps == ("w",)


async def test_a_stop_while_the_planner_replans_does_not_finish_the_old_plan(
    tmp_path: Path,
) -> None:
    """R6: the workspace drifted, so the run is replanned. A stop that lands while the
    planner works must not settle the drifted old plan behind the planner's back: the run
    goes on with the new plan (version 2, its new step runs)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "in.txt").write_text("one")
    gate = Gate()
    ledger = Ledger()
    planning = anyio.Event()
    release = anyio.Event()

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        planning.set()
        await release.wait()
        return plan_of(
            agent("w", "worker", path="in.txt"),
            tool("t", "inc", x=1),
            tool("new", "inc", x=99),
        )

    plan = plan_of(agent("w", "worker", path="in.txt"), tool("t", "inc", x=1))
    options: dict[str, Any] = {
        "agents": {"worker": _parker(gate)},
        "planner": planner,
        "workspace": workspace,
    }
    async with runtime(tmp_path, ledger, **options) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (workspace / "in.txt").write_text("two")  # drift
        resumed = await rt.resume(handle.execution_id)
        with anyio.fail_after(30):
            await planning.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        release.set()
        with anyio.fail_after(30):
            result = await resumed.wait()
        record = stored(rt, handle.execution_id)
    assert record.plan is not None
    assert record.plan.version == 2, statuses(record)
    assert ledger.count("inc:99") == 1
    assert result.status == "completed"


async def test_a_stop_request_the_runner_never_saw_is_applied_on_resume(tmp_path: Path) -> None:
    """B asks A's runner to stop a task; A shuts down before its next heartbeat. The
    request was answered "stopping": it must stand when B resumes the run."""
    gate = Gate()
    ledger = Ledger()
    worker = _parker(gate)
    slow = {"lease_ttl": 600.0, "heartbeat_interval": 299.0}
    plan = plan_of(agent("w", "worker"), tool("after", "inc", "w", x=5))
    async with runtime(tmp_path, ledger, agents={"worker": worker}, **FAST) as b:
        async with runtime(tmp_path, ledger, agents={"worker": worker}, **slow) as a:
            handle = await a.start("g", plan)
            await gate.entered.wait()
            (task,) = await b.agent_tasks(handle.execution_id)
            stop = await b.stop_agent_task(task.id)
            assert stop.state == "stopping"
        # A is gone (shut down, lease released) without having met the request.
        with anyio.fail_after(30):
            result = await (await b.resume(handle.execution_id)).wait()
        record = stored(b, handle.execution_id)
    assert gate.calls == 1
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.status == "completed"
    assert result.stopped_steps == ("w",)
