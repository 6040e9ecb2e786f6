"""PostgresStore: storage v3 on a PostgreSQL server, for many hosts sharing one store.

The same rows as SqliteStore (``schema``): a header row per execution plus one row per
plan step, observation, completed step, agent task and inner step; a commit writes only
what changed (``storage._journal``) and the history entries it adds.

Why it is safe across hosts:

* Every decide-then-write is one transaction that first locks the execution's row
  (``SELECT ... FOR UPDATE``; a batch locks its rows in id order, so two hosts' batches
  never deadlock). The own-write cache is trusted only while the row's ``stamp`` (a random
  number each write sets) is the one this store wrote.
* A run's commit whose rows are all cached, and whose decision on the cached versions (and
  the server's clock as last read, moved on by this host's monotonic clock) is OK, takes
  one round trip: BEGIN, the same row locks, the writes, the history entries and COMMIT go
  together (a Sync right behind the locks, not waited for, so a host that stalls leaves its
  session idle in its transaction, which the server ends: L6), and each header UPDATE is
  guarded by the stamp the cache was taken at (``AND stamp = ...``) besides the lease
  fence. A row another host wrote meanwhile writes nothing
  and fails the transaction, which is decided again with the rows locked first (a miss
  costs a retry; a hit costs no lock wait on the client).
* L4 fencing is in the statement that writes: a runner's commit or heartbeat updates the
  header ``WHERE seq = ... AND lease_owner = ... AND lease_epoch = ... AND lease_expires >
  <the server's clock>``; a lease that lapsed meanwhile writes nothing. Lease times are the
  server's clock (``clock_timestamp()``), never a host's.
* The history's global sequence comes from a counter row locked until COMMIT (V2).
* A connection lost before COMMIT is retried on a new one (the server rolled the
  transaction back); one lost during COMMIT is reconciled by asking the server what became
  of the transaction id (``txid_status``), after ending the old session if it is still
  there; a one-round-trip commit whose transaction id never came back is reconciled by the
  stamps its header rows hold, after ending its old session, named by pid and start (a pid
  alone may have gone to another session). What cannot be decided raises
  :class:`CommitUnknown`: never acknowledged, never applied twice.

Synchronous psycopg 3 from the persistence actor's worker thread, as with SQLite: it works
the same under asyncio and trio, and psycopg's async API would tie the store to asyncio.
"""

from __future__ import annotations

import builtins
import contextlib
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, TypeVar

from ..._codec import DEFAULT_MAX_BYTES, canonical_json, dumps_checked
from ..._errors import RecordError, StorageError, TooLarge
from ..._ids import check_id
from ..._journal.fold import Folded, fold
from ..._journal.history import HistoryEvent, check_after, parse_event
from ..._journal.model import Base, diff, snapshot_changes
from ..._records import EXECUTION_TERMINAL, Execution, Lease
from ..._v2 import upgrade_event, upgrade_folded
from ..compare_and_set import OwnWrites, decide_commit, epoch_of, releases
from ..contract import Clock, CommitOutcome, Listing, Problem
from ..holding import HoldingStore
from .connect import (
    LOCK_NOT_AVAILABLE,
    QUERY_CANCELED,
    Connections,
    SessionTimeouts,
    channel_name,
    check_seconds,
    is_driver_error,
    is_lost,
    is_retryable,
    quiet_pipeline,
    send_sync,
)
from .evidence import PgEvidence
from .feed import Feed
from .memory import PostgresMemory
from .retry import (
    DecideAgain,
    LockWait,
    Retry,
    StatementTimedOut,
    StoreUnavailable,
    retry_loop,
)
from .schema import (
    NOT_WRITTEN,
    TABLES,
    VALUES_SINCE,
    parse_address,
    schema_version,
    upgrade,
)
from .sql import Statements, loads_row, rows_for, size_expr, with_puts

__all__ = ["CommitUnknown", "PostgresStore", "StoreUnavailable"]

T = TypeVar("T")

#: An execution read back whole is refused past this (X2), as in SQLite.
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024 * 1024

#: The most part rows a commit writes in its header's statement (``with_puts``); more are
#: written one statement each (a statement's parameters are bounded by the protocol).
MAX_MERGED_ROWS = 256


class CommitUnknown(StorageError, OSError):
    """The connection was lost during COMMIT and the server could not be asked whether the
    transaction committed: nothing is acknowledged. A later resume reads what the store
    holds (it was written wholly or not at all)."""


class PostgresStore(HoldingStore):
    """Executions in schema ``schema`` at ``url``, and what the store holds beside them:
    agent memory (``memory``) and sealed evidence (``evidence``), to which its ``memory_*``
    and ``*_evidence`` methods delegate.

    ``url`` is a ``postgresql://`` URL (``?schema=NAME`` picks the schema, default
    ``mainspring``). The schema is created or upgraded on first use (``read_only`` stores
    never do: they refuse a database without a store). ``clock`` replaces the server's
    clock, for tests only. ``reconnect_timeout`` bounds how long a call waits for a server
    that went away before it fails with :class:`StoreUnavailable`.

    Any thread may call any method (the Store contract: the persistence actor writes from
    one worker thread while recovery reads the clock and lists from another). Write
    transactions take the store's lock one at a time, and a transaction's state (its
    connection, pipeline, locked rows, clock, and whether it skips its row locks) is the
    lock holder's alone: it is set, read and decided only holding the lock, and a call
    outside a transaction (``now``, ``get``, ``list``, ``history``) never looks at it but
    reads on a connection of its own.

    No session of the store holds a row lock past a bound (L6). Each carries server-side
    timeouts (unless the URL's ``options`` sets them): ``session_timeout`` (default 5 s) is
    its ``idle_in_transaction_session_timeout``, after which the server ends a session whose
    host stopped mid-transaction (frozen, cut off) and its locks go with it;
    ``lock_timeout`` (default 2 s) is how long one statement waits for a lock before the
    call is tried again, within ``reconnect_timeout`` (then :class:`StoreUnavailable`);
    ``statement_timeout`` (default None: the server's) bounds one statement; a call
    whose statement ran past it is tried again like a lock wait, within
    ``reconnect_timeout``. The timeouts are positive seconds, at most 2,147,483 (the
    server's limit). A URL's ``options`` (or ``PGOPTIONS``) setting one of them wins.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        clock: Clock | None = None,
        read_only: bool = False,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        reconnect_timeout: float = 30.0,
        session_timeout: float = 5.0,
        lock_timeout: float = 2.0,
        statement_timeout: float | None = None,
    ) -> None:
        connect_timeout = check_seconds("connect_timeout", connect_timeout)
        reconnect_timeout = check_seconds("reconnect_timeout", reconnect_timeout)
        for name, limit in (("max_bytes", max_bytes), ("max_record_bytes", max_record_bytes)):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"{name} must be a positive whole number, not {limit!r}")
        self.address = parse_address(url, schema)
        self.schema = self.address.schema
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self.read_only = read_only
        self.reconnect_timeout = reconnect_timeout
        timeouts = SessionTimeouts(
            idle=session_timeout, lock=lock_timeout, statement=statement_timeout
        )
        self._test_clock = clock
        self._now: float | None = None
        self._lock = threading.Lock()  # one write transaction at a time from this store
        # Everything below down to ``_conn`` is the state of the transaction under way:
        # touched only by the thread holding ``_lock`` (see the class docstring).
        self._holder: int | None = None  # that thread's id
        self._cache = OwnWrites()
        self._stamps: dict[str, int] = {}  # execution id -> the stamp of the cached version
        # The transaction under way: rows it locked (id -> stamp, None if not stored), its
        # id and the server's clock when it began, the header writes to check at the end.
        self._locked: dict[str, int | None] = {}
        self._txid: int | None = None
        self._pipeline: Any = None
        self._events: list[tuple[str, int, bytes]] = []
        self._touched: set[str] = set()  # edited out of run: their runners are told (NOTIFY)
        # The one-round-trip commit (see the module docstring): the lock query sent without
        # waiting for it, and per row the stamp the UPDATE is guarded on and the one it
        # writes (to settle a lost COMMIT by them).
        self._deferred: Any = None
        self._guards: dict[str, int] = {}
        self._wrote: dict[str, int] = {}
        # The server's clock minus this host's monotonic clock, as of the last row lock.
        self._skew: float | None = None
        self._conn: Any = None  # the connection of the transaction under way
        self._feeds: weakref.WeakSet[Feed] = weakref.WeakSet()
        sql = Statements(self.schema)
        self._s = sql.s
        self._lock_sql, self._events_sql, self._read_sql = sql.lock, sql.events, sql.read
        self._v2_values = False
        self._connections = Connections(
            self.address,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            timeouts=timeouts,
        )
        self._facts = PostgresMemory(self)
        self._evidence = PgEvidence(
            self._connections, self._s, read_only=read_only, retrying=self._retrying
        )
        try:
            with self._connections.direct() as conn:
                if read_only:
                    self._check_readable(conn)
                else:
                    upgrade(conn, self.schema)
            self._connections.open()
        except BaseException:  # any way out: closed, re-raised
            self._connections.close()
            raise
        self.channel = channel_name(self.schema)

    def _check_readable(self, conn: Any) -> None:
        version = schema_version(conn, self.schema)
        if version is None:
            raise StorageError(
                f"no mainspring store in schema {self.schema!r} at {self.address.shown}"
            )
        upgrade(conn, self.schema, to=version)  # refuses a newer one; writes nothing
        # An older schema is read as storage v3 spells it, in memory only (reading never
        # writes); a writable store upgrades it on open.
        self._v2_values = version < VALUES_SINCE
        self._read_sql = Statements(self.schema, version).read  # an older one's parts

    def __repr__(self) -> str:
        return f"PostgresStore({self.address.shown!r}, schema={self.schema!r})"

    def close(self) -> None:
        """Close every connection, its feeds' too; the store is unusable afterwards."""
        self._connections.close()
        for feed in list(self._feeds):
            feed.close()

    def listen(self) -> Feed:
        """A feed of this store's change notices from every host (``Notifying``); closed
        with the store if not before."""
        feed = Feed(self._connections, self.channel)
        self._feeds.add(feed)
        return feed

    # -- the clock and retries -------------------------------------------------------------

    def _clock(self) -> float:
        """The clock a transaction decides by: the server's as read with its first row
        locks (or the test clock). Only the transaction's own thread calls it."""
        if self._test_clock is not None:
            return self._test_clock()
        assert self._holder == threading.get_ident(), "the clock of another's transaction"
        if not self._began():
            self._lock_rows(())
        assert self._now is not None
        return self._now

    def now(self) -> float:
        """The server's clock (``clock_timestamp()``), or the test clock. From any thread,
        in a transaction or not: read on a connection of its own, never through a
        transaction under way (another thread's, whose connection is not this call's)."""
        if self._test_clock is not None:
            return self._test_clock()
        return self._retrying(self._server_clock)

    def _server_clock(self) -> float:
        with self._connections.reading() as conn:
            row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        return float(row[0])

    def _retrying(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``call`` until it completes, while the server is away for at most
        ``reconnect_timeout``; each retry re-reads the store (nothing cached is trusted)."""
        deadline = time.monotonic() + self.reconnect_timeout
        local = self._connections.local
        outer = getattr(local, "deadline", None)
        local.deadline = deadline if outer is None else min(outer, deadline)
        try:
            return retry_loop(
                self.address.shown,
                self.reconnect_timeout,
                deadline,
                self._connections.check,
                call,
                *args,
                **kwargs,
            )
        finally:
            local.deadline = outer

    # -- reading ---------------------------------------------------------------------------

    def _event(self, body: Any) -> Any:
        raw = self._loads(body, "history entry")
        return upgrade_event(raw) if self._v2_values else raw

    def _loads(self, body: Any, kind: str) -> Any:
        return loads_row(body, kind, self.max_bytes)  # E7, X2

    def _read(
        self, conn: Any, execution_id: str, *, synced: Callable[[], None] | None = None
    ) -> Base | None:
        """The execution as stored, read on ``conn``; in a transaction's pipeline,
        ``synced`` syncs it with the query (L6: never left unsynced while we parse)."""
        execution_id = check_id(execution_id)
        kind = f"execution {execution_id}"
        cursor = conn.execute(self._read_sql, {"id": execution_id, "limit": self.max_record_bytes})
        if synced is not None:
            synced()
        rows = cursor.fetchall()
        if not rows:
            return None
        _, _, seq, head, window, size = rows[0]
        if size > self.max_record_bytes:  # X2: nothing fetched beyond the header
            raise TooLarge(kind, int(size), self.max_record_bytes)
        folded = Folded(head=self._loads(head, kind), seq=seq)
        folded.checkpoints = self._loads(window, kind)
        if type(folded.head) is not dict or type(folded.checkpoints) is not list:
            raise RecordError(kind, ["(header): not an object and a list"])
        names = list(TABLES)
        items: dict[str, dict[str, Any]] = {part: {} for part in names}
        next_pos = dict.fromkeys(names, 0)
        for index, key, pos, body, _, _ in rows[1:]:
            part = names[index]
            items[part][key] = self._loads(body, kind)
            next_pos[part] = pos + 1
        folded.parts = items
        if self._v2_values:
            folded.head = upgrade_folded(folded.head, folded.parts)
        base = Base.of(fold(folded, kind=kind), seq, next_pos, window=folded.checkpoints)
        base.size = int(size)
        return base

    def get(self, execution_id: str) -> Execution | None:
        """The stored execution, or None. Raises ``RecordError``/``TooLarge`` for a bad one (X2)."""
        check_id(execution_id)
        base = self._retrying(self._get, execution_id)
        return base.execution if base is not None else None

    def _get(self, execution_id: str) -> Base | None:
        with self._connections.reading() as conn:
            return self._read(conn, execution_id)

    def list(self) -> Listing:
        """Every execution that reads, and a problem for each that does not (E7)."""
        return self._listing(self._retrying(self._ids))

    def unfinished(self, skip: Collection[str] = ()) -> Listing:
        """``list`` of the executions whose status is not a finished one (``Unfinished``):
        finished rows are not read (L8: recovery's sweeps cost what is unfinished)."""
        ids = self._retrying(self._unfinished_ids)
        return self._listing([i for i in ids if i not in skip])

    def _listing(self, ids: builtins.list[str]) -> Listing:
        executions: list[Execution] = []
        problems: list[Problem] = []
        for execution_id in ids:
            try:
                execution = self.get(execution_id)
            except StorageError as exc:
                if isinstance(exc, StoreUnavailable):
                    raise
                problems.append(Problem(id=execution_id, error=str(exc)))
                continue
            if execution is not None:
                executions.append(execution)
        return Listing(executions=tuple(executions), problems=tuple(problems))

    def _ids(self) -> builtins.list[str]:
        with self._connections.reading() as conn:
            rows = conn.execute(f"SELECT id FROM {self._s}.executions ORDER BY id")
            return [row[0] for row in rows]

    def _unfinished_ids(self) -> builtins.list[str]:
        query = f"SELECT id FROM {self._s}.executions WHERE status <> ALL(%s) ORDER BY id"
        with self._connections.reading() as conn:
            rows = conn.execute(query, (sorted(EXECUTION_TERMINAL),))
            return [row[0] for row in rows]

    def history(
        self, execution_id: str | None = None, *, after: int = 0, limit: int = 1_000
    ) -> tuple[HistoryEvent, ...]:
        """Committed history entries after global sequence ``after``, oldest first (V2)."""
        after = check_after(after)
        limit = max(1, min(int(limit), 10_000))
        if execution_id is not None:
            check_id(execution_id)
        rows = self._retrying(self._history_rows, execution_id, after, limit)
        return tuple(parse_event(seq, eseq, self._event(body)) for seq, eseq, body in rows)

    def _history_rows(self, execution_id: str | None, after: int, limit: int) -> builtins.list[Any]:
        with self._connections.reading() as conn:
            if execution_id is None:
                rows: builtins.list[Any] = conn.execute(
                    f"SELECT seq, eseq, body FROM {self._s}.events WHERE seq > %s "
                    "ORDER BY seq LIMIT %s",
                    (after, limit),
                ).fetchall()
                return rows
            rows = conn.execute(
                f"SELECT seq, eseq, body FROM {self._s}.events WHERE execution_id = %s "
                "AND seq > %s ORDER BY seq LIMIT %s",
                (execution_id, after, limit),
            ).fetchall()
            return rows

    # -- the transaction -------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction, pipelined: BEGIN goes with the first query (which locks
        the rows and reads the server's clock and the transaction id), the writes of every
        commit in it go in one round trip, and the history entries, the notices and COMMIT
        in one more: the Sync sent as the pipeline is left, which reads every answer."""
        with self._lock, self._connections.writing() as conn:
            self._holder = threading.get_ident()
            self._conn = conn
            self._locked = {}
            self._txid = None
            self._events = []
            self._touched = set()
            self._deferred = None
            self._guards = {}
            self._wrote = {}
            pid = conn.info.backend_pid
            committing = False
            try:
                with quiet_pipeline(conn) as pipeline:
                    self._pipeline = pipeline
                    yield
                    if not self._began():  # nothing was asked: nothing to commit
                        return
                    self._finish(conn)
                    committing = True
                    conn.execute("COMMIT")
                    # No Sync of our own here: leaving the pipeline sends one and reads
                    # every answer, COMMIT's included (a second Sync would cost a second
                    # round trip per transaction).
                if self._deferred is not None:
                    self._took_locks(self._deferred.fetchone())
            except BaseException as exc:  # re-raised as what it means
                self._forget()  # nothing of this transaction is remembered
                if self._deferred is not None and self._txid is None:
                    with contextlib.suppress(Exception):  # its answer may have come back
                        self._took_locks(self._deferred.fetchone())
                self._settle_failure(exc, conn, pid, committing)
            finally:
                self._conn = None
                self._pipeline = None
                self._now = None
                self._locked = {}
                self._deferred = None
                self._holder = None

    def _began(self) -> bool:
        return self._txid is not None or self._deferred is not None

    def _took_locks(self, row: Any) -> None:
        """The lock query's answer: the transaction id, and the server's clock (kept as a
        skew from this host's monotonic clock, for the next one-round-trip decision)."""
        now, txid, _, _ = row
        self._txid = txid
        self._skew = float(now) - time.monotonic()

    def _settle_failure(self, exc: BaseException, conn: Any, pid: int, committing: bool) -> None:
        """Re-raise what ended a transaction as what it means: retry, refusal or unknown.
        Returns (the call's answers stand) only if the COMMIT is known to have landed."""
        txid = self._txid
        if not is_lost(exc, conn):
            with contextlib.suppress(Exception):  # the failure below says why
                conn.execute("ROLLBACK")
            if isinstance(exc, Retry):
                raise exc
            if getattr(exc, "sqlstate", None) == LOCK_NOT_AVAILABLE:
                # L6: a row stayed locked elsewhere for our lock_timeout; tried again.
                raise LockWait(self._connections.scrub(exc).splitlines()[0]) from None
            if getattr(exc, "sqlstate", None) == QUERY_CANCELED:
                # L6: past our statement_timeout (a lock wait ends so too when it is the
                # shorter one). Not a refusal of the data: tried again, within a bound.
                if committing and txid is not None:
                    status = self._connections.settle(txid, pid, self.reconnect_timeout)
                    if status == "committed":
                        return  # it landed after all: the call's answers stand
                    if status != "aborted":
                        raise CommitUnknown(
                            f"COMMIT at {self.address.shown} was cancelled and the server "
                            f"could not be asked whether it committed; nothing is "
                            f"acknowledged: {self._connections.scrub(exc)}"
                        ) from None
                why = self._connections.scrub(exc).splitlines()[0]
                raise StatementTimedOut(why) from None
            if getattr(exc, "sqlstate", None) == NOT_WRITTEN or is_retryable(exc):
                # A lease lapsed on the server's clock between the decision and the write
                # (L4), or another host created the same id, or the server broke a
                # deadlock: decided again from scratch, it is answered cleanly.
                raise DecideAgain(self._connections.scrub(exc).splitlines()[0]) from None
            if is_driver_error(exc):
                why = self._connections.scrub(exc)
                raise StorageError(f"PostgreSQL refused the write: {why}") from None
            raise exc
        if txid is None and self._deferred is not None:
            # One round trip, lost before the transaction id came back: its session is
            # ended, then the stamps its header rows hold say what became of it.
            status = self._connections.settle_by_stamps(
                pid,
                f"{self._s}.executions",
                self._wrote,
                self._guards,
                self.reconnect_timeout,
                started=self._connections.started(conn),
            )
            if status == "committed" and committing:
                return  # it landed: the call's answers stand
            if status == "aborted" or not committing:
                raise Retry(self._connections.scrub(exc)) from None
            raise CommitUnknown(
                f"the connection to {self.address.shown} was lost during COMMIT and the "
                f"server could not be asked whether it committed; nothing is "
                f"acknowledged: {self._connections.scrub(exc)}"
            ) from None
        if txid is None or not committing:
            # COMMIT was never sent: the server rolls the transaction back. Its session may
            # live on (a cut network) holding row locks: it is ended before the retry,
            # which would otherwise wait for them.
            if txid is not None:
                self._connections.settle(txid, pid, self.reconnect_timeout)
            raise Retry(self._connections.scrub(exc)) from None
        status = self._connections.settle(txid, pid, self.reconnect_timeout)
        if status == "aborted":
            raise Retry(self._connections.scrub(exc)) from None
        if status != "committed":
            raise CommitUnknown(
                f"the connection to {self.address.shown} was lost during COMMIT and the "
                f"server could not be asked whether it committed; nothing is acknowledged: "
                f"{self._connections.scrub(exc)}"
            ) from None
        # It committed: the call's answers stand (nothing cached is trusted).

    def _forget(self) -> None:
        self._cache.clear()
        self._stamps.clear()

    def _lock_rows(self, ids: Sequence[str]) -> None:
        """Lock the rows of ``ids`` (in id order) and note their stamps; the first query of
        a transaction also begins it and reads the server's clock and transaction id."""
        wanted = sorted({i for i in ids if i not in self._locked})
        if not wanted and self._txid is not None:
            return
        conn = self._conn
        if self._txid is None:
            conn.execute("BEGIN")
        cursor = conn.execute(self._lock_sql, (wanted,))
        # L6: synced with the query, not fetched mid-pipeline: while we decide, the server
        # sees the session idle in its transaction, which its idle timeout ends if we stall
        # (frozen, cut off). Unsynced it would be "active", and no timeout applies.
        self._pipeline.sync()
        row = cursor.fetchone()
        now, txid, locked_ids, stamps = row
        if self._txid is None:
            self._now, self._txid = float(now), txid
            self._skew = self._now - time.monotonic()
        self._locked.update(dict.fromkeys(wanted))
        self._locked.update(zip(locked_ids, stamps, strict=True))

    def _finish(self, conn: Any) -> None:
        """The history entries of every commit in this transaction, numbered from the
        counter row (locked to COMMIT: V2), and the change notices to other hosts."""
        notices = [f"c {execution_id}" for execution_id in sorted(self._touched)]
        if self._events:
            ids, eseqs, bodies = zip(*self._events, strict=True)
            conn.execute(
                self._events_sql,
                (len(self._events), list(ids), list(eseqs), list(bodies), self.channel),
            )
        if notices:
            conn.execute(
                "SELECT pg_notify(%s, n) FROM unnest(%s::text[]) AS n", (self.channel, notices)
            )

    # -- the compare-and-set hooks (see CompareAndSetStore) ---------------------------------

    def _atomic(self) -> contextlib.AbstractContextManager[None]:
        if self.read_only:
            raise StorageError(f"{self.address.shown} was opened read-only")
        return self._transaction()

    def _prepare(
        self, execution_ids: Sequence[str], commits: Sequence[tuple[Execution, str]] = ()
    ) -> None:
        # Decided here, holding the store's lock, on this transaction's own batch: a
        # decision made before the lock (or by another thread) went stale meanwhile, or
        # leaked into another thread's transaction, which then skipped locking rows it had
        # no cached stamp for.
        if commits and not self._began() and self._may_skip_locks(commits):
            self._lock_later(execution_ids)
            return
        self._lock_rows([i for i in execution_ids if isinstance(i, str) and _valid(i)])

    def _lock_later(self, execution_ids: Sequence[str]) -> None:
        """The one-round-trip commit's start: BEGIN and the row locks are sent and not
        waited for; the rows are taken as holding the stamps cached for them, which every
        header UPDATE checks (``_write``), and the clock as estimated (see ``_may_skip_locks``)."""
        wanted = sorted(set(execution_ids))
        conn = self._conn
        conn.execute("BEGIN")
        self._deferred = conn.execute(self._lock_sql, (wanted,))
        # L6: a Sync right behind the row locks, not waited for: from then on the server
        # sees the session idle in its transaction until the writes arrive, and its idle
        # timeout ends it (its locks with it) should this host stall before they do
        # (frozen, cut off). Unsynced it would be "active", and no timeout applies.
        send_sync(self._pipeline)
        self._guards = {i: self._stamps[i] for i in wanted}
        self._locked.update(self._guards)
        self._now = self._estimated_now()

    def _estimated_now(self) -> float:
        assert self._skew is not None
        return time.monotonic() + self._skew

    def _may_skip_locks(self, commits: Sequence[tuple[Execution, str]]) -> bool:
        """Whether a batch of run commits can be written in one round trip: every row is
        cached with its stamp, no id repeats, and each commit is decided OK on the cached
        version at the estimated server time. Any other answer (a refusal, a lease near its
        end) is decided with the rows locked first, on the server's clock (L1, L4, E2)."""
        if self._test_clock is None and self._skew is None:
            return False
        ids = [execution.id for execution, _ in commits]
        if len(set(ids)) != len(ids):
            return False
        now = self._test_clock() if self._test_clock is not None else self._estimated_now()
        for execution, owner in commits:
            if execution.id not in self._stamps:
                return False
            cached = self._cache.get(execution.id)
            if cached is None:
                return False
            outcome = decide_commit(cached.execution, owner, now, epoch=epoch_of(execution))
            if outcome is not CommitOutcome.OK:
                return False
        return True

    def _load(self, execution_id: str) -> Base | None:
        execution_id = check_id(execution_id)
        if execution_id not in self._locked:
            self._lock_rows([execution_id])
        stamp = self._locked[execution_id]
        if stamp is None:
            return None
        cached = self._cache.get(execution_id)
        if cached is not None and self._stamps.get(execution_id) == stamp:
            return cached  # nobody wrote it since we did: the row lock keeps it so
        return self._read(self._conn, execution_id, synced=self._pipeline.sync)

    def _dumps(self, value: Any, what: str) -> bytes:
        data = dumps_checked(value)
        if len(data) > self.max_bytes:  # never acknowledge what could not be read back (X2)
            raise TooLarge(what, len(data), self.max_bytes)
        return data

    def _store(self, base: Base | None, execution: Execution) -> None:
        self._write(base, execution, None)

    def _store_fenced(self, base: Base, execution: Execution, owner: str, epoch: int) -> bool:
        return self._write(base, execution, (owner, epoch))

    def edit(self, execution_id: str, change: Any) -> Execution | None:
        """See :meth:`CompareAndSetStore.edit`; the runner elsewhere is told at once."""
        return self._retrying(super().edit, execution_id, change)

    def _write(
        self, base: Base | None, execution: Execution, fence: tuple[str, int] | None
    ) -> bool:
        execution_id = check_id(execution.id)
        what = f"execution {execution_id}"
        changes = snapshot_changes(execution) if base is None else diff(base, execution)
        rows = rows_for(
            self._s,
            execution_id,
            changes,
            base.window_after(changes) if base is not None else None,
            lambda value: self._dumps(value, what),
        )
        head, window, statements, written = rows.head, rows.window, rows.statements, rows.written
        s = self._s
        assert head is not None
        assert window is not None
        checkpoints = self._dumps(window, what)
        seq = base.seq + 1 if base is not None else 1
        events = self._entries_for(base, execution, changes)
        # Everything is encoded and checked before the first statement (X2).
        event_rows = [(execution_id, seq, canonical_json(event)) for event in events]
        size = (base.size if base is not None else 0) + len(head) + len(checkpoints) + written
        stamp = secrets.randbits(63)
        lease = execution.lease
        header = (
            seq,
            stamp,
            execution.status,
            execution.updated_at,
            lease.owner if lease is not None else "",
            lease.epoch if lease is not None else 0,
            lease.expires_at if lease is not None else 0.0,
            head,
            checkpoints,
        )
        conn = self._conn
        careful = size > self.max_record_bytes
        if careful:  # X2: measured as written, inside a savepoint, before it is kept
            conn.execute("SAVEPOINT bound")
        check = f"SELECT {s}.written(count(*)) FROM header"
        # A commit of upserts alone (a run's step: its plan step, observation, completed
        # id) writes them in its header's statement: one statement, not one per row. A
        # commit of many rows (a cancel that skips thousands of steps) keeps one statement
        # a row: a statement carries at most 65,535 parameters, four a row.
        merged = not careful and rows.only_puts and 0 < len(statements) <= MAX_MERGED_ROWS
        if base is None:
            sql = (
                f"INSERT INTO {s}.executions (seq, stamp, status, updated_at, "
                "lease_owner, lease_epoch, lease_expires, head, checkpoints, id) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING"
            )
            args: tuple[Any, ...] = (*header, execution_id)
        else:
            sql = (
                f"UPDATE {s}.executions SET seq = %s, stamp = %s, status = %s, "
                "updated_at = %s, lease_owner = %s, lease_epoch = %s, lease_expires = %s, "
                "head = %s, checkpoints = %s WHERE id = %s AND seq = %s"
            )
            args = (*header, execution_id, base.seq)
            guard = self._guards.get(execution_id)
            if guard is not None and execution_id not in self._wrote:
                # Sent without waiting for the row lock: the row must still be the cached
                # version, or nothing is written and the commit is decided again, locked.
                sql += " AND stamp = %s"
                args = (*args, guard)
            if fence is not None:
                # L4, in the statement that writes: this owner's tenure, live on the
                # server's clock (or the test clock) at this moment. A header not written
                # fails the transaction (``written``), which is then decided again.
                sql += (
                    " AND lease_owner = %s AND lease_epoch = %s AND lease_expires > "
                    "coalesce(%s, extract(epoch FROM clock_timestamp())::float8)"
                )
                now = self._test_clock() if self._test_clock is not None else None
                args = (*args, fence[0], fence[1], now)
        if merged:
            start, puts = with_puts(sql, execution_id, rows.puts, s)
            conn.execute(f"{start} {check}", (*args, *puts))
        else:
            conn.execute(f"WITH header AS ({sql} RETURNING 1) {check}", args)
            for statement, arguments in statements:
                conn.execute(statement, arguments)
        if careful:
            self._pipeline.sync()
            exact = self._exact_size(execution_id)
            if exact > self.max_record_bytes:
                conn.execute("ROLLBACK TO SAVEPOINT bound")
                conn.execute("RELEASE SAVEPOINT bound")
                raise TooLarge(what, exact, self.max_record_bytes)
            conn.execute("RELEASE SAVEPOINT bound")
            size = exact
        self._events.extend(event_rows)
        # Edits out of run tell its runner; a run's write that gives its lease up (L3) and
        # leaves it unfinished tells every other host's recovery that it is free (L8).
        if base is not None and (fence is None or (releases(execution) and not execution.terminal)):
            self._touched.add(execution_id)
        self._locked[execution_id] = stamp
        if execution_id in self._guards:
            self._wrote[execution_id] = stamp
        if base is None:
            base = Base.of(execution, seq, window=window)
        else:
            base.advance(execution, changes)
        base.size = size
        self._cache.remember(base)
        if execution.terminal:
            self._stamps.pop(execution_id, None)
        else:
            self._stamps[execution_id] = stamp
            if len(self._stamps) > 2 * 4_096:
                self._stamps = {k: v for k, v in self._stamps.items() if self._cache.get(k)}
        return True

    def _exact_size(self, execution_id: str) -> int:
        cursor = self._conn.execute(
            f"SELECT {size_expr(self.schema)} FROM {self._s}.executions WHERE id = %(id)s",
            {"id": execution_id},
        )
        self._pipeline.sync()  # L6: never left unsynced while we work
        row = cursor.fetchone()
        return int(row[0]) if row is not None else 0

    def delete(self, execution_id: str) -> bool:
        """Delete a finished execution with every row and history entry of it; False if it
        is not stored or not finished (decided under the row's lock)."""
        return self._retrying(self._delete, execution_id)

    def _delete(self, execution_id: str) -> bool:
        with self._atomic():
            base = self._load(execution_id)
            if base is None or not base.execution.terminal:
                return False
            s = self._s
            for table in ("executions", *TABLES.values(), "events"):
                column = "id" if table == "executions" else "execution_id"
                self._conn.execute(f"DELETE FROM {s}.{table} WHERE {column} = %s", (execution_id,))
            self._cache.pop(execution_id)
            self._stamps.pop(execution_id, None)
            return True

    # -- every write call is retried while the server is away (see _retrying) --------------

    def create(self, execution: Execution, *, lease_ttl: float | None = None) -> bool:
        return self._retrying(super().create, execution, lease_ttl=lease_ttl)

    def acquire(
        self, execution_id: str, owner: str, ttl: float, *, gone: Lease | None = None
    ) -> Any:
        return self._retrying(super().acquire, execution_id, owner, ttl, gone=gone)

    def heartbeat(self, execution_id: str, owner: str, ttl: float) -> bool:
        return self._retrying(super().heartbeat, execution_id, owner, ttl)

    def release(self, execution_id: str, owner: str) -> bool:
        return self._retrying(super().release, execution_id, owner)

    def commit_run(self, execution: Execution, owner: str) -> Any:
        return self._retrying(super().commit_run, execution, owner)

    def commit_runs(self, commits: Sequence[tuple[Execution, str]]) -> Any:
        return self._retrying(super().commit_runs, commits)

    def renew(self, execution_id: str, owner: str, ttl: float, *, epoch: int | None = None) -> Any:
        return self._retrying(super().renew, execution_id, owner, ttl, epoch=epoch)

    def renew_many(self, renewals: Any) -> Any:
        return self._retrying(super().renew_many, renewals)

    def replace(self, execution: Execution, owner: str) -> bool:
        return self._retrying(super().replace, execution, owner)


def _valid(execution_id: str) -> bool:
    try:
        check_id(execution_id)
    except ValueError:
        return False
    return True
