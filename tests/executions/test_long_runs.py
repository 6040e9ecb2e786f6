"""Long runs: the completed set kept in the order steps completed (not recounted from the
plan), agents of many inner steps, and the cap on an agent task's durable steps."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions._steps import context as _agent

from ._kit import Gate, MemoryStore, agent, plan_of, runtime, stored, tasks_of, tool

pytestmark = pytest.mark.anyio


async def test_E6_completed_steps_are_in_the_order_steps_completed(tmp_path: Path) -> None:
    gate = Gate()
    # "slow" comes first in the plan and completes last: it waits until "fast" is durable.
    plan = plan_of(tool("slow", "gate"), tool("fast", "inc", x=1), tool("end", "inc", "slow"))

    async def open_once_fast_is_done(stream: Any) -> None:
        async with contextlib.aclosing(stream):
            async for event in stream:
                if isinstance(event, ms.executions.StepFinished) and event.step_id == "fast":
                    gate.opened.set()
                    return

    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        async with anyio.create_task_group() as tg:
            before = rt._bus.subscribers
            tg.start_soon(open_once_fast_is_done, rt.events())
            while rt._bus.subscribers == before:  # subscribed: nothing published is missed
                await anyio.lowlevel.checkpoint()
            result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed"
    assert record.completed_steps == ("fast", "slow", "end")
    assert record.checkpoints[-1].completed_steps == record.completed_steps
    # E6: a checkpoint per new completed set (the first commit's, then one per completion).
    assert [c.completed_steps for c in record.checkpoints[-3:]] == [
        ("fast",),
        ("fast", "slow"),
        ("fast", "slow", "end"),
    ]


async def test_an_agent_of_two_thousand_inner_steps_completes() -> None:
    async def long(ctx: ms.AgentContext, input: Any) -> int:
        total = 0
        for i in range(2_000):
            total += await ctx.step(f"i{i}", lambda i=i: i)
        return total

    async with runtime(MemoryStore(), agents={"long": long}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "long")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    assert result.outputs["a"] == sum(range(2_000))
    [task] = tasks_of(record)
    assert task.inner_steps_done == 2_000
    assert task.inner_completed == tuple(f"i{i}" for i in range(2_000))
    assert [o.output for o in task.inner_observations] == list(range(2_000))
    # What the runtime built save by save is what was stored, and its stored form is what
    # unstructuring the task whole gives.
    assert record.agent_tasks[0] is task
    assert ms.storage._seam.unstructure(record)["agent_tasks"][0] == ms.storage._seam.unstructure(
        task
    )


async def test_an_agent_task_keeps_at_most_the_cap_of_durable_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _agent.MAX_INNER_STEPS == 100_000
    monkeypatch.setattr(_agent, "MAX_INNER_STEPS", 3)  # the same check, reached sooner
    ran: list[int] = []

    async def greedy(ctx: ms.AgentContext, input: Any) -> None:
        for i in range(4):
            await ctx.step(f"i{i}", lambda i=i: ran.append(i))

    async with runtime(tmp_path, agents={"greedy": greedy}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "greedy")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "failed"
    assert ran == [0, 1, 2]  # the fourth step never ran
    [task] = tasks_of(record)
    assert task.state == "failed"
    assert task.failure is not None
    assert "an agent task keeps at most 3 durable steps" in task.failure.message
    assert task.inner_completed == ("i0", "i1", "i2")


async def test_steps_completing_out_of_order_cost_each_commit_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Independent steps in flight finish in any order. Completed steps are kept in the order
    # they completed, so each completion is an append to the stored record, never a rewrite
    # of it: the journal's bytes per step do not grow with the run (was: the completed list
    # and five checkpoints rewritten whole on every out-of-order completion).
    from mainspring.storage._backends.file import store as _file

    monkeypatch.setattr(_file, "_COMPACT_AT", 1 << 40)  # measure the appends themselves
    order = list(range(400))
    order.reverse()

    async def shuffled(n: int) -> int:
        for _ in range(order.index(n) % 5):  # later-listed steps finish sooner
            await anyio.lowlevel.checkpoint()
        return n

    sizes = {}
    for count in (100, 400):
        path = tmp_path / f"files-{count}"
        plan = plan_of(*(tool(f"s{n}", "shuffled", n=n) for n in range(count)))
        async with runtime(ms.storage.FileStore(path), tools={"shuffled": shuffled}) as rt:
            result = await (await rt.start("g", plan)).wait()
        assert result.status == "completed"
        sizes[count] = sum(p.stat().st_size for p in path.glob("*.journal")) / count
    assert sizes[400] < sizes[100] * 1.3, sizes
