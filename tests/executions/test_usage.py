"""B3: skills and agents report tokens and cost; runs and agent tasks keep them durably,
across pauses, resumes and crashes, never backwards."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WithUsage
from mainspring.storage import Usage
from tests.executions._kit import (
    FAST,
    Gate,
    Ledger,
    agent,
    plan_of,
    runtime,
    skill,
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
