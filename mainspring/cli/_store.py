"""Finding and opening the store a command works on, and reading one execution from it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from ..storage import (
    Execution,
    FileStore,
    InvalidId,
    PostgresStore,
    SqliteStore,
    StorageError,
    Store,
)
from ..storage._seam import check_id, default_store, is_postgres_url, redact_url, store_kind
from ._codes import EXIT_FAILED, EXIT_NO_STORE, EXIT_UNKNOWN, EXIT_USAGE, CliError


def store_path(given: str | None) -> str:
    """``--store PATH|URL`` if given, else ``$MAINSPRING_STORE``, else the default store
    under ``default_home()`` (:func:`mainspring.storage._seam.default_store`)."""
    if given:
        return given
    return str(default_store())


def shown(store: str) -> str:
    """How a store is named on screen: a URL's password never is (``***``)."""
    return redact_url(store) if is_postgres_url(store) else store


def _open_postgres(url: str, *, write: bool) -> tuple[Store, Callable[[], None]]:
    try:
        # Read-only first, as for a file: it proves a store is there, creating nothing (a
        # writable open makes the schema and its tables where none are).
        store = PostgresStore(url, read_only=True)
        if write:
            store.close()
            store = PostgresStore(url)
    except (StorageError, ValueError) as exc:
        raise CliError(f"cannot use the store at {shown(url)}: {exc}", EXIT_NO_STORE) from None
    return store, store.close


def open_store(path: Path | str, *, write: bool) -> tuple[Store, Callable[[], None]]:
    """The store at ``path`` (or the ``postgresql://`` URL), which must already be one: a
    command never creates, converts or chmods anything by accident, and a read opens it
    read-only. Which backend it is, is decided as the runtime decides it
    (:func:`mainspring.storage._seam.store_kind`)."""
    if is_postgres_url(path):
        assert isinstance(path, str)
        return _open_postgres(path, write=write)
    path = Path(path)
    if not path.exists():
        raise CliError(
            f"no store at {path} (give --store PATH, or set MAINSPRING_HOME)", EXIT_NO_STORE
        )
    try:
        if store_kind(path) == "files":
            files = FileStore(path, read_only=True)  # proves it is a store, changing nothing
            if write:
                files.close()
                files = FileStore(path)
            return files, files.close  # closes its memory database, if it opened it
        probe = SqliteStore(path, read_only=True)
        if write:
            probe.close()
            probe = SqliteStore(path)
    except (StorageError, OSError, sqlite3.Error) as exc:
        raise CliError(f"cannot use the store at {path}: {exc}", EXIT_NO_STORE) from None
    return probe, probe.close


def check_task_id(task_id: str) -> None:
    """Refuse a task id that is not an id (X1) before anything opens the store."""
    try:
        check_id(task_id)
    except InvalidId:
        raise CliError(f"{task_id!r} is not a valid task id", EXIT_USAGE) from None


def check_execution_id(execution_id: str) -> None:
    """Refuse a malformed execution id (X1) as a usage error, before anything is opened."""
    try:
        check_id(execution_id)
    except InvalidId:
        raise CliError(f"{execution_id!r} is not a valid execution id", EXIT_USAGE) from None


def get_execution(store: Store, execution_id: str) -> Execution:
    """The execution ``execution_id``: an invalid id is a usage error, a missing one unknown."""
    try:
        check_id(execution_id)
        execution = store.get(execution_id)
    except InvalidId:
        raise CliError(f"{execution_id!r} is not a valid execution id", EXIT_USAGE) from None
    except (StorageError, OSError, sqlite3.Error) as exc:
        raise CliError(f"execution {execution_id} cannot be read: {exc}", EXIT_FAILED) from None
    if execution is None:
        raise CliError(f"no execution {execution_id} in this store", EXIT_UNKNOWN)
    return execution
