"""Review 14: a run resumed twice in a row, in fresh runtimes, hands user code what the live
run handed it (E10): typed values in outputs, ctx.step results and step inputs."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from tests._exact import same
from tests.executions._kit import FAST, Gate, plan_of, runtime, stored

pytestmark = pytest.mark.anyio

VALUES: dict[Any, Any] = {
    "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "day": dt.date(2024, 2, 29),
    "raw": b"\x00\xff",
    "set": {1, 2, 3},
    "fs": frozenset({"a"}),
    (1, 2): "pair",
    "tuple": (1, (2, 3)),
    "dec": decimal.Decimal("1.10"),
    "id": uuid.UUID(int=7),
    "big": 2**70,
    "nan": float("nan"),
    "tag-like": {"$ms": "set", "v": [1]},
}


async def test_E10_two_resumes_in_a_row_hand_back_the_live_values(tmp_path: Path) -> None:
    gate = Gate()
    handed: dict[str, list[Any]] = {"produce": [], "inner": [], "echo": []}

    async def produce(**_: Any) -> dict[Any, Any]:
        return VALUES

    async def echo(values: Any) -> Any:
        handed["echo"].append(values)
        return values

    async def keep(ctx: ms.AgentContext, input: Any) -> Any:
        got = await ctx.step("v", lambda: VALUES)
        handed["inner"].append(got)
        await ctx.step("park", gate)
        return got

    tools = {"produce": produce, "echo": echo, "gate": gate}
    agents = {"keep": keep}
    plan = plan_of(
        ms.PlanStep(id="produce", tool="produce"),
        ms.PlanStep(id="keep", agent="keep", depends_on=("produce",)),
        ms.PlanStep(id="echo", tool="echo", input={"values": VALUES}, depends_on=("keep",)),
    )
    async with runtime(tmp_path, tools=tools, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        with anyio.fail_after(30):
            await handle.wait()
    for last in (False, True):
        gate.entered = anyio.Event()
        async with runtime(tmp_path, tools=tools, agents=agents, **FAST) as rt:
            handle = await rt.resume(handle.execution_id)
            await gate.entered.wait()
            if last:
                gate.opened.set()
            else:
                await rt.pause(handle.execution_id)
            with anyio.fail_after(30):
                result = await handle.wait()
            record = stored(rt, handle.execution_id)
    assert result.status == "completed", result
    assert len(handed["inner"]) == 3
    for got in handed["inner"]:
        assert same(got, VALUES), got
    (echoed,) = handed["echo"]
    assert same(echoed, VALUES), echoed
    for step_id in ("produce", "keep", "echo"):
        assert same(result.outputs[step_id], VALUES), (step_id, result.outputs[step_id])
    assert record.plan is not None
    assert same(record.plan.steps[2].input, {"values": VALUES})
