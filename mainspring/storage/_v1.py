"""Reading stores written by mainspring 0.1, and telling layouts apart, for ``mainspring
migrate``: it never writes.

The 0.1 layouts: a SqliteStore is one table ``executions(id TEXT PRIMARY KEY, body BLOB NOT
NULL)`` whose body is ``encode(Execution)``; a FileStore is a directory of ``<id>.json``
files with the same body, plus a ``.lock`` file. Every record is read bounded (X2: one over
``max_bytes`` is refused before it is fetched or parsed), its id is checked (X1) and must be
the id its body holds, and its body is decoded strictly by the one converter. A record that
does not read becomes a :class:`Problem`: reported, never guessed at or dropped (E7).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import orjson

from ._backends.contract import Listing, Problem
from ._backends.file.frames import read_bounded
from ._backends.sqlite.read_only import connect_read_only, side_files_refused
from ._backends.sqlite.schema import SCHEMA_VERSION
from ._codec import DEFAULT_MAX_BYTES, structure
from ._errors import RecordError, StorageError, TooLarge
from ._ids import check_id
from ._platform import O_BINARY, O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK
from ._records import Execution
from ._v2 import upgrade_head

__all__ = [
    "Kind",
    "connect_existing",
    "files_layout",
    "iter_v1_files",
    "iter_v1_sqlite",
    "layout",
    "read_v1",
    "sqlite_layout",
]

Kind = Literal["sqlite", "files"]

_SUFFIX = ".json"


def _shown(value: object) -> str:
    """A record's id as a problem shows it: as it is if it is a string, clipped."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 300 else text[:297] + "..."


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


#: The layouts ``mainspring migrate`` knows: 0.1's, storage v2, and the one written now.
_KNOWN = (1, 2, SCHEMA_VERSION)


def sqlite_layout(db: sqlite3.Connection, path: Path) -> int:
    """1, 2 or 3: which layout the open database ``db`` at ``path`` holds; StorageError if
    it is no mainspring store, or a layout this mainspring does not know."""
    tables = _tables(db)
    if "meta" in tables:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        known = {str(version): version for version in _KNOWN[1:]}
        if row is None or row[0] not in known:
            raise StorageError(f"{path} has storage layout {row and row[0]!r}, not 1, 2 or 3")
        return known[row[0]]
    if "executions" in tables:
        columns = [row[1] for row in db.execute("PRAGMA table_info(executions)")]
        if columns == ["id", "body"]:
            return 1
    raise StorageError(f"{path} is a SQLite database, but not a mainspring store")


def files_layout(path: Path) -> int:
    """1, 2 or 3: which layout the FileStore directory ``path`` holds (``.format`` names 2
    or 3; a directory with ``.lock`` or ``*.json`` files and no ``.format`` is 0.1)."""
    marker = path / ".format"
    if marker.exists():
        try:
            value = orjson.loads(marker.read_bytes()[:4096]).get("layout")
        except (orjson.JSONDecodeError, AttributeError):
            value = None
        if type(value) is not int or value not in _KNOWN[1:]:
            raise StorageError(f"{path} has storage layout {value!r}, not 1, 2 or 3")
        return value
    with os.scandir(path) as entries:
        if any(e.name == ".lock" or e.name.endswith(_SUFFIX) for e in entries):
            return 1
    raise StorageError(f"{path} is a directory, but not a mainspring store")


def layout(path: Path) -> tuple[Kind, int]:
    """Which backend (``"sqlite"`` or ``"files"``) and layout (1, 2 or 3) the store at ``path``
    is, changing nothing. StorageError if there is no store there."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise StorageError(f"no store at {path}") from None
    if stat.S_ISDIR(info.st_mode):
        return "files", files_layout(path)
    db = connect_existing(path)
    try:
        try:
            return "sqlite", sqlite_layout(db, path)
        except sqlite3.Error as exc:
            if not side_files_refused(exc, path):
                raise
        # A read-only directory: SQLite cannot make the side files this connection reads
        # a WAL database through; read it as a reader does there (sqlite.read_only).
        db.close()
        db = connect_read_only(path, timeout=30.0)
        return "sqlite", sqlite_layout(db, path)
    except sqlite3.Error as exc:
        raise StorageError(f"{path} is not a readable SQLite database: {exc}") from None
    finally:
        db.close()


def connect_existing(path: Path) -> sqlite3.Connection:
    """A connection to the database at ``path``, which must exist (nothing is created).

    Read-write, though a look (``layout``) writes nothing through it: a read-only
    connection to a WAL database leaves empty ``-wal`` and ``-shm`` files behind, while the
    last read-write connection to close removes them, so a look changes nothing on disk.
    (Where the directory is read-only neither can make them: ``layout`` then reads through
    ``sqlite.read_only``.)
    """
    try:
        return sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=rw",
            uri=True,
            isolation_level=None,
            timeout=30.0,
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise StorageError(f"{path} is not a readable SQLite database: {exc}") from None


def _decode(name: str, body: bytes, max_bytes: int) -> Execution:
    kind = f"execution {name}"
    if len(body) > max_bytes:
        raise TooLarge(kind, len(body), max_bytes)
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RecordError(kind, [f"(top level): not JSON ({exc})"]) from None
    # Stop requests and approvals were strings then too: read as storage v3 holds them.
    execution = structure(upgrade_head(raw), Execution, kind=kind)
    if execution.id != name:  # stored under one id, claiming another: not ours to pick
        raise RecordError(kind, [f"id: the record says {execution.id!r}"])
    return execution


def iter_v1_sqlite(
    db: sqlite3.Connection, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Iterator[Execution | Problem]:
    """Each row of a 0.1 SQLite store, in id order: its execution, or why it does not read.

    A body over ``max_bytes`` is never fetched (X2); rows are streamed, not loaded at once.
    """
    rows = db.execute(
        "SELECT id, length(body), CASE WHEN length(body) <= ? THEN body END "
        "FROM executions ORDER BY id",
        (max_bytes,),
    )
    for name, size, body in rows:
        try:
            check_id(name)  # X1
            if size is None or size > max_bytes or body is None:
                raise TooLarge(f"execution {name}", size or 0, max_bytes)
            if not isinstance(body, bytes):
                raise RecordError(f"execution {name}", ["(row): the body is not a blob"])
            yield _decode(name, body, max_bytes)
        except StorageError as exc:
            yield Problem(id=_shown(name), error=str(exc))


def _read_file(path: Path, name: str, max_bytes: int) -> bytes:
    kind = f"execution {name}"
    if not O_NOFOLLOW and path.is_symlink():
        raise RecordError(kind, ["(file): a symlink, not a regular file"])
    try:
        # O_NONBLOCK: a FIFO planted under the name must not hang the reader.
        fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_BINARY)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a symlink
            raise RecordError(kind, ["(file): a symlink, not a regular file"]) from None
        raise
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise RecordError(kind, ["(file): not a regular file"])
        if info.st_size > max_bytes:  # X2: bounded before reading
            raise TooLarge(kind, info.st_size, max_bytes)
        data = read_bounded(handle, info.st_size, max_bytes)
    if len(data) > max_bytes:  # it grew between fstat and read
        raise TooLarge(kind, len(data), max_bytes)
    return data


def iter_v1_files(
    path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Iterator[Execution | Problem]:
    """Each ``<id>.json`` of a 0.1 FileStore directory, in id order: its execution, or why
    it does not read. Hidden files (``.lock``, ``.tmp-*`` left by a crash) are not records."""
    with os.scandir(path) as entries:
        names = sorted(
            e.name[: -len(_SUFFIX)]
            for e in entries
            if e.name.endswith(_SUFFIX) and not e.name.startswith(".")
        )
    for name in names:
        try:
            check_id(name)  # X1: before the name is used as a path again
            yield _decode(name, _read_file(path / f"{name}{_SUFFIX}", name, max_bytes), max_bytes)
        except (StorageError, OSError) as exc:
            yield Problem(id=_shown(name), error=str(exc))


def read_v1(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Listing:
    """Every execution of the 0.1 store at ``path`` that reads, and a problem for each that
    does not. Opens SQLite read-only; StorageError if ``path`` is not a 0.1 store."""
    path = Path(path)
    kind, version = layout(path)
    if version != 1:
        raise StorageError(f"{path} is not a mainspring 0.1 store (layout {version})")
    if kind == "files":
        items = list(iter_v1_files(path, max_bytes=max_bytes))
    else:
        try:
            db = connect_read_only(path, timeout=30.0)
        except sqlite3.Error as exc:
            raise StorageError(f"{path} is not a readable SQLite database: {exc}") from None
        try:
            items = list(iter_v1_sqlite(db, max_bytes=max_bytes))
        except sqlite3.Error as exc:
            raise StorageError(f"{path} cannot be read: {exc}") from None
        finally:
            db.close()
    return Listing(
        executions=tuple(item for item in items if isinstance(item, Execution)),
        problems=tuple(item for item in items if isinstance(item, Problem)),
    )
