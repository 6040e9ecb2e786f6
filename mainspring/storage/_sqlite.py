"""SqliteStore: one row per execution in a WAL database, ``synchronous=FULL``.

Every decide-then-write runs in ``BEGIN IMMEDIATE``, which takes SQLite's write lock up front,
so compare-and-set is atomic across connections and processes. The database and its ``-wal``
and ``-shm`` files are 0600. A connection is used by one thread at a time (a lock guards it),
since callers on an event loop reach it through worker threads.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ._backend import Clock, CompareAndSetStore, Listing, OwnWrites, Problem
from ._codec import DEFAULT_MAX_BYTES, decode, encode
from ._errors import StorageError, TooLarge
from ._ids import check_id
from ._platform import O_CLOEXEC
from ._records import Execution

__all__ = ["SqliteStore"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS executions (id TEXT PRIMARY KEY, body BLOB NOT NULL)"


def _open_read_only(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """A connection that cannot write, to a database that must already be a store: nothing
    is created, converted or chmodded (a command that only reads must change nothing)."""
    if not path.is_file():
        raise StorageError(f"no store at {path}")
    try:
        db = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro",
            uri=True,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'executions'"
        ).fetchone()
    except sqlite3.Error as exc:
        raise StorageError(f"{path} is not a readable SQLite database: {exc}") from None
    if found is None:
        db.close()
        raise StorageError(f"{path} is a SQLite database, but not a mainspring store")
    return db


class SqliteStore(CompareAndSetStore):
    """Executions as rows of one SQLite database at ``path`` (its directory made 0700)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Clock = time.time,
        busy_timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._clock = clock
        self.read_only = read_only
        self._lock = threading.Lock()
        self._tightened: set[str] = set()
        self._cache = OwnWrites()
        self._data_version: int | None = None
        if read_only:
            self._db = _open_read_only(self.path, busy_timeout)
            return
        if not self.path.parent.exists():
            self.path.parent.mkdir(mode=0o700, parents=True)
            os.chmod(self.path.parent, 0o700)
        # Create the file 0600 before SQLite does: it gives -wal and -shm the same mode.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | O_CLOEXEC, 0o600))
        os.chmod(self.path, 0o600)
        # The cache holds versions this connection wrote, valid while no other connection
        # has committed: SQLite's data_version changes exactly when another one commits.
        self._db = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)
        self._tighten_sidecars()

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards."""
        with self._lock:
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

    def _decode_row(self, execution_id: str, size: int, body: bytes | None) -> Execution:
        if size > self.max_bytes or body is None:  # X2: the body is not fetched when too big
            raise TooLarge(f"execution {execution_id}", size, self.max_bytes)
        return decode(
            bytes(body), Execution, kind=f"execution {execution_id}", max_bytes=self.max_bytes
        )

    def _read(self, execution_id: str, *, cached_ok: bool = False) -> Execution | None:
        if cached_ok:  # inside a transaction that checked data_version at BEGIN
            cached = self._cache.get(execution_id)
            if cached is not None:
                return cached
        row = self._db.execute(
            "SELECT length(body), CASE WHEN length(body) <= ? THEN body END "
            "FROM executions WHERE id = ?",
            (self.max_bytes, check_id(execution_id)),
        ).fetchone()
        if row is None:
            return None
        return self._decode_row(execution_id, row[0], row[1])

    def get(self, execution_id: str) -> Execution | None:
        """The stored execution, or None. Raises ``RecordError``/``TooLarge`` for a bad row (X2)."""
        with self._lock:
            return self._read(execution_id)

    def list(self) -> Listing:
        """Every execution that reads, and a problem for each row that does not (E7)."""
        executions: list[Execution] = []
        problems: list[Problem] = []
        with self._lock:
            rows = self._db.execute(
                "SELECT id, length(body), CASE WHEN length(body) <= ? THEN body END "
                "FROM executions ORDER BY id",
                (self.max_bytes,),
            ).fetchall()
        for execution_id, size, body in rows:
            try:
                executions.append(self._decode_row(execution_id, size, body))
            except StorageError as exc:
                problems.append(Problem(id=execution_id, error=str(exc)))
        return Listing(executions=tuple(executions), problems=tuple(problems))

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
            except BaseException:
                # Whatever failed, including the COMMIT itself (a failed fsync): nothing of
                # this transaction is acknowledged, and no state of it is remembered.
                self._cache.clear()
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._data_version = version
        self._tighten_sidecars()

    def _write(self, execution: Execution) -> None:
        data = encode(execution)
        if len(data) > self.max_bytes:  # never acknowledge what could not be read back (X2)
            raise TooLarge(f"execution {execution.id}", len(data), self.max_bytes)
        self._db.execute(
            "INSERT INTO executions (id, body) VALUES (?, ?) "
            "ON CONFLICT(id) DO UPDATE SET body = excluded.body",
            (check_id(execution.id), data),
        )
        self._cache.remember(execution)

    # -- the compare-and-set hooks (see CompareAndSetStore) ---------------------------------

    def _atomic(self) -> contextlib.AbstractContextManager[None]:
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only")
        return self._transaction()

    def _read_for_update(self, execution_id: str) -> Execution | None:
        return self._read(execution_id, cached_ok=True)
