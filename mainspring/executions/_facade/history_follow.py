"""``Runtime.events``: the live run events of this process, or the durable history (V2)
replayed from a sequence number and then followed.

A follower reads ``store.history`` a page at a time from the last sequence number it yielded;
entries are committed in sequence order (V2), so it never yields one twice and never skips
one. Between reads it waits until this process's writer made a write durable
(:class:`~mainspring.storage.Durable`) or ``poll`` seconds passed, whichever comes first: the
timeout is what catches commits of other processes on the same store.

Every stream handed out here ends, normally, when the runtime begins to close or when
:meth:`RuntimeEvents.close_streams` is called (Invariant V4): a server ends its clients'
streams at its own shutdown, before its lifespan closes the runtime, and a consumer
of the runtime never waits for its runs to stop (some take seconds: B2's grace).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import AsyncGenerator
from typing import Any, overload

import anyio
import anyio.to_thread

from ...actors import EventsDropped
from ...storage import Durable, HistoryEvent, Store, check_id
from .._run.events import RunEvent, RunEventBus

__all__ = ["HistoryFollowers", "RuntimeEvents"]

#: Entries read per ``store.history`` call.
PAGE = 1_000
#: Followers' store reads under way at once, per runtime. Every follower reads after each
#: durable write, whatever run it follows: with a server's hundreds of clients streaming,
#: unlimited reads would take every worker thread and the store's lock from the runtime's
#: own writer (its commits and lease renewals), and runs would crawl or lose their leases.
READERS = 4


class HistoryFollowers:
    """A runtime's history followers, counted so that closing the runtime waits for the
    reads they have under way (and the last read of those waiting for news) before the
    store closes, and never for a follower's consumer."""

    def __init__(self, store: Store, durable: Durable) -> None:
        self._store = store
        self._durable = durable
        self._reads = 0  # store reads under way
        self._parked = 0  # followers waiting for news: each reads once more on close
        self._closing = False
        self._closed = False  # the store may be gone: nobody reads any more
        self._idle: anyio.Event | None = None
        self._waits: set[anyio.CancelScope] = set()  # the waits of parked followers
        self._readers = anyio.CapacityLimiter(READERS)  # never the writer's threads

    def stop(self) -> None:
        """End every follower, now and from now on, while the store stays open: one that
        waits for news (or is reading) reads once more what is durable and ends; one whose
        consumer is busy elsewhere ends once it has yielded what it read; one started later
        reads once and ends. Synchronous and idempotent (Invariant V4)."""
        self._closing = True
        for wait in self._waits:
            wait.cancel()

    async def close(self) -> None:
        """End every follower (:meth:`stop`) and return once no read is under way: the
        store may close then."""
        self.stop()
        self._durable.close()
        while self._reads or self._parked:
            self._idle = anyio.Event()
            await self._idle.wait()
        self._closed = True

    def _settle(self) -> None:
        if self._idle is not None and not (self._reads or self._parked):
            self._idle.set()

    async def _read(self, execution_id: str | None, after: int) -> tuple[HistoryEvent, ...]:
        self._reads += 1  # before the first checkpoint: close() sees this read from now on
        try:
            read = functools.partial(self._store.history, execution_id, after=after, limit=PAGE)
            return await anyio.to_thread.run_sync(read, limiter=self._readers)
        finally:
            self._reads -= 1
            self._settle()

    async def follow(
        self, execution_id: str | None, after: int, poll: float
    ) -> AsyncGenerator[HistoryEvent, None]:
        """Every committed entry after ``after`` (of one execution, or of all), then every
        one committed later, until :meth:`stop` or the runtime closes."""
        last = after
        durable = self._durable
        while not self._closed:
            final = self._closing
            mark = durable.count  # read before the store: a flush during the read is seen
            page = await self._read(execution_id, last)
            if self._closing and not final and len(page) < PAGE:
                # The runtime began closing during that read: one more, before yielding
                # (close() waits for reads, never for a consumer), covers what the last
                # flush made durable meanwhile.
                page += await self._read(execution_id, page[-1].seq if page else last)
                final = True
            for event in page:
                yield event
                last = event.seq  # Invariant V2: the next read starts after what was yielded
            if final or self._closing:
                return
            if len(page) == PAGE or durable.count > mark:
                continue
            self._parked += 1
            try:
                with anyio.move_on_after(poll) as wait:
                    self._waits.add(wait)  # stop() ends it (V4)
                    try:
                        await durable.wait_past(mark)
                    finally:
                        self._waits.discard(wait)
            finally:
                # No checkpoint from here to the next read's start: close() counts us
                # as parked, then as reading, and so waits for our last read.
                self._parked -= 1
                self._settle()


async def _of_one(
    stream: AsyncGenerator[RunEvent | EventsDropped, None], execution_id: str
) -> AsyncGenerator[RunEvent | EventsDropped, None]:
    """The live events of one execution (and every ``EventsDropped``: it names none)."""
    async with contextlib.aclosing(stream):
        async for event in stream:
            if isinstance(event, EventsDropped) or event.execution_id == execution_id:
                yield event


class RuntimeEvents:
    """The ``events`` method of :class:`~mainspring.Runtime` (kept apart from running)."""

    _bus: RunEventBus
    _followers: HistoryFollowers

    @overload
    def events(
        self,
        execution_id: str | None = None,
        *,
        after: None = None,
        buffer: int = 1000,
        poll: float = 0.5,
    ) -> AsyncGenerator[RunEvent | EventsDropped, None]: ...

    @overload
    def events(
        self,
        execution_id: str | None = None,
        *,
        after: int,
        buffer: int = 1000,
        poll: float = 0.5,
    ) -> AsyncGenerator[HistoryEvent, None]: ...

    def events(
        self,
        execution_id: str | None = None,
        *,
        after: int | None = None,
        buffer: int = 1000,
        poll: float = 0.5,
    ) -> AsyncGenerator[Any, None]:
        """Iterate over what happens to executions (V1: ids, states, counts), of one
        execution or of all. Iteration ends, normally, when the runtime begins to close or
        :meth:`close_streams` is called (V4).

        Without ``after``: the runtime's live events, one of the :data:`RunEvent` classes
        each, from the first ``__anext__`` on, of the runs in this process only. A
        subscriber that falls more than ``buffer`` events behind gets an ``EventsDropped``
        instead of stalling the runtime.

        With ``after=seq`` (0 for everything): the durable history (V2), as
        :class:`~mainspring.storage.HistoryEvent` objects, every committed entry with a
        sequence number above ``seq`` and then each one as it is committed, by this process
        (seen as soon as its write is durable) or by another one on the same store (seen
        within ``poll`` seconds). None is yielded twice or skipped; a follower that stops
        can start again with ``after=`` the last ``seq`` it saw and misses nothing. When the
        runtime closes, a follower that waits for news (or is reading) reads once more what
        is durable (up to 1,000 entries) and ends; one whose consumer is busy elsewhere ends
        once it has yielded the entries it read; the rest is there for a follower started
        with ``after=`` its last ``seq`` (a server's ``Last-Event-ID``). ``buffer`` applies
        to live events only.

        Raises ``ValueError`` for a bad id, an ``after`` that is not a whole number >= 0, a
        ``poll`` that is not a positive finite number or a ``buffer`` below 1 (at the call).
        """
        if execution_id is not None:
            check_id(execution_id)
        if type(buffer) is not int or buffer < 1:
            raise ValueError(f"buffer must be at least 1, not {buffer!r}")
        if (
            not isinstance(poll, int | float)
            or isinstance(poll, bool)
            or not math.isfinite(poll)
            or poll <= 0
        ):
            raise ValueError(f"poll must be a positive number of seconds, not {poll!r}")
        if after is not None:
            if type(after) is not int or after < 0:
                raise ValueError(
                    f"after must be a sequence number (a whole number >= 0), not {after!r}"
                )
            return self._followers.follow(execution_id, after, float(poll))
        stream = self._bus.subscribe(buffer)
        return stream if execution_id is None else _of_one(stream, execution_id)

    def close_streams(self) -> None:
        """End every stream :meth:`events` handed out, and every one it hands out from now
        on, while the runtime goes on running (V4).

        For a server's shutdown: a server waits for its open responses before it runs its
        lifespan's exit, where the runtime closes, so a streaming response (server-sent
        events) would hold the server until its client gave up. Call this when the server
        begins to stop; each ``async for`` then finishes normally: a live stream once it has
        yielded what it already holds, a history follower once it has read what is durable
        (at most 1,000 entries; a client resumes with ``after=`` the last ``seq`` it got,
        missing nothing, V2). A stream asked for later ends at once (live) or after one read
        (history). Runs, controls and reads are untouched. Synchronous (call it on the
        event loop's thread), idempotent; the runtime calls it when it begins to close.
        """
        self._bus.close()
        self._followers.stop()
