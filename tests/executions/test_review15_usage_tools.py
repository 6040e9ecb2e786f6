"""Review of B3: a tool that reports usage with ``WithUsage`` is treated alike whether it runs
as a plan step or through an agent's ``ctx.call_tool``."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WithUsage
from mainspring.storage import Usage
from tests.executions._kit import agent, plan_of, runtime, stored, tasks_of, tool

pytestmark = pytest.mark.anyio

SPENT = Usage(input_tokens=10, output_tokens=5, cost=Decimal("0.5"))


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
