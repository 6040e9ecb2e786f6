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

This module creates cells, runs their task and keeps the tree; sending is in
``_messaging.py``, stopping and verdicts in ``_stopping.py``, the fields in ``_cellstate.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from anyio.lowlevel import checkpoint

from .._ids import ID_RULE, is_valid_id
from ._actor import Actor, _Stillborn
from ._context import _constructing, _current_cell
from ._crash_log import log_error
from ._errors import ActorDeadError, ActorFailed, NameTaken
from ._lifecycle import ActorState, check_transition
from ._messaging import Messaging, _Ask
from ._reasons import CancelReason, Crash
from ._ref import ActorRef, Terminated
from ._stopping import Stopping
from ._task import ActorTask, _asyncio_cancelled
from ._timer import Timer

if TYPE_CHECKING:
    import logging

    from ._overseer import Overseer
    from ._system import ActorSystem

__all__ = ["Cell"]


def _log() -> logging.Logger:
    """The kernel's logger, made on first use: ``import mainspring`` need not load logging."""
    import logging

    return logging.getLogger("mainspring.actors")


def _is_cancellation(exc: BaseException) -> bool:
    """The backend's cancellation, or a generator closing: never caught, never a crash."""
    return isinstance(exc, anyio.get_cancelled_exc_class() | GeneratorExit)


def _unasked(exc: BaseException, scope: anyio.CancelScope) -> bool:
    """A cancellation nobody asked of the actor: its scope is shielded, so only its own
    ``cancel(reason)`` reaches it, and that cancels the scope first. Its own code raised it
    (asyncio's ``CancelledError`` from a future someone else cancelled; on trio a plain
    BaseException): it crashed, as with any exception, and the system lives on."""
    cancelled = anyio.get_cancelled_exc_class() | _asyncio_cancelled()
    return isinstance(exc, cancelled) and not scope.cancel_called


# An actor whose handlers never await would otherwise hog the event loop while its mailbox
# is non-empty; it yields after this many messages in a row.
_BATCH = 64


class Cell(Messaging, Stopping):
    """Runtime state of one actor (see the module docstring)."""

    __slots__ = ()

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
        elif not isinstance(name, str) or not is_valid_id(
            name if type(name) is str else str.__str__(name)  # a str subclass: its text
        ):
            # The package's one id rule (X1), the same as for stored ids.
            raise ValueError(f"actor names must {ID_RULE}, not {name!r}")
        if name in siblings:
            raise NameTaken(name, parent.path if parent is not None else "/")
        cell = cls(system, parent, name, mailbox_size, ref_class)
        cell.factory = factory
        cell.args = args
        cell.overseer = overseer
        try:
            cell.actor = cell._construct()
        except BaseException:  # any way out: the unborn actor undone, re-raised
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

    def _mark_started(self) -> None:
        self.state = check_transition(self.state, ActorState.RUNNING, self.path)
        if self._started_event is not None:
            self._started_event.set()
            self._started_event = None

    # -- the actor's task ----------------------------------------------------------------

    async def run(self) -> None:
        _current_cell.set(self)
        while True:
            reason, crashed = await self._incarnation()
            overseer = self.overseer
            final = overseer is None or not self._may_restart(overseer, reason, crashed)
            if final:
                if overseer is not None:
                    overseer.child_ended(self, reason, crashed, True)
                break
            self.state = check_transition(self.state, ActorState.RESTARTING, self.path)
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

    def _may_restart(self, overseer: Overseer, reason: CancelReason, crashed: bool) -> bool:
        # The overseer is asked only when a restart is possible at all (see Overseer): not
        # after a stop or cancel from outside, not while the parent is stopping (it ends its
        # children for good), not once the system's shutdown began for a top-level actor.
        if self._final:
            return False
        parent = self.parent
        if parent is not None:
            if parent._halt:
                return False
        elif self.system._closed:
            return False
        return overseer.may_restart(self, reason, crashed)

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
                    # An actor's crash, whatever it is: its overseer's to handle.
                    how = "crashed"
                    self._crashed(exc)
                except BaseException as exc:  # cancellation passes; exits end the system
                    if _unasked(exc, scope):  # O2: a crash, logged; never a hang
                        how = "crashed"
                        self._crashed(exc)
                    elif _is_cancellation(exc):
                        raise
                    else:
                        how = "crashed"
                        self._fatal(exc)
                finally:
                    self._begin_stopping(how)
        finally:
            self._scope = None
            await self._end_incarnation()
        self._crashed_last = how == "crashed"
        return self.final_reason(), self._crashed_last

    def _begin_incarnation(self) -> None:
        """Reset what belongs to one instance and build the next (RESTARTING -> STARTING)."""
        self.state = check_transition(self.state, ActorState.STARTING, self.path)
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
        except BaseException as exc:  # a factory that fails on restart: this one crashes
            if _is_cancellation(exc):  # pragma: no cover - constructing does not await
                raise
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
                    except Exception as exc:  # the asker gets ActorFailed; the crash goes on
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

    def _crashed(self, exc: BaseException, *, fatal: bool = False) -> None:
        reason = self._record(Crash.from_exception(exc, source=self.path))
        actor = self.actor
        if not fatal and actor is not None and actor._mainspring_crashes_reported:
            return  # O2: logged once, by whoever knows what it means (see Actor)
        log_error(_log(), "actor %s crashed: %s", self.path, reason, exc=exc, actor=self.path)

    def _fatal(self, exc: BaseException) -> None:
        """SystemExit, KeyboardInterrupt (any BaseException but cancellation) in the actor's
        code: it ends for good with a Crash (no supervisor restarts it), and the system is
        told, which shuts down and lets ``exc`` out of ``open_system``. Not re-raised here:
        out of this task it would reach the task group (wrapped in a group) or, on asyncio,
        escape the event loop past the shutdown, leaving shielded actors behind."""
        self._final = True
        self._crashed(exc, fatal=True)
        self.system._fail(exc)

    def _begin_stopping(self, how: str) -> None:
        """Synchronous first half of stopping, run before the children's task group exits."""
        self._halt = True
        if self.state is not ActorState.STOPPING:
            self.state = check_transition(self.state, ActorState.STOPPING, self.path)
        reason = self.final_reason()
        # Nobody waits on an answer that will never come: the one in flight now, and, if this
        # end is final, those queued (a cell that may restart keeps them for its next life).
        if self._current is not None:
            self._current.fail(ActorDeadError(self.ref, reason))
            self._current = None
        overseer = self.overseer
        if overseer is None or not self._may_restart(overseer, reason, how == "crashed"):
            self._close_mailbox(reason)
        self._control = None
        if self.timers:
            for timer in list(self.timers):
                timer.cancel()
        # Children end the way their parent did: gracefully after a stop, at once after a
        # crash; after a cancel, cancel() already cancelled them.
        actor = self.actor
        if actor is not None and actor._mainspring_orders_children:
            return  # it stops its children itself, in its order (see _end_incarnation)
        if (self._children or self.tasks) and how != "cancelled":
            cause = self._cause_for_children(reason)
            for child in reversed(list((self._children or {}).values())):
                if how == "stopped":
                    child.request_stop(cause)
                else:
                    child.cancel(cause, final=True)
            for task in list(self.tasks or ()):
                task.cancel(cause)  # a task has no graceful stop

    def _close_mailbox(self, reason: CancelReason) -> None:
        self._final = True  # decided: a cell whose mailbox is closed never restarts
        self._accepting = False
        for item in self.mailbox.close():
            if type(item) is _Ask:
                item.fail(ActorDeadError(self.ref, reason))

    async def _end_incarnation(self) -> None:
        reason = self.final_reason()
        actor = self.actor
        if (
            (self._children or self.tasks)
            and actor is not None
            and type(actor)._mainspring_stop_children is not Actor._mainspring_stop_children
        ):
            with anyio.CancelScope(shield=True):  # cancel() reaches the children directly
                await actor._mainspring_stop_children(reason)
        if self._children or self.timers or self.tasks:
            # A parent never finishes before its children (and timers) have. They were told
            # to stop in _begin_stopping (or by the supervisor's ordered stop), but a child can
            # be stuck, e.g. asking this very actor: after stop_timeout they are cancelled.
            # Shielded: cancel() reaches them directly.
            self._dependents_gone = self.system.new_event()
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(self.system.stop_timeout):
                    await self._dependents_gone.wait()
                if self._children or self.timers or self.tasks:
                    cause = self._cause_for_children(reason)
                    for child in list((self._children or {}).values()):
                        child.cancel(cause, final=True)
                    for task in list(self.tasks or ()):
                        task.cancel(cause)
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
                except Exception as exc:  # the user's hook: logged, and the stop goes on
                    log_error(
                        _log(), "actor %s: on_stop raised", self.path, exc=exc, actor=self.path
                    )
                except BaseException as exc:  # cancellation passes; exits end the system
                    if _is_cancellation(exc):
                        raise
                    log_error(
                        _log(), "actor %s: on_stop raised", self.path, exc=exc, actor=self.path
                    )
                    self.system._fail(exc)
            self._stop_scope = None
        # Watches belong to the instance that made them.
        if self.watching:
            for target in self.watching:
                if target.watchers is not None:
                    target.watchers.discard(self)
            self.watching = None

    def _finalize(self, reason: CancelReason) -> None:
        self.state = check_transition(self.state, ActorState.STOPPED, self.path)
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
        if gone is not None and not self._children and not self.timers and not self.tasks:
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

    def start_task(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> ActorTask:
        if self._halt or self.state is ActorState.STOPPED:
            raise ActorDeadError(self.ref, self._reason)
        task = ActorTask._create(self, fn, args)
        if self.tasks is None:
            self.tasks = set()
        self.tasks.add(task)
        self.system._start(task._run, f"{self.path} task")
        return task

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
