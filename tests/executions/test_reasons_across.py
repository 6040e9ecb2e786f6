"""V3: a reason crosses processes intact. Two runtimes on one store stand in for two processes
(tests/executions/test_cross_process.py does it with real ones): code stopped by a control
issued in the other runtime sees that control's reason, with its detail and who issued it;
``LeaseLost`` only when another owner really holds the lease."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import FAST, Gate, agent, plan_of, runtime, stored, tasks_of, tool

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
