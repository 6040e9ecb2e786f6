"""Where stores live and which backend a name names: the default home, the one rule that
picks FileStore, SqliteStore or PostgresStore (shared by ``open_runtime`` and the command),
and opening the store a runtime writes to."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ._backends.contract import Store
from ._backends.file.store import FileStore
from ._backends.postgres.schema import is_postgres_url
from ._backends.sqlite.store import SqliteStore
from ._codec import make_hooks

__all__ = ["default_home", "default_store", "open_store", "store_kind"]

#: A path that does not exist yet names a SQLite file when it ends in one of these.
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def default_home() -> Path:
    """Where the default store lives: ``$MAINSPRING_HOME``, else the XDG state directory."""
    home = os.environ.get("MAINSPRING_HOME")
    if home:
        return Path(home)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "mainspring"


def default_store() -> str | Path:
    """The store used when none is named: ``$MAINSPRING_STORE`` (a path or a
    ``postgresql://`` URL), else ``mainspring.sqlite3`` under :func:`default_home`."""
    named = os.environ.get("MAINSPRING_STORE")
    if named:
        return named if is_postgres_url(named) else Path(named)
    return default_home() / "mainspring.sqlite3"


def store_kind(path: str | os.PathLike[str]) -> Literal["files", "sqlite", "postgres"]:
    """Which backend the store at ``path`` is: ``"postgres"`` (a ``postgresql://`` URL: a
    :class:`PostgresStore`), ``"files"`` (a :class:`FileStore` directory) or ``"sqlite"`` (a
    :class:`SqliteStore` file). The one rule, for the runtime and the command alike.

    What is there decides: an existing directory is a FileStore, any other existing file is
    SQLite. A path that does not exist yet (or cannot be looked at) is named by its suffix:
    ``.db``, ``.sqlite`` or ``.sqlite3`` is SQLite, anything else a FileStore directory.

    The runtime used to go by the suffix alone and the command by "is it a directory" alone.
    They gave different answers only where the runtime then failed: an existing directory
    with a SQLite suffix (the runtime tried SQLite: ``IsADirectoryError``) and an existing
    file without one (it tried a FileStore: ``FileExistsError``). Both now open what is
    there, as the command always did; every other path is named as before.
    """
    if is_postgres_url(path):
        return "postgres"
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, unreadable, or a name the system refuses
        return "sqlite" if Path(path).suffix in SQLITE_SUFFIXES else "files"
    return "files" if stat.S_ISDIR(mode) else "sqlite"


def open_store(store: Store | str | os.PathLike[str] | None) -> tuple[Store, Callable[[], None]]:
    """A backend for ``store``: a backend as is; a ``postgresql://`` URL or a path as
    :func:`store_kind` names it (created if it does not exist yet); None the default
    (:func:`default_store`). Returns the store and how to close it.

    The records' converter hooks are made here if they are not yet (they are made on first
    use, not at import): ``open_runtime`` opens its store off the event loop, so a run's
    first commit or read on the loop does not generate them."""
    make_hooks()
    if store is not None and not isinstance(store, str | os.PathLike):
        return store, lambda: None
    named = store if store is not None else default_store()
    if is_postgres_url(named):
        from ._backends.postgres.store import (
            PostgresStore,
        )  # psycopg is an extra: imported when named

        assert isinstance(named, str)
        postgres = PostgresStore(named)
        return postgres, postgres.close
    path = Path(named)
    if store_kind(path) == "sqlite":
        sqlite = SqliteStore(path)
        return sqlite, sqlite.close
    files = FileStore(path)
    return files, files.close
