"""Change notices from other hosts, acted on at once (stores that send them: ``Notifying``).

A pause, cancel, stop request or answer that another host writes to a shared store is a
``("control", id)`` notice: the run live here for that id heartbeats now, and meets the change
as a refused renewal or a stop request (E2, V3) within one round trip instead of one
heartbeat interval. A ``("history", seq)`` notice wakes this runtime's history followers.
A ``("lost", "")`` notice (notices may have been missed) does both for everything. A control
notice for a run not live here (a release, among others), and a lost one, also go to
``others`` (the runtime's recovery: L8). The heartbeat stays the backstop: a lost notice
costs latency, never correctness.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio
import anyio.to_thread
import attrs

from ...actors import Actor, ActorDeadError, ActorRef, ActorSystem, CancelReason, MailboxFull
from ...storage._seam import ChangeFeed, Durable, Notifying
from .._run.messages import Heartbeat

__all__ = ["StoreWatcher", "watch_store"]

#: How long one blocking wait for notices lasts: a stopped watcher's thread ends by then, so
#: it is also what closing a runtime on PostgreSQL waits for it (0.5 s took half of a
#: server's one-second Ctrl-C budget, V4). An idle wait costs no round trip to the server.
WAIT = 0.1


@attrs.frozen
class _Next:
    pass


class StoreWatcher(Actor):
    """Reads ``feed`` in a worker thread, one wait at a time, and pokes the live runs named
    (``live(id)`` -> the run's actor or None; ``every()`` -> all of them), and calls
    ``others()`` for a control notice of a run not live here or a lost notice."""

    def __init__(
        self,
        feed: ChangeFeed,
        live: Callable[[str], ActorRef | None],
        every: Callable[[], list[ActorRef]],
        durable: Durable,
        others: Callable[[], None] | None = None,
    ) -> None:
        self._feed = feed
        self._live = live
        self._every = every
        self._durable = durable
        self._others = others

    async def on_start(self) -> None:
        self.ref.tell_nowait(_Next())

    async def receive(self, message: Any) -> Any:
        if not isinstance(message, _Next):
            raise TypeError(f"the store watcher takes no {type(message).__name__}")
        notes = await anyio.to_thread.run_sync(self._feed.wait, WAIT, abandon_on_cancel=True)
        history = others = False
        for kind, value in notes:
            if kind == "control":
                ref = self._live(value)
                others = others or ref is None
                self._poke(ref)
            elif kind == "history":
                history = True
            elif kind == "lost":
                history = others = True
                for ref in self._every():
                    self._poke(ref)
        if history:
            self._durable.notify()
        if others and self._others is not None:
            self._others()
        with contextlib.suppress(ActorDeadError):  # the system is closing: no next wait
            self.ref.tell_nowait(_Next())

    @staticmethod
    def _poke(ref: ActorRef | None) -> None:
        if ref is None:
            return
        with contextlib.suppress(MailboxFull, ActorDeadError):  # its own heartbeat will do
            ref.tell_nowait(Heartbeat())

    async def on_stop(self, reason: CancelReason) -> None:
        # A wait under way finishes in its thread within WAIT and finds the feed closed.
        self._feed.close()


class _HasRef(Protocol):
    ref: ActorRef


async def watch_store(
    system: ActorSystem,
    store: Notifying,
    live: Mapping[str, _HasRef],
    durable: Durable,
    others: Callable[[], None] | None = None,
) -> ActorRef:
    """Start a :class:`StoreWatcher` on ``store`` for the runs in ``live`` (id -> entry
    with a ``ref``), under ``system``: it stops with the system. ``others()`` is told of
    changes to runs not live here."""
    feed = await anyio.to_thread.run_sync(store.listen)

    def one(execution_id: str) -> ActorRef | None:
        entry = live.get(execution_id)
        return entry.ref if entry is not None else None

    def every() -> list[ActorRef]:
        return [entry.ref for entry in live.values()]

    return await system.spawn(StoreWatcher, feed, one, every, durable, others, name="store-watch")
