"""The memory backends the memory tests run against, and small builders.

``MEMORY_BACKENDS`` is every backend with memory; adding one is one entry in ``_OPENERS``
(a function that opens a fresh store of that kind under a test's directory and closes it).
``memory_store`` (a fixture) gives each test one fresh store per backend; ``open_memory``
opens one where a fixture cannot (Hypothesis state machines). ``tamper``,
``total_changes``, ``sqlite_memory`` and ``store_files`` reach behind a backend (damaged rows,
"reads never write", faults, file modes): they know the SQLite family; another backend adds
its own branch there.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import Fact, ForgetFact, RememberFact, Scope


@contextlib.contextmanager
def _file(path: Path) -> Iterator[Any]:
    store = ms.storage.FileStore(path / "store")
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def _sqlite(path: Path) -> Iterator[Any]:
    store = ms.storage.SqliteStore(path / "store.db")
    try:
        yield store
    finally:
        store.close()


_OPENERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[Any]]] = {
    "file": _file,
    "sqlite": _sqlite,
}
MEMORY_BACKENDS = tuple(_OPENERS)


def open_memory(kind: str, path: Path) -> contextlib.AbstractContextManager[Any]:
    """A fresh store of ``kind`` under ``path`` (an empty directory), closed on exit."""
    return _OPENERS[kind](path)


@pytest.fixture(params=MEMORY_BACKENDS)
def memory_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A fresh store with memory, once per backend."""
    with open_memory(request.param, tmp_path) as store:
        yield store


def fact(fact_id: str, text: str = "a fact", **fields: Any) -> Fact:
    """A fact with test defaults: user scope, created at 1.0."""
    fields.setdefault("scope", Scope.USER)
    fields.setdefault("created_at", 1.0)
    return Fact(id=fact_id, text=text, **fields)


def remember(store: Any, *facts: Fact) -> tuple[Any, ...]:
    """Apply a RememberFact per fact as one batch; every answer must be a Fact."""
    answers: tuple[Any, ...] = store.memory_apply([RememberFact(f) for f in facts])
    assert all(isinstance(answer, Fact) for answer in answers), answers
    return answers


def forget(store: Any, fact_id: str) -> bool:
    (answer,) = store.memory_apply([ForgetFact(fact_id)])
    assert isinstance(answer, bool), answer
    return answer


def sqlite_memory(store: Any) -> Any:
    """The ``SqliteMemory`` behind a store of the SQLite family."""
    if isinstance(store, ms.storage.SqliteStore):
        return store._memory
    return store._memory.get(write=True)  # FileStore: its sidecar, created if need be


def tamper(store: Any, sql: str, *params: Any) -> None:
    """Run ``sql`` on the store's memory tables behind the backend's back (a damaged row)."""
    memory = sqlite_memory(store)
    with memory.lock:
        memory.db.execute(sql, params)


def total_changes(store: Any) -> int:
    """Rows the store's memory connection has changed since it opened."""
    changes: int = sqlite_memory(store).db.total_changes
    return changes


class FailingConnection:
    """Stands in for a memory connection; the chosen statement fails with an I/O error."""

    def __init__(self, real: Any, statement: str) -> None:
        self.real = real
        self.statement = statement

    def _check(self, sql: str) -> None:
        if sql.startswith(self.statement):
            raise sqlite3.OperationalError("disk I/O error")

    def execute(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self.real.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self.real.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def store_files(store: Any) -> list[Path]:
    """The files a store keeps (none for a server)."""
    if isinstance(store, ms.storage.SqliteStore):
        return sorted(store.path.parent.glob(store.path.name + "*"))
    return sorted(p for p in store.path.iterdir() if p.is_file())
