"""Agent memory on SQLite: in ``SqliteStore``'s database, or in ``FileStore``'s sidecar
``memory.sqlite3`` (the rules are ``storage._memory``'s).

Each fact is a row of ``memory_facts`` (every field a column; ``rid``, an integer key, is
what the full-text index refers to). ``memory_fts`` is an FTS5 index of their text (porter
stemming over unicode61, diacritics removed) with external content, kept in step by
triggers inside the transaction that changes a row. A search ranks by ``bm25``; each term
becomes a quoted FTS5 string, the strings are OR-ed and the expression is passed as a
parameter, so no query text is ever read as FTS syntax. Filters and the first link of the
hidden-by-chain rule (the direct superseder, joined) run in SQL; a candidate whose direct
superseder has expired walks the rest of its chain (``hidden``), and candidates are fetched
page by page until ``limit`` visible ones are found or the matches run out.

``memory_apply`` is one ``BEGIN IMMEDIATE`` transaction. A write of several statements (a
forget, a fact in a conflict group) runs under a savepoint; a fact without a group is one
statement, which SQLite undoes by itself if it refuses it: either way a write that cannot
be applied answers its error and leaves nothing behind. Any other SQLite failure rolls the
whole batch back and raises ``OSError`` (the writer then stops, as after a failed commit).
Rows are read back through bounded columns and validated into ``Fact``; a row that
does not validate is skipped and counted (``memory_dropped``), never coerced, never removed
(E7, E8). Reads run in one read transaction and never write.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..._errors import StorageError
from ..._ids import check_id
from ..._memory import (
    MAX_FACT_TEXT,
    MAX_NAME,
    MAX_QUERY_TERMS,
    Fact,
    FactFilter,
    ForgetFact,
    MemoryWrite,
    RememberFact,
    Scope,
    TextHit,
    check_after,
    check_limit,
    check_terms,
    check_where,
    check_write,
    hidden,
)

__all__ = ["MEMORY_SCHEMA", "MemoryOnSqlite", "SqliteMemory"]

MEMORY_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS memory_facts (rid INTEGER PRIMARY KEY, "
    "id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, scope TEXT NOT NULL, domain TEXT NOT NULL, "
    "confidence REAL NOT NULL, valid_until REAL, conflict_group TEXT, superseded_by TEXT, "
    "organization TEXT, created_at REAL NOT NULL, execution_id TEXT, task_id TEXT, "
    "step_id TEXT)",
    "CREATE INDEX IF NOT EXISTS memory_facts_group ON memory_facts (conflict_group)",
    "CREATE INDEX IF NOT EXISTS memory_facts_superseded ON memory_facts (superseded_by)",
    "CREATE INDEX IF NOT EXISTS memory_facts_created ON memory_facts (created_at, id)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(text, content='memory_facts', "
    "content_rowid='rid', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS memory_facts_added AFTER INSERT ON memory_facts BEGIN "
    "INSERT INTO memory_fts (rowid, text) VALUES (new.rid, new.text); END",
    "CREATE TRIGGER IF NOT EXISTS memory_facts_removed AFTER DELETE ON memory_facts BEGIN "
    "INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.rid, old.text); "
    "END",
    "CREATE TRIGGER IF NOT EXISTS memory_facts_retexted AFTER UPDATE OF text ON memory_facts "
    "BEGIN INSERT INTO memory_fts (memory_fts, rowid, text) "
    "VALUES ('delete', old.rid, old.text); "
    "INSERT INTO memory_fts (rowid, text) VALUES (new.rid, new.text); END",
)

_ID = 257  # one past the longest id: a longer value fails validation, never truncates into it
#: Column -> how many characters of it are read (None: a number). Bounded on read (X2).
_COLUMNS: dict[str, int | None] = {
    "id": _ID,
    "text": MAX_FACT_TEXT + 1,
    "scope": 32,
    "domain": MAX_NAME + 1,
    "confidence": None,
    "valid_until": None,
    "conflict_group": MAX_NAME + 1,
    "superseded_by": _ID,
    "organization": _ID,
    "created_at": None,
    "execution_id": _ID,
    "task_id": _ID,
    "step_id": _ID,
}


def _read_column(name: str, bound: int | None) -> str:
    # A value of the wrong type reads as X'' (bytes), which no field accepts: the row is
    # dropped, never coerced (SQLite would turn 5 into '5' or '5' into 5.0). Text is read
    # as its bytes (at most 4 per character of the bound: a longer value is too long anyway)
    # and decoded by ``_fact``: text that is not UTF-8 (another tool's write, a damaged page)
    # drops its row instead of failing every read of memory.
    column = f"f.{name}"
    if bound is None:
        return (
            f"CASE WHEN typeof({column}) IN ('integer', 'real', 'null') THEN {column} ELSE X'' END"
        )
    return (
        f"CASE typeof({column}) WHEN 'text' THEN substr(CAST({column} AS BLOB), 1, {4 * bound}) "
        f"WHEN 'null' THEN NULL ELSE X'' END"
    )


_SELECT = ", ".join(_read_column(name, bound) for name, bound in _COLUMNS.items())
_WIDTH = len(_COLUMNS)
#: A fact whose id is stored already is not inserted (``rowcount`` 0): the stored one answers.
_INSERT = (
    f"INSERT INTO memory_facts ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * _WIDTH)}) "
    "ON CONFLICT (id) DO NOTHING"
)


def _match(terms: Sequence[str]) -> str | None:
    """The FTS5 expression: each term a string (``"`` doubled, so nothing in it is syntax),
    OR-ed. None when no term is left."""
    kept: list[str] = []
    for term in terms:
        if type(term) is not str or not term.strip() or "\0" in term or term in kept:
            continue
        kept.append(term[:MAX_FACT_TEXT])
        if len(kept) == MAX_QUERY_TERMS:
            break
    if not kept:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in kept)


class SqliteMemory:
    """Memory on one SQLite connection, used under ``lock`` by one thread at a time."""

    def __init__(
        self,
        db: sqlite3.Connection,
        lock: threading.Lock,
        *,
        clock: Callable[[], float] = time.time,
        read_only: bool = False,
    ) -> None:
        self.db = db
        self.lock = lock
        self.clock = clock
        self.read_only = read_only
        #: Rows skipped because they did not read back as a fact (E7), since opening.
        self.dropped = 0
        self.closed = False
        self._ready = False

    # -- reading ---------------------------------------------------------------------------

    def _has_tables(self) -> bool:
        if not self._ready:  # a store older than memory has none; a writer adds them later
            row = self.db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memory_facts'"
            ).fetchone()
            self._ready = row is not None
        return self._ready

    @contextlib.contextmanager
    def _reading(self) -> Iterator[bool]:
        """One read transaction (pages of one search see one state); yields whether the
        tables exist. A database error is a StorageError: reads never break the writer."""
        with self.lock:
            try:
                self.db.execute("BEGIN")
                try:
                    yield self._has_tables()
                finally:
                    if self.db.in_transaction:
                        self.db.execute("COMMIT")  # nothing was written: ends the snapshot
            except sqlite3.Error as exc:
                raise StorageError(f"memory could not be read: {exc}") from None

    def _fact(self, row: Sequence[Any]) -> Fact | None:
        values = dict(zip(_COLUMNS, row[:_WIDTH], strict=True))
        try:
            for name, bound in _COLUMNS.items():
                if bound is not None and type(values[name]) is bytes:
                    # Strict: b"" (the wrong type's mark, or empty text) is "", which no
                    # text field accepts either.
                    values[name] = values[name].decode("utf-8")
            values["scope"] = Scope(values["scope"]) if type(values["scope"]) is str else None
            return Fact(**values)
        except (TypeError, ValueError):
            self.dropped += 1
            return None

    def _get(self, fact_id: str) -> Fact | None:
        row = self.db.execute(
            f"SELECT {_SELECT} FROM memory_facts f WHERE f.id = ?", (fact_id,)
        ).fetchone()
        return self._fact(row) if row is not None else None

    def _stored(self, fact_id: str) -> bool:
        """Whether a row is stored under ``fact_id``, read back or not."""
        row = self.db.execute("SELECT 1 FROM memory_facts WHERE id = ?", (fact_id,))
        return row.fetchone() is not None

    def get(self, fact_id: str) -> Fact | None:
        fact_id = check_id(fact_id)  # X1
        with self._reading() as ready:
            return self._get(fact_id) if ready else None

    def count(self) -> int:
        with self._reading() as ready:
            if not ready:
                return 0
            value: int = self.db.execute("SELECT count(*) FROM memory_facts").fetchone()[0]
            return value

    def _where(self, where: FactFilter, now: float) -> tuple[str, list[Any]]:
        """The filter as SQL over ``f`` (and ``s``, the direct superseder), parameterised."""
        scopes = [scope.value for scope in where.scope_list()]
        clauses = [
            f"f.scope IN ({', '.join('?' * len(scopes))})",
            "(f.scope != 'organization' OR f.organization = ?)",
        ]
        params: list[Any] = [*scopes, where.organization]
        if where.domain is not None:
            clauses.append("f.domain = ?")
            params.append(where.domain)
        if where.execution_id is not None:
            clauses.append("f.execution_id = ?")
            params.append(where.execution_id)
        if not where.include_hidden:
            clauses += [
                "f.confidence >= ?",
                "(f.valid_until IS NULL OR f.valid_until > ?)",
                # Hidden by the direct superseder while it is live; when it has expired the
                # rest of the chain is walked in Python (rare).
                "(s.id IS NULL OR (s.valid_until IS NOT NULL AND s.valid_until <= ?))",
            ]
            params += [where.min_confidence, now, now]
        return " AND ".join(clauses), params

    def _visible(self, rows: Sequence[Sequence[Any]], now: float, walk: bool) -> Iterator[Any]:
        """``(fact, row)`` for each row that reads back and is not hidden further down its chain."""
        for row in rows:
            fact = self._fact(row)
            if fact is None:
                continue
            if walk and row[_WIDTH] and hidden(fact, self._get, now, stored=self._stored):
                continue
            yield fact, row

    def listing(
        self, where: FactFilter, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[Fact]:
        where = check_where(where)
        limit = check_limit(limit)
        after = check_after(after)
        now = where.now if where.now is not None else self.clock()
        sql, params = self._where(where, now)
        select = (
            f"SELECT {_SELECT}, s.id IS NOT NULL, f.rid FROM memory_facts f "
            "LEFT JOIN memory_facts s ON s.id = f.superseded_by WHERE "
        )
        order = " ORDER BY f.created_at, f.id LIMIT ?"
        # The next page starts past the last row fetched, read back or not: its key is
        # taken from the table by rid (the values fetched are bounded, so may be cut).
        query, args = select + sql + order, tuple(params)
        if after is not None:
            query = select + sql + " AND (f.created_at, f.id) > (?, ?)" + order
            args = (*params, *after)
        onwards = (
            f"{select}{sql} AND (f.created_at, f.id) > "
            f"(SELECT created_at, id FROM memory_facts WHERE rid = ?){order}"
        )
        found: list[Fact] = []
        page = limit + 16
        with self._reading() as ready:
            while ready and len(found) < limit:
                rows = self.db.execute(query, (*args, page)).fetchall()
                for fact, _ in self._visible(rows, now, not where.include_hidden):
                    found.append(fact)
                    if len(found) == limit:
                        break
                if len(rows) < page:
                    break
                query, args = onwards, (*params, rows[-1][_WIDTH + 1])
                page = min(page * 2, 10_000)
        return found

    def search(self, terms: Sequence[str], where: FactFilter, *, limit: int) -> list[TextHit]:
        where = check_where(where)
        limit = check_limit(limit)
        expression = _match(check_terms(terms))
        if expression is None:
            return []
        now = where.now if where.now is not None else self.clock()
        sql, params = self._where(_shown(where), now)
        # Matches ranked and filtered first, the bounded columns read for the page kept
        # only: a sort computes every column it returns for every match (~12% of a search).
        query = (
            f"SELECT {_SELECT}, m.walk, m.score FROM (SELECT f.rid AS rid, f.id AS id, "
            "s.id IS NOT NULL AS walk, bm25(memory_fts) AS score FROM memory_fts "
            "JOIN memory_facts f ON f.rid = memory_fts.rowid "
            "LEFT JOIN memory_facts s ON s.id = f.superseded_by "
            f"WHERE memory_fts MATCH ? AND {sql} "
            "ORDER BY score, f.id LIMIT ? OFFSET ?) m "
            "JOIN memory_facts f ON f.rid = m.rid ORDER BY m.score, m.id"
        )
        hits: list[TextHit] = []
        offset = 0
        page = limit + 16
        with self._reading() as ready:
            while ready and len(hits) < limit:
                rows = self.db.execute(query, (expression, *params, page, offset)).fetchall()
                for fact, row in self._visible(rows, now, True):
                    hits.append(TextHit(fact, -float(row[_WIDTH + 1])))  # higher is better
                    if len(hits) == limit:
                        break
                if len(rows) < page:
                    break
                offset += len(rows)
                page = min(page * 2, 10_000)
        return hits

    # -- writing ---------------------------------------------------------------------------

    def apply(self, writes: Sequence[MemoryWrite]) -> tuple[Fact | bool | Exception, ...]:
        if self.read_only:
            raise StorageError("memory was opened read-only")
        answers: list[Fact | bool | Exception] = []
        with self.lock:
            if self.closed:  # the store's caller's mistake, not a failed disk (no OSError)
                raise StorageError("memory was closed with its store")
            try:
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    if (
                        not self._ready
                    ):  # the tables, where a new sidecar lacks them (no-ops otherwise)
                        for statement in MEMORY_SCHEMA:
                            self.db.execute(statement)
                    for write in writes:
                        answers.append(self._apply_one(write))
                    self.db.execute("COMMIT")
                except BaseException:  # any way out: rolled back, re-raised
                    if self.db.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            self.db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                # Whatever SQLite refused (I/O, a full disk, a lock never granted): nothing
                # of the batch was applied, and the writer must stop (an OSError does that).
                self._ready = False
                raise OSError(f"memory write failed: {exc}") from exc
            self._ready = True
        return tuple(answers)

    def _apply_one(self, write: object) -> Fact | bool | Exception:
        try:
            checked = check_write(write)
        except (TypeError, ValueError) as exc:
            return exc
        if isinstance(checked, RememberFact) and checked.fact.conflict_group is None:
            # One statement (the insert, and its full-text row by trigger): SQLite undoes a
            # statement it refuses by itself, so no savepoint is needed for it to change
            # nothing. Facts in a group supersede others too: a savepoint keeps those whole.
            # A stored id that does not read back (ValueError) inserted nothing either.
            try:
                return self._remember(checked)
            except ValueError as exc:
                return exc
            except sqlite3.IntegrityError as exc:
                return ValueError(f"the fact could not be stored: {exc}")
        self.db.execute("SAVEPOINT memory_write")
        try:
            if isinstance(checked, ForgetFact):
                answer: Fact | bool = self._forget(checked.fact_id)
            else:
                answer = self._remember(checked)
        except (TypeError, ValueError, sqlite3.IntegrityError) as exc:
            self.db.execute("ROLLBACK TO memory_write")
            self.db.execute("RELEASE memory_write")
            if isinstance(exc, sqlite3.IntegrityError):
                return ValueError(f"the fact could not be stored: {exc}")
            return exc
        self.db.execute("RELEASE memory_write")
        return answer

    def _remember(self, write: RememberFact) -> Fact:
        fact = write.fact
        added = self.db.execute(
            _INSERT,
            (
                fact.id,
                fact.text,
                fact.scope.value,
                fact.domain,
                fact.confidence,
                fact.valid_until,
                fact.conflict_group,
                fact.superseded_by,
                fact.organization,
                fact.created_at,
                fact.execution_id,
                fact.task_id,
                fact.step_id,
            ),
        )
        if added.rowcount == 0:  # idempotent: the stored fact answers, nothing changed
            stored = self._get(fact.id)
            if stored is None:
                raise ValueError(f"fact {fact.id} is stored but does not read back")
            return stored
        if fact.conflict_group is not None:
            # On the stored columns, whether the row reads back or not (as on PostgreSQL);
            # never an organization's facts for a writer of another one (or of none).
            self.db.execute(
                "UPDATE memory_facts SET superseded_by = ?1 WHERE conflict_group = ?2 "
                "AND superseded_by IS NULL AND id != ?1 "
                "AND (scope != 'organization' OR organization = ?3)",
                (fact.id, fact.conflict_group, write.organization),
            )
        return fact

    def _forget(self, fact_id: str) -> bool:
        row = self.db.execute(
            f"SELECT {_SELECT} FROM memory_facts f WHERE f.id = ?", (fact_id,)
        ).fetchone()
        if row is None:
            return False
        gone = self._fact(row)
        if gone is not None:
            heir = gone.superseded_by
        else:  # a row that does not read back goes by its stored superseder (as on PostgreSQL)
            heir = _stored_id(row[list(_COLUMNS).index("superseded_by")])
        # Every row that named it, read back or not, passes to its heir (``relink``'s rule):
        # nothing names the gone fact.
        self.db.execute(
            "UPDATE memory_facts SET superseded_by = CASE WHEN id = ?1 THEN NULL ELSE ?1 END "
            "WHERE superseded_by = ?2",
            (heir, fact_id),
        )
        self.db.execute("DELETE FROM memory_facts WHERE id = ?", (fact_id,))  # and its FTS row
        return True

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.db.close()


def _stored_id(value: object) -> str | None:
    """A stored superseder as read (bytes, bounded): the id it names, or None when it names
    none a fact could (not UTF-8 text of a valid id: nothing damaged is copied onward)."""
    if type(value) is not bytes:
        return None
    try:
        return check_id(value.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and InvalidId alike
        return None


def _shown(where: FactFilter) -> FactFilter:
    """A search shows visible facts only, whatever ``include_hidden`` says."""
    if not where.include_hidden:
        return where
    return FactFilter(
        scopes=where.scopes,
        domain=where.domain,
        min_confidence=where.min_confidence,
        organization=where.organization,
        now=where.now,
        execution_id=where.execution_id,
    )


class MemoryOnSqlite:
    """A local store's ``MemoryBackend`` calls, answered by the :class:`SqliteMemory` that
    ``memory_of(write=...)`` gives (None: no memory stored yet, so reads answer empty and
    only a write creates it). Held by ``SqliteStore`` (its own database) and ``FileStore``
    (its sidecar ``memory.sqlite3``), which delegate their ``memory_*`` methods to it;
    ``store`` names the store in errors."""

    #: What a search ranks with (SQLite FTS5's ``bm25``).
    ranking = "bm25"

    def __init__(
        self,
        memory_of: Callable[..., SqliteMemory | None],
        *,
        read_only: bool,
        store: object,
    ) -> None:
        self._memory_of = memory_of
        self.read_only = read_only
        self._store = store

    @property
    def dropped(self) -> int:
        """Rows that did not read back as facts (skipped, kept on disk: E7), since opening."""
        memory = self._memory_of(write=False)
        return memory.dropped if memory is not None else 0

    def apply(self, writes: Sequence[MemoryWrite]) -> tuple[Fact | bool | Exception, ...]:
        """See ``MemoryBackend.memory_apply``."""
        if self.read_only:
            raise StorageError(f"{self._store!r} was opened read-only")
        memory = self._memory_of(write=True)
        assert memory is not None
        return memory.apply(writes)

    def get(self, fact_id: str) -> Fact | None:
        """See ``MemoryBackend.memory_get``."""
        memory = self._memory_of(write=False)
        return memory.get(fact_id) if memory is not None else None

    def listing(
        self, where: FactFilter, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[Fact]:
        """See ``MemoryBackend.memory_list``."""
        memory = self._memory_of(write=False)
        if memory is None:
            check_where(where)
            check_limit(limit)
            check_after(after)
            return []
        return memory.listing(where, limit=limit, after=after)

    def search(self, terms: Sequence[str], where: FactFilter, *, limit: int) -> list[TextHit]:
        """See ``MemoryBackend.memory_search``."""
        memory = self._memory_of(write=False)
        if memory is None:
            check_terms(terms)
            check_where(where)
            check_limit(limit)
            return []
        return memory.search(terms, where, limit=limit)

    def count(self) -> int:
        """See ``MemoryBackend.memory_count``."""
        memory = self._memory_of(write=False)
        return memory.count() if memory is not None else 0
