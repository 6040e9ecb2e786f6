"""Supervisors: restart strategies, restart intensity, ordered shutdown and escalation.

A :class:`Supervisor` is an actor whose children are described by :class:`ChildSpec` values.
The kernel keeps a supervised child's ref and mailbox alive between instances (its RESTARTING
state) and asks the supervisor, through its overseer contract (``Overseer`` in
``mainspring.actors``), what to do each time an instance ends. The supervisor answers from its
own task, one notice at a time, so restarts, ``start_child``/``terminate_child`` calls and
shutdown never race each other.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import anyio

from ..actors import (
    Actor,
    ActorRef,
    CancelReason,
    Crash,
    MainspringError,
    NameTaken,
    Shutdown,
    Stop,
    Supervised,
)
from ..actors._seam import ActorState, deliver_control, publish_event, scrub, spawn_supervised
from ._events import ChildFailed, ChildRestarted, ChildStarted, Escalated, IntensityExceeded
from ._intensity import RestartWindow
from ._ref import (
    ChildInfo,
    ChildStatus,
    SupervisorRef,
    _ChildEnded,
    _Refused,
    _RestartChild,
    _StartChild,
    _TerminateChild,
    _WhichChildren,
)
from ._spec import STRATEGIES, Backoff, ChildSpec, Strategy, should_restart

__all__ = ["NoSuchChild", "RestartIntensityExceeded", "Supervisor"]

_log = logging.getLogger("mainspring.supervision")


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


class _Entry:
    __slots__ = ("cell", "in_group", "spec")

    def __init__(self, spec: ChildSpec, cell: Supervised) -> None:
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


def _is_supervisor_factory(factory: Callable[..., Actor]) -> bool:
    target = factory.func if isinstance(factory, partial) else factory
    return isinstance(target, type) and issubclass(target, Supervisor)


def _parent_path(path: str) -> str:
    return path.rpartition("/")[0] or "/"


class _ChildOverseer:
    """A Supervisor as the kernel sees it (the ``Overseer`` contract of ``mainspring.actors``).

    The kernel does not ask while the supervisor itself is stopping: its children then stop
    for good. Notices go to the supervisor's control lane and are handled in its own task.
    """

    __slots__ = ("sup",)

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def may_restart(self, child: Supervised, reason: CancelReason, crashed: bool) -> bool:
        entry = self.sup._by_cell.get(child)
        if entry is None:
            return False
        return entry.in_group or should_restart(entry.spec.restart, crashed=crashed)

    def child_ended(
        self, child: Supervised, reason: CancelReason, crashed: bool, final: bool
    ) -> None:
        sup = self.sup
        if not final and not sup.ref.is_alive:
            child.finish()
            return
        deliver_control(sup, _ChildEnded(child, reason, crashed, final, child.restarts))


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

    # Kernel hooks (declared on Actor): stop children in order, and pass our reason on as is.
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
        self._rng = random.Random(seed)
        self._initial = specs
        self._entries: list[_Entry] = []
        self._by_cell: dict[Supervised, _Entry] = {}
        self._window = RestartWindow(max_restarts, period, clock)
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
        if _log.isEnabledFor(logging.WARNING):  # the message is the caller's: scrubbed (E5)
            _log.warning(
                "%s",
                scrub(
                    f"supervisor {self.ref.path} ignored a message it does not handle: {message!r}"
                ),
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
        cell = spawn_supervised(
            self,
            spec.factory,
            spec.args,
            name=spec.name,
            mailbox_size=spec.mailbox_size,
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
        window = self._window
        if not window.add():
            path = self.ref.path
            self._publish(
                IntensityExceeded(supervisor=path, restarts=len(window), period=self.period)
            )
            error = RestartIntensityExceeded(path, self.max_restarts, self.period)
            self._publish(
                Escalated(
                    supervisor=path,
                    to=_parent_path(path),
                    reason=Crash.from_exception(error, source=path),
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
                delay = self.backoff.delay(len(self._window) - 1, self._rng)
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
        publish_event(self, event)
