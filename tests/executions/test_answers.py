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


async def test_E8_a_question_whose_task_record_is_unreadable_is_not_called_answered(
    tmp_path: Path,
) -> None:
    """The run waits on a question whose agent task's record no longer parses (E8: kept as
    an Unreadable). An answer is then not 'an answer already stored, waiting for its task'
    (ExecutionBusy, exit code 4 in the CLI: come back later): nothing was stored, and
    waiting never helps. Whatever the runtime decides, it must not say that."""
    import attrs

    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asks"),))
    store = ms.storage.SqliteStore(tmp_path / "s.sqlite3")
    async with ms.open_runtime(store=store, agents={"asks": _asks}) as rt:
        result = await (await rt.start("g", plan, execution_id="ex-1")).wait()
    assert result.status == "waiting_for_clarification"
    stored = store.get("ex-1")
    assert stored is not None
    (task,) = stored.agent_tasks
    assert type(task) is ms.storage.AgentTaskRecord
    raw = {**ms.storage.unstructure(task), "written_by_a_newer_version": 1}
    unreadable = ms.storage.Unreadable(raw=raw, key=task.id)
    assert store.acquire("ex-1", "tester", 30).acquired
    assert store.replace(attrs.evolve(stored, agent_tasks=(unreadable,)), "tester")
    assert store.release("ex-1", "tester")
    async with ms.open_runtime(store=store, agents={"asks": _asks}) as rt:
        for attempt in (
            lambda: rt.answer("ex-1", "Lisbon"),
            lambda: rt.resume("ex-1", answer="Lisbon"),
        ):
            try:
                await attempt()
            except ms.ExecutionBusy as exc:
                pytest.fail(f"an unreadable task's question is called answered: {exc}")
            except ms.MainspringError:
                pass  # refused saying something else: fine
