"""``doctor``'s check of the SQLite files a store keeps, below the records: SQLite's own
``PRAGMA quick_check``, read-only, on a SQLite store and on a FileStore's memory database.

Invariant U3: a damaged database is a problem ``doctor`` reports (exit 1, naming the file),
also when it is too damaged to open, never "all well" and never a traceback. Records that
parse say nothing about pages no read touched (a history or index page overwritten)."""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

from ..storage._seam import (
    MEMORY_FILE,
    StorageError,
    connect_read_only,
    is_postgres_url,
    store_kind,
)
from ._codes import EXIT_FAILED, EXIT_NO_STORE
from ._output import Out, clamp, fail
from ._store import shown

#: At most this many of SQLite's lines per file (quick_check stops there), each cut to
#: ``_LINE`` characters: a badly damaged file says a lot.
_MOST_LINES = 10
_LINE = 200
#: How long the check waits for a writer's lock (seconds) before it says it could not check.
_BUSY_TIMEOUT = 5.0


def sqlite_files(store: str) -> list[Path]:
    """The SQLite databases the store at ``store`` keeps (none for PostgreSQL)."""
    if is_postgres_url(store):
        return []
    path = Path(store)
    try:
        if store_kind(path) == "files":
            memory = path / MEMORY_FILE
            return [memory] if memory.is_file() else []
        return [path] if path.is_file() else []
    except OSError:
        return []


#: SQLite's result codes that mean the file itself is damaged (extended codes such as
#: ``SQLITE_CORRUPT_INDEX`` start with these). Any other error (a file or its ``-wal`` that
#: cannot be opened on a read-only mount, a permission, a lock, an I/O error) says nothing
#: about the file's pages: it was not checked, which is not the same as damaged.
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def _damage(exc: sqlite3.Error) -> bool:
    return str(getattr(exc, "sqlite_errorname", "")).startswith(_DAMAGED)


def quick_check(path: Path) -> str | None:
    """None if SQLite finds the database at ``path`` sound, else what it says is wrong (at
    most ``_MOST_LINES`` lines, one line of text). Opened read-only: nothing is changed.
    Raises ``sqlite3.Error`` when the check could not be made (a database another process
    holds locked, one that cannot be opened here), StorageError when a read-only directory
    keeps it from reading the file's write-ahead log: neither is damage (U3)."""
    try:  # also in a read-only directory, where SQLite cannot make -wal and -shm
        db = connect_read_only(path, timeout=_BUSY_TIMEOUT)
    except sqlite3.Error as exc:  # its first read, of the schema, meets the damage
        if _damage(exc):
            return str(exc)
        raise
    try:
        # The bound is a constant of ours, not input: PRAGMA takes no bound parameters.
        rows = db.execute(f"PRAGMA quick_check({_MOST_LINES})").fetchmany(_MOST_LINES)
    except sqlite3.Error as exc:  # "database disk image is malformed", "not a database"
        if _damage(exc):
            return str(exc)
        raise
    finally:
        db.close()
    lines = [str(row[0]) for row in rows]
    if lines == ["ok"]:
        return None
    return "; ".join(clamp(line, _LINE) for line in lines) or "no answer from quick_check"


def integrity_findings(store: str, out: Out) -> list[dict[str, str]]:
    """A ``corrupt`` finding for each of the store's SQLite files that fails quick_check
    (U3); a file that stays locked is a warning, not a finding: it was not checked."""
    findings = []
    for path in sqlite_files(store):
        try:
            problem = quick_check(path)
        except (sqlite3.Error, StorageError) as exc:  # a lock, a log it cannot read here
            out.warn(f"{path}: not checked for damage: {exc}")
            continue
        if problem is not None:
            findings.append(
                {"id": str(path), "problem": "corrupt", "detail": f"SQLite finds: {problem}"}
            )
    return findings


def report_unusable(args: argparse.Namespace, out: Out, error: str) -> int:
    """``doctor`` on a store it cannot open or read: exit 1 with what is wrong (U3) when
    the store is there and damaged; exit 5 when there is none (nothing there, a server that
    does not answer)."""
    store: str = args.store_path
    findings = integrity_findings(store, out)
    if not findings and (is_postgres_url(store) or not Path(store).is_file()):
        return fail(error, EXIT_NO_STORE, as_json=out.as_json)
    findings.append({"id": shown(store), "problem": "unreadable-store", "detail": error})
    if out.as_json:
        out.data({"ok": False, "executions": None, "findings": findings, "store": shown(store)})
    else:
        out.line(f"the store could not be read, {len(findings)} findings")
        for finding in findings:
            out.line(f"  {finding['problem']:<20} {finding['id']}: {finding['detail']}")
    return EXIT_FAILED
