"""Spawning many actors back to back does not hold the event loop; spawning a few is cheap."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from anyio.lowlevel import checkpoint

import mainspring as ms
from mainspring.actors import _util
from mainspring.actors._util import SpawnPacer

pytestmark = pytest.mark.anyio


class Idle(ms.Actor):
    async def receive(self, message: Any) -> Any:
        return message


class Spawner(ms.Actor):
    """Spawns ``count`` children in one handler; answers how many ticks happened meanwhile."""

    async def receive(self, message: Any) -> Any:
        count, ticks = message
        before = len(ticks)
        for number in range(count):
            await self.spawn(Idle, name=f"c{number}")
        return len(ticks) - before


async def _ticker(ticks: list[int], stop: anyio.Event) -> None:
    while not stop.is_set():
        ticks.append(1)
        await checkpoint()


@pytest.mark.parametrize("where", ["system", "actor"])
async def test_a_long_spawn_loop_lets_other_tasks_run(where: str) -> None:
    ticks: list[int] = []
    stop = anyio.Event()
    async with ms.open_system() as system, anyio.create_task_group() as tg:
        tg.start_soon(_ticker, ticks, stop)
        await checkpoint()
        # 3,000 spawns take well over the 10 ms slice on any machine this runs on.
        if where == "system":
            before = len(ticks)
            for number in range(3_000):
                await system.spawn(Idle, name=f"a{number}")
            during = len(ticks) - before
        else:
            spawner = await system.spawn(Spawner)
            during = await spawner.ask((3_000, ticks), timeout=60)
        stop.set()
    assert during > 1  # without pacing, nothing else runs until the loop is over


@pytest.fixture
def schedule_points(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the pacer's schedule points (the scheduler's order cannot tell them apart)."""
    points: list[int] = []

    async def counted() -> None:
        points.append(1)
        await checkpoint()

    monkeypatch.setattr(_util, "checkpoint", counted)
    return points


async def _yields(pacer: SpawnPacer, points: list[int]) -> bool:
    """Whether one ``pace()`` was a schedule point."""
    before = len(points)
    await pacer.pace()
    return len(points) > before


async def test_the_pacer_yields_once_per_slice(schedule_points: list[int]) -> None:
    now = [100.0]
    pacer = SpawnPacer(slice=0.01, clock=lambda: now[0])
    steps = []
    for _ in range(6):
        steps.append(await _yields(pacer, schedule_points))
        now[0] += 0.004
    # 0 ms: the first spawn yields; 4, 8 ms: no; 12 ms: a slice has passed; 16, 20 ms: no.
    assert steps == [True, False, False, True, False, False]


async def test_time_passing_between_spawns_is_not_yielding(schedule_points: list[int]) -> None:
    now = [100.0]
    pacer = SpawnPacer(slice=0.01, clock=lambda: now[0])
    assert await _yields(pacer, schedule_points)
    now[0] += 0.009
    assert not await _yields(pacer, schedule_points)
    now[0] += 0.011  # the caller worked 11 ms without yielding: this spawn yields
    assert await _yields(pacer, schedule_points)
    assert not await _yields(pacer, schedule_points)


async def test_a_paced_spawn_cancelled_before_it_starts_starts_nothing() -> None:
    async with ms.open_system() as system:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await system.spawn(Idle, name="never")
        assert system.lookup("/never") is None
