"""A bounded FIFO mailbox with exact delivery semantics on asyncio and trio.

Why not an anyio memory object stream: its ``send`` can raise ``Cancelled`` after the receiver
already took the item, so "a sender cancelled while waiting did not deliver" would only hold most
of the time; and its receive path builds a task-info object on every wait, which shows up in
tell throughput. Here a blocked sender never hands its item over: a receiver that frees a slot
*reserves* it for the oldest waiting sender and wakes it; the sender appends the item itself when
it resumes. If the sender is cancelled instead, it passes its reservation to the next waiter, so
no slot leaks and its item was never in the mailbox.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["Mailbox", "MailboxClosed"]


class MailboxClosed(Exception):
    """The owning actor is gone; nothing more is accepted. Mapped to ActorDeadError by refs."""


class Mailbox:
    """Single consumer, many producers, ``capacity`` slots. Not thread-safe (one event loop)."""

    __slots__ = (
        "_capacity",
        "_closed",
        "_items",
        "_new_event",
        "_receiver",
        "_reserved",
        "_senders",
    )

    def __init__(self, capacity: int, new_event: Callable[[], anyio.Event] = anyio.Event) -> None:
        if capacity < 1:
            raise ValueError(f"mailbox_size must be at least 1, not {capacity}")
        self._capacity = capacity
        self._items: deque[Any] = deque()
        self._reserved = 0  # slots promised to woken senders that have not appended yet
        self._receiver: anyio.Event | None = None
        self._senders: deque[anyio.Event] | None = None
        self._closed = False
        self._new_event = new_event

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._items)

    @property
    def pending(self) -> int:
        """Items queued, plus those on their way: senders granted a slot that have not
        appended yet, and senders still waiting for room."""
        senders = self._senders
        return len(self._items) + self._reserved + (len(senders) if senders else 0)

    @property
    def parked(self) -> bool:
        """True while the consumer waits in :meth:`wait` (nothing else is running for it)."""
        return self._receiver is not None

    @property
    def waiting_senders(self) -> int:
        return len(self._senders) if self._senders else 0

    def put_nowait(self, item: object) -> bool:
        """Append ``item`` if a slot is free; return False if full. Raise if closed."""
        if self._closed:
            raise MailboxClosed
        items = self._items
        if len(items) + self._reserved >= self._capacity:
            return False
        items.append(item)
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            receiver.set()
        return True

    async def put(self, item: object) -> None:
        """Append ``item``, waiting for a slot. If cancelled, the item was not appended."""
        if self.put_nowait(item):
            return
        if self._senders is None:
            self._senders = deque()
        waiter = self._new_event()
        self._senders.append(waiter)
        try:
            await waiter.wait()
        except BaseException:  # cancelled too: the slot handed on, re-raised
            if waiter.is_set():
                # We were granted a slot but will not use it: hand it on.
                if not self._closed:
                    self._reserved -= 1
                    self._grant()
            else:
                self._senders.remove(waiter)
            raise
        if self._closed:
            raise MailboxClosed
        self._reserved -= 1
        self._items.append(item)
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            receiver.set()

    def _grant(self) -> None:
        senders = self._senders
        if senders and len(self._items) + self._reserved < self._capacity:
            self._reserved += 1
            senders.popleft().set()

    def pop(self) -> Any:
        """Remove and return the oldest item. The caller checks the mailbox is not empty."""
        item = self._items.popleft()
        if self._senders:
            self._grant()
        return item

    def wake(self) -> None:
        """Wake the consumer if it is waiting, without an item (control lane, stop)."""
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            receiver.set()

    async def wait(self) -> None:
        """Wait until an item arrives or :meth:`wake` is called. A checkpoint."""
        event = self._new_event()
        self._receiver = event
        try:
            await event.wait()
        finally:
            if self._receiver is event:
                self._receiver = None

    def close(self) -> list[Any]:
        """Refuse everything from now on; wake blocked senders; return what was queued."""
        self._closed = True
        left = list(self._items)
        self._items.clear()
        senders, self._senders = self._senders, None
        while senders:
            senders.popleft().set()
        return left
