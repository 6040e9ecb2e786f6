"""The contract between the kernel and whoever supervises actors (an *overseer*).

The kernel knows nothing of strategies, restart intensity or child specs; ``mainspring.supervision``
implements them on top of this contract and of the kernel's public API. Two sides:

- what the kernel calls: :class:`Overseer` (on every supervised actor's end) and, for the
  system's top-level actors, :class:`RootOverseer`;
- what an overseer may use: :class:`Supervised` (the face of a child it oversees), and the
  functions below (:func:`spawn_supervised`, :func:`spawn_started`, :func:`deliver_control`,
  :func:`publish_event`, :func:`find_child`). Together with the hooks declared on :class:`Actor`
  (``_mainspring_orders_children``, ``_mainspring_passes_reason``,
  ``_mainspring_stop_children``) that is everything supervision needs of the kernel.

The life of a supervised child, as its overseer sees it::

    STARTING -> RUNNING -> STOPPING --(may_restart? yes)--> RESTARTING --restart()--> STARTING
                               |                                 |
                               +--(final)--> STOPPED  <--finish()+  (or a stop from outside)

When an incarnation ends, the kernel (in the child's own task) asks :meth:`Overseer.may_restart`
and then calls :meth:`Overseer.child_ended`. If that end was not final, the child waits in
RESTARTING, keeping its ref and mailbox, until the overseer answers with
:meth:`Supervised.restart` or :meth:`Supervised.finish`; a stop or cancel from outside meanwhile
ends it for good. Every child's last end is reported with ``final=True``, once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol

from anyio.lowlevel import checkpoint_if_cancelled

from ._ref import ActorRef

if TYPE_CHECKING:
    from ._actor import Actor
    from ._lifecycle import ActorState
    from ._reasons import CancelReason
    from ._system import ActorSystem

__all__ = [
    "RESTART_TYPES",
    "Overseer",
    "RestartType",
    "RootOverseer",
    "RootOverseerFactory",
    "Supervised",
    "deliver_control",
    "find_child",
    "publish_event",
    "spawn_started",
    "spawn_supervised",
]

#: How a supervised actor's ends are treated: ``permanent`` restarts after any end it did not
#: get from outside, ``transient`` after a crash only, ``temporary`` never.
RestartType = Literal["permanent", "transient", "temporary"]
RESTART_TYPES: tuple[RestartType, ...] = ("permanent", "transient", "temporary")


class Supervised(Protocol):
    """A child as its overseer sees it; the kernel implements it. Use it from the overseer's
    own task (or, for the root, from the kernel's calls into it)."""

    @property
    def ref(self) -> ActorRef:
        """The child's ref; it stays the same across restarts."""
        ...

    @property
    def path(self) -> str:
        """The child's path, e.g. ``/sup/worker``."""
        ...

    @property
    def state(self) -> ActorState:
        """Where the child is in its lifecycle (see ``ActorState``)."""
        ...

    @property
    def restarts(self) -> int:
        """How many times it was restarted (counted when the restart is granted)."""
        ...

    @property
    def crashed_last(self) -> bool:
        """Whether its latest incarnation ended by crashing."""
        ...

    @property
    def awaiting_verdict(self) -> bool:
        """Between two incarnations, with no restart-or-finish decision made yet."""
        ...

    @property
    def ending_for_good(self) -> bool:
        """Stopped, or on its way to stopping with no restart possible."""
        ...

    def final_reason(self) -> CancelReason:
        """Why its latest incarnation ended (or is ending)."""
        ...

    def restart(self) -> bool:
        """Verdict: run a fresh instance. False (and nothing done) if it is not waiting for one."""
        ...

    def finish(self) -> bool:
        """Verdict: stop for good. False (and nothing done) if it is not waiting for one."""
        ...

    def request_stop(self, reason: CancelReason, *, final: bool = True) -> None:
        """Stop after the current message; ``final=False`` lets a restart follow (the overseer's
        own restarts)."""
        ...

    def cancel(self, reason: CancelReason, *, final: bool | None = None) -> None:
        """Interrupt it now, with its subtree; ``final=False`` lets a restart follow."""
        ...

    async def wait_started(self) -> bool:
        """Wait until ``on_start`` finished (True) or the incarnation ended first (False)."""
        ...

    async def wait_incarnation_over(self) -> CancelReason:
        """Wait until the current incarnation ended (RESTARTING or STOPPED); return why."""
        ...

    async def wait_stopped(self) -> CancelReason:
        """Wait until it stopped for good; return why."""
        ...


class Overseer(Protocol):
    """What the kernel asks of whoever supervises an actor (``mainspring.supervision``).

    Both methods run synchronously in the ending child's task and must not raise or block.
    The kernel does not ask at all when an end is certainly final: after a stop or cancel
    from outside the child (through its ref, or from an ancestor), while the child's parent is
    stopping, or, for a top-level actor, once the system's shutdown began.
    """

    def may_restart(self, child: Supervised, reason: CancelReason, crashed: bool) -> bool:
        """Whether this end may be followed by a restart; False makes it final at once (the
        child's queued messages are then dropped and their askers told). A pure query: it may
        be asked more than once for the same end."""
        ...

    def child_ended(
        self, child: Supervised, reason: CancelReason, crashed: bool, final: bool
    ) -> None:
        """The incarnation ended. If not ``final``, a verdict must follow (``child.restart()``
        or ``child.finish()``), now or later from the overseer's own task."""
        ...


class RootOverseer(Overseer, Protocol):
    """The overseer of a system's top-level actors.

    One is made per system by the callable ``open_system(root=...)`` takes: given the
    :class:`ActorSystem`, it returns the system's root overseer.
    """

    def adopt(self, child: Supervised, restart: RestartType) -> None:
        """A new top-level actor, registered but not yet started, with its restart type."""
        ...


#: Builds the root overseer of one system; called once, by ``open_system``.
RootOverseerFactory = Callable[["ActorSystem"], RootOverseer]


# -- what an overseer may use beyond the public API ------------------------------------------


def spawn_supervised(
    parent: Actor,
    factory: Callable[..., Actor],
    args: tuple[object, ...],
    *,
    name: str,
    mailbox_size: int,
    overseer: Overseer,
    ref_class: type[ActorRef] = ActorRef,
) -> Supervised:
    """Start ``factory(*args)`` as a child of ``parent``, overseen by ``overseer``.

    Like ``parent.spawn(...)`` (same name rules and errors) but not paced and not a checkpoint;
    the child's ref is an instance of ``ref_class``. Call it from ``parent``'s own task.
    """
    return parent._cell.spawn_child(factory, args, name, mailbox_size, overseer, ref_class)


async def spawn_started(
    parent: Actor | ActorSystem,
    factory: Callable[[], Actor],
    *,
    name: str,
    ref_class: type[ActorRef] = ActorRef,
    restart: RestartType = "temporary",
) -> ActorRef:
    """Start ``factory()`` and return its ref (an instance of ``ref_class``) once its
    ``on_start`` has finished: as a child of the actor ``parent`` (call it from that actor's
    own task; ``restart`` does not apply, the parent oversees it), or as a top-level actor of
    the system ``parent`` with the restart type ``restart`` (its root overseer decides).

    How ``mainspring.supervision.spawn_supervisor`` starts a supervisor: the kernel builds
    none itself. A checkpoint. Raises like ``spawn`` (:class:`NameTaken`, a system shutting
    down), and :class:`MainspringError` if the actor failed to start (it is not running then).
    """
    from ._actor import DEFAULT_MAILBOX_SIZE, Actor
    from ._errors import MainspringError

    await checkpoint_if_cancelled()
    if isinstance(parent, Actor):
        cell = parent._cell.spawn_child(
            factory, (), name, DEFAULT_MAILBOX_SIZE, ref_class=ref_class
        )
    else:
        cell = parent._spawn_started(factory, name, restart, ref_class)
    if not await cell.wait_started():
        raise MainspringError(f"{cell.path} failed to start: {cell.final_reason()}")
    return cell.ref


def deliver_control(actor: Actor, message: object) -> None:
    """Queue ``message`` for ``actor``'s ``receive`` on its control lane, ahead of its user
    messages (the lane watch notices use). Unbounded and never blocks; dropped once the actor
    accepts no more messages. Not a checkpoint."""
    actor._cell.deliver_control(message)


def publish_event(actor: Actor, event: object) -> None:
    """Publish ``event`` to every ``events()`` subscriber of ``actor``'s system. Never blocks."""
    actor._cell.system.event_bus.publish(event)


def find_child(ref: ActorRef, name: str) -> ActorRef | None:
    """The child named ``name`` of ``ref``'s actor while it is registered (running, restarting
    or stopping), or None."""
    cell = ref._cell.child(name)
    return cell.ref if cell is not None else None
