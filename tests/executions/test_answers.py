"""``Runtime.answer``'s input (``executions._answers``): an answer is text with a UTF-8
form, refused before anything is read or written otherwise (R8, E5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mainspring as ms

pytestmark = pytest.mark.anyio


async def _asks(ctx: ms.AgentContext, input: Any) -> str:
    return await ctx.ask("which city?")


async def test_R8_an_answer_with_no_utf8_form_is_refused_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asks"),))
    async with ms.open_runtime(store=tmp_path / "s.sqlite3", agents={"asks": _asks}) as rt:
        result = await (await rt.start("g", plan, execution_id="ex-1")).wait()
        assert result.status == "waiting_for_clarification"
        before = await rt.get("ex-1")
        with pytest.raises(ValueError, match="UTF-8"):
            await rt.answer("ex-1", "caf\udce9")
        with pytest.raises(TypeError):
            await rt.answer("ex-1", b"Lisbon")  # type: ignore[arg-type]
        assert await rt.get("ex-1") == before
        await rt.answer("ex-1", "Lisbon")  # still open for a good answer
        done = await (await rt.resume("ex-1")).wait()
    assert (done.status, done.outputs) == ("completed", {"a": "Lisbon"})
