"""Supervisors: restart strategies, restart intensity, ordered shutdown and escalation.

A :class:`Supervisor` is an actor whose children are described by :class:`ChildSpec` values.
The kernel keeps a supervised child's ref and mailbox alive between instances (its RESTARTING
state) and asks the supervisor, through the :class:`Overseer` protocol, what to do each time an
instance ends. The supervisor answers from its own task, one notice at a time, so restarts,
``start_child``/``terminate_child`` calls and shutdown never race each other.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import anyio
import attrs

from ..actors import (
    DEFAULT_MAILBOX_SIZE,
    Actor,
    ActorRef,
    CancelReason,
    MainspringError,
    NameTaken,
    Shutdown,
    Stop,
)
from ..actors._cell import Cell
from ..actors._lifecycle import ActorState
from ..actors._system import RestartType, install_supervision
from ._events import ChildFailed, ChildRestarted, ChildStarted, Escalated, IntensityExceeded
from ._spec import STRATEGIES, Backoff, ChildSpec, Strategy, should_restart

if TYPE_CHECKING:
    from ..actors import ActorSystem

__all__ = ["ChildInfo", "RestartIntensityExceeded", "Supervisor", "SupervisorRef"]

_log = logging.getLogger("mainspring.supervision")

ChildStatus = Literal["running", "restarting", "stopping", "stopped"]


class RestartIntensityExceeded(MainspringError):
    """A supervisor saw more than ``max_restarts`` restarts within ``period`` seconds.

    It stops its children and fails with this error, which its own supervisor handles like any
    other crash of a child (escalation).
    """

    def __init__(self, supervisor: str, max_restarts: int, period: float) -> None:
        super().__init__(
            f"supervisor {supervisor} exceeded {max_restarts} restarts within {period:g} s"
        )
        self.supervisor = supervisor
        self.max_restarts = max_restarts
        self.period = period


class NoSuchChild(MainspringError, LookupError):
    """The supervisor has no child of that name."""

    def __init__(self, supervisor: str, name: str) -> None:
        super().__init__(f"supervisor {supervisor} has no child named {name!r}")
        self.supervisor = supervisor
        self.name = name


@attrs.frozen(kw_only=True)
class ChildInfo:
    """One row of :meth:`SupervisorRef.which_children`, in start order."""

    name: str
    ref: ActorRef
    restart: RestartType
    status: ChildStatus
    restarts: int


class _Entry:
    __slots__ = ("cell", "in_group", "spec")

    def __init__(self, spec: ChildSpec, cell: Cell) -> None:
        self.spec = spec
        self.cell = cell
        self.in_group = False  # being stopped and restarted by the supervisor itself

    @property
    def status(self) -> ChildStatus:
        state = self.cell.state
        if state is ActorState.STOPPED:
            return "stopped"
        if state is ActorState.RESTARTING or (state is ActorState.STOPPING and self.in_group):
            return "restarting"
        if state is ActorState.STOPPING:
            return "stopping"
        return "running"


# -- messages to the supervisor (private: users go through SupervisorRef) -------------------


@attrs.frozen
class _ChildEnded:
    cell: Cell
    reason: CancelReason
    crashed: bool
    final: bool
    life: int  # cell.restarts when it ended: a notice from an older life is stale


@attrs.frozen
class _StartChild:
    spec: ChildSpec


@attrs.frozen
class _TerminateChild:
    name: str


@attrs.frozen
class _RestartChild:
    name: str


@attrs.frozen
class _WhichChildren:
    pass


@attrs.frozen
class _Refused:
    error: Exception


def _is_supervisor_factory(factory: Callable[..., Actor]) -> bool:
    target = factory.func if isinstance(factory, partial) else factory
    return isinstance(target, type) and issubclass(target, Supervisor)


class _ChildOverseer:
    """The kernel's view of a Supervisor (see ``Overseer``)."""

    __slots__ = ("sup",)

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def may_restart(self, cell: Cell, reason: CancelReason, crashed: bool) -> bool:
        sup = self.sup
        if sup._cell._halt:  # the supervisor is stopping: its children stop for good
            return False
        entry = sup._by_cell.get(cell)
        if entry is None:
            return False
        return entry.in_group or should_restart(entry.spec.restart, crashed=crashed)

    def child_ended(self, cell: Cell, reason: CancelReason, crashed: bool, final: bool) -> None:
        sup_cell = self.sup._cell
        if not final and not sup_cell.accepting:
            cell.finish()
            return
        sup_cell.deliver_control(_ChildEnded(cell, reason, crashed, final, cell.restarts))


class Supervisor(Actor):
    """An actor that starts, watches over and restarts its children.

    ``strategy`` decides who restarts when one child ends and its restart type says so:
    ``"one_for_one"`` restarts that child; ``"one_for_all"`` stops every other child (reverse
    start order) and restarts them all (start order); ``"rest_for_one"`` does that for the child
    and those started after it. A restarted child keeps its ref and its queued messages; only
    the message it crashed on is lost. More than ``max_restarts`` restarts within ``period``
    seconds (measured with ``clock``) and the supervisor stops its children and fails with
    :class:`RestartIntensityExceeded`, which escalates to its own supervisor. ``backoff``
    (a :class:`Backoff`) spaces restarts out.

    Stopping a supervisor stops its children one at a time in reverse start order, each with
    the supervisor's own reason, cancelling any that outlast their ``shutdown`` seconds.
    """

    # Kernel hooks (reserved names): stop children in order, and pass our reason on as is.
    _mainspring_orders_children = True
    _mainspring_passes_reason = True

    def __init__(
        self,
        children: Sequence[ChildSpec],
        *,
        strategy: Strategy = "one_for_one",
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Backoff | None = None,
        clock: Callable[[], float] | None = None,
        seed: int | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        if max_restarts < 0:
            raise ValueError(f"max_restarts must not be negative, not {max_restarts}")
        if period <= 0:
            raise ValueError(f"period must be positive, not {period}")
        specs = list(children)
        names = [spec.name for spec in specs]
        for spec in specs:
            if not isinstance(spec, ChildSpec):
                raise TypeError(f"children must be ChildSpec values, not {type(spec).__name__}")
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique, got {names}")
        self.strategy: Strategy = strategy
        self.max_restarts = max_restarts
        self.period = period
        self.backoff = backoff
        self._clock = clock or anyio.current_time
        self._rng = random.Random(seed)
        self._initial = specs
        self._entries: list[_Entry] = []
        self._by_cell: dict[Cell, _Entry] = {}
        # Only the latest max_restarts + 1 restarts can matter to the intensity check.
        self._restart_times: deque[float] = deque(maxlen=max_restarts + 1)
        self._overseer = _ChildOverseer(self)

    # -- lifecycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        """Start the children, in order, each ready before the next."""
        for spec in self._initial:
            await self._start(spec)

    async def receive(self, message: Any) -> Any:
        """Handle the SupervisorRef's requests and the children's ends."""
        if isinstance(message, _ChildEnded):
            await self._child_ended(message)
            return None
        try:
            if isinstance(message, _StartChild):
                return await self._start(message.spec)
            if isinstance(message, _TerminateChild):
                return await self._terminate(self._entry(message.name))
            if isinstance(message, _RestartChild):
                return await self._restart_child(self._entry(message.name))
            if isinstance(message, _WhichChildren):
                return [self._info(entry) for entry in self._entries]
        except (MainspringError, ValueError, TypeError) as exc:
            return _Refused(exc)  # the caller's mistake must not crash the supervisor
        _log.warning(
            "supervisor %s ignored a message it does not handle: %r", self.ref.path, message
        )
        return None

    async def _mainspring_stop_children(self, reason: CancelReason) -> None:
        """Kernel hook: stop children one at a time, newest first, with our reason."""
        for entry in reversed(self._entries):
            await self._stop_child(entry, reason, final=True)

    # -- starting and stopping children ----------------------------------------------------

    def _entry(self, name: str) -> _Entry:
        for entry in self._entries:
            if entry.spec.name == name:
                return entry
        raise NoSuchChild(self.ref.path, name)

    def _info(self, entry: _Entry) -> ChildInfo:
        return ChildInfo(
            name=entry.spec.name,
            ref=entry.cell.ref,
            restart=entry.spec.restart,
            status=entry.status,
            restarts=entry.cell.restarts,
        )

    async def _start(self, spec: ChildSpec, replace: _Entry | None = None) -> ActorRef:
        for entry in self._entries:
            if entry.spec.name == spec.name and entry is not replace:
                if entry.cell.state is not ActorState.STOPPED:
                    raise NameTaken(spec.name, self.ref.path)
                replace = entry  # a stopped child's slot is reused by a new one of its name
        ref_class = SupervisorRef if _is_supervisor_factory(spec.factory) else ActorRef
        cell = self._cell.spawn_child(
            spec.factory,
            spec.args,
            spec.name,
            spec.mailbox_size,
            overseer=self._overseer,
            ref_class=ref_class,
        )
        entry = _Entry(spec, cell)
        if replace is not None:
            self._by_cell.pop(replace.cell, None)
            self._entries[self._entries.index(replace)] = entry
        else:
            self._entries.append(entry)
        self._by_cell[cell] = entry
        if await cell.wait_started():
            self._publish(ChildStarted(supervisor=self.ref.path, child=cell.path))
        return cell.ref

    async def _stop_child(self, entry: _Entry, reason: CancelReason, *, final: bool) -> None:
        """Graceful stop, then cancel after the child's ``shutdown`` seconds (same reason)."""
        cell = entry.cell
        if cell.state is ActorState.STOPPED:
            return
        if cell.state is ActorState.RESTARTING:
            if final:
                cell.finish()
                await cell.wait_stopped()
            return
        cell.request_stop(reason, final=final)
        with anyio.move_on_after(entry.spec.shutdown):
            await cell.wait_incarnation_over()
        if cell.state not in (ActorState.RESTARTING, ActorState.STOPPED):
            cell.cancel(reason, final=final)
            await cell.wait_incarnation_over()
        if final:
            await cell.wait_stopped()

    async def _terminate(self, entry: _Entry) -> bool:
        if entry.cell.state is ActorState.STOPPED:
            return False
        reason = Stop(detail="terminated by its supervisor", source=self.ref.path)
        await self._stop_child(entry, reason, final=True)
        if entry.spec.restart == "temporary":
            self._forget(entry)
        return True

    async def _restart_child(self, entry: _Entry) -> ActorRef:
        if entry.cell.ending_for_good:  # already on its way out: let it go, start a new one
            await entry.cell.wait_stopped()
            return await self._start(entry.spec, replace=entry)
        reason = Stop(detail="restart requested", source=self.ref.path)
        await self._restart_group(entry, [entry], reason, stop_first=True)
        return entry.cell.ref

    def _forget(self, entry: _Entry) -> None:
        self._by_cell.pop(entry.cell, None)
        if entry in self._entries:
            self._entries.remove(entry)

    # -- restarts --------------------------------------------------------------------------

    async def _child_ended(self, notice: _ChildEnded) -> None:
        entry = self._by_cell.get(notice.cell)
        if entry is None:
            return
        if notice.final:
            self._report_crash(notice, restarting=False)
            if entry.spec.restart == "temporary":
                self._forget(entry)
            return
        if entry.in_group or notice.life != notice.cell.restarts:
            return  # a restart we run ourselves, or a notice from an earlier life
        if not notice.cell.awaiting_verdict:
            return
        self._report_crash(notice, restarting=True)
        self._count_restart()
        await self._restart_group(entry, self._group(entry), notice.reason, stop_first=False)

    def _report_crash(self, notice: _ChildEnded, *, restarting: bool) -> None:
        if notice.crashed:
            self._publish(
                ChildFailed(
                    supervisor=self.ref.path,
                    child=notice.cell.path,
                    reason=notice.reason,
                    restarting=restarting,
                )
            )

    def _count_restart(self) -> None:
        now = self._clock()
        times = self._restart_times
        times.append(now)
        while times and times[0] <= now - self.period:
            times.popleft()
        if len(times) > self.max_restarts:
            parent = self._cell.parent
            self._publish(
                IntensityExceeded(supervisor=self.ref.path, restarts=len(times), period=self.period)
            )
            error = RestartIntensityExceeded(self.ref.path, self.max_restarts, self.period)
            self._publish(
                Escalated(
                    supervisor=self.ref.path,
                    to=parent.path if parent is not None else "/",
                    reason=_crash_reason(error, self.ref.path),
                )
            )
            raise error

    def _group(self, entry: _Entry) -> list[_Entry]:
        if self.strategy == "one_for_one":
            return [entry]
        # Children already ending for good (stopped from outside, or temporary ones that
        # exited) are not pulled back into a group restart.
        live = [e for e in self._entries if e is entry or not e.cell.ending_for_good]
        if self.strategy == "one_for_all":
            return live
        return live[live.index(entry) :] if entry in live else [entry]

    async def _restart_group(
        self, failed: _Entry, group: list[_Entry], reason: CancelReason, *, stop_first: bool
    ) -> None:
        for entry in group:
            if entry is not failed and entry.cell.awaiting_verdict:
                # It ended on its own while the group was being restarted: its own notice will
                # look stale once we restart it, so count and report it here.
                if entry.cell.crashed_last:
                    self._publish(
                        ChildFailed(
                            supervisor=self.ref.path,
                            child=entry.cell.path,
                            reason=entry.cell.final_reason(),
                            restarting=True,
                        )
                    )
                self._count_restart()
        for entry in group:
            entry.in_group = True
        try:
            why = Shutdown(
                detail=f"{self.strategy} restart after {failed.spec.name} ended",
                source=self.ref.path,
            )
            for entry in reversed(group):
                if entry is not failed or stop_first:
                    await self._stop_child(entry, why, final=False)
            if self.backoff is not None:
                delay = self.backoff.delay(len(self._restart_times) - 1, self._rng)
                if delay > 0:
                    await anyio.sleep(delay)
            for entry in group:
                cell = entry.cell
                if cell.restart():
                    self._publish(
                        ChildRestarted(
                            supervisor=self.ref.path,
                            child=cell.path,
                            restarts=cell.restarts,
                            reason=reason if entry is failed else why,
                        )
                    )
                    await cell.wait_started()
        finally:
            for entry in group:
                entry.in_group = False

    def _publish(self, event: object) -> None:
        self._cell.system.event_bus.publish(event)


def _crash_reason(error: Exception, source: str) -> CancelReason:
    from ..actors import Crash

    return Crash.from_exception(error, source=source)


class SupervisorRef(ActorRef):
    """An :class:`ActorRef` to a :class:`Supervisor`, with the supervisor's own operations.

    Each ``await``-ed method is an ``ask`` to the supervisor, so it runs after the restarts
    already under way. Mistakes (an unknown name, a name in use) raise to the caller and leave
    the supervisor running.
    """

    __slots__ = ()

    def child(self, name: str) -> ActorRef | None:
        """The child named ``name`` (alive or restarting), or None."""
        cell = self._cell.child(name)
        return cell.ref if cell is not None else None

    async def _command(self, message: object) -> Any:
        answer = await self.ask(message)
        if isinstance(answer, _Refused):
            raise answer.error
        return answer

    async def start_child(self, spec: ChildSpec) -> ActorRef:
        """Start a new child after the others; returns once its ``on_start`` finished."""
        result: ActorRef = await self._command(_StartChild(spec))
        return result

    async def terminate_child(self, name: str) -> bool:
        """Stop a child for good (stop, then cancel after its ``shutdown``); False if it was
        already stopped. Its spec stays (unless temporary), so :meth:`restart_child` can
        bring it back."""
        result: bool = await self._command(_TerminateChild(name))
        return result

    async def restart_child(self, name: str) -> ActorRef:
        """Restart a running child with a fresh instance, or start a stopped one again."""
        result: ActorRef = await self._command(_RestartChild(name))
        return result

    async def which_children(self) -> list[ChildInfo]:
        """Every child in start order: name, ref, restart type, status and restart count."""
        result: list[ChildInfo] = await self._command(_WhichChildren())
        return result


# -- the system's root supervisor and the kernel plug-in -------------------------------------


class _RootOverseer:
    """Supervises top-level actors: one_for_one, restart intensity counted per actor."""

    def __init__(self, system: ActorSystem, max_restarts: int = 3, period: float = 5.0) -> None:
        self.system = system
        self.max_restarts = max_restarts
        self.period = period
        self._types: dict[Cell, RestartType] = {}
        self._times: dict[Cell, deque[float]] = {}

    def adopt(self, cell: Cell, restart: RestartType) -> None:
        if restart != "temporary":  # the default needs no bookkeeping
            self._types[cell] = restart

    def may_restart(self, cell: Cell, reason: CancelReason, crashed: bool) -> bool:
        if self.system._closed:
            return False
        return should_restart(self._types.get(cell, "temporary"), crashed=crashed)

    def child_ended(self, cell: Cell, reason: CancelReason, crashed: bool, final: bool) -> None:
        bus = self.system.event_bus
        if final:
            self._types.pop(cell, None)
            self._times.pop(cell, None)
            if crashed:
                bus.publish(
                    ChildFailed(supervisor="/", child=cell.path, reason=reason, restarting=False)
                )
            return
        now = anyio.current_time()
        times = self._times.setdefault(cell, deque(maxlen=self.max_restarts + 1))
        times.append(now)
        while times and times[0] <= now - self.period:
            times.popleft()
        if len(times) > self.max_restarts:
            bus.publish(IntensityExceeded(supervisor="/", restarts=len(times), period=self.period))
            _log.error(
                "%s restarted more than %d times within %g s; stopping it for good",
                cell.path,
                self.max_restarts,
                self.period,
            )
            cell.finish()  # ends as final: child_ended reports the failure
            return
        if crashed:
            bus.publish(
                ChildFailed(supervisor="/", child=cell.path, reason=reason, restarting=True)
            )
        cell.restart()
        bus.publish(
            ChildRestarted(supervisor="/", child=cell.path, restarts=cell.restarts, reason=reason)
        )


class _Hooks:
    def root_overseer(self, system: ActorSystem) -> _RootOverseer:
        return _RootOverseer(system)

    async def spawn_supervisor(
        self,
        system: ActorSystem,
        parent: Cell | None,
        children: Sequence[Any],
        options: dict[str, Any],
    ) -> ActorRef:
        factory = partial(
            Supervisor,
            list(children),
            strategy=options["strategy"],
            max_restarts=options["max_restarts"],
            period=options["period"],
            backoff=options["backoff"],
            clock=options["clock"],
        )
        name = options["name"]
        if parent is None:
            cell = Cell.create(
                system,
                None,
                system._children,
                factory,
                (),
                name,
                DEFAULT_MAILBOX_SIZE,
                system._root,
                SupervisorRef,
            )
            if system._root is not None:
                system._root.adopt(cell, options["restart"])
            system._start(cell.run, cell.path)
        else:
            cell = parent.spawn_child(
                factory, (), name, DEFAULT_MAILBOX_SIZE, ref_class=SupervisorRef
            )
        if not await cell.wait_started():
            raise MainspringError(f"supervisor {cell.path} failed to start: {cell.final_reason()}")
        return cell.ref


install_supervision(_Hooks())
