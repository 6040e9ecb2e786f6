"""A live stop is durable from the moment it is answered "stopping" (S1, R11): it is written
as a stop request before the task is cancelled, so whatever ends the run before the task has
unwound applies it; once the task is recorded cancelled, the request is applied nowhere again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions._rules import transitions as tr
from mainspring.executions._rules.plan import step_input_hash

from ._kit import FAST, Gate, agent, plan_of, runtime, statuses, stored, tasks_of, tool

pytestmark = pytest.mark.anyio


async def test_a_completed_live_stop_is_recorded_once_through_pause_and_resume(
    tmp_path: Path,
) -> None:
    gate = Gate()
    parked = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", gate)
        return "worked"

    plan = plan_of(agent("w", "worker"), tool("p", "parked"), tool("after", "inc", "w", x=1))
    async with runtime(tmp_path, agents={"worker": worker}, tools={"parked": parked}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await parked.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert stop.state == "stopping"
        written = stored(rt, handle.execution_id)
        # Durable before the task unwound: the request names the task.
        assert [r.task_id for r in written.stop_requests] == [task.id]
        await rt.pause(handle.execution_id)  # the stop under way is recorded as it ends
        assert tasks_of(stored(rt, handle.execution_id))[0].state == "cancelled"
        parked.opened.set()
        with anyio.fail_after(30):
            result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed", result
    assert statuses(record) == {"w": "stopped", "p": "succeeded", "after": "succeeded"}
    assert gate.calls == 1
    assert len([c for c in record.controls if c.action == "stop-task"]) == 1


async def test_a_cascade_stop_under_way_keeps_its_cascade_through_a_pause_from_elsewhere(
    tmp_path: Path,
) -> None:
    cleaning = anyio.Event()
    go_on = anyio.Event()
    runs: list[int] = []

    async def slow_to_stop(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
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
        stop = await a.stop_agent_task(task.id, cascade=True)
        assert stop.state == "stopping"
        with anyio.fail_after(30):
            await cleaning.wait()
        await b.pause(handle.execution_id)
        go_on.set()
        with anyio.fail_after(30):
            await handle.wait()
        between = stored(b, handle.execution_id)
        with anyio.fail_after(30):
            result = await (await b.resume(handle.execution_id)).wait()
        record = stored(b, handle.execution_id)
    assert runs == [1]
    assert tasks_of(between)[0].state == "cancelled"
    assert statuses(record) == {"w": "cancelled", "after": "cancelled"}
    assert result.status == "failed"


def test_a_pause_applies_the_stop_requests_first() -> None:
    now = time.time()
    step = ms.PlanStep(id="w", agent="worker", input={}, status="running")
    task = ms.storage.AgentTaskRecord(
        id="ex:t1",
        agent_id="worker",
        step_id="w",
        state="running",
        created_at=now,
        updated_at=now,
        execution_id="ex",
        input_hash=step_input_hash(step),
    )
    record = ms.storage.Execution(
        id="ex",
        goal="g",
        status="running",
        plan=ms.Plan(id="p", goal="g", steps=(step,)),
        agent_tasks=(ms.storage._seam.unstructure(task),),
        stop_requests=(tr.stop_request("op-1", "ex:t1"),),
        created_at=now,
        updated_at=now,
    )
    paused = tr.pause_execution(record, "me", now)
    (after,) = ms.storage._seam.parse_agent_tasks(paused)[0]
    assert paused.status == "paused"
    assert after.state == "cancelled"
    assert paused.plan is not None
    assert paused.plan.steps[0].status == "stopped"
    # A request for a task already cancelled changes nothing more.
    again = tr.pause_execution(attrs.evolve(paused, status="running"), "me", now)
    assert len([c for c in again.controls if c.action == "stop-task"]) == 1
