"""An agent whose reservation was all the run's budget had left waits for budget like any
other step (P4), with its durable inner steps kept, and resumes with a higher ``max_calls``;
``calls_used`` accumulates across the wait (E9). An agent that spends a reservation the
run's budget did not cut short still fails with ``agent-call-budget``."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import Ledger, agent, plan_of, runtime, statuses, stored, tasks_of, tool

pytestmark = pytest.mark.anyio


def _five_durable_calls(runs: list[int]) -> Any:
    async def writer(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        parts = []
        for i in range(5):
            # Each model call is a durable inner step: kept across the wait for budget.
            parts.append(await ctx.step(f"part{i}", ctx.call_skill, "model", f"p{i}"))
        return " / ".join(parts)

    return writer


async def test_P4_E9_an_agent_short_of_the_runs_budget_waits_and_resumes_with_its_steps_kept(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    runs: list[int] = []
    plan = plan_of(agent("w", "writer"), tool("after", "inc", "w", x=1))
    async with runtime(
        tmp_path, ledger, agents={"writer": _five_durable_calls(runs)}, max_calls=3
    ) as rt:
        with anyio.fail_after(30):
            first = await (await rt.start("g", plan)).wait()
        waiting = stored(rt, first.execution_id)
        assert first.status == "waiting_for_budget"
        assert first.pending is not None
        assert first.pending.kind == "budget"
        # needed: what the rest of the plan would hold, the agent's reservation (the
        # default reservation, min(remaining, 10), with room for all: 10) and a tool (0).
        assert first.pending.budget == ms.storage.BudgetInfo(calls_used=3, max_calls=3, needed=10)
        assert first.calls_used == 3
        assert statuses(waiting) == {"w": "pending", "after": "pending"}
        (task,) = tasks_of(waiting)
        assert task.state == "queued"
        assert task.interruption is not None
        assert task.interruption.kind == "budget"
        assert task.inner_completed == ("part0", "part1", "part2")
        assert task.calls_used == 3
        assert task.failure is None

        with anyio.fail_after(30):
            same = await (await rt.resume(first.execution_id)).wait()
        assert same.status == "waiting_for_budget"  # no more budget: still waiting
        assert same.calls_used == 3

        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_calls=10)).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed", done
    assert done.outputs["w"] == " / ".join(f"model says p{i}" for i in range(5))
    # Every model call was made once: the three made before the wait were not made again.
    assert ledger.names("skill") == [f"model:p{i}" for i in range(5)]
    assert done.calls_used == 5
    assert record.calls_used == 5
    assert len(runs) == 2  # not started again while no budget was left
    (task,) = tasks_of(record)
    assert (task.state, task.calls_used) == ("completed", 5)
    assert statuses(record) == {"w": "succeeded", "after": "succeeded"}


async def test_P4_an_agent_that_spends_the_reservation_it_was_given_still_fails(
    tmp_path: Path,
) -> None:
    """The reservation is the most one agent task may spend in a run (it keeps agents
    sharing a budget from draining it): the run had budget to spare, so this is not a wait."""

    async def greedy(ctx: ms.AgentContext, input: Any) -> None:
        for _ in range(5):
            await ctx.call_skill("model", prompt="more")

    async with runtime(
        tmp_path, agents={"greedy": greedy}, max_calls=50, reservation=lambda remaining: 2
    ) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan_of(agent("g", "greedy")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "failed"
    (task,) = tasks_of(record)
    assert task.failure is not None
    assert task.failure.code == "agent-call-budget"
    assert result.calls_used == 2


async def test_P4_an_agent_short_of_budget_runs_again_at_once_when_other_steps_free_some(
    tmp_path: Path,
) -> None:
    """b's reservation took all the budget left after a's; a spends less than it held, so
    when b runs short the run has budget again: b is requeued and started again in the same
    run, its durable steps replayed, without waiting."""
    ledger = Ledger()
    a_done = anyio.Event()

    async def thrifty(ctx: ms.AgentContext, input: Any) -> str:
        return str(await ctx.call_skill("model", "a"))

    async def patient(ctx: ms.AgentContext, input: Any) -> str:
        first = await ctx.step("b0", ctx.call_skill, "model", "b0")
        second = await ctx.step("b1", ctx.call_skill, "model", "b1")
        with anyio.fail_after(30):
            await a_done.wait()  # a has finished and given back what it did not spend
        third = await ctx.step("b2", ctx.call_skill, "model", "b2")
        return f"{first}, {second}, {third}"

    plan = plan_of(agent("a", "thrifty"), agent("b", "patient"))
    options: dict[str, Any] = {
        "agents": {"thrifty": thrifty, "patient": patient},
        "max_calls": 4,
        "reservation": lambda remaining: min(remaining, 2),
    }
    async with runtime(tmp_path, ledger, **options) as rt:
        async with contextlib.aclosing(rt.events()) as events:  # type: ignore[type-var]
            handle = await rt.start("g", plan)
            with anyio.fail_after(30):
                async for event in events:
                    if isinstance(event, ms.executions.AgentTaskCompleted):
                        break  # a's end is durable (b cannot end before it)
            a_done.set()
            with anyio.fail_after(30):
                result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed", result
    assert ledger.names("skill") == ["model:a", "model:b0", "model:b1", "model:b2"]
    assert result.calls_used == 4
    b_task = next(t for t in tasks_of(record) if t.step_id == "b")
    assert (b_task.state, b_task.calls_used) == ("completed", 3)
    assert b_task.interruption is not None
    assert b_task.interruption.kind == "budget"  # it waited once, briefly
