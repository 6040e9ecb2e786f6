"""system.events(): bounded, ids and reasons only; Backoff arithmetic and its effect."""

from __future__ import annotations

import random
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms

from ._kit import recording_events, specs

pytestmark = pytest.mark.anyio


async def test_events_carry_names_paths_reasons_and_counts_only() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system, recording_events(system) as events:
        sup = await ms.supervision.spawn_supervisor(system, specs(log, "a"), name="sup")
        a = sup.child("a")
        assert a is not None
        with pytest.raises(ms.ActorFailed):
            await a.ask("crash")
        assert await a.ask("get") == 0
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ChildStarted", "ChildFailed", "ChildRestarted"]
    for event in events:
        assert isinstance(event, ms.supervision.SupervisionEvent)
        for field in attrs.fields(type(event)):
            value = getattr(event, field.name)
            assert isinstance(value, str | int | float | bool | ms.CancelReason), field.name
    restarted = events[2]
    assert isinstance(restarted, ms.supervision.ChildRestarted)
    assert (restarted.supervisor, restarted.child, restarted.restarts) == ("/sup", "/sup/a", 1)
    assert isinstance(restarted.reason, ms.Crash)


async def test_a_slow_event_consumer_loses_the_oldest_events_and_is_told() -> None:
    async with ms.open_system() as system:
        stream = system.events(buffer=2)
        first = anyio.Event()
        received: list[object] = []

        async def slow() -> None:
            async for event in stream:
                received.append(event)
                first.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await anyio.wait_all_tasks_blocked()
            for i in range(5):
                system.event_bus.publish(("event", i))  # synchronously: the consumer lags
            await first.wait()
            await anyio.wait_all_tasks_blocked()
            await system.shutdown()
    assert received == [ms.EventsDropped(3), ("event", 3), ("event", 4)]


async def test_events_buffer_must_be_positive() -> None:
    async with ms.open_system() as system:
        with pytest.raises(ValueError, match="buffer"):
            await system.events(buffer=0).__anext__()


def test_backoff_grows_caps_and_jitters() -> None:
    backoff = ms.supervision.Backoff(initial=0.1, maximum=1.0, multiplier=2.0, jitter=0.0)
    rng = random.Random(1)
    assert [backoff.delay(n, rng) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    jittery = ms.supervision.Backoff(initial=1.0, maximum=1.0, jitter=0.5)
    delays = [jittery.delay(0, rng) for _ in range(200)]
    assert all(0.5 <= d <= 1.0 for d in delays)
    assert len(set(delays)) > 100
    for bad in (
        {"initial": 2.0, "maximum": 1.0},
        {"multiplier": 0.5},
        {"jitter": 1.5},
    ):
        with pytest.raises(ValueError, match="Backoff"):
            ms.supervision.Backoff(**bad)


async def test_backoff_delays_the_restart() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system,
            specs(log, "w"),
            name="sup",
            backoff=ms.supervision.Backoff(initial=0.05, maximum=0.05, jitter=0.0),
        )
        w = sup.child("w")
        assert w is not None
        with pytest.raises(ms.ActorFailed):
            await w.ask("crash")
        crashed_at = anyio.current_time()
        assert await w.ask("get") == 0
        assert anyio.current_time() - crashed_at >= 0.05


async def test_supervisor_ignores_stray_messages(caplog: pytest.LogCaptureFixture) -> None:
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(system, [], name="sup")
        assert await sup.ask("hello?") is None
        assert sup.is_alive
    assert "ignored a message" in caplog.text
