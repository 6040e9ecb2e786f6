"""SqliteStore's layout: its tables (a header row per execution, one table per part, the
history's ``events``, agent memory's and sealed evidence's tables), the layout version it
records in ``meta``, and how a database is checked before it is opened or changed: a 0.1
store needs ``mainspring migrate``, a newer layout or another application's database is
refused as it was found. FileStore records the same layout version (``.format``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..._errors import StorageError
from .memory import MEMORY_SCHEMA
from .read_only import connect_read_only

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TABLES",
    "StoreNeedsMigration",
    "check_layout",
    "open_read_only",
    "tables",
]

#: The layout this library writes; a newer one is refused, an older one must be migrated
#: (``mainspring migrate``). 3: states in one spelling, typed stop requests and approvals.
SCHEMA_VERSION = 3
#: An execution read back whole (all its rows) is refused past this (X2); one row past
#: ``max_bytes``.
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024 * 1024

#: Part -> table. Fixed names: nothing user-given ever becomes SQL.
TABLES = {
    "steps": "plan_steps",
    "obs": "observations",
    "done": "completed_steps",
    "tasks": "agent_tasks",
    "inner_obs": "inner_observations",
    "inner_done": "inner_completed",
    "workers": "workers",
    "worker_tasks": "worker_tasks",
    "worker_trail": "worker_trail",
}

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS executions (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
    "status TEXT NOT NULL, updated_at REAL NOT NULL, head BLOB NOT NULL, "
    "checkpoints BLOB NOT NULL)",
    *(
        f"CREATE TABLE IF NOT EXISTS {table} (execution_id TEXT NOT NULL, key TEXT NOT NULL, "
        f"pos INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (execution_id, key)) "
        f"WITHOUT ROWID"
        for table in TABLES.values()
    ),
    *(
        f"CREATE INDEX IF NOT EXISTS {table}_order ON {table} (execution_id, pos)"
        for table in TABLES.values()
    ),
    "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "execution_id TEXT NOT NULL, eseq INTEGER NOT NULL, body BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS events_by_execution ON events (execution_id, seq)",
    *MEMORY_SCHEMA,  # agent memory (``memory``): added to older stores on open
    # Sealed evidence (storage._evidence), and the worker tables above: added on open too.
    "CREATE TABLE IF NOT EXISTS evidence (digest TEXT PRIMARY KEY, body BLOB NOT NULL, "
    "created_at REAL NOT NULL)",
]


class StoreNeedsMigration(StorageError):
    """A store written by an older layout: it is read only after ``mainspring migrate``."""


def tables(db: sqlite3.Connection) -> set[str]:
    """The names of the tables in ``db``."""
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def check_layout(
    db: sqlite3.Connection, path: Path, *, creating: bool, layout: int = SCHEMA_VERSION
) -> None:
    """Refuse an older store (it needs ``mainspring migrate``) and a newer layout; create ours
    in an empty database. ``layout``: the one expected (a migration reads an older one)."""
    found = tables(db)
    if "meta" not in found:
        if "executions" in found:
            raise StoreNeedsMigration(
                f"{path} is a mainspring 0.1 store; convert it with "
                f"`mainspring migrate --store {path}` (the old store is kept)"
            )
        if not creating or found:  # another application's database is not taken over
            raise StorageError(f"{path} is a SQLite database, but not a mainspring store")
        return
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = row[0] if row is not None else None
    if version == str(layout):
        return
    if version in {str(older) for older in range(2, layout)}:
        raise StoreNeedsMigration(
            f"{path} has storage layout {version}; convert it to layout {layout} with "
            f"`mainspring migrate --store {path}` (the old store is kept)"
        )
    raise StorageError(
        f"{path} has storage layout {version!r}; this mainspring reads layout "
        f"{layout}: upgrade mainspring to open it"
    )


def open_read_only(
    path: Path, busy_timeout: float, layout: int = SCHEMA_VERSION
) -> sqlite3.Connection:
    """A connection that cannot write, to a database that must already be a store: nothing
    is created, converted or chmodded (a command that only reads must change nothing), also
    in a read-only directory (``read_only.connect_read_only``)."""
    if not path.is_file():
        raise StorageError(f"no store at {path}")
    try:
        db = connect_read_only(path, timeout=busy_timeout)
    except sqlite3.Error as exc:
        raise StorageError(f"{path} is not a readable SQLite database: {exc}") from None
    try:
        check_layout(db, path, creating=False, layout=layout)
    except sqlite3.Error as exc:
        db.close()
        raise StorageError(f"{path} is not a readable SQLite database: {exc}") from None
    except BaseException:
        db.close()
        raise
    return db
