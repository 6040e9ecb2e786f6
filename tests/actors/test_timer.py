"""Death watch and timers: both end with their actor."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import Recorder, wait_blocked

pytestmark = pytest.mark.anyio


class Watcher(ms.Actor):
    def __init__(self) -> None:
        self.notices: list[ms.Terminated] = []
        self.got_notice = anyio.Event()

    async def receive(self, message: Any) -> Any:
        if isinstance(message, ms.Terminated):
            self.notices.append(message)
            self.got_notice.set()
            return None
        verb, ref = message
        if verb == "watch":
            self.watch(ref)
        elif verb == "unwatch":
            self.unwatch(ref)
        return None


def _watcher(ref: ms.ActorRef) -> Watcher:
    actor = ref._cell.actor
    assert isinstance(actor, Watcher)
    return actor


async def test_watch_delivers_terminated_with_the_reason() -> None:
    async with ms.open_system() as system:
        watcher_ref = await system.spawn(Watcher)
        target = await system.spawn(Recorder)
        await watcher_ref.ask(("watch", target))
        await watcher_ref.ask(("watch", target))  # twice: still one notice
        reason = ms.Pause(detail="watched")
        await target.stop(reason)
        watcher = _watcher(watcher_ref)
        await watcher.got_notice.wait()
        assert watcher.notices == [ms.Terminated(target, reason)]


async def test_watching_a_dead_actor_notifies_at_once() -> None:
    async with ms.open_system() as system:
        watcher_ref = await system.spawn(Watcher)
        target = await system.spawn(Recorder)
        reason = await target.stop()
        await watcher_ref.ask(("watch", target))
        watcher = _watcher(watcher_ref)
        await watcher.got_notice.wait()
        assert watcher.notices == [ms.Terminated(target, reason)]


async def test_terminated_overtakes_queued_user_messages() -> None:
    gate = anyio.Event()
    order: list[str] = []

    class Busy(ms.Actor):
        async def receive(self, message: Any) -> Any:
            if message == "block":
                await gate.wait()
            elif isinstance(message, ms.Terminated):
                order.append("terminated")
            elif isinstance(message, tuple):
                self.watch(message[1])
            else:
                order.append(message)

    async with ms.open_system() as system:
        busy = await system.spawn(Busy)
        target = await system.spawn(Recorder)
        await busy.ask(("watch", target))
        busy.tell_nowait("block")
        await wait_blocked()
        for i in range(3):
            busy.tell_nowait(f"user-{i}")
        await target.stop()
        gate.set()
        await busy.ask("flush")
    assert order == ["terminated", "user-0", "user-1", "user-2", "flush"]


async def test_unwatch_and_watches_end_with_the_watcher() -> None:
    async with ms.open_system() as system:
        watcher_ref = await system.spawn(Watcher)
        target = await system.spawn(Recorder)
        other = await system.spawn(Recorder)
        await watcher_ref.ask(("watch", target))
        await watcher_ref.ask(("watch", other))
        await watcher_ref.ask(("unwatch", target))
        assert not target._cell.watchers
        await watcher_ref.stop()
        assert not other._cell.watchers  # the watcher's end removed its watch
        await other.stop()  # nobody to notify: no error


async def test_an_actor_cannot_watch_itself() -> None:
    class SelfWatch(ms.Actor):
        async def receive(self, message: Any) -> Any:
            self.watch(self.ref)

    async with ms.open_system() as system:
        ref = await system.spawn(SelfWatch)
        with pytest.raises(ms.ActorFailed) as info:
            await ref.ask("go")
        assert isinstance(info.value.__cause__, ValueError)


class Ticker(ms.Actor):
    def __init__(self, ticks_wanted: int) -> None:
        self.ticks: list[str] = []
        self.ticks_wanted = ticks_wanted
        self.done = anyio.Event()
        self.timer: ms.Timer | None = None

    async def on_start(self) -> None:
        self.send_after(0.001, "once")
        self.timer = self.send_every(0.001, "tick")
        self.send_after(3600, "never")  # must die with the actor, not keep it alive

    async def receive(self, message: Any) -> Any:
        if message == "cancel-timer":
            assert self.timer is not None
            self.timer.cancel()
            self.timer.cancel()  # harmless twice
            return self.timer.active
        self.ticks.append(message)
        if self.ticks.count("tick") >= self.ticks_wanted and "once" in self.ticks:
            self.done.set()
        return None


async def test_timers_fire_and_die_with_their_actor() -> None:
    before = {task.id for task in anyio.get_running_tasks()}
    async with ms.open_system() as system:
        inside = {task.id for task in anyio.get_running_tasks()}
        ref = await system.spawn(Ticker, 5)
        actor = ref._cell.actor
        assert isinstance(actor, Ticker)
        await actor.done.wait()
        assert actor.ticks.count("once") == 1
        assert "never" not in actor.ticks
        assert await ref.ask("cancel-timer") is False
        assert ref._cell.timers is not None
        live = [timer for timer in ref._cell.timers if timer.active]
        assert len(live) == 1  # only the one-hour timer is left
        await ref.stop()  # returns once the actor *and* its timers have ended
        assert not ref._cell.timers
        assert {task.id for task in anyio.get_running_tasks()} == inside
    assert {task.id for task in anyio.get_running_tasks()} == before


async def test_timer_arguments_are_validated() -> None:
    class Bad(ms.Actor):
        async def receive(self, message: Any) -> Any:
            if message == "interval":
                self.send_every(0, "x")
            else:
                self.send_after(-1, "x")

    async with ms.open_system() as system:
        for what in ("interval", "delay"):
            ref = await system.spawn(Bad)
            with pytest.raises(ms.ActorFailed) as info:
                await ref.ask(what)
            assert isinstance(info.value.__cause__, ValueError)
