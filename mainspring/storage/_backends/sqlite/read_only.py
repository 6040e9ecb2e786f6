"""Opening a SQLite database only to read it, also where its directory is read-only.

A database in WAL mode is read through its ``-wal`` and ``-shm`` files, which a reader
creates when they are missing. SQLite's documentation (https://www.sqlite.org/wal.html,
"Read-Only Databases") says a read-only WAL database opens if those files exist, or can be
created, or the database is opened as immutable. So a reader in a directory it cannot write
(a read-only mount, another user's directory) first opens the file ``mode=ro``; when that
fails because the side files cannot be made, and no ``-wal`` file holds commits (none, or
an empty one: everything committed is then in the database file), it opens it
``mode=ro&immutable=1``, which reads the file as it is and needs no side file. A ``-wal``
holding commits cannot be read without its ``-shm``: that is refused, saying why, never read
as if the commits were not there. Neither open writes anything (E7, U6). An immutable
connection takes no locks: it reads the file as it was when no log held commits, which is
what a directory no writer can create a log in holds.

A writer cannot work there at all (it must create the side files): ``side_files_refused``
tells its caller so, to name the directory rather than call the file unreadable.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ..._errors import StorageError

__all__ = ["connect_read_only", "read_only_directory_error", "side_files_refused"]

#: SQLite's answers when a side file cannot be created or opened: EACCES in the directory
#: (``SQLITE_READONLY_DIRECTORY``), EPERM or EROFS (``SQLITE_CANTOPEN``), a ``-shm`` there
#: that cannot be written (``SQLITE_READONLY_CANTINIT``).
_REFUSALS = ("SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN", "SQLITE_READONLY_CANTINIT")


def _writable(directory: Path) -> bool:
    effective = os.access in os.supports_effective_ids
    return os.access(directory, os.W_OK | os.X_OK, effective_ids=effective)


def side_files_refused(exc: sqlite3.Error, path: Path) -> bool:
    """Whether ``exc``, raised using the database at ``path``, means SQLite could not make
    its side files: an answer of that kind, and a directory this process cannot write."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    return name.startswith(_REFUSALS) and not _writable(path.parent)


def read_only_directory_error(path: Path) -> StorageError:
    """What a writer says when the directory of the database at ``path`` is read-only."""
    return StorageError(
        f"{path} cannot be written here: its directory {path.parent} is read-only, and "
        f"SQLite keeps {path.name}-wal and {path.name}-shm beside the database (commands "
        "that only read the store still work)"
    )


def _connect(uri: str, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(
        uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
    )


def connect_read_only(path: Path, *, timeout: float) -> sqlite3.Connection:
    """A connection that cannot write to the existing database at ``path``, which has
    already read its schema. Raises ``sqlite3.Error`` as SQLite does (a damaged file, a
    lock held too long), and StorageError when the directory is read-only and a ``-wal``
    holding commits cannot be read there."""
    uri = path.resolve().as_uri()
    db = _connect(f"{uri}?mode=ro", timeout)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        db.close()
        if not side_files_refused(exc, path):
            raise
    else:
        return db
    wal = path.with_name(path.name + "-wal")
    try:
        pending = os.stat(wal).st_size
    except FileNotFoundError:
        pending = 0
    if pending:
        raise StorageError(
            f"{path} cannot be read here: its directory {path.parent} is read-only, and its "
            f"write-ahead log {wal.name} holds commits not yet in the database file, which "
            f"SQLite reads only through a {path.name}-shm file it cannot create there. Open "
            "the store once where its directory is writable (the last connection to close "
            "moves the log into the file), or copy the database with its -wal file to a "
            "writable place"
        )
    db = _connect(f"{uri}?mode=ro&immutable=1", timeout)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        db.close()
        raise
    return db
