"""Review #14: answers for a run live in this runtime (``request_answer``), on SQLite and
PostgreSQL: two agent tasks asking at once (R9: the slot passes on)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
import mainspring.executions

from .._postgres import drop_schema, fresh_schema, require_server, with_schema

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "s.sqlite3")
        return
    url = require_server()
    schema = fresh_schema()
    try:
        yield with_schema(url, schema)
    finally:
        drop_schema(schema)


async def _waiting(rt: ms.Runtime, execution_id: str, n: int) -> list[Any]:
    with anyio.fail_after(30):
        while True:
            tasks = [
                t
                for t in await rt.agent_tasks(execution_id)
                if t.state == "waiting_for_clarification"
            ]
            if len(tasks) >= n:
                return tasks
            await anyio.sleep(0.02)


async def test_two_tasks_asking_two_answers_in_a_row_reach_both_tasks(store: str) -> None:
    """Two agent tasks ask while a third step keeps the run live. The user answers the
    question shown (the first task's), then at once answers again: the second answer is for
    the question that now holds the slot (R9), the second task's. ``request_answer`` returns
    as soon as the first answer is written (before the runner took it and passed the slot
    on), so the second is written against the same, stale, pending slot: for the first task
    again, where it is dropped (same ask) — while the caller was handed the run as accepted.
    Either the second answer reaches the second task, or the caller is refused."""
    release = anyio.Event()
    answers: dict[str, str] = {}

    async def busy() -> str:
        await release.wait()
        return "done"

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        answer = await ctx.ask(f"question of {input['who']}")
        answers[input["who"]] = answer
        if len(answers) == 2:
            release.set()
        return answer

    plan = ms.Plan(
        id="p",
        goal="g",
        steps=(
            ms.PlanStep(id="one", agent="asker", input={"who": "one"}),
            ms.PlanStep(id="two", agent="asker", input={"who": "two"}),
            ms.PlanStep(id="busy", tool="busy"),
        ),
    )
    async with ms.open_runtime(store=store, tools={"busy": busy}, agents={"asker": asker}) as rt:
        handle = await rt.start("g", plan, execution_id="ex-two")
        await _waiting(rt, "ex-two", 2)
        waiting = await _waiting(rt, "ex-two", 2)
        first_asker = min(waiting, key=lambda t: (t.created_at, t.id))
        second_asker = next(t for t in waiting if t.id != first_asker.id)
        await rt.resume("ex-two", answer="first")
        await rt.resume("ex-two", answer="second")  # accepted: the caller is handed the run
        record = await rt.get("ex-two")
        assert record is not None
        targets = [r.task_id for r in record.answer_requests]
        if len(targets) == 2:  # both went through the record: the second must target task two
            assert targets == [first_asker.id, second_asker.id], targets
        with anyio.fail_after(30):
            await release.wait()  # set by the agent once both tasks have their answers
        with anyio.fail_after(30):
            result = await handle.wait()
    assert answers == {"one": "first", "two": "second"}
    assert result.status == "completed"
