"""The event streams a runtime hands out (``Runtime.events``): the live run events of this
process, or the durable history (V2) replayed from a sequence number and then followed.
:class:`EventStreams` picks one for a call; :class:`HistoryFollowers` follows the history.

A follower reads ``store.history`` a page at a time from the last sequence number it yielded;
entries are committed in sequence order (V2), so it never yields one twice and never skips
one. Between reads it waits until this process's writer made a write durable
(:class:`~mainspring.storage._seam.Durable`) or ``poll`` seconds passed, whichever comes first: the
timeout is what catches commits of other processes on the same store.

Every stream handed out here ends, normally, when the runtime begins to close or when
:meth:`EventStreams.close` is called (Invariant V4): a server ends its clients'
streams at its own shutdown, before its lifespan closes the runtime, and a consumer
of the runtime never waits for its runs to stop (some take seconds: B2's grace).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import AsyncGenerator

import anyio
import anyio.to_thread

from ...actors import EventsDropped
from ...storage import HistoryEvent, Store
from ...storage._seam import Durable, check_id
from .._run.events import RunEvent, RunEventBus

__all__ = ["EventStreams", "HistoryFollowers"]

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


class EventStreams:
    """The streams of one runtime: its live event bus, and its history followers. Both end
    together (V4); each method is the work of the :class:`~mainspring.Runtime` method of the
    same job."""

    def __init__(self, bus: RunEventBus, followers: HistoryFollowers) -> None:
        self._bus = bus
        self._followers = followers

    def open(
        self, execution_id: str | None, *, after: int | None, buffer: int, poll: float
    ) -> AsyncGenerator[RunEvent | EventsDropped, None] | AsyncGenerator[HistoryEvent, None]:
        """``Runtime.events``: the arguments checked at the call, then a history follower
        (``after`` given) or a subscription to the live bus, of one execution or of all."""
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

    def close(self) -> None:
        """``Runtime.close_streams``: end every stream handed out, and every one handed out
        from now on (V4). Synchronous, idempotent."""
        self._bus.close()
        self._followers.stop()
