"""Review 13: an agent short of the run's budget waits for budget (P4), its calls accounted
once and never backwards (E9, B3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
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


def _durable_writer(runs: list[int], n: int = 5) -> Any:
    async def writer(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        parts = [await ctx.step(f"p{i}", ctx.call_skill, "model", f"p{i}") for i in range(n)]
        return "|".join(parts)

    return writer


async def test_resumed_with_a_lower_budget_it_keeps_waiting_and_nothing_goes_backwards(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    runs: list[int] = []
    plan = plan_of(agent("w", "writer"))
    async with runtime(
        tmp_path, ledger, agents={"writer": _durable_writer(runs)}, max_calls=3
    ) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert (first.status, first.calls_used) == ("waiting_for_budget", 3)
        with anyio.fail_after(30):
            lower = await (await rt.resume(first.execution_id, max_calls=1)).wait()
        assert lower.status == "waiting_for_budget"
        assert lower.calls_used == 3
        assert stored(rt, first.execution_id).calls_used == 3
        (task,) = tasks_of(stored(rt, first.execution_id))
        assert (task.state, task.calls_used) == ("queued", 3)
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_calls=20)).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed", done
    assert ledger.names("skill") == [f"model:p{i}" for i in range(5)]
    assert (done.calls_used, record.calls_used) == (5, 5)
    assert len(runs) == 2


async def test_raised_by_one_call_at_a_time_it_makes_each_call_once(tmp_path: Path) -> None:
    ledger = Ledger()
    runs: list[int] = []
    plan = plan_of(agent("w", "writer"), tool("after", "inc", "w"))
    async with runtime(
        tmp_path, ledger, agents={"writer": _durable_writer(runs)}, max_calls=3
    ) as rt:
        result = await (await rt.start("g", plan)).wait()
        budget = 3
        seen = [result.calls_used]
        while result.status == "waiting_for_budget":
            budget += 1
            with anyio.fail_after(30):
                result = await (await rt.resume(result.execution_id, max_calls=budget)).wait()
            seen.append(result.calls_used)
            assert budget < 20
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    assert seen == sorted(seen)  # never backwards
    assert ledger.names("skill") == [f"model:p{i}" for i in range(5)]
    assert record.calls_used == 5
    (task,) = tasks_of(record)
    assert task.calls_used == 5
    assert statuses(record) == {"w": "succeeded", "after": "succeeded"}


async def test_calls_outside_ctx_step_are_made_again_and_counted_again(tmp_path: Path) -> None:
    ledger = Ledger()

    async def chatty(ctx: ms.AgentContext, input: Any) -> str:
        for i in range(5):
            await ctx.call_skill("model", f"c{i}")
        return "said"

    async with runtime(tmp_path, ledger, agents={"chatty": chatty}, max_calls=3) as rt:
        first = await (await rt.start("g", plan_of(agent("c", "chatty")))).wait()
        assert (first.status, first.calls_used) == ("waiting_for_budget", 3)
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_calls=50)).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed", done
    assert len(ledger.names("skill")) == 8
    assert (done.calls_used, record.calls_used) == (8, 8)
    (task,) = tasks_of(record)
    assert task.calls_used == 8


async def test_a_pause_from_elsewhere_keeps_the_calls_an_agent_made_before_it(
    tmp_path: Path,
) -> None:
    """E9/B3: calls_used counts every call made. Paused here, the calls an agent made but
    had not saved are charged; paused from another runtime they must be too."""
    gate = Gate()
    ledger = Ledger()

    async def caller(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.call_skill("model", "one")
        await ctx.call_skill("model", "two")
        await gate()

    async with (
        runtime(tmp_path, ledger, agents={"caller": caller}, **FAST) as a,
        runtime(tmp_path, **FAST) as b,
    ):
        handle = await a.start("g", plan_of(agent("c", "caller")))
        await gate.entered.wait()
        await b.pause(handle.execution_id, reason="hold")
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    assert isinstance(result.stopped_by, ms.Pause)
    assert len(ledger.names("skill")) == 2
    assert record.calls_used == 2


async def test_a_pause_here_keeps_the_calls_an_agent_made_before_it(tmp_path: Path) -> None:
    gate = Gate()
    ledger = Ledger()

    async def caller(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.call_skill("model", "one")
        await ctx.call_skill("model", "two")
        await gate()

    async with runtime(tmp_path, ledger, agents={"caller": caller}, **FAST) as a:
        handle = await a.start("g", plan_of(agent("c", "caller")))
        await gate.entered.wait()
        await a.pause(handle.execution_id, reason="hold")
        record = stored(a, handle.execution_id)
    assert record.calls_used == 2


async def test_a_budget_wait_then_a_pause_then_a_resume_with_budget_completes(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    runs: list[int] = []
    async with runtime(
        tmp_path, ledger, agents={"writer": _durable_writer(runs)}, max_calls=2
    ) as rt:
        first = await (await rt.start("g", plan_of(agent("w", "writer")))).wait()
        assert first.status == "waiting_for_budget"
        paused = await rt.pause(first.execution_id)
        assert paused.status == "paused"
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_calls=10)).wait()
    assert done.status == "completed", done
    assert done.calls_used == 5
    assert ledger.names("skill") == [f"model:p{i}" for i in range(5)]
