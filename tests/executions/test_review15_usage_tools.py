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
