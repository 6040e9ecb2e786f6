"""B3, P4: token and cost budgets. Once a run's tokens or cost reach their limit no model
call starts (the one that overran is charged in full); the run waits for budget with its
work kept, stopped with ``BudgetExhausted`` naming the budget, and a resume with a higher
limit goes on. ``BudgetInfo.needed`` says how many more calls the rest of the plan wants."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WithUsage
from mainspring.storage import BudgetInfo, Usage
from tests.executions._kit import (
    Ledger,
    agent,
    plan_of,
    runtime,
    skill,
    statuses,
    stored,
    tasks_of,
    tool,
)

pytestmark = pytest.mark.anyio

ONE = Usage(input_tokens=100, output_tokens=20, cost=Decimal("0.01"))


def priced(ledger: Ledger) -> Any:
    async def chat(prompt: str = "", **_: Any) -> WithUsage:
        ledger.add("skill", f"chat:{prompt}")
        return WithUsage(f"said {prompt}", usage=ONE)

    return chat


async def test_B3_max_tokens_reached_waits_for_budget_naming_tokens_and_a_resume_goes_on(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    plan = plan_of(
        skill("a", "chat", prompt="one"),
        skill("b", "chat", "a", prompt="two"),
        tool("t", "inc", "b", x=1),  # spends no tokens: still runs
        skill("c", "chat", "b", prompt="three"),
    )
    async with runtime(tmp_path, ledger, skills={"chat": priced(ledger)}, max_tokens=200) as rt:
        with anyio.fail_after(30):
            first = await (await rt.start("g", plan)).wait()
        waiting = stored(rt, first.execution_id)
        assert first.status == "waiting_for_budget"
        # a used 120 tokens (< 200), so b started; it overran and was charged in full.
        assert waiting.usage == ONE + ONE
        assert statuses(waiting) == {"a": "succeeded", "b": "succeeded", "t": "succeeded",
                                     "c": "pending"}  # fmt: skip
        assert ledger.count("chat:three") == 0
        pending = waiting.pending
        assert pending is not None
        assert pending.kind == "budget"
        assert pending.budget == BudgetInfo(
            calls_used=2, max_calls=100, needed=1, budget="tokens", usage=ONE + ONE,
            max_tokens=200,
        )  # fmt: skip
        assert isinstance(first.stopped_by, ms.BudgetExhausted)
        assert "tokens budget is exhausted" in first.stopped_by.detail
        assert "240 of 200 tokens" in first.stopped_by.detail

        with anyio.fail_after(30):
            same = await (await rt.resume(first.execution_id)).wait()
        assert same.status == "waiting_for_budget"  # the same limit: still waiting
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_tokens=10_000)).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed", done
    assert ledger.names("skill") == ["chat:one", "chat:two", "chat:three"]
    assert record.usage == ONE + ONE + ONE
    assert record.max_tokens == 10_000


async def test_B3_max_cost_stops_an_agents_next_model_call_and_resume_replays_its_steps(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    reasons: list[ms.CancelReason | None] = []
    runs: list[int] = []

    async def writer(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        parts = []
        try:
            for i in range(5):
                parts.append(await ctx.step(f"p{i}", ctx.call_skill, "chat", f"p{i}"))
        except BaseException:
            reasons.append(ctx.cancel_reason())
            raise
        return "|".join(parts)

    plan = plan_of(agent("w", "writer"), tool("after", "inc", "w", x=1))
    async with runtime(
        tmp_path,
        ledger,
        skills={"chat": priced(ledger)},
        agents={"writer": writer},
        max_cost="0.025",
    ) as rt:
        with anyio.fail_after(30):
            first = await (await rt.start("g", plan)).wait()
        waiting = stored(rt, first.execution_id)
        assert first.status == "waiting_for_budget"
        # 0.01 and 0.02 are under 0.025: the third call started and overran; no fourth.
        assert ledger.names("skill") == ["chat:p0", "chat:p1", "chat:p2"]
        assert waiting.usage.cost == Decimal("0.03")
        (task,) = tasks_of(waiting)
        assert task.state == "queued"
        assert task.interruption is not None
        assert task.interruption.kind == "budget"
        assert "cost budget" in task.interruption.detail
        assert task.inner_completed == ("p0", "p1", "p2")
        assert task.usage == waiting.usage
        assert waiting.pending is not None
        assert waiting.pending.budget is not None
        assert waiting.pending.budget.budget == "cost"
        assert waiting.pending.budget.max_cost == Decimal("0.025")
        assert isinstance(first.stopped_by, ms.BudgetExhausted)
        assert "cost budget is exhausted" in first.stopped_by.detail
        # The agent itself was told which budget ran out.
        assert len(reasons) == 1
        assert isinstance(reasons[0], ms.BudgetExhausted)
        assert "cost budget" in reasons[0].detail

        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_cost=Decimal(1))).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed", done
    assert ledger.names("skill") == [f"chat:p{i}" for i in range(5)]  # each call made once
    assert record.usage == Usage(input_tokens=500, output_tokens=100, cost=Decimal("0.05"))
    (task,) = tasks_of(record)
    assert task.usage == record.usage
    assert len(runs) == 2


async def test_B3_a_limit_per_start_overrides_the_runtimes_default(tmp_path: Path) -> None:
    ledger = Ledger()
    plan = plan_of(skill("a", "chat", prompt="one"), skill("b", "chat", "a", prompt="two"))
    async with runtime(tmp_path, ledger, skills={"chat": priced(ledger)}, max_tokens=50) as rt:
        with anyio.fail_after(30):
            capped = await (await rt.start("g", plan)).wait()
            free = await (await rt.start("g", plan, max_tokens=1_000)).wait()
    assert capped.status == "waiting_for_budget"
    assert ledger.count("chat:one") == 2
    assert ledger.count("chat:two") == 1
    assert free.status == "completed", free


async def test_P4_needed_is_what_the_rest_of_a_mixed_plan_would_hold(tmp_path: Path) -> None:
    ledger = Ledger()

    async def helper(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.call_skill("model", "h")
        return "helped"

    plan = plan_of(
        tool("t", "inc", x=1),
        skill("a", "model", "t", prompt="a"),
        agent("b", "helper", "t"),
        skill("c", "model", "a", prompt="c"),
        tool("d", "inc", "c", x=2),
    )
    async with runtime(
        tmp_path, ledger, agents={"helper": helper}, max_calls=0,
        reservation=lambda remaining: min(remaining, 4),
    ) as rt:  # fmt: skip
        with anyio.fail_after(30):
            first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_budget"
        assert first.pending is not None
        assert first.pending.budget is not None
        info = first.pending.budget
        # Two skills (1 call each) and an agent (its reservation, 4); tools cost nothing.
        assert (info.budget, info.calls_used, info.max_calls, info.needed) == ("calls", 0, 0, 6)
        with anyio.fail_after(30):
            partly = await (await rt.resume(first.execution_id, max_calls=1)).wait()
        assert partly.pending is not None
        assert partly.pending.budget is not None
        assert partly.pending.budget.needed == 5  # one skill ran
        with anyio.fail_after(30):
            done = await (
                await rt.resume(first.execution_id, max_calls=1 + partly.pending.budget.needed)
            ).wait()
    assert done.status == "completed", done


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_tokens": -1}, "max_tokens must be within"),
        ({"max_tokens": 2.5}, "max_tokens must be a whole number"),
        ({"max_cost": float("nan")}, "max_cost must be a finite number"),
        ({"max_cost": "-1"}, "max_cost must not be negative"),
        ({"max_cost": "lots"}, "max_cost must be a decimal number"),
    ],
)
async def test_B3_bad_limits_are_refused_before_anything_is_stored(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        async with runtime(tmp_path, **options):
            pass
    async with runtime(tmp_path) as rt:
        with pytest.raises((ValueError, TypeError), match=message):
            await rt.start("g", plan_of(tool("t")), execution_id="ex-bad", **options)
        assert await rt.get("ex-bad") is None
        done = await (await rt.start("g", plan_of(tool("t")), execution_id="ex-ok")).wait()
        with pytest.raises((ValueError, TypeError), match=message):
            await rt.resume(done.execution_id, **options)


async def test_P4_B3_an_agent_past_its_token_reservation_fails_with_agent_call_budget(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    asked: list[int] = []

    async def chatty(ctx: ms.AgentContext, input: Any) -> str:
        for i in range(5):
            await ctx.call_skill("chat", f"c{i}")
        return "never"

    def hold(remaining: int) -> int:
        asked.append(remaining)
        return 150

    async with runtime(
        tmp_path,
        ledger,
        skills={"chat": priced(ledger)},
        agents={"chatty": chatty},
        max_tokens=10_000,
        token_reservation=hold,
    ) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan_of(agent("c", "chatty")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "failed"
    assert asked == [10_000]  # asked of what the run had left
    # 120 tokens < 150: a second call; 240 >= 150: no third.
    assert ledger.names("skill") == ["chat:c0", "chat:c1"]
    (task,) = tasks_of(record)
    assert task.state == "failed"
    assert task.failure is not None
    assert task.failure.code == "agent-call-budget"
    assert "150 reserved tokens" in task.failure.message
    assert task.usage == ONE + ONE
    assert record.usage == ONE + ONE


async def test_P4_B3_a_cost_reservation_of_everything_left_waits_for_budget_instead(
    tmp_path: Path,
) -> None:
    ledger = Ledger()

    async def chatty(ctx: ms.AgentContext, input: Any) -> str:
        for i in range(3):
            await ctx.step(f"s{i}", ctx.call_skill, "chat", f"c{i}")
        return "done"

    async with runtime(
        tmp_path,
        ledger,
        skills={"chat": priced(ledger)},
        agents={"chatty": chatty},
        max_cost="0.015",
        cost_reservation=lambda left: left,
    ) as rt:
        with anyio.fail_after(30):
            first = await (await rt.start("g", plan_of(agent("c", "chatty")))).wait()
        assert first.status == "waiting_for_budget"
        assert isinstance(first.stopped_by, ms.BudgetExhausted)
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_cost="0.03")).wait()
    assert done.status == "completed", done
    assert ledger.names("skill") == ["chat:c0", "chat:c1", "chat:c2"]
