"""``migrate_store``: convert a store written by mainspring 0.1 to storage v2, crash-safely.

The old store stays where it is, unchanged, until the new one is durable; then the two
swap places by renames. Each step is safe to crash after, and running again finishes or
restarts cleanly:

1. The v2 store is built beside the old one, at ``<path>.v2-migrating`` (what a crashed
   run left there is removed first: while the old store is in place, it is the truth).
   Every execution that reads (``storage._v1``) is created in it and read back, and must
   equal what was read, leases, plans, observations, raw agent tasks and checkpoints
   included. One that does not read is reported as a :class:`Problem` (it stays in the
   backup); one that reads back differently stops the migration, nothing changed.
2. It is made durable: SQLite's WAL is checkpointed into the file, the connection closed
   and the file fsynced; a FileStore fsyncs every journal it writes, and the directory.
3. The old store is renamed to ``<path>.v1-backup`` (``.v1-backup.2``, ``.3``... if taken:
   always one past the highest, so the newest backup is the highest), directory fsynced.
4. The new store is renamed to ``<path>``, directory fsynced.

A run that finds no store at ``<path>`` but a built one beside it and a backup (a crash
between 3 and 4) only does step 4. A v2 store is answered "already current", untouched.

A 0.1 SQLite store's WAL is checkpointed into its file before it is renamed (the same
committed data, no new transaction), rather than its ``-wal`` and ``-shm`` moved along: the
store is then one file, and one rename moves it whole. Moving the sidecars would take three
renames, and a crash between them would leave the backup without the WAL holding its last
commits, or the old WAL beside the new database, where SQLite would try to apply it. A WAL
that cannot be checkpointed, or sidecars that outlive our connection, mean a 0.1 process is
using the store: refused (:class:`StoreInUse`), like a second migrate in the same directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs

from ._backends.contract import Problem, Store
from ._backends.file.frames import _fsync_directory
from ._backends.file.store import FileStore
from ._backends.sqlite.store import SqliteStore
from ._codec import DEFAULT_MAX_BYTES
from ._errors import StorageError
from ._platform import O_CLOEXEC, fcntl
from ._records import Execution
from ._v1 import Kind, connect_existing, iter_v1_files, iter_v1_sqlite, layout

__all__ = ["MigrationError", "MigrationReport", "StoreInUse", "migrate_store"]

_TEMP = ".v2-migrating"
_BACKUP = ".v1-backup"
_SIDECARS = ("-wal", "-shm", "-journal")


class MigrationError(StorageError):
    """The migration could not be done; the old store is where it was, or (said in the
    message) the rerun that finishes it is safe."""


class StoreInUse(MigrationError):
    """Another process uses the store (a 0.1 runtime, or another migrate): nothing changed."""


@attrs.frozen(kw_only=True)
class MigrationReport:
    """What :func:`migrate_store` did. ``migrated`` executions are in the v2 store now at
    ``new_path``; each of ``problems`` did not read and stays only in the 0.1 store kept at
    ``backup_path``. ``already_current``: ``new_path`` was v2 already and nothing changed."""

    new_path: Path
    kind: Kind
    migrated: int
    problems: tuple[Problem, ...] = ()
    backup_path: Path | None = None
    already_current: bool = False


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _backups(path: Path) -> list[tuple[int, Path]]:
    """The backups of ``path`` there are, numbered (the plain name is 1), oldest first."""
    pattern = re.compile(re.escape(path.name + _BACKUP) + r"(?:\.([0-9]{1,9}))?")
    found: list[tuple[int, Path]] = []
    with os.scandir(path.parent) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match is not None:
                found.append((int(match.group(1) or 1), path.parent / entry.name))
    return sorted(found)


def _next_backup(path: Path) -> Path:
    taken = _backups(path)
    number = taken[-1][0] + 1 if taken else 1
    return _sibling(path, _BACKUP if number == 1 else f"{_BACKUP}.{number}")


def _discard(temp: Path) -> None:
    """Remove what a crashed run left at ``temp``: never in place, so never the truth."""
    if os.path.isdir(temp) and not os.path.islink(temp):
        shutil.rmtree(temp)
    elif _exists(temp):
        os.unlink(temp)
    for suffix in _SIDECARS:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_sibling(temp, suffix))


@contextlib.contextmanager
def _flocked(fd: int, refusal: str) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover - Windows: no flock, nothing to exclude with it
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise StoreInUse(refusal) from None
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def _one_migrate_at_a_time(directory: Path) -> Iterator[None]:
    """An exclusive flock on the directory the store lives in, held for the whole run."""
    o_directory = getattr(os, "O_DIRECTORY", 0)
    if fcntl is None or not o_directory:  # pragma: no cover - Windows: nothing to lock with
        yield
        return
    refusal = f"another `mainspring migrate` runs in {directory}: nothing changed"
    with _open_fd(directory, os.O_RDONLY | o_directory) as fd, _flocked(fd, refusal):
        yield


@contextlib.contextmanager
def _open_fd(path: Path, flags: int) -> Iterator[int]:
    fd = os.open(path, flags | O_CLOEXEC, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)


def _build(items: Iterable[Execution | Problem], store: Store) -> tuple[int, list[Problem]]:
    """Create each readable execution in ``store`` exactly; the problems, reported."""
    migrated = 0
    problems: list[Problem] = []
    for item in items:
        if isinstance(item, Problem):
            problems.append(item)
            continue
        try:
            created = store.create(item)
        except (StorageError, ValueError) as exc:  # refused before anything was written
            problems.append(Problem(id=item.id, error=f"cannot be stored as v2: {exc}"))
            continue
        if not created:
            problems.append(Problem(id=item.id, error="a second record with the same id"))
            continue
        if store.get(item.id) != item:
            raise MigrationError(
                f"execution {item.id} does not read back from the new store as it was: "
                "the old store is left as it was"
            )
        migrated += 1
    return migrated, problems


def _build_from_files(path: Path, temp: Path, max_bytes: int) -> tuple[int, list[Problem]]:
    store = FileStore(temp)
    migrated, problems = _build(iter_v1_files(path, max_bytes=max_bytes), store)
    _fsync_directory(temp)  # every journal was fsynced by the store; their names are now
    return migrated, problems


def _check_sealed(path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        if _exists(_sibling(path, suffix)):
            raise StoreInUse(
                f"{path} is in use by another process (its {suffix} file stays open): stop "
                "every mainspring 0.1 process using it and run migrate again"
            )


def _build_from_sqlite(path: Path, temp: Path, max_bytes: int) -> tuple[int, list[Problem]]:
    old = connect_existing(path)
    try:
        try:
            old.execute("PRAGMA busy_timeout = 5000")
            # The write lock, held while reading: no 0.1 writer commits behind our back.
            old.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreInUse(f"{path} is in use by another process ({exc})") from None
        store = SqliteStore(temp)
        try:
            # Durability comes at the end (checkpoint, close, fsync), not per execution.
            store._db.execute("PRAGMA synchronous=OFF")
            migrated, problems = _build(iter_v1_sqlite(old, max_bytes=max_bytes), store)
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            store.close()
        old.execute("ROLLBACK")  # nothing was written
        busy = old.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            raise StoreInUse(f"{path} is in use by another process (its WAL is being read)")
    except sqlite3.Error as exc:
        raise MigrationError(f"{path} cannot be read: {exc}") from None
    finally:
        old.close()  # the last connection to close removes -wal and -shm
    try:
        _check_sealed(path)
    except StoreInUse:
        _discard(temp)
        raise
    if _exists(_sibling(temp, "-wal")):
        raise MigrationError(f"{temp} kept its WAL after closing: run migrate again")
    with _open_fd(temp, os.O_RDONLY) as fd:
        os.fsync(fd)
    return migrated, problems


def _count_v2(path: Path, kind: Kind) -> int:
    if kind == "files":
        return len(FileStore(path).list().executions)
    store = SqliteStore(path)
    try:
        return len(store.list().executions)
    finally:
        store.close()


def _problems_of_v1(path: Path, kind: Kind, max_bytes: int) -> list[Problem]:
    if kind == "files":
        items = list(iter_v1_files(path, max_bytes=max_bytes))
    else:
        db = connect_existing(path)
        try:
            items = list(iter_v1_sqlite(db, max_bytes=max_bytes))
        finally:
            db.close()
    return [item for item in items if isinstance(item, Problem)]


def _finish(path: Path, temp: Path, max_bytes: int) -> MigrationReport:
    """No store at ``path``: a run that crashed between its two renames left the new store
    at ``temp`` (complete: the old one is renamed only once it is durable) and a backup."""
    if not _exists(temp):
        raise StorageError(f"no store at {path}")
    backups = _backups(path)
    if not backups:
        raise MigrationError(
            f"{path} is missing and {temp} holds a migration without a backup of the old "
            "store beside it: nothing changed (move the store you want back to the path)"
        )
    kind, version = layout(temp)
    if version != 2:
        raise MigrationError(f"{temp} is not a finished v2 store: nothing changed")
    backup = backups[-1][1]
    os.rename(temp, path)
    _fsync_directory(path.parent)
    return MigrationReport(
        new_path=path,
        kind=kind,
        migrated=_count_v2(path, kind),
        problems=tuple(_problems_of_v1(backup, kind, max_bytes)),
        backup_path=backup,
    )


def migrate_store(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> MigrationReport:
    """Convert the 0.1 store at ``path`` (a SQLite file or a FileStore directory) to storage
    v2 in place, keeping the old one as ``<path>.v1-backup``; see the module docstring for
    the steps and what a crash at each leaves. A v2 store is left alone
    (``already_current``). Raises :class:`StoreInUse` if a process uses the store,
    :class:`MigrationError` if it cannot be migrated, StorageError if there is no store.
    Blocking: call it through a worker thread from an event loop.
    """
    path = Path(path)
    if os.path.islink(path):
        raise MigrationError(f"{path} is a symlink: migrate the store it points to")
    temp = _sibling(path, _TEMP)
    directory = path.parent
    with _one_migrate_at_a_time(directory):
        if not _exists(path):
            return _finish(path, temp, max_bytes)
        kind, version = layout(path)
        if version == 2:
            return MigrationReport(new_path=path, kind=kind, migrated=0, already_current=True)
        _discard(temp)
        if kind == "files":
            # 0.1 writers take this lock for every write: none writes while it is held.
            with (
                _open_fd(path / ".lock", os.O_RDWR | os.O_CREAT) as lock_fd,
                _flocked(
                    lock_fd,
                    f"{path} is in use by another process (a 0.1 writer "
                    "holds its lock): stop it and run migrate again",
                ),
            ):
                migrated, problems = _build_from_files(path, temp, max_bytes)
                _fsync_directory(directory)  # the new store's own name, before any rename
                backup = _next_backup(path)
                os.rename(path, backup)
        else:
            migrated, problems = _build_from_sqlite(path, temp, max_bytes)
            _fsync_directory(directory)
            backup = _next_backup(path)
            os.rename(path, backup)
        _fsync_directory(directory)
        os.rename(temp, path)
        _fsync_directory(directory)
    return MigrationReport(
        new_path=path, kind=kind, migrated=migrated, problems=tuple(problems), backup_path=backup
    )
