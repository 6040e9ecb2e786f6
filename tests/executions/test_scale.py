"""1,000 concurrent executions of a 10-step plan in one process complete, and what they
leave behind is bounded: no live executions, actors or heap growth per run (slow)."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import anyio
import pytest

import mainspring as ms

from ._kit import linear

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _inc(x: int = 0) -> int:
    return x + 1


async def _batch(rt: ms.Runtime, count: int) -> list[ms.ExecutionResult]:
    results: list[ms.ExecutionResult] = []

    async def one() -> None:
        results.append(await (await rt.start("scale", linear(10))).wait())

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return results


# Heavy on purpose: with 1,000 live executions a full garbage collection pass alone takes
# 0.25-0.3 s of CPU here (measured by the loop guard), and one lands in some step; beside the
# other slow suites one took 1.0 s (CI, 2026-12-01). What is measured here is completion and
# memory, not the collector.
@pytest.mark.loop_guard(2.0)
@pytest.mark.timeout(480)  # a soak: ~110 s quiet, more beside the other slow suites
async def test_a_thousand_concurrent_executions_complete_with_bounded_memory(
    tmp_path: Path,
) -> None:
    # A long lease: this test is about completion and memory, and on a loaded machine 10,000
    # commits can delay some run's heartbeat past the default 15 s (the run then rightly stops
    # with LeaseLost, which is not what is measured here).
    store = tmp_path / "s.sqlite3"
    async with ms.open_runtime(store=store, tools={"inc": _inc}, lease_ttl=300.0) as rt:
        first = await _batch(rt, 1_000)
        assert [r.status for r in first] == ["completed"] * 1_000, {
            (r.status, str(r.stopped_by)) for r in first
        }
        assert rt.live() == []
        del first
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        second = await _batch(rt, 1_000)
        assert [r.status for r in second] == ["completed"] * 1_000
        del second
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
        listing = await rt.executions()
    assert len(listing) == 2_000
    # A run that left anything behind (an actor, a handle, a subscriber, its record) would
    # cost kilobytes each; 1,000 of them would show here. Under load more runs are in flight
    # at once, and the dicts sized by that peak (task states, caches) grow their capacity:
    # measured 0.7-1.6 KB a run with nothing left behind.
    assert grown < 2_000 * 1_024, grown
