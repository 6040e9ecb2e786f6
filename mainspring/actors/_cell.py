"""The machinery behind one actor: its task, mailbox loop, cancel scope, children and watches.

Users never see a :class:`Cell`; they hold an :class:`ActorRef` to it and subclass
:class:`Actor`, whose instance the cell drives. One cell runs as one task in the system's task
group::

    CancelScope(shield=True)   <- cancelled only by cancel(reason), which records why first
      on_start()
      loop: control lane first, then one mailbox item at a time
    wait until every child and timer of this actor has ended
    on_stop(reason)            (shielded, bounded by the system's stop_timeout)

The tree is kept by the cells, not by nested task groups: ``cancel(reason)`` records the reason
on the actor and a :class:`ParentCancel` on each descendant, then cancels each one's scope, so
no actor is ever cancelled without a reason (not even by a cancelled host around
``open_system``). A nested task group per actor would cost a scope, a task group exit and a
schedule point per actor on every cancel; this way cancelling a subtree costs one scope
cancellation per actor, and a parent still never finishes before its children.
"""

from __future__ import annotations

import abc
import contextvars
import logging
import re
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.lowlevel import checkpoint, checkpoint_if_cancelled

from ._errors import ActorDeadError, ActorFailed, AskTimeout, MailboxFull, NameTaken
from ._lifecycle import ActorState, check_transition
from ._mailbox import Mailbox, MailboxClosed
from ._reasons import Cancel, CancelReason, Crash, ParentCancel, Stop
from ._ref import ActorRef, Terminated
from ._util import NoPublicConstructor

if TYPE_CHECKING:
    from ._system import ActorSystem

__all__ = ["Actor", "Cell", "Timer", "cancel_reason", "current_actor"]

_log = logging.getLogger("mainspring.actors")

#: A mailbox holds at most this many messages unless ``mailbox_size`` says otherwise.
DEFAULT_MAILBOX_SIZE = 1000

# An actor whose handlers never await would otherwise hog the event loop while its mailbox
# is non-empty; it yields after this many messages in a row.
_BATCH = 64

_NAME_RE = re.compile(r"[A-Za-z0-9._:-]{1,256}")

_current_cell: contextvars.ContextVar[Cell | None] = contextvars.ContextVar(
    "mainspring_current_actor", default=None
)
_constructing: contextvars.ContextVar[Cell | None] = contextvars.ContextVar(
    "mainspring_constructing_actor", default=None
)


def cancel_reason() -> CancelReason | None:
    """Why the actor this code runs in is stopping, or None if it is not.

    Works in the actor's own task and in every task started inside it (tasks inherit the
    actor's context). Meant for ``except``/``finally`` blocks and ``on_stop``: during a
    graceful stop it is the stop's reason; when an ancestor was cancelled it is a
    :class:`ParentCancel` whose ``root`` is the ancestor's reason.
    """
    cell = _current_cell.get()
    if cell is None:
        return None
    return cell.reason_if_stopping()


def current_actor() -> ActorRef | None:
    """The ref of the actor whose code is running now, or None outside any actor."""
    cell = _current_cell.get()
    return cell.ref if cell is not None else None


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


class Actor(abc.ABC):
    """Subclass this and implement :meth:`receive`.

    The runtime calls ``receive`` for one message at a time, so the actor's state needs no
    locks. Framework state lives in a single attribute, ``_mainspring_cell``; every other
    name without the public methods below is yours. ``self.ref`` already works inside
    ``__init__`` when the runtime constructs the actor.
    """

    _mainspring_cell: Cell

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

    async def spawn_supervisor(
        self,
        children: Any,
        *,
        name: str,
        strategy: str = "one_for_one",
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Any = None,
        clock: Callable[[], float] | None = None,
    ) -> Any:
        """Start a child :class:`Supervisor` over ``children`` (ChildSpec values).

        Returns its :class:`SupervisorRef` once all of its children have started, in order.
        The supervisor is this actor's child: it stops (and so do its children) when this
        actor stops.
        """
        from ._system import spawn_supervisor_under  # import cycle: _system imports us

        await checkpoint_if_cancelled()
        cell = self._cell
        return await spawn_supervisor_under(
            cell.system, cell, children, name, strategy, max_restarts, period, backoff,
            "temporary", clock,
        )  # fmt: skip

    def watch(self, ref: ActorRef) -> None:
        """Receive ``Terminated(ref, reason)`` when ``ref`` stops (at once if it already has).

        The watch ends with either actor. Watching twice delivers one notice.
        """
        self._cell.watch(ref._cell)

    def unwatch(self, ref: ActorRef) -> None:
        """Stop watching ``ref``; a notice already delivered is not taken back."""
        self._cell.unwatch(ref._cell)

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

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def on_start(self) -> None:
        raise self.error

    async def receive(self, message: Any) -> Any:  # pragma: no cover - never runs
        return None


class Timer(metaclass=NoPublicConstructor):
    """A pending ``send_after``/``send_every``. Cancel it, or let it die with its actor."""

    __slots__ = ("_cancelled", "_cell", "_delay", "_interval", "_message", "_scope")

    def __init__(self, cell: Cell, delay: float, interval: float | None, message: Any) -> None:
        self._cell = cell
        self._delay = delay
        self._interval = interval
        self._message = message
        self._scope: anyio.CancelScope | None = None
        self._cancelled = False

    @property
    def active(self) -> bool:
        """True until it fired (one-shot), was cancelled, or its actor stopped."""
        return not self._cancelled

    def cancel(self) -> None:
        """Stop the timer; harmless if it already fired or was cancelled."""
        if not self._cancelled:
            self._cancelled = True
            if self._scope is not None:
                self._scope.cancel("timer cancelled")

    async def _run(self) -> None:
        cell = self._cell
        _current_cell.set(cell)
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self._cancelled:
                    return
                await anyio.sleep(self._delay)
                if self._interval is None:
                    await cell.tell(self._message)
                    return
                interval = self._interval
                due = anyio.current_time()
                while True:
                    await cell.tell(self._message)
                    now = anyio.current_time()
                    due += interval
                    if due <= now:  # skip ticks we slept through instead of bunching them
                        due += (now - due) // interval * interval + interval
                    await anyio.sleep_until(due)
        except ActorDeadError:
            pass  # the actor is stopping; timers die with it
        finally:
            self._cancelled = True
            if cell.timers is not None:
                cell.timers.discard(self)
            cell._dependent_ended()


class Overseer(Protocol):
    """What the kernel asks of whoever supervises a cell; ``mainspring.supervision`` implements it.

    The kernel stays ignorant of strategies: when an incarnation ends it asks
    :meth:`may_restart`; if that says yes, the cell waits in RESTARTING, keeping its ref and
    mailbox, until the overseer calls :meth:`Cell.restart` or :meth:`Cell.finish`.
    """

    def may_restart(self, cell: Cell, reason: CancelReason, crashed: bool) -> bool:
        """False if this end is certainly final (the cell then closes its mailbox at once)."""
        ...

    def child_ended(self, cell: Cell, reason: CancelReason, crashed: bool, final: bool) -> None:
        """The incarnation ended; if not ``final``, a verdict must follow (restart or finish)."""
        ...


class Cell:
    """Runtime state of one actor (see the module docstring)."""

    __slots__ = (
        "_accepting",
        "_children",
        "_control",
        "_crashed_last",
        "_current",
        "_dependents_gone",
        "_final",
        "_halt",
        "_hard",
        "_over_event",
        "_reason",
        "_scope",
        "_started_event",
        "_stop_scope",
        "_stopped_event",
        "_verdict",
        "_verdict_event",
        "actor",
        "args",
        "factory",
        "mailbox",
        "name",
        "overseer",
        "parent",
        "path",
        "ref",
        "restarts",
        "state",
        "system",
        "timers",
        "watchers",
        "watching",
    )

    def __init__(
        self,
        system: ActorSystem,
        parent: Cell | None,
        name: str,
        mailbox_size: int,
        ref_class: type[ActorRef] = ActorRef,
    ) -> None:
        self.system = system
        self.parent = parent
        self.name = name
        self.path: str = f"{parent.path}/{name}" if parent is not None else f"/{name}"
        self.mailbox = Mailbox(mailbox_size, system.new_event)
        self.ref: ActorRef = ref_class._create(self)
        self.actor: Actor | None = None
        self.state = ActorState.STARTING
        self._accepting = True
        self._halt = False  # the loop must end: stop or cancel requested
        self._hard = False  # cancel requested: our scope is (or will be) cancelled
        self._reason: CancelReason | None = None  # first reason wins
        self._scope: anyio.CancelScope | None = None
        self._stop_scope: anyio.CancelScope | None = None
        self._dependents_gone: anyio.Event | None = None  # children and timers all ended
        self._children: dict[str, Cell] | None = None
        self._control: deque[Any] | None = None
        self._current: _Ask | None = None
        self._stopped_event: anyio.Event | None = None
        self.timers: set[Timer] | None = None
        self.watchers: set[Cell] | None = None
        self.watching: set[Cell] | None = None
        # Supervision (see Overseer): how to build a fresh instance, and who decides.
        self.factory: Callable[..., Actor] | None = None
        self.args: tuple[Any, ...] = ()
        self.overseer: Overseer | None = None
        self.restarts = 0
        self._final = False  # this end was asked for from outside: never restart it
        self._crashed_last = False
        self._verdict: bool | None = None  # True: restart, False: stop for good
        self._verdict_event: anyio.Event | None = None
        self._over_event: anyio.Event | None = None  # waiters for the incarnation's end
        self._started_event: anyio.Event | None = None  # waiters for on_start to finish

    # -- creation ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        system: ActorSystem,
        parent: Cell | None,
        siblings: dict[str, Cell],
        factory: Callable[..., Actor],
        args: tuple[Any, ...],
        name: str | None,
        mailbox_size: int,
        overseer: Overseer | None = None,
        ref_class: type[ActorRef] = ActorRef,
    ) -> Cell:
        """Build, register and construct an actor; the caller starts :meth:`run`."""
        if name is None:
            base = getattr(factory, "__name__", "actor").lower()
            name = f"${base}-{system._next_id()}"
        elif not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
            raise ValueError(f"actor names must match [A-Za-z0-9._:-]{{1,256}}, not {name!r}")
        if name in siblings:
            raise NameTaken(name, parent.path if parent is not None else "/")
        cell = cls(system, parent, name, mailbox_size, ref_class)
        cell.factory = factory
        cell.args = args
        cell.overseer = overseer
        try:
            cell.actor = cell._construct()
        except BaseException:
            cell._discard_unborn()
            raise
        siblings[name] = cell
        return cell

    def _discard_unborn(self) -> None:
        # A constructor that raised may have started timers or watches already: undo them,
        # since this cell never runs and nothing else would.
        self._halt = True
        self._accepting = False
        for timer in list(self.timers or ()):
            timer.cancel()
        for target in list(self.watching or ()):
            self.unwatch(target)

    def _construct(self) -> Actor:
        assert self.factory is not None
        token = _constructing.set(self)
        try:
            actor = self.factory(*self.args)
        finally:
            _constructing.reset(token)
        if not isinstance(actor, Actor):
            raise TypeError(f"{self.factory!r} returned {type(actor).__qualname__}, not an Actor")
        owner = getattr(actor, "_mainspring_cell", None)
        if owner is None:
            actor._mainspring_cell = self
        elif owner is not self:
            raise ValueError(f"this {type(actor).__qualname__} instance already runs elsewhere")
        return actor

    def spawn_child(
        self,
        factory: Callable[..., Actor],
        args: tuple[Any, ...],
        name: str | None,
        mailbox_size: int,
        overseer: Overseer | None = None,
        ref_class: type[ActorRef] = ActorRef,
    ) -> Cell:
        if self._halt or self.state is ActorState.STOPPED:
            raise ActorDeadError(self.ref, self._reason)
        if self._children is None:
            self._children = {}
        cell = Cell.create(
            self.system,
            self,
            self._children,
            factory,
            args,
            name,
            mailbox_size,
            overseer,
            ref_class,
        )
        self.system._start(cell.run, cell.path)
        return cell

    # -- messaging -----------------------------------------------------------------------

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

    # -- stopping ------------------------------------------------------------------------

    def _record(self, reason: CancelReason) -> CancelReason:
        if self._reason is None:
            self._reason = reason
        return self._reason

    def _called_from_inside(self) -> bool:
        # The actor itself (or a task it started) asking to stop: a "normal exit" in the
        # supervision sense, which a permanent child's supervisor answers with a restart.
        return _current_cell.get() is self

    def request_stop(self, reason: CancelReason, *, final: bool = True) -> None:
        """Graceful: the current message finishes, then the actor stops.

        ``final`` ends the actor for good even under a supervisor; the supervisor's own
        restarts and an actor stopping itself pass ``final=False``.
        """
        if self.state is ActorState.STOPPED:
            return
        if self.state is ActorState.RESTARTING:
            if final:
                self._end_between_lives(reason)
            return
        self._record(reason)
        self._final = self._final or final
        if final:  # otherwise a restart may follow: keep taking messages for the next life
            self._accepting = False
        if not self._halt:
            self._halt = True
            self.mailbox.wake()

    async def request_stop_and_wait(self, reason: CancelReason | None) -> CancelReason:
        inside = self._called_from_inside()
        self.request_stop(reason if reason is not None else Stop(), final=not inside)
        current = _current_cell.get()
        while current is not None:
            if current is self:  # stopping ourselves or an ancestor: waiting would deadlock
                await checkpoint()
                assert self._reason is not None
                return self._reason
            current = current.parent
        return await self.wait_stopped()

    def cancel(self, reason: CancelReason, *, final: bool | None = None) -> None:
        """Hard: interrupt whatever runs now; the subtree is cancelled with it."""
        if not isinstance(reason, CancelReason):
            raise TypeError(f"cancel() needs a CancelReason, not {type(reason).__qualname__}")
        if self.state is ActorState.STOPPED:
            return
        if final is None:
            final = not self._called_from_inside()
        if self.state is ActorState.RESTARTING:
            if final:
                self._end_between_lives(reason)
            return
        recorded = self._record(reason)
        self._final = self._final or final
        if final:
            self._accepting = False
        self._halt = True
        if self._hard:
            return
        self._hard = True
        if self.mailbox.parked:
            # Idle in its mailbox: nothing to interrupt, so waking it is enough (its loop sees
            # _halt). Far cheaper than a scope cancellation, which for a subtree of thousands
            # of idle actors is most of the cost.
            self.mailbox.wake()
        elif self._scope is not None:
            self._scope.cancel(str(recorded))
        if self._stop_scope is not None:
            self._stop_scope.cancel(str(recorded))
        # The whole subtree goes with it, each link recording which parent it came from, so
        # every descendant's `.root` is this actor's reason (or the one it already had).
        if self._children:
            cause = self._cause_for_children(recorded)
            for child in list(self._children.values()):
                child.cancel(cause, final=True)
        if self.timers:
            for timer in list(self.timers):
                timer.cancel()

    def _end_between_lives(self, reason: CancelReason) -> None:
        # A stop or cancel from outside while the cell waits between two lives (even with a
        # restart already granted but not yet begun) ends it for good, for this new reason.
        self._reason = reason
        self._final = True
        self._give_verdict(restart=False)

    def _cause_for_children(self, reason: CancelReason) -> CancelReason:
        actor = self.actor
        if actor is not None and getattr(actor, "_mainspring_passes_reason", False):
            return reason  # a supervisor's children observe the supervisor's own reason
        return ParentCancel(reason, source=self.path)

    def reason_if_stopping(self) -> CancelReason | None:
        return self._reason

    def final_reason(self) -> CancelReason:
        reason = self.reason_if_stopping()
        if reason is None:  # cannot happen through the public API; say so rather than guess
            return Cancel(detail="stopped without a recorded reason")
        return reason

    async def wait_stopped(self) -> CancelReason:
        if self.state is not ActorState.STOPPED:
            if self._stopped_event is None:
                self._stopped_event = self.system.new_event()
            await self._stopped_event.wait()
        else:
            await checkpoint()
        return self.final_reason()

    async def wait_incarnation_over(self) -> CancelReason:
        """Wait until the current incarnation ended (RESTARTING or STOPPED); return why."""
        if self.state in (ActorState.RESTARTING, ActorState.STOPPED):
            await checkpoint()
        else:
            if self._over_event is None:
                self._over_event = self.system.new_event()
            await self._over_event.wait()
        return self.final_reason()

    async def wait_started(self) -> bool:
        """Wait until on_start finished (True) or the incarnation ended first (False)."""
        restarting = self.state is ActorState.RESTARTING and self._verdict is True
        if self.state is ActorState.STARTING or restarting:
            if self._started_event is None:
                self._started_event = self.system.new_event()
            await self._started_event.wait()
        else:
            await checkpoint()
        return self.state is ActorState.RUNNING

    @property
    def ending_for_good(self) -> bool:
        """Stopped, or on its way to stopping with no restart possible."""
        return self.state is ActorState.STOPPED or (self._final and self._halt)

    @property
    def crashed_last(self) -> bool:
        """Whether the latest incarnation ended by crashing."""
        return self._crashed_last

    @property
    def awaiting_verdict(self) -> bool:
        """Between two incarnations, with no restart-or-stop decision made yet."""
        return self.state is ActorState.RESTARTING and self._verdict is None

    def restart(self) -> bool:
        """Overseer's verdict: run a fresh instance. False if the cell is not waiting for one."""
        return self._give_verdict(restart=True)

    def finish(self) -> bool:
        """Overseer's verdict: stop for good. False if the cell is not waiting for one."""
        return self._give_verdict(restart=False)

    def _restart_granted(self) -> bool:
        return self._verdict is True

    def _give_verdict(self, *, restart: bool) -> bool:
        if self.state is not ActorState.RESTARTING:
            return False
        if self._verdict is not None:
            if restart or self._verdict is False:
                return False
            self.restarts -= 1  # a granted restart that never began is taken back
        self._verdict = restart
        if restart:
            self.restarts += 1  # now, so a notice about the previous life is already stale
        if self._verdict_event is not None:
            self._verdict_event.set()
        return True

    def _mark_started(self) -> None:
        self.state = check_transition(self.state, ActorState.RUNNING)
        if self._started_event is not None:
            self._started_event.set()
            self._started_event = None

    # -- the actor's task ----------------------------------------------------------------

    async def run(self) -> None:
        _current_cell.set(self)
        while True:
            reason, crashed = await self._incarnation()
            overseer = self.overseer
            final = (
                overseer is None or self._final or not overseer.may_restart(self, reason, crashed)
            )
            if final:
                if overseer is not None:
                    overseer.child_ended(self, reason, crashed, True)
                break
            self.state = check_transition(self.state, ActorState.RESTARTING)
            self._verdict = None
            self._verdict_event = self.system.new_event()
            self._incarnation_over()
            assert overseer is not None
            overseer.child_ended(self, reason, crashed, False)
            if self._verdict is None:
                with anyio.CancelScope(shield=True):  # cancel() answers with a verdict
                    await self._verdict_event.wait()
            self._verdict_event = None
            if not self._restart_granted():
                reason = self.final_reason()
                overseer.child_ended(self, reason, crashed, True)
                break
            self._begin_incarnation()
        self._finalize(reason)

    async def _incarnation(self) -> tuple[CancelReason, bool]:
        how = "cancelled"
        try:
            # Shielded: only this actor's own cancel(reason), which records the reason first,
            # can cancel it; a cancelled host reaches it through the system's shutdown.
            with anyio.CancelScope(shield=True) as scope:
                self._scope = scope
                if self._hard:
                    scope.cancel(str(self._reason))
                try:
                    await self._main()
                    how = "cancelled" if self._hard else "stopped"
                except Exception as exc:
                    how = "crashed"
                    self._crashed(exc)
                finally:
                    self._begin_stopping(how)
        finally:
            self._scope = None
            await self._end_incarnation()
        self._crashed_last = how == "crashed"
        return self.final_reason(), self._crashed_last

    def _begin_incarnation(self) -> None:
        """Reset what belongs to one instance and build the next (RESTARTING -> STARTING)."""
        self.state = check_transition(self.state, ActorState.STARTING)
        self._verdict = None
        self._halt = False
        self._hard = False
        self._final = False
        self._reason = None
        self._current = None
        self._control = None
        self._accepting = True
        self.actor = None  # lets Actor.__new__ attach the next instance (self.ref in __init__)
        try:
            self.actor = self._construct()
        except Exception as exc:  # a factory that fails on restart: this incarnation crashes
            self.actor = _Stillborn(exc)
            self.actor._mainspring_cell = self

    def _incarnation_over(self) -> None:
        if self._over_event is not None:
            self._over_event.set()
            self._over_event = None
        if self._started_event is not None:
            self._started_event.set()
            self._started_event = None

    async def _main(self) -> None:
        actor = self.actor
        assert actor is not None
        if type(actor).on_start is not Actor.on_start:
            await actor.on_start()
        if self._halt:
            return
        self._mark_started()
        receive = actor.receive
        mailbox = self.mailbox
        items = mailbox._items
        in_a_row = -1  # a fresh actor parks at once: nobody is waiting on an answer yet
        while not self._halt:
            control = self._control
            if control:
                await receive(control.popleft())
            elif items:
                item = mailbox.pop()
                if type(item) is _Ask:
                    self._current = item
                    try:
                        value = await receive(item.message)
                    except Exception as exc:
                        failure = ActorFailed(self.ref, exc)
                        failure.__cause__ = exc
                        item.fail(failure)
                        raise
                    item.answer(value)
                    self._current = None
                else:
                    await receive(item)
                in_a_row = max(in_a_row, 0) + 1
                if in_a_row == _BATCH:
                    in_a_row = 0
                    await checkpoint()
            elif in_a_row >= 0:
                # Empty: yield once before parking. A sender that is about to send again
                # (an asker that just got its answer) usually does so during this yield, which
                # saves creating, setting and waiting on a wake-up event per message.
                in_a_row = -1
                await checkpoint()
            else:
                in_a_row = 0
                await mailbox.wait()

    def _crashed(self, exc: Exception) -> None:
        reason = self._record(Crash.from_exception(exc, source=self.path))
        _log.error("actor %s crashed: %s", self.path, reason, exc_info=exc)

    def _begin_stopping(self, how: str) -> None:
        """Synchronous first half of stopping, run before the children's task group exits."""
        self._halt = True
        if self.state is not ActorState.STOPPING:
            self.state = check_transition(self.state, ActorState.STOPPING)
        reason = self.final_reason()
        # Nobody waits on an answer that will never come: the one in flight now, and, if this
        # end is final, those queued (a cell that may restart keeps them for its next life).
        if self._current is not None:
            self._current.fail(ActorDeadError(self.ref, reason))
            self._current = None
        overseer = self.overseer
        if (
            overseer is None
            or self._final
            or not overseer.may_restart(self, reason, how == "crashed")
        ):
            self._close_mailbox(reason)
        self._control = None
        if self.timers:
            for timer in list(self.timers):
                timer.cancel()
        # Children end the way their parent did: gracefully after a stop, at once after a
        # crash; after a cancel, cancel() already cancelled them.
        actor = self.actor
        if actor is not None and getattr(actor, "_mainspring_orders_children", False):
            return  # a supervisor stops its children itself, in order (see _end_incarnation)
        if self._children and how != "cancelled":
            cause = self._cause_for_children(reason)
            for child in reversed(list(self._children.values())):
                if how == "stopped":
                    child.request_stop(cause)
                else:
                    child.cancel(cause, final=True)

    def _close_mailbox(self, reason: CancelReason) -> None:
        self._final = True  # decided: a cell whose mailbox is closed never restarts
        self._accepting = False
        for item in self.mailbox.close():
            if type(item) is _Ask:
                item.fail(ActorDeadError(self.ref, reason))

    async def _end_incarnation(self) -> None:
        reason = self.final_reason()
        actor = self.actor
        stop_children = getattr(actor, "_mainspring_stop_children", None)
        if stop_children is not None and self._children:
            with anyio.CancelScope(shield=True):  # cancel() reaches the children directly
                await stop_children(reason)
        if self._children or self.timers:
            # A parent never finishes before its children (and timers) have. They were told
            # to stop in _begin_stopping (or by the supervisor's ordered stop), but a child can
            # be stuck, e.g. asking this very actor: after stop_timeout they are cancelled.
            # Shielded: cancel() reaches them directly.
            self._dependents_gone = self.system.new_event()
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(self.system.stop_timeout):
                    await self._dependents_gone.wait()
                if self._children or self.timers:
                    cause = self._cause_for_children(reason)
                    for child in list((self._children or {}).values()):
                        child.cancel(cause, final=True)
                    for timer in list(self.timers or ()):
                        timer.cancel()
                    await self._dependents_gone.wait()
            self._dependents_gone = None
        if actor is not None and type(actor).on_stop is not Actor.on_stop:
            with anyio.move_on_after(self.system.stop_timeout, shield=True) as stop_scope:
                self._stop_scope = stop_scope
                if self._hard:
                    stop_scope.cancel(str(reason))
                try:
                    await actor.on_stop(reason)
                except Exception:
                    _log.exception("actor %s: on_stop raised", self.path)
            self._stop_scope = None
        # Watches belong to the instance that made them.
        if self.watching:
            for target in self.watching:
                if target.watchers is not None:
                    target.watchers.discard(self)
            self.watching = None

    def _finalize(self, reason: CancelReason) -> None:
        self.state = check_transition(self.state, ActorState.STOPPED)
        if not self.mailbox._closed:
            self._close_mailbox(reason)
        self._accepting = False
        if self.watchers:
            notice = Terminated(self.ref, reason)
            for watcher in self.watchers:
                if watcher.watching is not None:
                    watcher.watching.discard(self)
                watcher.deliver_control(notice)
            self.watchers = None
        parent = self.parent
        siblings = parent._children if parent is not None else self.system._children
        if siblings is not None and siblings.get(self.name) is self:
            del siblings[self.name]
        if parent is not None:
            parent._dependent_ended()
        self._incarnation_over()
        if self._stopped_event is not None:
            self._stopped_event.set()

    # -- children, watches, timers -------------------------------------------------------

    def _dependent_ended(self) -> None:
        gone = self._dependents_gone
        if gone is not None and not self._children and not self.timers:
            gone.set()

    def child(self, name: str) -> Cell | None:
        return self._children.get(name) if self._children else None

    def watch(self, target: Cell) -> None:
        if target is self:
            raise ValueError("an actor cannot watch itself")
        if target.state is ActorState.STOPPED:
            self.deliver_control(Terminated(target.ref, target.final_reason()))
            return
        if target.watchers is None:
            target.watchers = set()
        target.watchers.add(self)
        if self.watching is None:
            self.watching = set()
        self.watching.add(target)

    def unwatch(self, target: Cell) -> None:
        if target.watchers is not None:
            target.watchers.discard(self)
        if self.watching is not None:
            self.watching.discard(target)

    def start_timer(self, delay: float, interval: float | None, message: Any) -> Timer:
        if delay < 0:
            raise ValueError(f"delay must not be negative, not {delay}")
        if self._halt or self.state is ActorState.STOPPED:
            raise ActorDeadError(self.ref, self._reason)
        timer = Timer._create(self, delay, interval, message)
        if self.timers is None:
            self.timers = set()
        self.timers.add(timer)
        self.system._start(timer._run, f"{self.path} timer")
        return timer
