"""Recovery: finding runs nobody runs and taking them over, once on request and all along.

A stored run that is ``running`` or ``planned`` is an orphan when nobody holds its lease
(released, or lapsed on the store's clock) or when its owner is a process of this host that
is gone (L7, ``storage._owners``). :meth:`Recovery.sweep` lists the store once and resumes
every orphan through the runtime's own ``resume`` (the lease's compare-and-set decides, so of
several runtimes sweeping at once exactly one takes each run: L1, L7); it is what
:meth:`Runtime.recover` does.

Invariant L8: while a runtime is open (``open_runtime(recover=True)``, the default) its
:meth:`Recovery.watch` loop sweeps again, without anyone asking: at the first lapse of a
lease it saw live (on the store's clock), when an owner on this host that it saw holding a
lease is gone (probed every ``PROBE`` s by ``/proc``, no store read), when the store says a
run changed out of run (a release: PostgreSQL's notices) and at least every ``rescan``
seconds. A run whose owner died is therefore taken over within about ``PROBE`` s on its own
host and within its lease's remaining time (at most the ttl) plus ``MARGIN`` elsewhere.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, final

import anyio
import anyio.to_thread
import attrs

from ...actors import Actor
from ...storage import Execution, Store
from ...storage._seam import Unfinished, holder, owner_gone, owner_here
from .._steps.failures import describe_off_loop
from .handle import ExecutionBusy, ExecutionHandle, UnknownExecution
from .record_controls import answer_waiting

__all__ = ["PROBE", "Recovery", "RecoveryReport", "RecoveryWatch", "SkippedRun"]

_log = logging.getLogger("mainspring.executions")

#: How often (seconds) owners on this host that hold leases are checked for being gone.
PROBE = 0.25
#: How long after a lease's expiry (seconds, store's clock) the watcher looks again.
MARGIN = 0.05
#: Taken-over runs kept for ``recover()`` to report; past it, finished ones are dropped.
_KEPT = 1_000


@final
@attrs.frozen(kw_only=True)
class SkippedRun:
    """An item of :attr:`RecoveryReport.skipped`, made by the runtime: a stored, unfinished
    execution that :meth:`Runtime.recover` left alone, and why, so a caller can tell a run
    another owner holds from one that needs a person (its ``reason``):
    ``lease-live:<owner>`` (another owner holds a live lease and is not known to be gone),
    ``paused`` or another waiting status (``waiting_for_input``, ``waiting_for_approval``
    ...: a resume is a decision, not a recovery), ``terminal`` (it finished elsewhere
    meanwhile), ``unreadable`` (its record does not read: see ``mainspring doctor``),
    ``missing:<kind>:<name>,...`` (its unfinished steps name a tool, skill or agent this
    runtime does not have, or ``missing:planner``: it has no plan yet and this runtime no
    planner; left to one that has them) or ``failed:<error class>``
    (resuming it raised; the error is logged)."""

    id: str
    reason: str


class RecoveryReport(list[ExecutionHandle]):
    """What :meth:`Runtime.recover` did: a list of the handles of the runs this runtime took
    over (so callers that treat it as the list it used to be keep working), plus
    ``skipped``: the unfinished runs it left alone, with the reason (:class:`SkippedRun`).

    Runs the runtime's own background recovery took over since the last ``recover()`` are
    among the handles (each handle is reported once)."""

    def __init__(
        self, resumed: Iterable[ExecutionHandle] = (), skipped: Iterable[SkippedRun] = ()
    ) -> None:
        super().__init__(resumed)
        self.skipped: tuple[SkippedRun, ...] = tuple(skipped)

    @property
    def resumed(self) -> tuple[ExecutionHandle, ...]:
        """The handles of the runs taken over (the list's items)."""
        return tuple(self)

    def __repr__(self) -> str:
        return f"RecoveryReport(resumed={list(self)!r}, skipped={list(self.skipped)!r})"


class Recovery:
    """The Runtime's collaborator that takes orphaned runs over (see the module docstring).

    ``take(id)`` resumes one run if it still is one to recover, or answers the status that
    makes it not one; ``live`` is the runtime's map of runs live here. ``rescan`` bounds
    how long the watcher goes without listing the store.
    """

    def __init__(
        self,
        store: Store,
        live: Mapping[str, Any],
        take: Callable[[str], Awaitable[ExecutionHandle | str]],
        *,
        rescan: float,
        recovered: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._recovered = recovered  # told of each run taken over (a metric, O1)
        self._live = live
        self._take = take
        self._rescan = rescan
        self._wake = anyio.Event()
        self._watched: frozenset[str] = frozenset()  # owners of this host seen holding leases
        self._taken: dict[str, ExecutionHandle] = {}  # by the watcher, not yet reported
        self._reported: weakref.WeakSet[ExecutionHandle] = weakref.WeakSet()
        self._sweeping = anyio.Lock()  # one sweep at a time: recover() and the watcher

    def notice(self) -> None:
        """The store says something changed out of run (a lease may have been released):
        the watcher sweeps now. Safe to call from the event loop at any time."""
        self._wake.set()

    async def recover(self) -> RecoveryReport:
        """One sweep, plus what the watcher took over since the last call (each handle is
        reported once)."""
        report, _ = await self.sweep()
        found = {id(handle) for handle in report}
        resumed = list(report)
        for handle in self._taken.values():
            if id(handle) not in found and handle not in self._reported:
                resumed.append(handle)
        self._taken.clear()
        self._reported.update(resumed)
        return RecoveryReport(resumed, report.skipped)

    async def sweep(self) -> tuple[RecoveryReport, float]:
        """List the store once and take over every orphan; returns what was taken and
        skipped, and how long (seconds) until a lease seen live lapses (at most ``rescan``).
        """
        async with self._sweeping:
            return await self._sweep()

    async def _sweep(self) -> tuple[RecoveryReport, float]:
        # L8: only what may be unfinished is read: a store keeps its finished runs, and a
        # sweep every few seconds must not read them all each time.
        store = self._store
        if isinstance(store, Unfinished):
            # Runs live here are not read: folding a long one whole at every sweep held the
            # store's lock its own commits need (a late step cost 2.5x an early one).
            live = frozenset(self._live)
            listing = await anyio.to_thread.run_sync(lambda: store.unfinished(skip=live))
        else:
            listing = await anyio.to_thread.run_sync(store.list)
        now = await anyio.to_thread.run_sync(self._store.now)
        skipped = [SkippedRun(id=problem.id, reason="unreadable") for problem in listing.problems]
        candidates = []
        for execution in listing.executions:
            if execution.terminal or execution.id in self._live:
                continue
            if not recoverable(execution):
                skipped.append(SkippedRun(id=execution.id, reason=str(execution.status)))
                continue
            candidates.append(execution)
        owners = {holder(e.lease, now) for e in candidates} - {None}
        gone = await anyio.to_thread.run_sync(_gone, owners)
        wake = self._rescan
        watched: set[str] = set()
        resumed = []
        for execution in candidates:
            current = holder(execution.lease, now)
            if current is not None and current not in gone:
                assert execution.lease is not None
                skipped.append(SkippedRun(id=execution.id, reason=f"lease-live:{current}"))
                wake = min(wake, max(0.0, execution.lease.expires_at - now))
                if owner_here(current):  # L7: found gone by /proc, no store read
                    watched.add(current)
                continue
            # Taking it is the store's compare-and-set (L1, L7): of runtimes sweeping at
            # once, one wins; the others see its live lease.
            try:
                handle = await self._take(execution.id)
            except ExecutionBusy as busy:
                owner = busy.lease.owner if busy.lease is not None else ""
                skipped.append(SkippedRun(id=execution.id, reason=f"lease-live:{owner}"))
                continue
            except UnknownExecution:
                continue  # deleted meanwhile
            except Exception as exc:  # one bad run must not stop the others' recovery
                await _warn(f"could not recover {execution.id}", exc, execution.id)
                skipped.append(SkippedRun(id=execution.id, reason=f"failed:{type(exc).__name__}"))
                continue
            if handle == "live":  # resumed here by hand meanwhile: not taken over, not left
                continue
            if isinstance(handle, str):  # it changed since the listing: not one to recover
                skipped.append(SkippedRun(id=execution.id, reason=handle))
            elif handle._ran_here:
                resumed.append(handle)
                if self._recovered is not None:
                    self._recovered()
            else:  # finished elsewhere since the listing: its result, not ours to run
                skipped.append(SkippedRun(id=execution.id, reason="terminal"))
        self._watched = frozenset(watched)
        return RecoveryReport(resumed, skipped), wake

    async def watch(self) -> None:
        """Sweep for as long as the runtime is open (L8); cancel to stop. A sweep that fails
        (the store away) is tried again after ``rescan`` seconds; the failure is logged."""
        while True:
            self._wake = anyio.Event()  # a notice during the sweep makes the next one at once
            try:
                report, wait = await self.sweep()
            except Exception as exc:  # any Store's error: logged, tried again
                await _warn("recovery sweep failed; trying again", exc)
                wait = self._rescan
            else:
                for handle in report:
                    if handle not in self._reported:
                        self._taken[handle.execution_id] = handle
                if len(self._taken) > _KEPT:
                    self._taken = {k: h for k, h in self._taken.items() if not h.done}
            await self._idle(wait + MARGIN)

    async def _idle(self, delay: float) -> None:
        """Until ``delay`` passes, a notice comes, or an owner of this host seen holding a
        lease is gone."""
        deadline = anyio.current_time() + delay
        while (left := deadline - anyio.current_time()) > 0:
            with anyio.move_on_after(min(left, PROBE)):
                await self._wake.wait()
                return
            if self._watched:
                gone = await anyio.to_thread.run_sync(_gone, list(self._watched))
                if gone:
                    return


async def _warn(text: str, exc: Exception, execution_id: str | None = None) -> None:
    """Log a failed recovery or sweep with its traceback, redacted (E5: a store error may
    quote what it was given) and bounded (O2), never through ``exc_info``, which would
    write the exception's text as it is."""
    if not _log.isEnabledFor(logging.WARNING):
        return
    caught = await describe_off_loop(exc)
    extra = {"execution_id": execution_id}
    _log.warning("%s\n%s", text, caught.traceback.rstrip("\n"), extra=extra)


def _gone(owners: Iterable[str | None]) -> set[str]:
    """The owners among ``owners`` that are processes of this host that are gone (L7).
    Blocking: reads ``/proc``."""
    return {owner for owner in owners if owner is not None and owner_gone(owner)}


@attrs.frozen
class _Watch:
    pass


class RecoveryWatch(Actor):
    """Runs :meth:`Recovery.watch` in its own actor task for as long as it lives (L8); the
    runtime cancels it before its runs stop on close."""

    def __init__(self, recovery: Recovery) -> None:
        self._recovery = recovery

    async def on_start(self) -> None:
        self.ref.tell_nowait(_Watch())

    async def receive(self, message: Any) -> Any:
        if not isinstance(message, _Watch):
            raise TypeError(f"the recovery watch takes no {type(message).__name__}")
        await self._recovery.watch()


def recoverable(execution: Execution) -> bool:
    """A run nobody may be running: running or planned, or waiting for an answer that
    :meth:`Runtime.answer` stored for it (R8: whichever runtime next resumes it gives it)."""
    if execution.status in ("running", "planned"):
        return True
    return execution.status == "waiting_for_clarification" and answer_waiting(execution)
