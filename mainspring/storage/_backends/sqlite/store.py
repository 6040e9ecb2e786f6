"""SqliteStore: storage v3 in normalised tables of one WAL database, ``synchronous=FULL``.

An execution is a header row (``executions``: its head as JSON, status, update time, the
per-execution sequence number and its checkpoint window) plus one row per plan step, per
observation, per completed step, per agent task and per inner step and inner completion of
an agent task, each with its position; a commit writes only the rows that changed
(``storage._journal``) and the history entries it adds (``events``: a global sequence and
the per-execution one, V2), so its cost does not grow with the run.

Every decide-then-write runs in ``BEGIN IMMEDIATE``, which takes SQLite's write lock up front,
so compare-and-set is atomic across connections and processes; a flush of many commits is
one transaction. The database and its ``-wal`` and ``-shm`` files are 0600. A connection is
used by one thread at a time (a lock guards it), since callers on an event loop reach it
through worker threads.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from ..._codec import DEFAULT_MAX_BYTES, canonical_json, dumps_checked
from ..._errors import RecordError, StorageError, TooLarge
from ..._ids import check_id
from ..._journal.fold import Folded, fold
from ..._journal.history import HistoryEvent, check_after, parse_event
from ..._journal.model import Base, diff, snapshot_changes
from ..._platform import O_CLOEXEC
from ..._records import EXECUTION_TERMINAL, Execution
from ..compare_and_set import OwnWrites
from ..contract import Clock, Listing, Problem
from ..holding import HoldingStore
from .evidence import SqliteEvidence
from .memory import MemoryOnSqlite, SqliteMemory
from .read_only import read_only_directory_error, side_files_refused
from .schema import (
    DEFAULT_MAX_RECORD_BYTES,
    SCHEMA,
    SCHEMA_VERSION,
    TABLES,
    StoreNeedsMigration,
    check_layout,
    open_read_only,
    tables,
)

__all__ = ["DEFAULT_MAX_RECORD_BYTES", "SCHEMA_VERSION", "SqliteStore", "StoreNeedsMigration"]


def _remove_new(path: Path) -> None:
    # A database file this constructor created and could not make a store: not left behind.
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


class SqliteStore(HoldingStore):
    """Executions as rows of one SQLite database at ``path`` (its directory made 0700), and
    what it holds beside them on the same connection: agent memory (``memory``) and sealed
    evidence (``evidence``), to which its ``memory_*`` and ``*_evidence`` methods delegate."""

    #: The layout this store reads and writes; a migration's reader of an older one
    #: (``storage._migrate``) says which, and rewrites what it reads (``_upgrade``).
    _layout = SCHEMA_VERSION

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        clock: Clock = time.time,
        busy_timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self._clock = clock
        self.read_only = read_only
        self._lock = threading.Lock()
        self._tightened: set[str] = set()
        self._cache = OwnWrites()
        self._data_version: int | None = None
        #: The part tables this store has (a store opened read-only may predate some:
        #: those parts read as empty; a writable open adds them).
        self._part_tables = dict(TABLES)
        if read_only:
            self._db = open_read_only(self.path, busy_timeout, self._layout)
            present = tables(self._db)
            self._part_tables = {p: t for p, t in TABLES.items() if t in present}
            self._memory = SqliteMemory(self._db, self._lock, clock=clock, read_only=True)
            self._hold(clock)
            return
        if not self.path.parent.exists():
            self.path.parent.mkdir(mode=0o700, parents=True)
            os.chmod(self.path.parent, 0o700)
        # Create the file 0600 before SQLite does: it gives -wal and -shm the same mode.
        created = False
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o600))
            created = True
        # The cache holds versions this connection wrote, valid while no other connection
        # has committed: SQLite's data_version changes exactly when another one commits.
        self._db = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            # What is there is checked before anything is changed: a database that is not
            # a store, or of a newer layout, is refused as it was found.
            check_layout(self._db, self.path, creating=True, layout=self._layout)
            os.chmod(self.path, 0o600)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                check_layout(self._db, self.path, creating=True, layout=self._layout)
                for statement in SCHEMA:
                    self._db.execute(statement)
                self._db.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(self._layout),),
                )
                self._db.execute("COMMIT")
            except BaseException:  # any way out: rolled back, re-raised
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if created:
                _remove_new(self.path)
            if side_files_refused(exc, self.path):  # the file is fine, its directory is not
                raise read_only_directory_error(self.path) from None
            raise StorageError(f"{self.path} is not a usable SQLite database: {exc}") from None
        except BaseException:  # any way out: closed, re-raised
            self._db.close()
            if created:
                _remove_new(self.path)
            raise
        self._tighten_sidecars()
        self._memory = SqliteMemory(self._db, self._lock, clock=clock)
        self._hold(clock)

    def _hold(self, clock: Clock) -> None:
        """Make what this store holds on its connection: its memory and its evidence."""
        self._facts = MemoryOnSqlite(self._memory_of, read_only=self.read_only, store=self)
        self._evidence = SqliteEvidence(
            self._db, self._lock, clock=clock, read_only=self.read_only, path=self.path
        )

    def _upgrade(self, folded: Folded) -> Folded:
        """What is read, as this layout's: unchanged (a migration's reader rewrites it)."""
        return folded

    def _memory_of(self, *, write: bool) -> SqliteMemory:
        return self._memory

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards."""
        with self._lock:
            self._memory.closed = True  # its memory shares the connection
            self._db.close()

    def _tighten_sidecars(self) -> None:
        # Once per sidecar: a chmod on every commit would dirty the inode and make each
        # WAL fsync also flush the file system's journal.
        for suffix in ("-wal", "-shm"):
            if suffix in self._tightened:
                continue
            sidecar = self.path.with_name(self.path.name + suffix)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(sidecar).st_mode & 0o077:
                    os.chmod(sidecar, 0o600)
                self._tightened.add(suffix)

    # -- reading ---------------------------------------------------------------------------

    def _record_size(self, execution_id: str) -> int:
        parts = " + ".join(
            f"(SELECT coalesce(sum(length(body)), 0) FROM {table} WHERE execution_id = ?1)"
            for table in self._part_tables.values()
        )
        row = self._db.execute(
            f"SELECT length(head) + length(checkpoints) + {parts} FROM executions WHERE id = ?1",
            (execution_id,),
        ).fetchone()
        return int(row[0]) if row is not None else 0

    def _loads(self, body: Any, kind: str) -> Any:
        if type(body) not in (bytes, str):  # E7: a row that is not data is a problem, not a crash
            raise RecordError(kind, [f"(row): a {type(body).__name__}, not a stored entry"])
        if len(body) > self.max_bytes:  # X2: one row, bounded before parsing
            raise TooLarge(kind, len(body), self.max_bytes)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise RecordError(kind, [f"(row): not JSON ({exc})"]) from None

    def _read_base(self, execution_id: str) -> Base | None:
        read = self._read(execution_id)
        if read is None:
            return None
        execution, seq, next_pos, window = read
        base = Base.of(execution, seq, next_pos, window=window)
        base.size = self._record_size(check_id(execution_id))
        return base

    def _read(self, execution_id: str) -> tuple[Execution, int, dict[str, int], list[Any]] | None:
        execution_id = check_id(execution_id)
        kind = f"execution {execution_id}"
        row = self._db.execute(
            "SELECT seq, head, checkpoints FROM executions WHERE id = ?", (execution_id,)
        ).fetchone()
        if row is None:
            return None
        size = self._record_size(execution_id)
        if size > self.max_record_bytes:  # X2: nothing fetched beyond the header
            raise TooLarge(kind, size, self.max_record_bytes)
        seq, head, window = row
        folded = Folded(head=self._loads(head, kind), seq=seq)
        folded.checkpoints = self._loads(window, kind)
        if type(folded.head) is not dict or type(folded.checkpoints) is not list:
            raise RecordError(kind, ["(header): not an object and a list"])
        next_pos: dict[str, int] = {}
        for part, table in self._part_tables.items():
            items: dict[str, Any] = {}
            top = -1
            for key, pos, body in self._db.execute(
                f"SELECT key, pos, body FROM {table} WHERE execution_id = ? ORDER BY pos",
                (execution_id,),
            ):
                items[key] = self._loads(body, kind)
                top = pos
            folded.parts[part] = items
            next_pos[part] = top + 1
        return fold(self._upgrade(folded), kind=kind), seq, next_pos, folded.checkpoints

    def get(self, execution_id: str) -> Execution | None:
        """The stored execution, or None. Raises ``RecordError``/``TooLarge`` for a bad one (X2)."""
        with self._lock:
            read = self._read(execution_id)
        return read[0] if read is not None else None

    def list(self) -> Listing:
        """Every execution that reads, and a problem for each that does not (E7)."""
        with self._lock:
            ids = [row[0] for row in self._db.execute("SELECT id FROM executions ORDER BY id")]
        return self._listing(ids)

    def unfinished(self, skip: Collection[str] = ()) -> Listing:
        """``list`` of the executions whose status is not a finished one (``Unfinished``):
        finished rows are not read (L8: recovery's sweeps cost what is unfinished)."""
        marks = ", ".join("?" * len(EXECUTION_TERMINAL))
        query = f"SELECT id FROM executions WHERE status NOT IN ({marks}) ORDER BY id"
        with self._lock:
            ids = [row[0] for row in self._db.execute(query, sorted(EXECUTION_TERMINAL))]
        return self._listing(i for i in ids if i not in skip)

    def _listing(self, ids: Iterable[str]) -> Listing:
        executions: list[Execution] = []
        problems: list[Problem] = []
        for execution_id in ids:
            try:
                with self._lock:
                    read = self._read(execution_id)
            except StorageError as exc:
                problems.append(Problem(id=execution_id, error=str(exc)))
                continue
            if read is not None:
                executions.append(read[0])
        return Listing(executions=tuple(executions), problems=tuple(problems))

    def history(
        self, execution_id: str | None = None, *, after: int = 0, limit: int = 1_000
    ) -> tuple[HistoryEvent, ...]:
        """Committed history entries after global sequence ``after``, oldest first (V2)."""
        after = check_after(after)
        limit = max(1, min(int(limit), 10_000))
        with self._lock:
            if execution_id is None:
                rows = self._db.execute(
                    "SELECT seq, eseq, body FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                    (after, limit),
                ).fetchall()
            else:
                rows = self._db.execute(
                    "SELECT seq, eseq, body FROM events WHERE execution_id = ? AND seq > ? "
                    "ORDER BY seq LIMIT ?",
                    (check_id(execution_id), after, limit),
                ).fetchall()
        return tuple(
            parse_event(seq, eseq, self._loads(body, "history entry")) for seq, eseq, body in rows
        )

    # -- writing ---------------------------------------------------------------------------

    def _data_version_now(self) -> int:
        value: int = self._db.execute("PRAGMA data_version").fetchone()[0]
        return value

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                # Read under the write lock: our own commits do not change it, so it is also
                # the right baseline after COMMIT (reading it after COMMIT would miss another
                # connection's commit landing in between).
                version = self._data_version_now()
                if version != self._data_version:
                    self._cache.clear()  # someone else committed: trust nothing we remember
                yield
                self._db.execute("COMMIT")
            except BaseException:  # any way out, re-raised
                # Whatever failed, including the COMMIT itself (a failed fsync): nothing of
                # this transaction is acknowledged, and no state of it is remembered.
                self._cache.clear()
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._data_version = version
        self._tighten_sidecars()

    def _dumps(self, value: Any, what: str) -> bytes:
        data = dumps_checked(value)
        if len(data) > self.max_bytes:  # never acknowledge what could not be read back (X2)
            raise TooLarge(what, len(data), self.max_bytes)
        return data

    def _store(self, base: Base | None, execution: Execution) -> None:
        execution_id = check_id(execution.id)
        what = f"execution {execution_id}"
        changes = snapshot_changes(execution) if base is None else diff(base, execution)
        window = base.window_after(changes) if base is not None else None
        rows: list[tuple[str, Sequence[Any]]] = []
        head: bytes | None = None
        for change in changes:
            op = change[0]
            if op == "head":
                head = self._dumps(change[1], what)
            elif op == "put":
                _, part, key, pos, value = change
                rows.append(
                    (
                        f"INSERT INTO {TABLES[part]} (execution_id, key, pos, body) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT(execution_id, key) "
                        "DO UPDATE SET body = excluded.body",
                        (execution_id, key, pos, self._dumps(value, what)),
                    )
                )
            elif op == "drop":  # the oldest of the trail: one row each (storage._journal)
                for key in change[2]:
                    rows.append(
                        (
                            f"DELETE FROM {TABLES[change[1]]} WHERE execution_id = ? AND key = ?",
                            (execution_id, key),
                        )
                    )
            elif op in ("reset", "group"):
                part = change[1]
                table = TABLES[part]
                if op == "reset":
                    rows.append((f"DELETE FROM {table} WHERE execution_id = ?", (execution_id,)))
                    start, entries = 0, change[2]
                else:
                    prefix = f"{change[2]}/"
                    upper = f"{change[2]}0"  # "0" follows "/": every key of the task sorts between
                    rows.append(
                        (
                            f"DELETE FROM {table} WHERE execution_id = ? AND key >= ? AND key < ?",
                            (execution_id, prefix, upper),
                        )
                    )
                    start, entries = change[3], change[4]
                for offset, (key, value) in enumerate(entries):
                    rows.append(
                        (
                            f"INSERT INTO {table} (execution_id, key, pos, body) "
                            "VALUES (?, ?, ?, ?)",
                            (execution_id, key, start + offset, self._dumps(value, what)),
                        )
                    )
            elif op == "ckpts" and base is None:
                window = change[1]
        assert head is not None
        assert window is not None
        checkpoints = self._dumps(window, what)
        seq = base.seq + 1 if base is not None else 1
        events = self._entries_for(base, execution, changes)
        # Everything is encoded and checked before the first statement: a record that cannot
        # be stored (X2) leaves the transaction as it was for the other commits in it.
        event_rows = [(execution_id, seq, canonical_json(event)) for event in events]
        bodies = (args[-1] for _, args in rows if isinstance(args[-1], bytes))
        written = len(head) + len(checkpoints) + sum(map(len, bodies))
        size = (base.size if base is not None else 0) + written  # an upper bound
        # One savepoint per commit: a statement that fails leaves nothing of this commit in
        # the flush's transaction, and the other commits in it stand.
        self._db.execute("SAVEPOINT store")
        try:
            self._statements(base, execution, seq, head, checkpoints, rows, event_rows)
            if size > self.max_record_bytes:  # X2: measured as written, before it is kept
                size = self._refuse_past_bound(execution_id)
        except (sqlite3.IntegrityError, TooLarge) as exc:
            self._db.execute("ROLLBACK TO store")
            self._db.execute("RELEASE store")
            if isinstance(exc, TooLarge):
                raise
            raise RecordError(what, [f"(rows): {exc}"]) from None
        self._db.execute("RELEASE store")
        # The cache moves on now, so a second commit of this execution in the same flush
        # diffs against this one; a transaction that fails clears the cache (_transaction).
        if base is None:
            base = Base.of(execution, seq, window=window)
        else:
            base.advance(execution, changes)
        base.size = size
        self._cache.remember(base)

    def _refuse_past_bound(self, execution_id: str) -> int:
        """The record's exact size as written so far; TooLarge if it could not be read back."""
        size = self._record_size(execution_id)
        if size > self.max_record_bytes:
            raise TooLarge(f"execution {execution_id}", size, self.max_record_bytes)
        return size

    def _statements(
        self,
        base: Base | None,
        execution: Execution,
        seq: int,
        head: bytes,
        checkpoints: bytes,
        rows: Sequence[tuple[str, Sequence[Any]]],
        event_rows: Sequence[tuple[str, int, bytes]],
    ) -> None:
        execution_id = execution.id
        if base is None:
            self._db.execute(
                "INSERT INTO executions (id, seq, status, updated_at, head, checkpoints) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (execution_id, seq, execution.status, execution.updated_at, head, checkpoints),
            )
        else:
            self._db.execute(
                "UPDATE executions SET seq = ?, status = ?, updated_at = ?, head = ?, "
                "checkpoints = ? WHERE id = ?",
                (seq, execution.status, execution.updated_at, head, checkpoints, execution_id),
            )
        for statement, arguments in rows:
            self._db.execute(statement, arguments)
        insert = "INSERT INTO events (execution_id, eseq, body) VALUES (?, ?, ?)"
        if len(event_rows) == 1:  # the common commit adds one: a plain statement is cheaper
            self._db.execute(insert, event_rows[0])
        elif event_rows:
            self._db.executemany(insert, event_rows)

    def delete(self, execution_id: str) -> bool:
        """Delete a finished execution with every row and history entry of it; False if it
        is not stored or not finished (checked under the write lock)."""
        with self._atomic():
            base = self._load(execution_id)
            if base is None or not base.execution.terminal:
                return False
            for table in ("executions", *TABLES.values(), "events"):
                column = "id" if table == "executions" else "execution_id"
                self._db.execute(f"DELETE FROM {table} WHERE {column} = ?", (execution_id,))
            self._cache.pop(execution_id)
            return True

    # -- the compare-and-set hooks (see CompareAndSetStore) ---------------------------------

    def _atomic(self) -> contextlib.AbstractContextManager[None]:
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only")
        return self._transaction()

    def _load(self, execution_id: str) -> Base | None:
        cached = self._cache.get(check_id(execution_id))
        if cached is not None:  # valid: _transaction checked data_version at BEGIN
            return cached
        return self._read_base(execution_id)
