"""Sending to a cell: ``tell``, ``tell_nowait``, ``ask`` and the control lane.

User messages go through the bounded :class:`Mailbox`; an ask travels as an :class:`_Ask`
envelope whose one-shot slot the actor's loop fills. Control messages (watch notices, a
supervisor's child notices) bypass the mailbox on an unbounded lane the loop reads first.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

from ._cellstate import CellState
from ._errors import ActorDeadError, AskTimeout, MailboxFull
from ._mailbox import MailboxClosed

__all__ = ["Messaging"]


class _Ask:
    """An ask in flight: the message plus a one-shot reply slot."""

    __slots__ = ("done", "error", "event", "message", "value")

    def __init__(self, message: Any, event: anyio.Event) -> None:
        self.message = message
        self.event = event
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def answer(self, value: Any) -> None:
        if not self.done:
            self.done = True
            self.value = value
            self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self.error = error
            self.event.set()


class Messaging(CellState):
    """The sending side of a cell. Every method is safe from any task of the event loop."""

    __slots__ = ()

    @property
    def accepting(self) -> bool:
        return self._accepting

    def tell_nowait(self, message: Any) -> None:
        if not self._accepting:
            raise ActorDeadError(self.ref, self._reason)
        if not self.mailbox.put_nowait(message):
            raise MailboxFull(self.ref, self.mailbox.capacity)

    async def tell(self, message: Any) -> None:
        await checkpoint()
        if not self._accepting:
            raise ActorDeadError(self.ref, self._reason)
        mailbox = self.mailbox
        if mailbox.put_nowait(message):
            return
        try:
            await mailbox.put(message)
        except MailboxClosed:
            raise ActorDeadError(self.ref, self._reason) from None

    async def ask(self, message: Any, timeout: float | None) -> Any:  # noqa: ASYNC109
        if not self._accepting:
            raise ActorDeadError(self.ref, self._reason)
        envelope = _Ask(message, self.system.new_event())
        if timeout is None:
            await self._ask_and_wait(envelope)
        else:
            # The timeout covers waiting for mailbox room too; if it ran out there, the
            # message was never delivered.
            with anyio.move_on_after(timeout):
                await self._ask_and_wait(envelope)
            if not envelope.done:
                envelope.done = True  # the late answer is dropped
                raise AskTimeout(self.ref, timeout)
        if envelope.error is not None:
            raise envelope.error
        return envelope.value

    async def _ask_and_wait(self, envelope: _Ask) -> None:
        mailbox = self.mailbox
        if not mailbox.put_nowait(envelope):
            try:
                await mailbox.put(envelope)
            except MailboxClosed:
                raise ActorDeadError(self.ref, self._reason) from None
        await envelope.event.wait()

    def deliver_control(self, message: Any) -> None:
        """Queue ``message`` on the control lane, ahead of user messages."""
        if not self._accepting:
            return
        if self._control is None:
            self._control = deque()
        self._control.append(message)
        self.mailbox.wake()
