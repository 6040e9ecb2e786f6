"""FileStore's agent memory: ``MemoryFile``, the sidecar SQLite database that holds it
(``memory.sqlite3``), opened on first use; the facts in it are SQLite memory
(``sqlite.memory.SqliteMemory``), served through ``sqlite.memory.MemoryOnSqlite`` as on a
SqliteStore.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from ..._errors import StorageError
from ..._platform import O_CLOEXEC
from ..sqlite.memory import SqliteMemory
from ..sqlite.read_only import connect_read_only, read_only_directory_error, side_files_refused

__all__ = ["MEMORY_FILE", "MemoryFile"]

#: FileStore's sidecar database, in the store's directory.
MEMORY_FILE = "memory.sqlite3"
#: The sidecar's layout (``PRAGMA user_version``): another one is refused.
_SIDECAR_LAYOUT = 1


class MemoryFile:
    """FileStore's sidecar database ``memory.sqlite3``: opened on first use (0600,
    ``synchronous=FULL``), created only by a write, and made WAL (its layout marked if it is
    empty) only by the first write: a read changes nothing in it. Read-only, or absent for a
    read, it is opened read-only or not at all (reads then answer empty)."""

    def __init__(
        self, path: Path, *, clock: Callable[[], float], read_only: bool, busy_timeout: float = 30.0
    ) -> None:
        self.path = path
        self.clock = clock
        self.read_only = read_only
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()  # guards opening and closing
        self._memory: SqliteMemory | None = None
        self._prepared = False
        self._closed = False

    def get(self, *, write: bool) -> SqliteMemory | None:
        with self._lock:
            if self._closed:  # as SqliteStore's: a closed store never opens it again
                raise StorageError(f"{self.path} was closed with its store")
            if self._memory is None:
                exists = self.path.is_file()
                if not exists and not write:
                    return None  # a read creates nothing
                db = self._open(create=not exists)
                self._memory = SqliteMemory(
                    db, threading.Lock(), clock=self.clock, read_only=self.read_only
                )
            if write and not self._prepared and not self.read_only:
                self._prepare(self._memory)
                for suffix in ("", "-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        if os.stat(f"{self.path}{suffix}").st_mode & 0o077:
                            os.chmod(f"{self.path}{suffix}", 0o600)
                self._prepared = True
            return self._memory

    def _prepare(self, memory: SqliteMemory) -> None:
        """Before the first write (never on a read, which changes nothing): WAL, and the
        layout marked on a database still empty (new, or left empty by a crash before its
        first write)."""
        with memory.lock:
            try:
                memory.db.execute("PRAGMA journal_mode=WAL")
                if memory.db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None:
                    memory.db.execute(f"PRAGMA user_version = {_SIDECAR_LAYOUT}")
            except sqlite3.Error as exc:
                raise OSError(f"{self.path} could not be prepared for writing: {exc}") from exc

    def _open(self, *, create: bool) -> sqlite3.Connection:
        if self.read_only:  # also in a read-only directory (sqlite.read_only)
            try:
                db = connect_read_only(self.path, timeout=self.busy_timeout)
            except sqlite3.Error as exc:
                raise StorageError(
                    f"{self.path} is not a readable SQLite database: {exc}"
                ) from None
            try:
                self._check_layout(db)
            except sqlite3.Error as exc:
                db.close()
                raise StorageError(
                    f"{self.path} is not a readable SQLite database: {exc}"
                ) from None
            return db
        if create:  # 0600 before SQLite opens it: its -wal and -shm get the same mode
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o600))
        db = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._check_layout(db)
            db.execute("PRAGMA synchronous=FULL")  # this connection's: nothing is written
        except sqlite3.Error as exc:
            db.close()
            if side_files_refused(exc, self.path):  # the file is fine, its directory is not
                raise read_only_directory_error(self.path) from None
            raise StorageError(f"{self.path} is not a usable SQLite database: {exc}") from None
        except BaseException:  # any way out: closed, re-raised
            db.close()
            raise
        return db

    def _check_layout(self, db: sqlite3.Connection) -> None:
        layout = db.execute("PRAGMA user_version").fetchone()[0]
        if layout not in (0, _SIDECAR_LAYOUT):
            db.close()
            raise StorageError(
                f"{self.path} has memory layout {layout!r}; this mainspring reads layout "
                f"{_SIDECAR_LAYOUT}: upgrade mainspring to open it"
            )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._memory is not None:
                self._memory.close()
                self._memory = None
