"""B3: skills and agents report tokens and cost; runs and agent tasks keep them durably,
across pauses, resumes and crashes, never backwards."""

from __future__ import annotations

import contextlib
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WithUsage
from mainspring.storage import BudgetInfo, Usage
from tests.executions._kit import (
    FAST,
    Gate,
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


def priced(ledger: Ledger, input_tokens: int = 100, output_tokens: int = 20, cost: str = "0.01"):
    """A skill that reports what its (pretend) model call spent."""

    async def chat(prompt: str = "", **_: Any) -> WithUsage:
        ledger.add("skill", f"chat:{prompt}")
        spent = Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost=cost)
        return WithUsage(f"said {prompt}", usage=spent)

    return chat


async def test_B3_a_skill_returning_usage_adds_it_to_the_run_and_its_record(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    plan = plan_of(
        skill("a", "chat", prompt="one"),
        skill("b", "chat", "a", prompt="two"),
        skill("c", "model", "b", prompt="plain"),  # reports nothing: adds nothing
        tool("d", "inc", "c", x=1),
    )
    async with runtime(tmp_path, ledger, skills={"chat": priced(ledger)}) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    want = Usage(input_tokens=200, output_tokens=40, cost=Decimal("0.02"))
    assert result.usage == want
    assert record.usage == want
    assert record.calls_used == 3
    # The step's output is the value alone: the usage is taken out before it is stored.
    assert result.outputs["a"] == "said one"
    assert next(o for o in record.observations if o.step_id == "a").output == "said one"


async def test_B3_an_agents_skill_calls_and_reported_usage_add_to_the_task_and_the_run(
    tmp_path: Path,
) -> None:
    ledger = Ledger()

    async def researcher(ctx: ms.AgentContext, input: Any) -> str:
        first = await ctx.step("ask", ctx.call_skill, "chat", "q")
        ctx.report_usage(input_tokens=7, output_tokens=3, cost=Decimal("0.5"))
        second = await ctx.call_skill("chat", "r")
        return f"{first}+{second}"

    plan = plan_of(agent("r", "researcher"), skill("s", "chat", "r", prompt="after"))
    async with runtime(
        tmp_path, ledger, skills={"chat": priced(ledger)}, agents={"researcher": researcher}
    ) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    assert result.outputs["r"] == "said q+said r"
    (task,) = tasks_of(record)
    assert task.usage == Usage(input_tokens=207, output_tokens=43, cost=Decimal("0.52"))
    assert record.usage == Usage(input_tokens=307, output_tokens=63, cost=Decimal("0.53"))
    assert result.usage == record.usage


async def test_B3_usage_survives_a_pause_and_resume_and_never_goes_backwards(
    tmp_path: Path,
) -> None:
    """Usage an agent reported but no save recorded is charged when the run is paused."""
    ledger = Ledger()
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.call_skill("chat", "before")  # not a durable step: nothing saves it
        if gate.calls == 0:
            await gate()
        return "done"

    plan = plan_of(agent("w", "worker"))
    async with runtime(
        tmp_path, ledger, skills={"chat": priced(ledger)}, agents={"worker": worker}, **FAST
    ) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id, reason="hold")
        with anyio.fail_after(30):
            paused = await handle.wait()
        record = stored(rt, handle.execution_id)
        assert paused.status == "paused"
        one = Usage(input_tokens=100, output_tokens=20, cost=Decimal("0.01"))
        assert record.usage == one
        (task,) = tasks_of(record)
        assert task.usage == one
        with anyio.fail_after(30):
            done = await (await rt.resume(handle.execution_id)).wait()
        final = stored(rt, handle.execution_id)
    assert done.status == "completed", done
    # The call outside ctx.step was made again on resume, and counted again (as calls are).
    assert len(ledger.names("skill")) == 2
    assert final.usage == one + one
    assert final.usage.covers(record.usage)
    (task,) = tasks_of(final)
    assert task.usage == one + one


async def test_B3_a_pause_from_another_runtime_keeps_the_usage_reported_before_it(
    tmp_path: Path,
) -> None:
    gate = Gate()
    ledger = Ledger()

    async def caller(ctx: ms.AgentContext, input: Any) -> None:
        ctx.report_usage(input_tokens=5, output_tokens=6, cost="1.25")
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
    want = Usage(input_tokens=5, output_tokens=6, cost=Decimal("1.25"))
    assert record.usage == want
    (task,) = tasks_of(record)
    assert task.usage == want


async def test_B3_usage_survives_closing_and_reopening_the_runtime(tmp_path: Path) -> None:
    """A crash of the process, in process: the runtime closes under a running step (its
    record left as a crash leaves it) and another one on the same store resumes."""
    ledger = Ledger()
    gate = Gate()
    plan = plan_of(
        skill("a", "chat", prompt="one"),
        tool("wait", "gate", "a"),
        skill("b", "chat", "wait", prompt="two"),
    )
    async with runtime(
        tmp_path, ledger, tools={"gate": gate}, skills={"chat": priced(ledger)}, **FAST
    ) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        before = stored(rt, handle.execution_id).usage
    one = Usage(input_tokens=100, output_tokens=20, cost=Decimal("0.01"))
    assert before == one
    gate.opened.set()
    async with runtime(
        tmp_path, ledger, tools={"gate": gate}, skills={"chat": priced(ledger)}, **FAST
    ) as rt:
        reopened = stored(rt, handle.execution_id)
        assert reopened.usage == one  # as durable as calls_used (E9)
        with anyio.fail_after(30):
            done = await (await rt.resume(handle.execution_id)).wait()
        final = stored(rt, handle.execution_id)
    assert done.status == "completed", done
    assert ledger.count("chat:one") == 1  # a durable step is not run again
    assert final.usage == one + one
    assert final.usage.covers(reopened.usage)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"input_tokens": -1}, "input_tokens must be within"),
        ({"cost": math.nan}, "cost must be a finite number"),
        ({"cost": "-0.5"}, "cost must not be negative"),
        ({"output_tokens": 1.5}, "output_tokens must be a whole number"),
    ],
)
async def test_B3_a_skill_reporting_bad_usage_fails_its_step_and_totals_are_untouched(
    tmp_path: Path, bad: dict[str, Any], error: str
) -> None:
    ledger = Ledger()

    async def broken(**_: Any) -> WithUsage:
        return WithUsage("x", usage=Usage(**bad))

    plan = plan_of(skill("a", "chat", prompt="ok"), skill("b", "broken", "a"))
    async with runtime(tmp_path, ledger, skills={"chat": priced(ledger), "broken": broken}) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "failed"
    failed = next(o for o in record.observations if o.step_id == "b")
    assert not failed.ok
    assert error in (failed.error or "")
    assert record.usage == Usage(input_tokens=100, output_tokens=20, cost=Decimal("0.01"))


async def test_B3_usage_that_is_not_a_usage_fails_the_step(tmp_path: Path) -> None:
    async def sloppy(**_: Any) -> WithUsage:
        return WithUsage("x", usage={"input_tokens": 3})  # type: ignore[arg-type]

    async with runtime(tmp_path, skills={"sloppy": sloppy}) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan_of(skill("a", "sloppy")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "failed"
    assert "usage must be a mainspring.storage.Usage" in (record.observations[0].error or "")
    assert record.usage == Usage()


async def test_B3_an_agent_reporting_bad_usage_gets_the_error_and_nothing_is_added(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    async def careful(ctx: ms.AgentContext, input: Any) -> str:
        try:
            ctx.report_usage(input_tokens=10, cost=float("inf"))
        except ValueError as exc:
            seen.append(str(exc))
        ctx.report_usage(input_tokens=10, output_tokens=1, cost=0.25)
        return "ok"

    async with runtime(tmp_path, agents={"careful": careful}) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan_of(agent("c", "careful")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    assert seen
    assert "cost must be a finite number" in seen[0]
    assert record.usage == Usage(input_tokens=10, output_tokens=1, cost=Decimal("0.25"))


async def test_B3_a_resumed_agent_paused_before_reporting_keeps_its_earlier_usage(
    tmp_path: Path,
) -> None:
    """The second run of a task makes a model call that reports nothing and is paused
    before any save: its calls are charged, and its usage from the first run stays."""
    ledger = Ledger()
    gate = Gate()
    runs: list[int] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        if len(runs) == 1:
            ctx.report_usage(input_tokens=5, output_tokens=5, cost="0.5")
            await ctx.step("first", lambda: "kept")
        await ctx.call_skill("model", "plain")  # reports no usage
        await gate()
        return "done"

    async with runtime(tmp_path, ledger, agents={"worker": worker}, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("w", "worker")))
        for _ in range(2):
            await gate.entered.wait()
            gate.entered = anyio.Event()
            await rt.pause(handle.execution_id, reason="hold")
            with anyio.fail_after(30):
                await handle.wait()
            record = stored(rt, handle.execution_id)
            (task,) = tasks_of(record)
            want = Usage(input_tokens=5, output_tokens=5, cost=Decimal("0.5"))
            assert task.usage == want, len(runs)
            assert record.usage == want
            assert task.calls_used == len(runs)
            if len(runs) == 1:
                handle = await rt.resume(handle.execution_id)
    assert len(runs) == 2


async def test_B3_a_cancel_keeps_the_usage_reported_before_it(tmp_path: Path) -> None:
    gate = Gate()

    async def caller(ctx: ms.AgentContext, input: Any) -> None:
        ctx.report_usage(input_tokens=9, output_tokens=1, cost="0.75")
        await gate()

    async with runtime(tmp_path, agents={"caller": caller}, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("c", "caller")))
        await gate.entered.wait()
        await rt.cancel(handle.execution_id, reason="enough")
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "cancelled"
    want = Usage(input_tokens=9, output_tokens=1, cost=Decimal("0.75"))
    assert record.usage == want
    assert result.usage == want
    (task,) = tasks_of(record)
    assert task.usage == want


# ----------------------------------------------------------------------
# B3, P4: token and cost budgets. Once a run's tokens or cost reach their limit no model
# call starts (the one that overran is charged in full); the run waits for budget with its
# work kept, stopped with ``BudgetExhausted`` naming the budget, and a resume with a higher
# limit goes on. ``BudgetInfo.needed`` says how many more calls the rest of the plan wants.

ONE = Usage(input_tokens=100, output_tokens=20, cost=Decimal("0.01"))


def priced_usage_budget(ledger: Ledger) -> Any:
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
    async with runtime(
        tmp_path, ledger, skills={"chat": priced_usage_budget(ledger)}, max_tokens=200
    ) as rt:
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
        skills={"chat": priced_usage_budget(ledger)},
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
    async with runtime(
        tmp_path, ledger, skills={"chat": priced_usage_budget(ledger)}, max_tokens=50
    ) as rt:
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
        skills={"chat": priced_usage_budget(ledger)},
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
        skills={"chat": priced_usage_budget(ledger)},
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


# ----------------------------------------------------------------------
# An agent whose reservation was all the run's budget had left waits for budget like any
# other step (P4), with its durable inner steps kept, and resumes with a higher ``max_calls``;
# ``calls_used`` accumulates across the wait (E9). An agent that spends a reservation the
# run's budget did not cut short still fails with ``agent-call-budget``.


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
                    if isinstance(event, ms.events.AgentTaskCompleted):
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


# ----------------------------------------------------------------------
# An agent short of the run's budget waits for budget (P4), its calls accounted
# once and never backwards (E9, B3).


def _durable_writer(runs: list[int], n: int = 5) -> Any:
    async def writer(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        parts = [await ctx.step(f"p{i}", ctx.call_skill, "model", f"p{i}") for i in range(n)]
        return "|".join(parts)

    return writer


async def test_E9_resumed_with_a_lower_budget_it_keeps_waiting_and_nothing_goes_backwards(
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


async def test_E9_raised_by_one_call_at_a_time_it_makes_each_call_once(tmp_path: Path) -> None:
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


async def test_E9_calls_outside_ctx_step_are_made_again_and_counted_again(tmp_path: Path) -> None:
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


async def test_E9_a_pause_from_elsewhere_keeps_the_calls_an_agent_made_before_it(
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


async def test_E9_a_pause_here_keeps_the_calls_an_agent_made_before_it(tmp_path: Path) -> None:
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


async def test_P4_a_budget_wait_then_a_pause_then_a_resume_with_budget_completes(
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


# ----------------------------------------------------------------------
# B3: a skill whose model call returned while its run was being paused has spent
# what it reports; that usage is accounting and must not be dropped with the step's result.

SPENT = Usage(input_tokens=10, output_tokens=5, cost=Decimal("0.5"))


@pytest.mark.parametrize("control", ["pause", "cancel"])
async def test_B3_a_skill_that_finishes_its_call_during_a_pause_or_cancel_is_charged(
    tmp_path: Path, control: str
) -> None:
    """Its result arrives while the run stops, too late to be handled: the step runs again
    on resume (its call count is the resume's), but what the finished call spent is kept."""
    entered = anyio.Event()

    async def chat(**_: Any) -> WithUsage:
        # The model call is shielded (a skill that will not waste a started call): it
        # finishes once the pause has reached it, and returns what it spent.
        with anyio.CancelScope(shield=True):
            entered.set()
            while ms.cancel_reason() is None:
                await anyio.lowlevel.checkpoint()
        return WithUsage("said", usage=SPENT)

    async with runtime(tmp_path, skills={"chat": chat}) as rt:
        handle = await rt.start("g", plan_of(skill("a", "chat")))
        with anyio.fail_after(30):
            await entered.wait()
            await getattr(rt, control)(handle.execution_id)
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == {"pause": "paused", "cancel": "cancelled"}[control]
    assert result.usage == SPENT
    assert record.usage == SPENT  # the call was made and returned its usage (B3, E9)


# ----------------------------------------------------------------------
# B3: a tool that reports usage with ``WithUsage`` is treated alike whether it runs
# as a plan step or through an agent's ``ctx.call_tool``.


async def test_B3_ctx_call_tool_returns_the_value_and_charges_a_tools_reported_usage(
    tmp_path: Path,
) -> None:
    """A tool step's ``WithUsage`` is unwrapped and charged; ``ctx.call_tool`` of the same
    tool handed the agent the wrapper itself and dropped the usage."""
    got: list[Any] = []

    async def embed(**_: Any) -> WithUsage:
        return WithUsage("vector", usage=SPENT)

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        got.append(await ctx.call_tool("embed"))
        return "ok"

    plan = plan_of(agent("w", "worker"), tool("t", "embed"))
    async with runtime(tmp_path, tools={"embed": embed}, agents={"worker": worker}) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    assert result.outputs["t"] == "vector"  # the step: unwrapped
    assert got == ["vector"]  # the agent's call: likewise
    (task,) = tasks_of(record)
    assert task.usage == SPENT
    assert record.usage == SPENT + SPENT


async def test_B3_an_inner_step_whose_function_returns_usage_charges_it_once(
    tmp_path: Path,
) -> None:
    """``ctx.step("ask", model_call)`` with a function returning ``WithUsage`` (a skill's own
    function, say) failed the task as unstorable and lost what the call spent. The value is
    what the step stores and returns; the usage is charged once: the resume that answers
    the agent's question replays the step without charging it again (E9)."""
    calls: list[str] = []

    async def model(prompt: str) -> WithUsage:
        calls.append(prompt)
        return WithUsage(f"said {prompt}", usage=SPENT)

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        said = await ctx.step("ask", model, "q")
        return f"{said} {await ctx.ask('go on?')}"

    plan = plan_of(agent("w", "worker"))
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        with anyio.fail_after(30):
            handle = await rt.start("g", plan)
            first = await handle.wait()
            assert first.status == "waiting_for_clarification", first
            resumed = await rt.resume(handle.execution_id, answer="yes")
            result = await resumed.wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    assert calls == ["q"]  # replayed, not made again
    assert result.outputs["w"] == "said q yes"
    (task,) = tasks_of(record)
    assert task.usage == SPENT
    assert record.usage == SPENT
