"""ActorRef: the only handle users hold on an actor, and the Terminated notice."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ._util import NoPublicConstructor

if TYPE_CHECKING:
    from ._cell import Cell
    from ._reasons import CancelReason

__all__ = ["ActorRef", "Terminated"]


class ActorRef(metaclass=NoPublicConstructor):
    """Address of one actor. Cheap to copy around; compares by identity of the actor.

    Every method is safe to call from any task in the same event loop, including after the
    actor stopped: sending to a stopped actor raises :class:`ActorDeadError` rather than
    losing the message silently.
    """

    __slots__ = ("__weakref__", "_cell")

    def __init__(self, cell: Cell) -> None:
        self._cell = cell

    @property
    def name(self) -> str:
        """The actor's name, unique among its live siblings."""
        return self._cell.name

    @property
    def path(self) -> str:
        """Slash-separated names from the system root, e.g. ``/executions/ex-1``."""
        return self._cell.path

    @property
    def is_alive(self) -> bool:
        """True until the actor starts stopping; a stopping actor accepts no more messages."""
        return self._cell.accepting

    async def tell(self, message: Any) -> None:
        """Deliver ``message``, waiting while the mailbox is full (backpressure).

        A checkpoint. If it raises because the caller was cancelled, the message was not
        delivered. Raises :class:`ActorDeadError` if the actor is stopping or stopped.
        """
        await self._cell.tell(message)

    def tell_nowait(self, message: Any) -> None:
        """Deliver ``message`` now or raise :class:`MailboxFull` (nothing delivered).

        Not a checkpoint. Raises :class:`ActorDeadError` if the actor is stopping or stopped.
        """
        self._cell.tell_nowait(message)

    # The timeout is part of the ask protocol (the late answer must be dropped), so it is a
    # parameter rather than left to an enclosing fail_after (STYLE.md, habit 6).
    async def ask(self, message: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """Deliver ``message`` and return what the actor's ``receive`` returned for it.

        Raises :class:`ActorFailed` (the handler's exception as ``__cause__``) if the handler
        raised, :class:`ActorDeadError` at once if the actor is dead or dies before answering,
        :class:`AskTimeout` after ``timeout`` seconds (a late answer is dropped). A checkpoint;
        if the caller is cancelled, the message may still be processed but its answer is dropped.
        """
        return await self._cell.ask(message, timeout)

    async def stop(self, reason: CancelReason | None = None) -> CancelReason:
        """Stop after the current message, with ``reason`` (default :class:`Stop`).

        Messages still queued are dropped (their askers get :class:`ActorDeadError`); children
        stop first, then ``on_stop(reason)`` runs. Waits until the actor has stopped and returns
        the reason it stopped with — which is an earlier one if another reason got there first.
        A stop sent through the ref is final: a supervisor does not restart the actor after it.
        Called from inside the actor itself it is the actor's own "normal exit" (a permanent
        child's supervisor restarts it), and, like a call from one of its descendants, it only
        requests the stop: waiting there would wait forever.
        """
        return await self._cell.request_stop_and_wait(reason)

    def cancel(self, reason: CancelReason) -> None:
        """Interrupt the current message and stop the actor and its subtree now.

        ``reason`` is recorded before the cancel scope is cancelled, so the handler's
        ``except``/``finally`` sees it through :func:`cancel_reason`; descendants see a
        :class:`ParentCancel` leading to it. The first reason wins; calling twice is harmless.
        Like :meth:`stop`, a cancel from outside the actor is final under a supervisor.
        Not a checkpoint and does not wait: use :meth:`wait_stopped` for that.
        """
        self._cell.cancel(reason)

    async def wait_stopped(self) -> CancelReason:
        """Wait until the actor has stopped for good (``on_stop`` done); return why.

        A supervised actor between two instances has not stopped: this waits through restarts.
        """
        return await self._cell.wait_stopped()

    def __repr__(self) -> str:
        return f"<ActorRef {self._cell.path} {self._cell.state.value}>"


@attrs.frozen
class Terminated:
    """Delivered to a watcher's ``receive`` when a watched actor has stopped."""

    ref: ActorRef
    reason: CancelReason
