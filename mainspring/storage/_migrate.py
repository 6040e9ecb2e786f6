"""``migrate_store``: convert a store of an older layout (mainspring 0.1's, or storage v2) to
the layout this mainspring writes (storage v3), crash-safely.

The old store stays where it is, unchanged, until the new one is durable; then the two
swap places by renames. Each step is safe to crash after, and running again finishes or
restarts cleanly:

1. The new store is built beside the old one, at ``<path>.v3-migrating`` (what a crashed
   run left there is removed first: while the old store is in place, it is the truth).

   - From 0.1: every execution that reads (``storage._v1``) is created in it and read back,
     and must equal what was read, leases, plans, observations, raw agent tasks and
     checkpoints included.
   - From v2: the old store is copied whole (a FileStore's directory, memory and sealed
     evidence included; a SQLite database through SQLite's backup, under its write lock),
     and what changed in the stored shape is rewritten in the copy (``storage._v2``: states
     in one spelling, typed stop requests and approvals): each FileStore journal becomes one
     snapshot of what it folds to, its history kept; each SQLite row that holds a changed
     value is updated in one transaction. Every execution is then read back from the copy
     as v3 and must equal what the v2 store reads as, rewritten, history included.

   One that does not read is reported as a :class:`Problem` (it stays in the backup, and
   in a v2 copy as it was); one that reads back differently stops the migration, nothing
   changed.
2. It is made durable: SQLite's WAL is checkpointed into the file, the connection closed
   and the file fsynced; a FileStore fsyncs every journal it writes, and the directory.
3. The old store is renamed to ``<path>.v1-backup`` or ``<path>.v2-backup`` (by the layout
   it had; ``.2``, ``.3``... if taken: always one past the highest, so the newest backup is
   the highest), directory fsynced.
4. The new store is renamed to ``<path>``, directory fsynced.

A run that finds no store at ``<path>`` but a built one beside it and a backup (a crash
between 3 and 4) only does step 4 (a ``<path>.v2-migrating`` left by an earlier mainspring's
migrate is put in place alike: it is a v2 store, which a second run converts). A store of
the current layout is answered "already current", untouched.

An old SQLite store's WAL is checkpointed into its file before it is renamed (the same
committed data, no new transaction), rather than its ``-wal`` and ``-shm`` moved along: the
store is then one file, and one rename moves it whole. Moving the sidecars would take three
renames, and a crash between them would leave the backup without the WAL holding its last
commits, or the old WAL beside the new database, where SQLite would try to apply it. A WAL
that cannot be checkpointed, or sidecars that outlive our connection, mean another process
is using the store: refused (:class:`StoreInUse`), like a second migrate in the same
directory.

PostgreSQL is not migrated here: its schema is upgraded when a store opens it
(``storage._backends.postgres.schema.upgrade``, one transaction per version under an
advisory lock), the rewrite from v2 values included.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import orjson

from ._backends.contract import Problem, Store
from ._backends.file.frames import _fsync_directory, encode_frame, replace_file
from ._backends.file.store import FileStore, _chunks
from ._backends.postgres.schema import is_postgres_url
from ._backends.sqlite.schema import SCHEMA_VERSION
from ._backends.sqlite.store import SqliteStore
from ._codec import DEFAULT_MAX_BYTES, canonical_json, dumps_checked
from ._errors import StorageError
from ._journal.fold import Folded
from ._journal.history import HistoryEvent
from ._journal.model import snapshot_changes
from ._platform import O_CLOEXEC, fcntl
from ._records import Execution
from ._v1 import Kind, connect_existing, iter_v1_files, iter_v1_sqlite, layout
from ._v2 import RESPELLED, upgrade_event, upgrade_folded, upgrade_head, upgrade_part

__all__ = ["MigrationError", "MigrationReport", "StoreInUse", "migrate_store"]

_TEMP = f".v{SCHEMA_VERSION}-migrating"
#: What a v1 -> v2 migrate of an earlier mainspring built (a v2 store), put in place alike.
_OLD_TEMP = ".v2-migrating"
_BACKUPS = {1: ".v1-backup", 2: ".v2-backup"}
_SIDECARS = ("-wal", "-shm", "-journal")
#: The SQLite tables whose rows hold a value storage v3 spells differently, by part.
_SQLITE_PARTS = {
    "workers": "workers",
    "worker_tasks": "worker_tasks",
    "worker_trail": "worker_trail",
}


class MigrationError(StorageError):
    """The migration could not be done; the old store is where it was, or (said in the
    message) the rerun that finishes it is safe."""


class StoreInUse(MigrationError):
    """Another process uses the store (an older runtime, or another migrate): nothing
    changed."""


@attrs.frozen(kw_only=True)
class MigrationReport:
    """What :func:`migrate_store` did. ``migrated`` executions are in the current store now
    at ``new_path``; each of ``problems`` did not read and stays only in the old store kept
    at ``backup_path``. ``from_layout``: the layout the store had (1 for 0.1, 2 for storage
    v2). ``already_current``: ``new_path`` was of the current layout and nothing changed.
    For PostgreSQL, the schema was upgraded in place (no backup: each version's upgrade is
    one transaction), and ``problems`` are the executions that do not read after it."""

    new_path: Path | str  # a PostgreSQL store's: its URL, any password hidden
    kind: Kind | Literal["postgres"]
    migrated: int
    problems: tuple[Problem, ...] = ()
    backup_path: Path | None = None
    already_current: bool = False
    from_layout: int | None = None
    #: The layout the store has now.
    to_layout: int = SCHEMA_VERSION


class _V2Files(FileStore):
    """A storage v2 FileStore read as v3: what it folds is rewritten (``storage._v2``)."""

    _layout = 2

    def _upgrade(self, folded: Folded) -> Folded:
        folded.head = upgrade_folded(folded.head, folded.parts)
        return folded


class _V2Sqlite(SqliteStore):
    """A storage v2 SqliteStore read as v3: what it folds is rewritten (``storage._v2``)."""

    _layout = 2

    def _upgrade(self, folded: Folded) -> Folded:
        folded.head = upgrade_folded(folded.head, folded.parts)
        return folded


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _backups(path: Path, suffix: str) -> list[tuple[int, Path]]:
    """The backups of ``path`` named with ``suffix`` there are, numbered (the plain name is
    1), oldest first."""
    pattern = re.compile(re.escape(path.name + suffix) + r"(?:\.([0-9]{1,9}))?")
    found: list[tuple[int, Path]] = []
    with os.scandir(path.parent) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match is not None:
                found.append((int(match.group(1) or 1), path.parent / entry.name))
    return sorted(found)


def _next_backup(path: Path, version: int) -> Path:
    suffix = _BACKUPS[version]
    taken = _backups(path, suffix)
    number = taken[-1][0] + 1 if taken else 1
    return _sibling(path, suffix if number == 1 else f"{suffix}.{number}")


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


def _check_writable(path: Path) -> None:
    """Refuse, before anything is made, a store whose directory this process cannot write:
    the new store is built beside the old one, and the two swap places by renames."""
    directory = path.parent
    effective = os.access in os.supports_effective_ids
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=effective):
        raise MigrationError(
            f"{path} cannot be migrated here: its directory {directory} is read-only (the "
            "new store is built beside the old one, then the two swap places by renames): "
            "nothing changed"
        )


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
            problems.append(
                Problem(id=item.id, error=f"cannot be stored as v{SCHEMA_VERSION}: {exc}")
            )
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


def _history(store: Store, execution_id: str) -> list[HistoryEvent]:
    events: list[HistoryEvent] = []
    while True:
        after = events[-1].seq if events else 0
        page = store.history(execution_id, after=after, limit=10_000)
        events.extend(page)
        if len(page) < 10_000:
            return events


def _respelled_events(events: Iterable[HistoryEvent]) -> list[HistoryEvent]:
    """A v2 store's history as v3 stores it (``storage._v2.upgrade_event``)."""
    return [
        attrs.evolve(event, status=RESPELLED.get(event.status or "", event.status))
        if event.kind == "worker"
        else event
        for event in events
    ]


def _read_back(new: Store, expected: dict[str, tuple[Execution, list[HistoryEvent]]]) -> None:
    """Every execution of the new store must read as ``expected``, history included."""
    for execution_id, (execution, history) in expected.items():
        if new.get(execution_id) != execution or _history(new, execution_id) != history:
            raise MigrationError(
                f"execution {execution_id} does not read back from the new store as it was: "
                "the old store is left as it was"
            )


def _v2_files(path: Path, temp: Path) -> tuple[int, list[Problem]]:
    """Copy the v2 FileStore at ``path`` to ``temp`` and rewrite each journal there as one
    v3 snapshot of what it folds to, with its history (as compaction writes it)."""
    shutil.copytree(path, temp, symlinks=True)
    os.chmod(temp, 0o700)
    old = _V2Files(temp, read_only=True)
    limit = min(512 * 1024, old.max_bytes // 2)
    problems: list[Problem] = []
    expected: dict[str, tuple[Execution, list[HistoryEvent]]] = {}
    for execution_id in old._ids():
        try:
            read = old._read(execution_id, with_events=True)
        except (StorageError, OSError) as exc:  # E7: kept as it was, reported
            problems.append(Problem(id=execution_id, error=str(exc)))
            continue
        if read is None:
            continue
        history = _respelled_events(_history(old, execution_id))
        events = [_upgraded_entry(entry) for entry in read.events]
        frames: list[bytes] = []
        frame_head: dict[str, Any] = {"seq": read.seq, "snapshot": True}
        for chunk in _chunks(snapshot_changes(read.execution), events, limit):
            frames.append(encode_frame(dumps_checked({**frame_head, **chunk})))
            frame_head = {"more": True}
        replace_file(old._file(execution_id), b"".join(frames))
        expected[execution_id] = (read.execution, history)
    replace_file(temp / ".format", canonical_json({"layout": SCHEMA_VERSION}))
    _read_back(FileStore(temp, read_only=True), expected)
    _fsync_tree(temp)  # what was copied as it was (memory, evidence, counters) too
    return len(expected), problems


def _fsync_tree(root: Path) -> None:
    """Every file under ``root`` fsynced, then every directory, deepest first."""
    directories: list[Path] = []
    for here, _, files in os.walk(root):
        directories.append(Path(here))
        for name in files:
            path = Path(here) / name
            if path.is_file() and not path.is_symlink():
                with _open_fd(path, os.O_RDONLY) as fd:
                    os.fsync(fd)
    for directory in reversed(directories):
        _fsync_directory(directory)


def _upgraded_entry(entry: Any) -> Any:
    # A journal's history entry is [seq, execution seq, body]; anything else is kept as it
    # is (the strict read of the history names it).
    if type(entry) is list and len(entry) == 3:
        return [entry[0], entry[1], upgrade_event(entry[2])]
    return entry


def _rewrite(db: sqlite3.Connection, select: str, update: str, change: Any) -> None:
    """Update each row ``select`` returns (``key..., body``) whose JSON body ``change``
    rewrites; a body that is not JSON is left as it is (E7)."""
    for *key, body in db.execute(select).fetchall():
        try:
            raw = orjson.loads(body)
        except (orjson.JSONDecodeError, TypeError):
            continue
        upgraded = change(raw)
        if upgraded != raw:
            db.execute(update, (dumps_checked(upgraded), *key))


def _v2_sqlite(path: Path, temp: Path) -> tuple[int, list[Problem]]:
    """Copy the v2 SQLite store at ``path`` to ``temp`` (under its write lock) and rewrite,
    in one transaction, every row holding a value v3 spells differently."""
    old = connect_existing(path)
    try:
        try:
            old.execute("PRAGMA busy_timeout = 5000")
            old.execute("BEGIN IMMEDIATE")  # no writer commits behind our back
        except sqlite3.OperationalError as exc:
            raise StoreInUse(f"{path} is in use by another process ({exc})") from None
        os.close(os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o600))
        # Read through a second connection: the first holds the write lock, and a backup
        # through it would wait for its own lock.
        source = connect_existing(path)
        copy = sqlite3.connect(temp, isolation_level=None)
        try:
            source.backup(copy)
        finally:
            copy.close()
            source.close()
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
    reader = _V2Sqlite(temp)
    try:
        listing = reader.list()
        expected = {
            execution.id: (execution, _respelled_events(_history(reader, execution.id)))
            for execution in listing.executions
        }
    finally:
        reader.close()
    db = sqlite3.connect(temp, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        _rewrite(
            db,
            "SELECT id, head FROM executions",
            "UPDATE executions SET head = ? WHERE id = ?",
            upgrade_head,
        )
        for part, table in _SQLITE_PARTS.items():
            _rewrite(
                db,
                f"SELECT execution_id, key, body FROM {table}",
                f"UPDATE {table} SET body = ? WHERE execution_id = ? AND key = ?",
                lambda raw, part=part: upgrade_part(part, raw),
            )
        _rewrite(
            db,
            "SELECT seq, body FROM events",
            "UPDATE events SET body = ? WHERE seq = ?",
            upgrade_event,
        )
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    new = SqliteStore(temp)
    try:
        _read_back(new, expected)
        new._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        new.close()
    if _exists(_sibling(temp, "-wal")):
        raise MigrationError(f"{temp} kept its WAL after closing: run migrate again")
    with _open_fd(temp, os.O_RDONLY) as fd:
        os.fsync(fd)
    return len(expected), list(listing.problems)


def _count(path: Path, kind: Kind) -> int:
    if kind == "files":
        return len(FileStore(path).list().executions)
    store = SqliteStore(path)
    try:
        return len(store.list().executions)
    finally:
        store.close()


def _problems_of(path: Path, kind: Kind, max_bytes: int) -> list[Problem]:
    """What does not read in the old store at ``path`` (a backup), by its layout."""
    version = layout(path)[1]
    if version == 1:
        return _problems_of_v1(path, kind, max_bytes)
    if kind == "files":
        return list(_V2Files(path, read_only=True).list().problems)
    store = _V2Sqlite(path, read_only=True)
    try:
        return list(store.list().problems)
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
    at ``temp`` (complete: the old one is renamed only once it is durable) and a backup
    (an earlier mainspring's migrate: at ``<path>.v2-migrating``, a v2 store)."""
    built, expected = temp, SCHEMA_VERSION
    if not _exists(temp) and _exists(_sibling(path, _OLD_TEMP)):
        built, expected = _sibling(path, _OLD_TEMP), 2
    if not _exists(built):
        raise StorageError(f"no store at {path}")
    backups = [found for suffix in _BACKUPS.values() for found in _backups(path, suffix)]
    if not backups:
        raise MigrationError(
            f"{path} is missing and {built} holds a migration without a backup of the old "
            "store beside it: nothing changed (move the store you want back to the path)"
        )
    kind, version = layout(built)
    if version != expected:
        raise MigrationError(f"{built} is not a finished v{expected} store: nothing changed")
    # The backup renamed last is the one this run made (a rename changes its ctime).
    backup = max(backups, key=lambda found: os.stat(found[1]).st_ctime_ns)[1]
    _check_writable(path)
    os.rename(built, path)
    _fsync_directory(path.parent)
    return MigrationReport(
        new_path=path,
        kind=kind,
        migrated=_count(path, kind) if version == SCHEMA_VERSION else 0,
        problems=tuple(_problems_of(backup, kind, max_bytes)),
        backup_path=backup,
        from_layout=layout(backup)[1],
    )


def _migrate_postgres(url: str) -> MigrationReport:
    """Upgrade the PostgreSQL store at ``url`` as opening it writable does: one transaction
    per schema version, under the schema's advisory lock (``storage._backends.postgres.schema``)."""
    from ._backends.postgres.store import PostgresStore

    current = PostgresStore(url, read_only=True)  # StorageError if there is no store
    current.close()
    if not current._v2_values:
        return MigrationReport(
            new_path=current.address.shown,
            kind="postgres",
            migrated=0,
            already_current=True,
            from_layout=SCHEMA_VERSION,
        )
    store = PostgresStore(url)
    try:
        listing = store.list()
    finally:
        store.close()
    return MigrationReport(
        new_path=store.address.shown,
        kind="postgres",
        migrated=len(listing.executions),
        problems=listing.problems,
        from_layout=2,
    )


def migrate_store(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> MigrationReport:
    """Convert the store at ``path`` (a SQLite file, a FileStore directory, or a PostgreSQL
    URL: see :func:`_migrate_postgres`) of an older
    layout (0.1's, or storage v2) to the current one in place, keeping the old one as
    ``<path>.v1-backup`` or ``<path>.v2-backup``; see the module docstring for the steps
    and what a crash at each leaves. A store of the current layout is left alone
    (``already_current``). Raises :class:`StoreInUse` if a process uses the store,
    :class:`MigrationError` if it cannot be migrated (its directory read-only included),
    StorageError if there is no store.
    Blocking: call it through a worker thread from an event loop.
    """
    if is_postgres_url(path):
        return _migrate_postgres(str(path))
    path = Path(path)
    if os.path.islink(path):
        raise MigrationError(f"{path} is a symlink: migrate the store it points to")
    temp = _sibling(path, _TEMP)
    directory = path.parent
    with _one_migrate_at_a_time(directory):
        if not _exists(path):
            return _finish(path, temp, max_bytes)
        kind, version = layout(path)
        if version == SCHEMA_VERSION:
            return MigrationReport(
                new_path=path, kind=kind, migrated=0, already_current=True, from_layout=version
            )
        _check_writable(path)
        _discard(temp)
        if kind == "files":
            # Older writers take this lock for every write: none writes while it is held.
            with (
                _open_fd(path / ".lock", os.O_RDWR | os.O_CREAT) as lock_fd,
                _flocked(
                    lock_fd,
                    f"{path} is in use by another process (a writer holds its lock): stop "
                    "it and run migrate again",
                ),
            ):
                if version == 1:
                    migrated, problems = _build_from_files(path, temp, max_bytes)
                else:
                    migrated, problems = _v2_files(path, temp)
                _fsync_directory(directory)  # the new store's own name, before any rename
                backup = _next_backup(path, version)
                os.rename(path, backup)
        else:
            if version == 1:
                migrated, problems = _build_from_sqlite(path, temp, max_bytes)
            else:
                migrated, problems = _v2_sqlite(path, temp)
            _fsync_directory(directory)
            backup = _next_backup(path, version)
            os.rename(path, backup)
        _fsync_directory(directory)
        os.rename(temp, path)
        _fsync_directory(directory)
    return MigrationReport(
        new_path=path,
        kind=kind,
        migrated=migrated,
        problems=tuple(problems),
        backup_path=backup,
        from_layout=version,
    )
