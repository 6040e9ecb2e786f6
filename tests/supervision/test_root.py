"""The root supervisor (the overseer of top-level actors) and the one restart-intensity window."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

import mainspring as ms
from mainspring.supervision import RootSupervisor
from mainspring.supervision._intensity import RestartWindow

from ._kit import FakeClock, Worker, recording_events, starts

pytestmark = pytest.mark.anyio


def test_the_window_counts_restarts_within_the_period_of_the_injected_clock() -> None:
    clock = FakeClock()
    window = RestartWindow(2, 10.0, clock)
    assert window.add()
    clock.now += 5
    assert window.add()
    assert len(window) == 2
    assert not window.add()  # a third within 10 s
    clock.now += 10  # all three leave the window: a restart at t counts until t + period
    assert window.add()
    assert len(window) == 1


def test_a_window_that_allows_no_restart_refuses_the_first() -> None:
    window = RestartWindow(0, 1.0, FakeClock())
    assert not window.add()
    assert len(window) == 1


async def crash(ref: ms.ActorRef, times: int, clock: FakeClock | None = None) -> None:
    for _ in range(times):
        with pytest.raises((ms.ActorFailed, ms.ActorDeadError)):
            await ref.ask("crash")
        if clock is not None:
            clock.now += 6  # each restart alone in the root's 5 s window


async def test_the_roots_intensity_window_honours_an_injected_clock() -> None:
    log: list[tuple[Any, ...]] = []
    clock = FakeClock()
    async with ms.open_system(root=partial(RootSupervisor, clock=clock)) as system:
        ref = await system.spawn(Worker, log, "w", name="w", restart="permanent")
        await crash(ref, 6, clock)  # 6 restarts, but never more than 3 within 5 s of the clock
        assert await ref.ask("get") == 0  # still alive, a seventh instance
        await crash(ref, 4)  # the clock stands still: the fourth restart is one too many
        assert isinstance(await ref.wait_stopped(), ms.Crash)
    assert starts(log) == ["w"] * 10


async def test_a_root_given_to_open_system_replaces_the_default_one() -> None:
    log: list[tuple[Any, ...]] = []
    root = partial(RootSupervisor, max_restarts=0, period=60.0, clock=FakeClock())
    async with ms.open_system(root=root) as system, recording_events(system) as events:
        ref = await system.spawn(Worker, log, "w", name="w", restart="permanent")
        await crash(ref, 1)
        assert isinstance(await ref.wait_stopped(), ms.Crash)
    exceeded = [e for e in events if isinstance(e, ms.supervision.IntensityExceeded)]
    assert [(e.supervisor, e.restarts, e.period) for e in exceeded] == [("/", 1, 60.0)]
    assert starts(log) == ["w"]


async def test_the_root_builds_supervisors_that_check_their_options() -> None:
    async with ms.open_system() as system:
        with pytest.raises(ValueError, match="strategy"):
            await ms.supervision.spawn_supervisor(system, [], name="sup", strategy="all_for_none")
        sup = await ms.supervision.spawn_supervisor(system, [], name="sup")
        assert isinstance(sup, ms.supervision.SupervisorRef)
