"""A tool (or an agent) that raises SystemExit or KeyboardInterrupt ends the program: it comes
out of ``open_runtime`` unwrapped, and the run is left resumable (its lease released)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import agent, plan_of, runtime, statuses, tool

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("where", ["tool", "agent"])
async def test_it_leaves_open_runtime_and_the_run_resumes(
    tmp_path: Path, error: type[BaseException], where: str
) -> None:
    calls: list[int] = []

    async def bad(**_: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise error(3) if error is SystemExit else error()
        return "fine"

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        return str(await ctx.step("call", bad))

    step = tool("b", "bad") if where == "tool" else agent("b", "worker")
    plan = plan_of(step, tool("after", "inc", "b", x=1))
    ids: list[str] = []
    with pytest.raises(error) as caught:  # noqa: PT012
        async with runtime(tmp_path, tools={"bad": bad}, agents={"worker": worker}) as rt:
            handle = await rt.start("g", plan)
            ids.append(handle.execution_id)
            with anyio.fail_after(30):
                await handle.wait()
    assert type(caught.value) is error
    async with runtime(tmp_path, tools={"bad": bad}, agents={"worker": worker}) as rt:
        record = rt.store.get(ids[0])
        assert record is not None
        assert record.status == "running"
        assert record.lease is None or record.lease.owner == ""
        with anyio.fail_after(30):
            result = await (await rt.resume(ids[0])).wait()
        assert rt.store.get(ids[0]) is not None
        final = rt.store.get(ids[0])
    assert result.status == "completed", result
    assert final is not None
    assert statuses(final) == {"b": "succeeded", "after": "succeeded"}
