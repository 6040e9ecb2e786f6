"""The backend contract: what every store offers (:class:`Store`, whose docstring is the
written contract), what its calls answer (:class:`CommitOutcome`, :class:`LeaseResult`,
:class:`Listing`, :class:`Problem`) and what a store may offer besides (:class:`Notifying`,
:class:`Unfinished`).

Backends are synchronous and blocking on purpose: the persistence actor (and anything else on
an event loop) calls them through ``anyio.to_thread.run_sync`` (STYLE.md, habit 10), unless a
store declares that its calls never block (``blocking = False``, see :class:`Store`). How the
three stores of this package keep it is ``compare_and_set``'s.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .._journal.history import HistoryEvent
from .._owners import new_owner_id
from .._records import Execution, Lease

__all__ = [
    "ChangeFeed",
    "Clock",
    "CommitOutcome",
    "CommitResult",
    "Edit",
    "LeaseResult",
    "Listing",
    "Notifying",
    "Problem",
    "RenewResult",
    "Renewal",
    "Store",
    "Unfinished",
    "holder",
    "new_owner_id",
    "store_blocks",
]


class CommitOutcome(enum.StrEnum):
    """What a run's commit met on disk (invariant E2). Only ``OK`` means it was written."""

    OK = "ok"
    MISSING = "missing"  # the execution is not stored (any more)
    FOREIGN_LEASE = "foreign_lease"  # another owner holds the lease
    RELEASED = "released"  # nobody holds the lease (released, lapsed or never taken)
    TERMINAL = "terminal"  # completed, failed or cancelled on disk: sticky
    PAUSED = "paused"  # paused on disk: not the runner's to overwrite

    @property
    def ok(self) -> bool:
        """True only for ``OK``: the commit was written."""
        return self is CommitOutcome.OK


CommitResult = CommitOutcome | Exception
#: ``(execution id, owner, ttl)``, or with the lease epoch the heartbeat is made under (L4).
Renewal = tuple[str, str, float] | tuple[str, str, float, int | None]
RenewResult = tuple[CommitOutcome, "Execution | None"] | Exception


@attrs.frozen(kw_only=True)
class LeaseResult:
    """What :meth:`Store.acquire` returns: ``acquired`` and the lease now on disk, or why
    it was refused (``reason``: another owner's live lease...).

    Public because a store implements ``acquire`` and so makes these, and a caller of it
    (the runtime, an operator's tool) reads them."""

    acquired: bool
    lease: Lease | None = None
    reason: str = ""


@attrs.frozen(kw_only=True)
class Problem:
    """A stored execution that could not be read: reported by listing, never deleted (E7)."""

    id: str
    error: str


@attrs.frozen(kw_only=True)
class Listing:
    """Everything a store holds that reads, and what does not (``problems``)."""

    executions: tuple[Execution, ...]
    problems: tuple[Problem, ...] = ()


class Store(Protocol):
    """The backend contract (storage v3): what every store offers and must keep.

    ``FileStore``, ``SqliteStore`` and ``PostgresStore`` implement it; one contract suite
    (``tests/storage/backends/test_contract.py``, parametrised by backend) checks each of them.

    *Shape.* An execution is stored as its head (every small field: status, lease, budget,
    pending question, controls, the plan without its steps) plus keyed, ordered parts (plan
    steps, observations, completed steps, agent tasks, each task's inner observations and
    completed inner steps, external workers by id, the tasks they serve by id, and the
    workers' diagnostic trail by ``str(seq)``, at most ``MAX_TRAIL``) and a window of at most
    five checkpoints. The journal's ``diff(base, new)`` (``storage._journal.model``) turns a
    commit into changes (``head``, ``put``, ``reset``, ``drop``, ``group``, ``ckpt``,
    ``ckpts``) that touch only what differs from the version the backend stored last
    (``drop``: the oldest trail entries leave, one row each, so a bounded trail costs the
    same at entry 10 and entry 10,000); ``fold`` (``storage._journal.fold``) rebuilds the
    execution. A backend stores changes its own way (rows, frames) but must read back
    exactly the execution that was committed: same items, same order (a put of a new key
    appends, of a known key replaces in place). Each commit also gets the next
    per-execution sequence number and the history entries ``events_for``
    (``storage._journal.commit_events``) derives from it.

    *Operations and what each makes atomic* (one compare-and-set against the stored copy,
    exclusive across processes and hosts):

    - ``create``: store a new execution, or refuse (False) if the id exists.
    - ``acquire`` / ``heartbeat`` / ``release`` (L1-L3): take the lease unless another
      owner's is live (a lapsed one is taken over and the epoch grows), extend the holder's
      live lease, give it up keeping the epoch. The lease's clock is the backend's
      (``now``; for a shared server, the server's). ``acquire(..., gone=lease)`` also takes
      over a live lease whose owner process the caller found gone (``owner_gone``, L7), if
      it is still that lease.
    - ``commit_run`` / ``commit_runs`` (E2, L4): decide in order missing, terminal,
      paused, released, foreign lease (another owner, or this owner's lease of another
      epoch than the commit's), then write the changes and the history entries together;
      the lease on disk is kept, except that a commit whose record carries a released lease
      (no owner) releases it in that same write (L3: a run's final write, so no crash can
      leave it held). ``commit_runs`` makes a batch durable together: one transaction
      (SQLite, PostgreSQL: a disk error fails the whole batch) or one fsynced append per
      execution (files: the commits before a failure stay). A bad record (too large,
      unstorable) fails only its own commit and writes nothing of it.
    - ``renew`` / ``renew_many``: a heartbeat that answers like a commit (L2, E2).
    - ``edit`` / ``replace``: out-of-run changes (controls): ``edit`` applies a change to the
      record as it is then, whoever holds the lease; ``replace`` writes a whole record unless
      it is terminal or another owner's live lease holds it. The stored lease is kept.
    - ``delete``: a terminal execution with everything stored about it, history included.
    - ``get`` / ``list`` / ``history``: reads; they never write (E7). ``list`` reports what
      does not read as a ``Problem`` (never skipped, never deleted); ``get`` raises
      ``RecordError`` for the same record (a journal with bytes but no whole entry
      included), and ``create`` refuses such an id with that error, writing nothing (X2:
      what is stored and unreadable is never taken for absent). A terminal execution's
      lease is void: nobody holds a finished run (L3). ``history(execution_id, after=,
      limit=)`` returns committed entries with a global sequence above ``after``, in that
      order: an entry is visible only once the commit that made it is durable, and a reader
      never sees a later sequence before an earlier one is visible (SQLite: transactions are
      serial; files: readers take the lock shared; a server backend must not expose a
      sequence until every lower one has committed, e.g. by allocating them under the
      commit's lock).

    *Durability and failure.* Nothing is acknowledged before it is durable (fsync, or a
    ``synchronous=FULL`` commit); after a failed write the writer forgets what it cached,
    and the persistence actor acknowledges nothing more. Reads are bounded (``max_bytes``
    per entry or row, ``max_record_bytes`` per execution, X2), parse strictly and fail
    closed per entry (E8); a torn tail of an append is ignored and cut off by the next
    writer. Ids are checked before any path or query (X1); SQL is parameterised; files are
    0600 in a 0700 directory.

    *Sealed evidence* (``storage._evidence``, ``EvidenceStore``): ``put_evidence(digest,
    body)`` stores canonical JSON (``canonical_json``) of at most ``MAX_EVIDENCE_BYTES``
    under its sha256 once (a digest stored already is checked and left as it is);
    ``get_evidence(digest)`` reads it back bounded, hashes it again and raises
    ``EvidenceError`` if it is missing or not what was sealed (fail closed). Both are
    synchronous and check the digest before any path or query (X1); files are
    ``evidence/<digest>.json`` (0600, in a 0700 directory), rows an ``evidence`` table.
    ``Committer.seal_evidence`` / ``read_evidence`` call them off the event loop;
    ``load_evidence(store, digest)`` reads a document synchronously (the CLI).

    *Layouts.* ``SCHEMA_VERSION`` (3) is recorded in the store (SQLite ``meta``, files
    ``.format``); an older layout (0.1's, storage v2) is refused with ``StoreNeedsMigration``
    (run ``mainspring migrate``: ``storage._migrate``), a newer one with a clear error. A
    PostgreSQL schema is upgraded when a writable store opens it; a read-only store of an
    older schema reads it as v3 spells it, changing nothing. v3 spells every state one way
    (snake_case ``enum.StrEnum`` members) and keeps stop requests, approvals and question ids
    as typed values (``StopRequest``, ``Approval``, ``QuestionId``; ``storage._requests``).

    *Blocking.* Calls may block (a disk, a server, a lock held across I/O), so code on an
    event loop makes them in a worker thread. A store whose every call returns at once,
    touching no disk or network and never waiting on a lock held across I/O (an in-memory
    store for tests or benchmarks), may say so with a class attribute ``blocking = False``:
    the persistence actor then calls it on the event loop, saving a thread hop per flush. A
    store that does not say so is taken to block; every store this package ships does, and
    keeps its thread. ``blocking`` is optional, not a member every store must define (see
    ``store_blocks``).

    *Live records.* The records a store is given (``create``, ``commit_run``,
    ``commit_runs``, ``replace``, what an ``edit``'s change returns) may be a run's live
    records: their sequence fields (a plan's steps, the observations, the completed steps,
    the agent tasks and their inner steps, a checkpoint's completed steps) may be ``Vector``
    or ``AppendOnly`` sequences, which read as the tuple they stand for (an
    ``AppendOnlyList``: the list) but are not ``tuple`` instances: ``attrs.asdict``,
    ``json`` and ``isinstance(x, tuple)`` do not take them for one. A store that keeps or
    serialises records itself converts them (``tuple(x)``); what ``get`` and ``list``
    return should hold plain tuples, as every store this package ships returns, but for the
    entries read one by one (an execution's agent tasks, workers, worker tasks and trail):
    the package's codec reads those into ``Entries``, which read as the tuple of their
    records and parse each one when it is first looked at (``storage._entries``).
    """

    def get(self, execution_id: str) -> Execution | None:
        """The stored execution, or None. Raises ``RecordError``/``TooLarge`` for a bad record."""
        ...

    def now(self) -> float:
        """The store's clock (seconds since the epoch): what its leases are timed by. A
        shared server's, never a host's: judge whether a lease is live by this."""
        ...

    def list(self) -> Listing:
        """Every execution that reads, and a problem for each that does not (E7)."""
        ...

    def create(self, execution: Execution, *, lease_ttl: float | None = None) -> bool:
        """Store a new execution; False if its id exists (nothing written). With
        ``lease_ttl``, its lease is stored to expire that long from now on the store's
        clock (a lease's times are the store's, never a host's: L1)."""
        ...

    def acquire(
        self, execution_id: str, owner: str, ttl: float, *, gone: Lease | None = None
    ) -> LeaseResult:
        """L1: take the lease unless another owner's is live; takes over a lapsed one, and
        ``gone`` (a lease whose owner process the caller found gone: L7) if it is still on
        disk as it was seen."""
        ...

    def heartbeat(self, execution_id: str, owner: str, ttl: float) -> bool:
        """L2: extend the holder's live lease; False otherwise."""
        ...

    def release(self, execution_id: str, owner: str) -> bool:
        """L3: give the lease up; False if ``owner`` does not hold it."""
        ...

    def commit_run(self, execution: Execution, owner: str) -> CommitOutcome:
        """A run's write (E2): written only if the outcome is ``OK``, keeping the lease on
        disk, or releasing it in the same write if ``execution`` carries a released lease
        (L3: a run's final write)."""
        ...

    def replace(self, execution: Execution, owner: str) -> bool:
        """Write ``execution`` whole, from outside a run, keeping the stored lease: refused
        (False, nothing written) if the stored record is missing or terminal, or another
        owner holds a live lease on it. (``edit`` changes the record as it is then, whoever
        holds the lease.)"""
        ...

    def renew(
        self, execution_id: str, owner: str, ttl: float, *, epoch: int | None = None
    ) -> tuple[CommitOutcome, Execution | None]:
        """A heartbeat that answers like a commit (L2, E2): the lease is extended only if a
        commit by ``owner`` (of lease ``epoch``, when given: L4) would be accepted now."""
        ...

    def edit(self, execution_id: str, change: Edit) -> Execution | None:
        """Apply ``change`` atomically, whoever holds the lease; the stored lease is kept."""
        ...

    def renew_many(self, renewals: Sequence[Renewal]) -> tuple[RenewResult, ...]:
        """``renew`` for each ``(execution id, owner, ttl[, epoch])``, made durable together."""
        ...

    def commit_runs(self, commits: Sequence[tuple[Execution, str]]) -> tuple[CommitResult, ...]:
        """``commit_run`` for each, made durable together where the backend can.

        Each result is an outcome, or the error that stopped that one commit: a bad record
        (``StorageError``, ``ValueError``) touches nothing else; an ``OSError`` means the disk
        failed at that commit, and it and every later one in the batch were not written.
        """
        ...

    def history(
        self, execution_id: str | None = None, *, after: int = 0, limit: int = 1_000
    ) -> tuple[HistoryEvent, ...]:
        """Committed history entries (V2) with a global sequence above ``after``, oldest
        first, at most ``limit`` (1..10,000); of one execution, or of all."""
        ...

    def delete(self, execution_id: str) -> bool:
        """Delete a finished (terminal) execution with everything stored about it, history
        included; False if it is not stored or not finished (decided atomically)."""
        ...


def store_blocks(store: object) -> bool:
    """Whether calls to ``store`` may block, so that an event loop makes them in a worker
    thread: True unless the store declares ``blocking = False`` (see :class:`Store`). A
    wrapper that forwards attributes to the store it wraps inherits that store's answer; one
    that blocks on its own says ``blocking = True``."""
    return getattr(store, "blocking", True) is not False


class ChangeFeed(Protocol):
    """Change notices from every host writing to a shared store (see ``Notifying``)."""

    def wait(self, timeout: float) -> list[tuple[str, str]]:
        """The notices arriving within ``timeout`` s: ``("control", execution id)`` (changed
        out of run: its runner should look now), ``("history", seq)`` (history committed up
        to ``seq``), ``("lost", "")`` (notices may have been missed: look at everything)."""
        ...

    def close(self) -> None:
        """Stop listening."""
        ...


@runtime_checkable
class Notifying(Protocol):
    """A store that tells every host of changes as they commit (PostgreSQL's
    LISTEN/NOTIFY). Runners then meet a control from another host at once rather than at
    their next heartbeat, and followers read on at once; heartbeats and polling stay the
    backstop."""

    def listen(self) -> ChangeFeed:
        """A new feed of this store's change notices (blocking calls: use a thread)."""
        ...


@runtime_checkable
class Unfinished(Protocol):
    """A store that lists its unfinished executions without reading its finished ones:
    what a runtime's recovery looks at every few seconds (L8), whose cost must not grow
    with the finished runs a store keeps. A store without it is listed whole."""

    def unfinished(self, skip: Collection[str] = ()) -> Listing:
        """Every execution that is not finished (completed, failed or cancelled), and a
        problem for each that may be one and does not read (E7); the ids in ``skip`` (the
        caller's own live runs) are not read at all: a long run live here must not be
        folded whole at every sweep, under the lock its commits need."""
        ...


def holder(lease: Lease | None, now: float) -> str | None:
    """The owner holding ``lease`` at ``now``, or None if it is released or lapsed."""
    if lease is None or not lease.owner or lease.expires_at <= now:
        return None
    return lease.owner


Clock = Callable[[], float]


Edit = Callable[[Execution, float], Execution | None]
"""An out-of-band change: given the stored execution and the time, the new one (or None)."""
