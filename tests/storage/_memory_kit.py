"""The memory backends the memory tests run against, and small builders.

``MEMORY_BACKENDS`` is every backend with memory; adding one is one entry in ``_OPENERS``
(a function that opens a fresh store of that kind under a test's directory and closes it;
PostgreSQL's gets a schema of its own, dropped on close). ``memory_store`` (a fixture)
gives each test one fresh store per backend; ``open_memory`` opens one where a fixture
cannot (Hypothesis examples: on PostgreSQL those share one schema per process, emptied
for each). ``tamper``, ``total_changes``, ``sqlite_memory``,
``store_files``, ``reopen`` and ``wrong_values`` reach behind a backend (damaged rows,
"reads never write", faults, file modes): they know the SQLite family and PostgreSQL.
"""

from __future__ import annotations

import atexit
import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import Fact, Scope
from mainspring.storage._seam import ForgetFact, RememberFact
from tests._postgres import (
    admin,
    drop_schema,
    fresh_schema,
    recycled_store,
    require_server,
    server_expected,
    server_url,
    with_schema,
)


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


@contextlib.contextmanager
def _postgres(path: Path) -> Iterator[Any]:
    url = require_server()  # skips (or, under CI, fails) without a server
    with recycled_store() as schema:  # an empty store, perhaps an earlier test's, emptied
        store = ms.storage.PostgresStore(with_schema(url, schema))
        try:
            yield store
        finally:
            store.close()


#: The schema this process's property tests reuse (see ``open_memory``), dropped at exit.
_examples_schema: list[str] = []
#: One entry per example that emptied it.
_examples_emptied: list[bool] = []


def _drop_examples_schema() -> None:
    # If the server went away first, the schema goes with the test database.
    with contextlib.suppress(Exception):
        drop_schema(_examples_schema[0])


@contextlib.contextmanager
def _postgres_emptied(path: Path) -> Iterator[Any]:
    url = require_server()
    if not _examples_schema:
        _examples_schema.append(fresh_schema())
        atexit.register(_drop_examples_schema)
    store = ms.storage.PostgresStore(with_schema(url, _examples_schema[0]))
    try:
        # The facts the last example left: deleted (a TRUNCATE gives the table and its
        # indexes new files and catalog rows, each time), and vacuumed now and then (the
        # server's autovacuum may be off).
        _on_server(store, "DELETE FROM memory_facts")
        _examples_emptied.append(True)
        if len(_examples_emptied) % 40 == 0:
            with admin() as conn:
                conn.execute(f'VACUUM "{store.schema}".memory_facts')
        yield store
    finally:
        store.close()


_OPENERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[Any]]] = {
    "file": _file,
    "sqlite": _sqlite,
    "postgres": _postgres,
}
MEMORY_BACKENDS = tuple(_OPENERS)


def usable_backends() -> tuple[str, ...]:
    """The backends a test that runs them all at once can open here: PostgreSQL only where
    a server answers (or CI requires one), so the others are still checked without it."""
    return tuple(kind for kind in MEMORY_BACKENDS if kind != "postgres" or server_expected())


def open_memory(
    kind: str, path: Path, *, examples: bool = False
) -> contextlib.AbstractContextManager[Any]:
    """A fresh store of ``kind`` under ``path`` (an empty directory), closed on exit.

    ``examples=True`` is for a property test's examples, which only remember, forget and
    read: on PostgreSQL each gets a new store on one schema per process, its facts deleted,
    instead of a schema of its own (creating one is most of a small example's time)."""
    if examples and kind == "postgres":
        return _postgres_emptied(path)
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


def _on_server(store: Any, sql: str, *params: Any) -> list[Any]:
    """Run ``sql`` (``?`` placeholders, unqualified names) in a PostgresStore's schema, on a
    connection of the harness's own (in a transaction of its own)."""
    with admin() as conn, conn.transaction():
        conn.execute("SELECT set_config('search_path', %s, true)", (f'"{store.schema}"',))
        cursor = conn.execute(sql.replace("?", "%s"), params)
        return cursor.fetchall() if cursor.description else []


def tamper(store: Any, sql: str, *params: Any) -> None:
    """Run ``sql`` on the store's memory tables behind the backend's back (a damaged row)."""
    if isinstance(store, ms.storage.PostgresStore):
        _on_server(store, sql, *params)
        return
    memory = sqlite_memory(store)
    with memory.lock:
        memory.db.execute(sql, params)


def total_changes(store: Any) -> object:
    """Rows the store's memory connection has changed since it opened; on PostgreSQL, where
    each row version of the facts table lies and which transaction wrote it (a write moves
    a row)."""
    if isinstance(store, ms.storage.PostgresStore):
        return _on_server(
            store,
            "SELECT count(*), string_agg(ctid::text || xmin::text, ',' ORDER BY ctid) "
            "FROM memory_facts",
        )
    changes: int = sqlite_memory(store).db.total_changes
    return changes


def wrong_values(store: Any) -> list[tuple[str, Any]]:
    """Column values no valid fact holds, as the backend can store them: of the wrong type
    where any type goes (SQLite), out of range where columns are typed (PostgreSQL)."""
    if isinstance(store, ms.storage.PostgresStore):
        return [("confidence", 2.5), ("created_at", float("nan")), ("domain", "")]
    return [("confidence", "high"), ("created_at", b"\x00"), ("domain", b"build")]


def drops_stop_words(store: Any) -> bool:
    """Whether the backend's text search leaves out stop words (PostgreSQL's ``english``
    configuration: ``and``, ``or``, ``not``, ``the``...); FTS5's tokenizer keeps them."""
    return isinstance(store, ms.storage.PostgresStore)


#: What each backend ranks a search with (``memory_ranking``).
RANKINGS = {"file": "bm25", "sqlite": "bm25", "postgres": "ts_rank"}


def ranking_of(store: Any) -> str:
    return RANKINGS["postgres" if isinstance(store, ms.storage.PostgresStore) else "sqlite"]


def reopen(store: Any, **options: Any) -> Any:
    """Another store on what ``store`` keeps (its path, or its server and schema)."""
    if isinstance(store, ms.storage.PostgresStore):
        return ms.storage.PostgresStore(with_schema(server_url(), store.schema), **options)
    return type(store)(store.path, **options)


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
    if isinstance(store, ms.storage.PostgresStore):
        return []
    if isinstance(store, ms.storage.SqliteStore):
        return sorted(store.path.parent.glob(store.path.name + "*"))
    return sorted(p for p in store.path.iterdir() if p.is_file())
