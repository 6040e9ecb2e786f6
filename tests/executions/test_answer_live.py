"""An answer for a run that is still live in this runtime (another step keeps it going):
the asking task takes it at once and the run goes on, without waiting to end first (R8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
import mainspring.executions  # loaded before any event loop runs

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", ["sqlite", "files"])
async def test_an_answer_reaches_the_task_of_a_run_live_here(tmp_path: Path, kind: str) -> None:
    release = anyio.Event()
    asked = anyio.Event()
    answers: list[str] = []

    async def busy() -> str:
        await release.wait()
        return "done"

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        asked.set()
        answer = await ctx.ask("which city?")
        answers.append(answer)
        release.set()  # the other step may finish only once the answer arrived
        return answer

    plan = ms.Plan(
        id="p",
        goal="g",
        steps=(ms.PlanStep(id="ask", agent="asker"), ms.PlanStep(id="busy", tool="busy")),
    )
    store = tmp_path / ("s.sqlite3" if kind == "sqlite" else "files")
    async with ms.open_runtime(store=store, tools={"busy": busy}, agents={"asker": asker}) as rt:
        handle = await rt.start("g", plan, execution_id="ex-live")
        await asked.wait()
        with anyio.fail_after(30):
            while True:
                tasks = await rt.agent_tasks("ex-live")
                if tasks and tasks[0].state == "waiting_for_clarification":
                    break
                await anyio.sleep(0.02)
        again = await rt.resume("ex-live", answer="Lisbon")
        assert again is handle  # the same live run, not a second one
        with anyio.fail_after(30):
            result = await handle.wait()
        record = await rt.get("ex-live")
    assert result.status == "completed", result
    assert result.outputs == {"ask": "Lisbon", "busy": "done"}
    assert answers == ["Lisbon"]
    assert record is not None
    assert [c.action for c in record.controls].count("answer") == 1


async def test_an_answer_with_no_question_open_is_refused_while_the_run_is_live(
    tmp_path: Path,
) -> None:
    release = anyio.Event()

    async def busy() -> str:
        await release.wait()
        return "done"

    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="busy", tool="busy"),))
    async with ms.open_runtime(store=tmp_path / "s.sqlite3", tools={"busy": busy}) as rt:
        handle = await rt.start("g", plan, execution_id="ex-live")
        with pytest.raises(ms.ExecutionBusy):
            await rt.resume("ex-live", answer="nobody asked")
        release.set()
        assert (await handle.wait()).status == "completed"
        record = await rt.get("ex-live")
    assert record is not None
    assert record.answer_requests == ()
