"""Soak: many spawn / message / cancel cycles leave no task, timer or memory behind (slow)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import anyio
import pytest

import mainspring as ms

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


class Node(ms.Actor):
    def __init__(self, depth: int) -> None:
        self.depth = depth

    async def on_start(self) -> None:
        self.send_every(3600, "tick")
        if self.depth:
            for i in range(3):
                child = await self.spawn(Node, self.depth - 1, name=f"c{i}")
                self.watch(child)

    async def receive(self, message: Any) -> Any:
        if message == "block":
            await anyio.sleep_forever()
        return message


async def _cycle(system: ms.ActorSystem, i: int) -> None:
    root = await system.spawn(Node, 4, name=f"root{i}")  # 1 + 3 + 9 + 27 + 81 = 121 actors
    assert await root.ask("ping") == "ping"
    await anyio.wait_all_tasks_blocked()  # the whole tree has started
    leaf = system.lookup(f"/root{i}/c0/c1/c2/c0")
    assert leaf is not None
    leaf.tell_nowait("block")
    await anyio.wait_all_tasks_blocked()
    reason = ms.Cancel(detail=f"cycle {i}")
    root.cancel(reason)
    assert await root.wait_stopped() is reason


# Heavy on purpose: full garbage collections of a heap of thousands of actors; the guard
# still fails a step that blocks for longer.
@pytest.mark.loop_guard(2.0)
async def test_repeated_tree_cancel_cycles_leak_nothing() -> None:
    async with ms.open_system() as system:
        baseline_tasks = {task.id for task in anyio.get_running_tasks()}
        for i in range(20):  # warm caches and free lists first
            await _cycle(system, i)
        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            for i in range(20, 120):  # 100 cycles x 121 actors = 12,100 actors
                await _cycle(system, i)
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert {task.id for task in anyio.get_running_tasks()} == baseline_tasks
        assert system._children == {}
        # Growth well under one byte per actor-cycle means nothing accumulates per actor.
        assert after - before < 64 * 1024, after - before
