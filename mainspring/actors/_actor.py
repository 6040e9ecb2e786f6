"""The class users subclass: :class:`Actor`, its hooks, and the names it reserves.

The runtime state behind an instance is its cell (``_cell.py``); the instance reaches it
through the single attribute ``_mainspring_cell``.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ._context import _constructing
from ._reasons import CancelReason, Stop

if TYPE_CHECKING:
    from ._cell import Cell
    from ._ref import ActorRef
    from ._task import ActorTask
    from ._timer import Timer

__all__ = ["DEFAULT_MAILBOX_SIZE", "Actor"]

#: A mailbox holds at most this many messages unless ``mailbox_size`` says otherwise.
DEFAULT_MAILBOX_SIZE = 1000


class Actor(abc.ABC):
    """Subclass this and implement :meth:`receive`.

    The runtime calls ``receive`` for one message at a time, so the actor's state needs no
    locks. ``self.ref`` already works inside ``__init__`` when the runtime constructs the actor.

    Its mailbox is bounded: at most 1000 messages wait, unless the ``spawn`` that started it
    (``ActorSystem.spawn``, :meth:`spawn`, a ``ChildSpec``) passed another ``mailbox_size``.
    When it is full, ``tell`` waits for room and ``tell_nowait`` raises :class:`MailboxFull`.

    Names the framework reserves on your subclass: the public methods below (``ref``,
    ``spawn``, ``watch``, ``unwatch``, ``send_after``, ``send_every``,
    ``start_task``, ``stop_self``, ``messages_waiting``) and every name starting with
    ``_mainspring_``. Framework state lives in one attribute, ``_mainspring_cell``; the other
    ``_mainspring_`` names are hooks for actors that oversee their children (supervisors)
    or report their own crashes, documented below. Every other name is yours.
    """

    _mainspring_cell: Cell

    #: Hook: True if this actor stops its own children, in its own order, in
    #: :meth:`_mainspring_stop_children`. The kernel then does not tell them to stop when this
    #: actor's loop ends; it still waits for them afterwards (and cancels those left after the
    #: system's ``stop_timeout``). A cancel of this actor still cancels its whole subtree.
    _mainspring_orders_children: ClassVar[bool] = False

    #: Hook: True if this actor's children observe its own reason when it stops or is
    #: cancelled, rather than a :class:`ParentCancel` leading to it (supervisors pass theirs on).
    _mainspring_passes_reason: ClassVar[bool] = False

    #: Hook: True if this actor's crashes are logged by the code that knows what they mean
    #: (its own ``on_stop``, or the actor that watches it), with their traceback. The kernel
    #: then logs none of them (every failure is logged once); it still ends the actor with a
    #: :class:`Crash`, fails its askers and tells its overseer and watchers, as for any crash.
    #: A crash that ends the program (``SystemExit``, ``KeyboardInterrupt``) is still logged.
    _mainspring_crashes_reported: ClassVar[bool] = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        self = super().__new__(cls)
        cell = _constructing.get()
        if cell is not None and cell.actor is None:
            self._mainspring_cell = cell
        return self

    @abc.abstractmethod
    async def receive(self, message: Any) -> Any:
        """Handle one message; the return value answers an ``ask`` (ignored for ``tell``).

        Runs in the actor's task. If it raises, the asker (if any) gets :class:`ActorFailed`
        and the actor stops with a :class:`Crash` reason. A watched actor's end arrives here
        as a :class:`Terminated` message, ahead of queued user messages.
        """

    async def on_start(self) -> None:  # noqa: B027 (optional hook, empty on purpose)
        """Runs in the actor's task before the first message. Raising crashes the actor."""

    async def on_stop(self, reason: CancelReason) -> None:  # noqa: B027 (optional hook)
        """Runs once, in the actor's task, after its children stopped and whatever ended it.

        ``reason`` is why it stopped. Runs shielded from outer cancellation but bounded by the
        system's ``stop_timeout``; a later ``cancel`` interrupts it. An exception here is
        logged and does not change the reason.
        """

    async def _mainspring_stop_children(self, reason: CancelReason) -> None:  # noqa: B027
        """Hook: stop this actor's children; the kernel calls it only if a subclass defines it.

        Runs in the actor's task when its loop has ended (after its last message or
        ``on_start``), before the kernel waits for the children and before ``on_stop``; only
        if the actor has children then. ``reason`` is why this actor is stopping. Shielded from
        outer cancellation (a ``cancel`` of this actor reaches the children directly); it may
        await, e.g. stop the children one at a time. It must not raise: the kernel does not
        handle an exception here; it escapes the actor's task, the actor never finishes
        stopping, and a shutdown of the system then waits for it forever.
        """

    @property
    def ref(self) -> ActorRef:
        """This actor's own ref."""
        return self._cell.ref

    @property
    def _cell(self) -> Cell:
        try:
            return self._mainspring_cell
        except AttributeError:
            raise RuntimeError(
                f"{type(self).__qualname__} is not running in an actor system; "
                "spawn it with system.spawn(...) or self.spawn(...)"
            ) from None

    async def spawn(
        self,
        factory: Callable[..., Actor],
        *args: Any,
        name: str | None = None,
        mailbox_size: int = DEFAULT_MAILBOX_SIZE,
    ) -> ActorRef:
        """Start a child actor, supervised by this one; it cannot outlive this actor.

        Returns once the child is registered and scheduled (its ``on_start`` runs in its own
        task, before its first message). Raises :class:`NameTaken` if a live sibling has the
        name, :class:`ActorDeadError` if this actor is stopping. Paced like
        :meth:`ActorSystem.spawn`: a schedule point once per 10 ms of back-to-back spawning.
        """
        await self._cell.system._spawn_pacer.pace()
        return self._cell.spawn_child(factory, args, name, mailbox_size).ref

    def messages_waiting(self) -> int:
        """How many messages wait in this actor's mailbox behind the one being handled now,
        counting senders that wait for room (theirs are on the way); control-lane notices
        (``Terminated``, ``TaskEnded``) are not counted.

        For the actor's own code, to decide whether work can wait for what is queued: a
        writer that batches, say, writes at once when nothing waits and queues its flush
        behind the queue when something does. A snapshot: a message may arrive the moment
        after (only at a checkpoint, as the actor runs alone on its event loop until then).
        Not a checkpoint."""
        return self._cell.mailbox.pending

    def stop_self(self, reason: CancelReason | None = None) -> None:
        """Stop this actor for good once the message being handled now is done.

        Meant for the actor's own code (``receive``, ``on_start``, a task it started). Not a
        checkpoint and returns at once: the handler that called it runs to its end. From this
        call on the actor accepts no more messages (senders get :class:`ActorDeadError`); the
        messages still queued are dropped (their askers get :class:`ActorDeadError`); then its
        children stop, then ``on_stop(reason)`` runs. Final: no supervisor restarts it, whatever
        its restart type (unlike ``await self.ref.stop()`` from inside, a normal exit that a
        permanent child's supervisor answers with a restart). ``reason`` defaults to
        :class:`Stop`; if the actor is already stopping, the earlier reason stays.
        """
        if reason is None:
            reason = Stop(source=self._cell.path)
        elif not isinstance(reason, CancelReason):
            raise TypeError(f"stop_self() needs a CancelReason, not {type(reason).__qualname__}")
        self._cell.request_stop(reason)

    def watch(self, ref: ActorRef) -> None:
        """Receive ``Terminated(ref, reason)`` when ``ref`` stops (at once if it already has).

        The watch ends with either actor. Watching twice delivers one notice.
        """
        self._cell.watch(ref._cell)

    def unwatch(self, ref: ActorRef) -> None:
        """Stop watching ``ref``; a notice already delivered is not taken back."""
        self._cell.unwatch(ref._cell)

    def start_task(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> ActorTask:
        """Run ``await fn(*args)`` in a new task bound to this actor (see ``ActorTask``):
        lighter than a child actor, cancelled with a reason like one. Its end arrives in
        ``receive`` as a :class:`TaskEnded` carrying what it returned, ahead of queued
        user messages. Not a checkpoint. Raises :class:`ActorDeadError` if this actor is
        stopping."""
        return self._cell.start_task(fn, args)

    def send_after(self, delay: float, message: Any) -> Timer:
        """Tell this actor ``message`` once after ``delay`` seconds; dies with the actor."""
        return self._cell.start_timer(delay, None, message)

    def send_every(self, interval: float, message: Any) -> Timer:
        """Tell this actor ``message`` every ``interval`` seconds; dies with the actor.

        Ticks follow a fixed schedule; a tick that finds the mailbox full waits for room, and
        ticks missed meanwhile are skipped rather than bunched up.
        """
        if interval <= 0:
            raise ValueError(f"interval must be positive, not {interval}")
        return self._cell.start_timer(interval, interval, message)


class _Stillborn(Actor):
    """Stands in for an instance whose factory raised on restart: it crashes on start."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def on_start(self) -> None:
        raise self.error

    async def receive(self, message: Any) -> Any:  # pragma: no cover - never runs
        return None
