"""A small in-process event bus: many publishers, any number of bounded subscribers.

Publishing never blocks and never fails: a subscriber that falls more than ``buffer`` events
behind loses the oldest ones, and is told how many with an :class:`EventsDropped` event, so a
slow consumer can never stall the runtime (or grow its memory) and never silently misses data.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Generic, TypeVar

import anyio
import attrs

E = TypeVar("E")

__all__ = ["EventBus", "EventsDropped"]


@attrs.frozen
class EventsDropped:
    """This subscriber fell behind and lost ``count`` events just before this one."""

    count: int


class _Subscriber(Generic[E]):
    __slots__ = ("buffer", "dropped", "items", "wake")

    def __init__(self, buffer: int) -> None:
        self.buffer = buffer
        self.items: deque[E] = deque()
        self.dropped = 0
        self.wake: anyio.Event | None = None


class EventBus(Generic[E]):
    """Fan-out of events of type ``E`` to subscribers; closed when its owner ends (the actor
    system for supervision events, the runtime for run events)."""

    def __init__(self, new_event: Callable[[], anyio.Event]) -> None:
        self._subscribers: set[_Subscriber[E]] = set()
        self._new_event = new_event
        self._closed = False

    @property
    def subscribers(self) -> int:
        """How many iterators are subscribed now."""
        return len(self._subscribers)

    def listening(self) -> bool:
        """Whether an event published now reaches anyone: a publisher may skip building
        one that nobody would be handed (a subscription sees only what is published after
        its first ``__anext__``, and a closed bus hands out nothing)."""
        return bool(self._subscribers) and not self._closed

    def publish(self, event: E) -> None:
        """Hand ``event`` to every subscriber (synchronously; never blocks). Once the bus
        is closed nothing more is handed out: a subscription ends after what it held at
        :meth:`close` (Invariant V4), however much its owner goes on publishing and however
        slowly its consumer drains."""
        if self._closed:
            return
        for sub in self._subscribers:
            if len(sub.items) >= sub.buffer:
                sub.items.popleft()
                sub.dropped += 1
            sub.items.append(event)
            if sub.wake is not None:
                sub.wake.set()
                sub.wake = None

    def close(self) -> None:
        """End every subscription once it has drained what it holds."""
        self._closed = True
        for sub in self._subscribers:
            if sub.wake is not None:
                sub.wake.set()
                sub.wake = None

    async def subscribe(self, buffer: int) -> AsyncGenerator[E | EventsDropped, None]:
        """Iterate over events published from the first ``__anext__`` on."""
        if buffer < 1:
            raise ValueError(f"buffer must be at least 1, not {buffer}")
        sub: _Subscriber[E] = _Subscriber(buffer)
        self._subscribers.add(sub)
        try:
            while True:
                if sub.dropped:
                    dropped, sub.dropped = sub.dropped, 0
                    yield EventsDropped(dropped)
                elif sub.items:
                    yield sub.items.popleft()
                elif self._closed:
                    return
                else:
                    sub.wake = self._new_event()
                    await sub.wake.wait()
        finally:
            self._subscribers.discard(sub)
