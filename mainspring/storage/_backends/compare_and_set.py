"""The compare-and-set template the three stores share: decide, then write, atomically.

Every operation of the contract (see :class:`~.contract.Store`) that decides and writes is
one decision over the stored copy, made by a pure ``decide_*`` function (E2, L1-L4, L7), and
one write, both inside the backend's atomic section. :class:`CompareAndSetStore` is that
algorithm once, for FileStore, SqliteStore and PostgresStore to implement its three steps
(``_atomic``, ``_load``, ``_store``); :class:`OwnWrites` is the cache of what a store wrote
last, which each of them diffs against.
"""

from __future__ import annotations

import collections
import contextlib
import math
from collections.abc import Sequence
from typing import Any

import attrs

from .._errors import StorageError
from .._journal.commit_events import events_for, release_entries, takeover_entries
from .._journal.model import Base, Change, copy_with
from .._owners import owner_gone
from .._records import MAX_CONTROLS, Execution, Lease
from .contract import (
    Clock,
    CommitOutcome,
    CommitResult,
    Edit,
    LeaseResult,
    Renewal,
    RenewResult,
    holder,
)

__all__ = [
    "CompareAndSetStore",
    "OwnWrites",
    "decide_acquire",
    "decide_commit",
    "decide_edit",
    "decide_heartbeat",
    "decide_release",
    "decide_renew",
    "epoch_of",
    "released_lease",
    "releases",
    "with_disk_lease",
]


def _check_ttl(ttl: float) -> None:
    if not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"ttl must be a positive finite number of seconds, not {ttl!r}")


def epoch_of(execution: Execution) -> int | None:
    """The lease epoch a record was made under (L4), or None if it holds no lease."""
    return execution.lease.epoch if execution.lease is not None else None


def decide_commit(
    stored: Execution | None, owner: str, now: float, *, epoch: int | None = None
) -> CommitOutcome:
    """Invariant E2, in order: missing, terminal (sticky), paused, then the lease on disk.

    L4: with ``epoch`` (the tenure the write was made under), a lease that is this owner's
    but of another tenure refuses the write as foreign: the owner id alone is not enough.
    """
    if stored is None:
        return CommitOutcome.MISSING
    if stored.terminal:
        return CommitOutcome.TERMINAL
    if stored.status == "paused":
        return CommitOutcome.PAUSED
    current = holder(stored.lease, now)
    if current is None:
        return CommitOutcome.RELEASED
    if current != owner:
        return CommitOutcome.FOREIGN_LEASE
    assert stored.lease is not None
    if epoch is not None and stored.lease.epoch != epoch:
        return CommitOutcome.FOREIGN_LEASE
    return CommitOutcome.OK


def decide_acquire(
    stored: Execution | None, owner: str, ttl: float, now: float, *, gone: Lease | None = None
) -> tuple[LeaseResult, Execution | None]:
    """Invariant L1: refuse while another owner's lease is live, take over a lapsed one.

    L7: ``gone`` is a lease the caller found held by a process that is gone (see
    ``_owners.owner_gone``); it is taken over, live or not, only if it is still exactly that
    lease on disk (same owner, same epoch): of two callers acting on one sighting, one wins.
    """
    _check_ttl(ttl)
    if stored is None:
        return LeaseResult(acquired=False, reason="no such execution"), None
    if stored.terminal:
        return LeaseResult(
            acquired=False, lease=stored.lease, reason=f"it is {stored.status}"
        ), None
    current = holder(stored.lease, now)
    if (
        current is not None
        and gone is not None
        and stored.lease is not None
        and (stored.lease.owner, stored.lease.epoch) == (gone.owner, gone.epoch)
        and current != owner
    ):
        current = None  # L7: its owner is gone; a new tenure begins (the epoch grows)
    if current is not None and current != owner:
        assert stored.lease is not None
        reason = f"held by {current} until {stored.lease.expires_at:.3f}"
        return LeaseResult(acquired=False, lease=stored.lease, reason=reason), None
    epoch = stored.lease.epoch if stored.lease is not None else 0
    if current is None:
        epoch += 1  # a new tenure: the fencing epoch only grows
    lease = Lease(owner=owner, expires_at=now + ttl, epoch=epoch)
    return LeaseResult(acquired=True, lease=lease), attrs.evolve(stored, lease=lease)


def decide_heartbeat(
    stored: Execution | None, owner: str, ttl: float, now: float
) -> Execution | None:
    """Invariant L2: the holder of a live lease extends it. A lapsed lease is not revived:
    someone may have edited the execution meanwhile, so the owner must acquire again."""
    _check_ttl(ttl)
    if stored is None or stored.lease is None or holder(stored.lease, now) != owner:
        return None
    return attrs.evolve(stored, lease=attrs.evolve(stored.lease, expires_at=now + ttl))


def decide_release(stored: Execution | None, owner: str) -> Execution | None:
    """Invariant L3: the owner gives the lease up; the epoch stays, so it keeps growing."""
    if stored is None or stored.lease is None or stored.lease.owner != owner:
        return None
    return attrs.evolve(stored, lease=released_lease(stored.lease))


def released_lease(lease: Lease) -> Lease:
    """``lease`` given up (L3): no owner, lapsed, the same epoch (it only grows)."""
    return Lease(owner="", expires_at=0.0, epoch=lease.epoch)


def releases(execution: Execution) -> bool:
    """Invariant L3: a run's write whose record carries a released lease (no owner) gives
    the lease up in that same write, so a crash right after a run's final write never
    leaves the run held by a dead owner. The write is still decided (E2) and fenced (L4)
    by that lease's epoch; any other write keeps the lease on disk (see with_disk_lease)."""
    return execution.lease is not None and not execution.lease.owner


def with_disk_lease(execution: Execution, stored: Execution) -> Execution:
    """What a run writes, merged with what only others write (E2).

    The lease on disk wins over the writer's copy, so heartbeats are never undone. Stop
    requests, answer requests and audit lines that another process appended while this owner
    ran are kept: a
    runner's copy can lag behind them, and losing them would silently drop an operator's
    request.
    """
    changes: dict[str, Any] = {}
    if execution.lease != stored.lease:
        changes["lease"] = stored.lease
    if stored.stop_requests != execution.stop_requests:
        merged = dict.fromkeys(stored.stop_requests + execution.stop_requests)
        changes["stop_requests"] = tuple(merged)[-MAX_CONTROLS:]
    if stored.answer_requests != execution.answer_requests:
        answers = dict.fromkeys(stored.answer_requests + execution.answer_requests)
        changes["answer_requests"] = tuple(answers)[-MAX_CONTROLS:]
    if stored.controls != execution.controls:
        lines = dict.fromkeys(stored.controls + execution.controls)
        changes["controls"] = tuple(sorted(lines, key=lambda c: c.at))[-MAX_CONTROLS:]
    if stored.proof_digest is not None and execution.proof_digest != stored.proof_digest:
        changes["proof_digest"] = stored.proof_digest  # finalize writes it once (#17): kept
    if not changes:
        return execution
    if len(changes) == 1 and "lease" in changes:
        return _with_lease(execution, stored.lease)  # the common commit: the lease alone
    return attrs.evolve(execution, **changes)


def _with_lease(execution: Execution, lease: Lease | None) -> Execution:
    # Every value was checked where it came from (the runner's record, the disk's lease),
    # and no check of an Execution field reads another: no evolve, which would check them
    # all again (about three times the cost, on every commit).
    return copy_with(execution, lease=lease)


def decide_renew(
    stored: Execution | None, owner: str, ttl: float, now: float, *, epoch: int | None = None
) -> tuple[CommitOutcome, Execution | None]:
    """A run's heartbeat (L2) that also says whether it may go on (E2, E3).

    The lease is extended only when a commit by ``owner`` would be accepted now; otherwise the
    outcome says why not (paused or cancelled by someone else, lease lost) and nothing changes.
    """
    _check_ttl(ttl)
    outcome = decide_commit(stored, owner, now, epoch=epoch)  # L4: fenced like a commit
    if outcome is not CommitOutcome.OK:
        return outcome, None
    assert stored is not None
    assert stored.lease is not None
    return outcome, attrs.evolve(stored, lease=attrs.evolve(stored.lease, expires_at=now + ttl))


class OwnWrites:
    """The last version (a journal base) a store wrote of recently written executions, to
    diff against and to skip re-reading them under its lock. Bounded (least recently used
    go first), and terminal executions are not kept: they are done changing, so a
    long-lived store does not grow with history.
    """

    def __init__(self, limit: int = 4_096) -> None:
        self._items: collections.OrderedDict[str, Base] = collections.OrderedDict()
        self._limit = limit

    def get(self, execution_id: str) -> Base | None:
        item = self._items.get(execution_id)
        if item is not None:
            self._items.move_to_end(execution_id)
        return item

    def remember(self, base: Base) -> None:
        execution = base.execution
        if execution.terminal:
            self._items.pop(execution.id, None)
            return
        self._items[execution.id] = base
        self._items.move_to_end(execution.id)
        if len(self._items) > self._limit:
            self._items.popitem(last=False)

    def pop(self, execution_id: str, default: None = None) -> Base | None:
        return self._items.pop(execution_id, default)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def decide_edit(stored: Execution | None, owner: str, now: float) -> bool:
    """An out-of-run write (``replace``): the record exists, is not terminal, and no other
    owner holds a live lease on it."""
    if stored is None or stored.terminal:
        return False
    current = holder(stored.lease, now)
    return current is None or current == owner


class CompareAndSetStore:
    """The decide-then-write methods every backend shares.

    A backend provides ``_atomic()`` (a context in which reads and writes form one atomic
    compare-and-set across processes), ``_load(id)`` (the stored execution as a journal
    :class:`~._journal.Base`, or None) and ``_store(base, execution)`` (write what changed
    from ``base`` — None for a new execution — to ``execution``; the backend's cache moves on
    only once that is durable), and says with ``_batch_keeps_earlier`` whether the commits
    before a disk failure in a batch stay durable or the whole batch fails together (one
    transaction).
    """

    _clock: Clock
    _batch_keeps_earlier = False
    #: The history entries the write under way says besides what its diff shows (set by
    #: ``acquire`` and ``release`` inside their atomic section, taken by ``_entries_for``).
    _notes: list[dict[str, Any]] | None = None

    def _entries_for(
        self, base: Base | None, execution: Execution, changes: Sequence[Change]
    ) -> Any:
        """The history entries of the write under way (V2): what ``events_for`` derives
        from ``changes``, with what the deciding call noted (a takeover, a lapse)."""
        notes, self._notes = self._notes, None
        return events_for(base, execution, changes, notes)

    def _atomic(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _load(self, execution_id: str) -> Base | None:
        raise NotImplementedError

    def _store(self, base: Base | None, execution: Execution) -> None:
        raise NotImplementedError

    def _store_fenced(self, base: Base, execution: Execution, owner: str, epoch: int) -> bool:
        """``_store`` for a write that a live lease of ``owner`` at ``epoch`` allowed (L4).

        A backend whose lock covers the decision and the write (a file lock, SQLite's write
        lock) has nothing to add. A server backend also checks the lease in the statement
        that writes (``UPDATE ... WHERE epoch = ...``, against the server's clock) and returns
        False, writing nothing, if it lapsed between the decision and the write.
        """
        self._store(base, execution)
        return True

    def _prepare(
        self, execution_ids: Sequence[str], commits: Sequence[tuple[Execution, str]] = ()
    ) -> None:
        """Called first in a batch (``commit_runs``, ``renew_many``) with the ids it touches,
        and ``commit_runs``'s commits: a server backend locks their rows here, in one order,
        so that two hosts' batches never deadlock, or decides here (inside ``_atomic``, so
        on its own transaction's state) that a batch of cached rows needs no lock first."""

    def now(self) -> float:
        """The clock this store times leases by (see ``Store.now``)."""
        return self._clock()

    def _read_for_update(self, execution_id: str) -> Execution | None:
        base = self._load(execution_id)
        return base.execution if base is not None else None

    def create(self, execution: Execution, *, lease_ttl: float | None = None) -> bool:
        """Store a new execution; False if one with its id exists (nothing written). With
        ``lease_ttl``, the execution's lease expires that long from now on this store's
        clock."""
        if lease_ttl is not None:
            _check_ttl(lease_ttl)
        with self._atomic():
            if self._load(execution.id) is not None:
                return False
            lease = execution.lease
            if lease_ttl is not None and lease is not None:
                lease = attrs.evolve(lease, expires_at=self._clock() + lease_ttl)
                execution = attrs.evolve(execution, lease=lease)
            self._store(None, execution)
            return True

    def acquire(
        self, execution_id: str, owner: str, ttl: float, *, gone: Lease | None = None
    ) -> LeaseResult:
        """L1: refused while another owner's lease is live; takes over a lapsed one, and
        ``gone`` if it is still the lease on disk (L7)."""
        with self._atomic():
            base = self._load(execution_id)
            stored = base.execution if base is not None else None
            now = self._clock()
            result, updated = decide_acquire(stored, owner, ttl, now, gone=gone)
            if updated is not None:
                assert stored is not None
                assert updated.lease is not None
                if stored.lease is not None and stored.lease.epoch != updated.lease.epoch:
                    # A new tenure: who took it from whom, and why it was free (V2). The
                    # first ever (a record stored without a lease) takes it from nobody.
                    taken = gone is not None and holder(stored.lease, now) is not None
                    self._notes = takeover_entries(
                        stored, updated.lease, ttl, now, gone=taken, dead=owner_gone
                    )
                try:
                    self._store(base, updated)
                finally:
                    self._notes = None
            return result

    def heartbeat(self, execution_id: str, owner: str, ttl: float) -> bool:
        """L2: the holder of a live lease extends it; False otherwise."""
        with self._atomic():
            base = self._load(execution_id)
            stored = base.execution if base is not None else None
            updated = decide_heartbeat(stored, owner, ttl, self._clock())
            if updated is None:
                return False
            assert base is not None
            assert updated.lease is not None
            # Fenced like a commit (L4): a lease that lapsed while this call waited is not
            # revived by it.
            return self._store_fenced(base, updated, owner, updated.lease.epoch)

    def release(self, execution_id: str, owner: str) -> bool:
        """L3: the owner gives the lease up; False if it was not the owner."""
        with self._atomic():
            base = self._load(execution_id)
            updated = decide_release(base.execution if base is not None else None, owner)
            if updated is None:
                return False
            assert base is not None
            # A lease that ran out before its owner let it go: said (V2); else nothing. It
            # keeps its expiry, so that the next tenure says the lease expired (not that a
            # runtime shut down) and `ls` when nobody held it since.
            self._notes = release_entries(base.execution, self._clock())
            before = base.execution.lease
            if self._notes and before is not None:
                lapsed = Lease(owner="", expires_at=before.expires_at, epoch=before.epoch)
                updated = attrs.evolve(updated, lease=lapsed)
            try:
                self._store(base, updated)
            finally:
                self._notes = None
            return True

    def _commit_one(self, execution: Execution, owner: str, now: float) -> CommitOutcome:
        base = self._load(execution.id)
        stored = base.execution if base is not None else None
        outcome = decide_commit(stored, owner, now, epoch=epoch_of(execution))
        if outcome is CommitOutcome.OK:
            assert base is not None
            assert stored is not None
            assert stored.lease is not None
            merged = with_disk_lease(execution, stored)
            if releases(execution):
                # Invariant L3: the final write gives the lease up in the same write; the
                # epoch stays (it only grows).
                merged = attrs.evolve(merged, lease=released_lease(stored.lease))
            if not self._store_fenced(base, merged, owner, stored.lease.epoch):
                return CommitOutcome.RELEASED  # it lapsed on the server's clock meanwhile
        return outcome

    def commit_run(self, execution: Execution, owner: str) -> CommitOutcome:
        """A run's write (E2): written only if the outcome is OK, keeping the disk's lease."""
        with self._atomic():
            self._prepare([execution.id])
            return self._commit_one(execution, owner, self._clock())

    def commit_runs(self, commits: Sequence[tuple[Execution, str]]) -> tuple[CommitResult, ...]:
        """``commit_run`` for each in one atomic section (see Store.commit_runs)."""
        results: list[CommitResult] = []
        with self._atomic():
            self._prepare([execution.id for execution, _ in commits], commits)
            now = self._clock()  # after the rows are locked: a server's clock is read then
            for index, (execution, owner) in enumerate(commits):
                try:
                    results.append(self._commit_one(execution, owner, now))
                except OSError as exc:
                    if not self._batch_keeps_earlier:
                        raise  # one transaction: nothing in it was written
                    results.extend([exc] * (len(commits) - index))
                    break
                except (StorageError, ValueError) as exc:  # this record only
                    results.append(exc)
        return tuple(results)

    def renew(
        self, execution_id: str, owner: str, ttl: float, *, epoch: int | None = None
    ) -> tuple[CommitOutcome, Execution | None]:
        """A heartbeat that answers like a commit: OK and the stored execution (lease
        extended), or why this owner may not go on (nothing written then)."""
        with self._atomic():
            base = self._load(execution_id)
            stored = base.execution if base is not None else None
            outcome, updated = decide_renew(stored, owner, ttl, self._clock(), epoch=epoch)
            return self._store_renewal(base, owner, outcome, updated)

    def _store_renewal(
        self,
        base: Base | None,
        owner: str,
        outcome: CommitOutcome,
        updated: Execution | None,
    ) -> tuple[CommitOutcome, Execution | None]:
        if updated is None:
            return outcome, None
        assert base is not None
        assert updated.lease is not None
        if not self._store_fenced(base, updated, owner, updated.lease.epoch):
            return CommitOutcome.RELEASED, None
        return outcome, updated

    def renew_many(self, renewals: Sequence[Renewal]) -> tuple[RenewResult, ...]:
        """``renew`` for each, in one atomic section: many heartbeats, one durable write.

        An ``OSError`` fails the whole batch (raised); a bad argument fails only its entry.
        """
        results: list[RenewResult] = []
        with self._atomic():
            self._prepare([renewal[0] for renewal in renewals])
            now = self._clock()
            for renewal in renewals:
                execution_id, owner, ttl = renewal[:3]
                epoch = renewal[3] if len(renewal) > 3 else None
                try:
                    base = self._load(execution_id)
                    stored = base.execution if base is not None else None
                    outcome, updated = decide_renew(stored, owner, ttl, now, epoch=epoch)
                    results.append(self._store_renewal(base, owner, outcome, updated))
                except OSError:
                    raise
                except (StorageError, ValueError) as exc:
                    results.append(exc)
        return tuple(results)

    def edit(self, execution_id: str, change: Edit) -> Execution | None:
        """Apply ``change`` to the stored execution atomically, whoever holds the lease.

        For controls from outside a run (pause, cancel, a stop request): the run sees the
        result at its next commit or heartbeat (E2). The stored lease is kept whatever
        ``change`` returns. Returns what was written, or None if nothing was (no such
        execution, or ``change`` returned None).
        """
        with self._atomic():
            base = self._load(execution_id)
            if base is None:
                return None
            stored = base.execution
            updated = change(stored, self._clock())
            if updated is None:
                return None
            updated = attrs.evolve(updated, lease=stored.lease)
            self._store(base, updated)
            return updated

    def replace(self, execution: Execution, owner: str) -> bool:
        """Write ``execution`` whole, from outside a run, keeping the stored lease: unless
        missing, terminal, or another owner holds a live lease."""
        with self._atomic():
            base = self._load(execution.id)
            stored = base.execution if base is not None else None
            if not decide_edit(stored, owner, self._clock()):
                return False
            assert stored is not None
            self._store(base, with_disk_lease(execution, stored))
            return True
