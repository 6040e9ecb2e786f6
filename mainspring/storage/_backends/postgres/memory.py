"""PostgresStore's agent memory (``storage._memory``): facts as rows of ``memory_facts``
(schema version 3), searched with PostgreSQL's text search: each fact's ``search`` column
is ``to_tsvector('english', ...)`` of its text without diacritics (see :func:`fold`), set
when it is stored, under a GIN index; ranking is ``ts_rank`` normalised by length.

Writes (``memory_apply``):

* A batch is one of the store's write transactions, so a lost connection is settled as a
  commit's is (``store``). Lost before COMMIT, the server rolled it back and the whole
  batch runs again: a RememberFact is idempotent by id, and a ForgetFact finds again the
  fact the aborted attempt deleted, so every answer is the one a single run gives. Lost
  during COMMIT, the server is asked what became of the transaction: committed, the
  answers stand; aborted, the batch runs again; unknown, :class:`CommitUnknown` is raised
  and nothing is acknowledged. A batch is never run again on an unknown outcome, where a
  ForgetFact would answer False for the fact its first run deleted.
* Every conflict group the batch touches is locked for the transaction first (an advisory
  lock on a hash of schema and group, in key order, so two batches never deadlock): two
  hosts remembering in one group are serialised, the later one sees the earlier one's fact
  and supersedes it, and two forgets along one chain never re-link to a fact the other
  deletes. Supersession stays inside a group, so chains do too.
* The writes go in one round trip (pipelined), one statement each, under a savepoint: one
  the server refuses as data answers its error and leaves nothing; the others are sent
  again and applied. A failure of the server raises and applies nothing.

Reads run in one REPEATABLE READ snapshot. Scope, organization, domain, confidence, expiry
(the filter's ``now``, else the test clock, else the server's clock) and the direct
superseder are decided in SQL; a fact whose direct superseder has expired is walked further
with :func:`hidden`; more rows are fetched until ``limit`` are visible. Each row is validated
into a :class:`Fact` (its text columns cut just past the longest valid value, X2); a row that
does not read is skipped and counted (``memory_dropped``), never coerced or deleted (E7).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..._errors import RecordError
from ..._ids import check_id
from ..._memory import (
    MAX_FACT_TEXT,
    MAX_NAME,
    Fact,
    FactFilter,
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
    query_terms,
)
from .connect import is_refused_data
from .retry import DecideAgain

if TYPE_CHECKING:
    from .store import PostgresStore

__all__ = ["PostgresMemory", "fold", "group_lock_key"]

_ID = 256
#: Column -> the longest text a valid fact holds there, plus one: a longer stored value is
#: cut to that (nothing unbounded is fetched, X2) and still fails validation.
_CUT = {
    "id": _ID + 1,
    "text": MAX_FACT_TEXT + 1,
    "scope": max(len(scope.value) for scope in Scope) + 1,
    "domain": MAX_NAME + 1,
    "conflict_group": MAX_NAME + 1,
    "superseded_by": _ID + 1,
    "organization": _ID + 1,
    "execution_id": _ID + 1,
    "task_id": _ID + 1,
    "step_id": _ID + 1,
}
_COLUMNS = (
    "id",
    "text",
    "scope",
    "domain",
    "confidence",
    "valid_until",
    "conflict_group",
    "superseded_by",
    "organization",
    "created_at",
    "execution_id",
    "task_id",
    "step_id",
)
_CLOCK = "coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)"


def _columns(alias: str) -> str:
    return ", ".join(
        f"left({alias}.{name}, {_CUT[name]})" if name in _CUT else f"{alias}.{name}"
        for name in _COLUMNS
    )


def group_lock_key(schema: str, group: str) -> int:
    """The advisory lock (a signed 64-bit key) of conflict group ``group`` in ``schema``:
    the same on every host and server version."""
    digest = hashlib.blake2b(f"mainspring:{schema}:memory:{group}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def _fact(row: Sequence[Any]) -> Fact | None:
    """The fact a row holds, or None if it does not read as one (skipped, E7)."""
    try:
        return Fact(
            id=row[0],
            text=row[1],
            scope=Scope(row[2]),
            domain=row[3],
            confidence=row[4],
            valid_until=row[5],
            conflict_group=row[6],
            superseded_by=row[7],
            organization=row[8],
            created_at=row[9],
            execution_id=row[10],
            task_id=row[11],
            step_id=row[12],
        )
    except (TypeError, ValueError):
        return None


def _conditions(where: FactFilter, *, visible: bool) -> tuple[list[str], dict[str, Any]]:
    """The SQL conditions of ``where`` on ``f`` (the fact) and ``s`` (its direct superseder,
    outer-joined), and their parameters. ``visible`` adds the rules of a search: confidence,
    expiry, and no unexpired direct superseder (a missing one hides nothing, as in
    :func:`hidden`)."""
    conditions = [
        "f.scope = ANY(%(scopes)s)",
        "(f.scope <> 'organization' OR f.organization = %(organization)s)",
    ]
    params: dict[str, Any] = {
        "scopes": [scope.value for scope in where.scope_list()],
        "organization": where.organization,
    }
    if where.domain is not None:
        conditions.append("f.domain = %(domain)s")
        params["domain"] = where.domain
    if where.execution_id is not None:
        conditions.append("f.execution_id = %(execution_id)s")
        params["execution_id"] = where.execution_id
    if visible:
        conditions += [
            "f.confidence >= %(confidence)s",
            "(f.valid_until IS NULL OR f.valid_until > clock.now)",
            "(s.id IS NULL OR s.valid_until <= clock.now)",
        ]
        params["confidence"] = where.min_confidence
    return conditions, params


class PostgresMemory:
    """The agent memory a :class:`PostgresStore` holds (``MemoryBackend``, see the module):
    the store delegates its ``memory_*`` methods here. A batch of writes is one of the
    store's write transactions (its ``_atomic``, its connection and pipeline while it runs);
    reads take connections of their own."""

    #: What a search ranks with (PostgreSQL's ``ts_rank``; higher is better).
    ranking = "ts_rank"

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self.schema = store.schema
        self.read_only = store.read_only
        self._s = store._s
        self._connections = store._connections
        self._test_clock = store._test_clock
        self._retrying = store._retrying
        self._dropped = 0
        self._dropped_lock = threading.Lock()
        self._memory_present = False

    # -- writing ---------------------------------------------------------------------------

    def apply(self, writes: Sequence[MemoryWrite]) -> tuple[Fact | bool | Exception, ...]:
        """See :meth:`MemoryBackend.memory_apply` and the module: one transaction, retried
        whole only when the server certainly did not commit it."""
        batch = tuple(writes)
        if not batch:
            return ()
        return self._retrying(self._memory_apply, batch)

    def _memory_apply(self, batch: tuple[Any, ...]) -> tuple[Fact | bool | Exception, ...]:
        answers: list[Fact | bool | Exception | None] = [None] * len(batch)
        checked: list[tuple[int, MemoryWrite]] = []
        for position, write in enumerate(batch):
            try:
                checked.append((position, _checked(write)))
            except (TypeError, ValueError) as exc:
                answers[position] = exc
        with self._store._atomic():
            # BEGIN, and the transaction id a COMMIT whose connection is lost is settled by.
            self._store._lock_rows(())
            locked = self._lock_groups([write for _, write in checked])
            todo = checked
            while todo:
                todo = self._apply_writes(todo, locked, answers)
        assert all(answer is not None for answer in answers)
        return tuple(answers)  # type: ignore[arg-type]

    def _lock_groups(self, writes: Sequence[MemoryWrite]) -> list[str]:
        """Lock every conflict group ``writes`` may change, in key order (no deadlock between
        two batches): the groups of the facts remembered and of the stored facts forgotten."""
        groups = {w.fact.conflict_group for w in writes if isinstance(w, RememberFact)}
        # A remembered id already stored changes nothing (not even its group): only the
        # facts forgotten are looked up, and a batch that forgets none saves the round trip.
        ids = sorted({w.fact_id for w in writes if not isinstance(w, RememberFact)})
        if ids:
            cursor = self._store._conn.execute(
                f"SELECT DISTINCT f.conflict_group FROM unnest(%s::text[]) AS named (id) "
                f"JOIN {self._s}.memory_facts f ON f.id = named.id "
                "WHERE f.conflict_group IS NOT NULL",
                (ids,),
            )
            self._store._pipeline.sync()  # L6: never left unsynced while we work
            rows = cursor.fetchall()
            groups.update(row[0] for row in rows)
        named = sorted(group for group in groups if group is not None)
        for key in sorted({group_lock_key(self.schema, group) for group in named}):
            self._store._conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        return named

    def _apply_writes(
        self,
        todo: list[tuple[int, MemoryWrite]],
        locked: list[str],
        answers: list[Fact | bool | Exception | None],
    ) -> list[tuple[int, MemoryWrite]]:
        """Send every write of ``todo`` at once, one statement each, under one savepoint,
        then read their answers. A write the server refuses as data aborts the rest: the
        savepoint is rolled back, the refused write answers its error, and the others are
        returned, to be sent again (what they answer then is what they answered before)."""
        conn = self._store._conn
        sent: list[Any] = []
        try:
            conn.execute("SAVEPOINT memory_writes")
            for _, write in todo:
                cursor = conn.cursor()
                sent.append(cursor)  # before it runs: its own refusal may come at once
                if isinstance(write, RememberFact):
                    cursor.execute(*self._remember_sql(write))
                else:
                    cursor.execute(*self._forget_sql(write.fact_id, locked))
            conn.execute("RELEASE SAVEPOINT memory_writes")
            self._store._pipeline.sync()  # one round trip: every answer, or the first refusal
        except Exception as exc:  # re-raised unless a refusal
            # A refusal comes with whatever statement reads the results next. The refused
            # write is the first without an answer (answers are read in order, and the
            # server skips everything after a refusal until the pipeline syncs).
            refused = next((n for n, cursor in enumerate(sent) if cursor.pgresult is None), None)
            if refused is None or not is_refused_data(exc):
                raise
            with contextlib.suppress(Exception):  # the skipped rest (lost: the next says)
                self._store._pipeline.sync()
            conn.execute("ROLLBACK TO SAVEPOINT memory_writes")
            conn.execute("RELEASE SAVEPOINT memory_writes")
            # Read at once: psycopg forgets what it prepared in this pipeline only when it
            # sees the rollback's answer (a statement it prepared after the refusal never
            # was, and sent again by its name it would fail).
            self._store._pipeline.sync()
            why = self._connections.scrub(exc).splitlines()[0]
            position = todo[refused][0]
            answers[position] = ValueError(f"PostgreSQL refused this memory write: {why}")
            return todo[:refused] + todo[refused + 1 :]
        for (position, write), cursor in zip(todo, sent, strict=True):
            row = cursor.fetchone()
            if isinstance(write, RememberFact):
                answers[position] = _remembered(write.fact, row)
            else:
                answers[position] = _forgotten(write.fact_id, row)
        return []

    def _remember_sql(self, write: RememberFact) -> tuple[str, dict[str, Any]]:
        """Inserted, the fact supersedes every other current fact of its group its writer
        could see (every scope but another organization's; the group is locked, so no other
        host adds one meanwhile). Already stored, nothing is written and the stored fact is
        the answer.

        The statement is prepared (psycopg), so the server may run it with a generic plan,
        made without the parameters' values: a fact without a group gets a statement
        without the supersession (a generic plan cannot tell that it would do nothing),
        and the group's current facts are found through the group's index alone (``(...
        IS NULL) IS TRUE`` is the same test, but no index of ``superseded_by`` can serve
        it: a generic plan ANDed that index's NULL entries, every current fact, into the
        lookup of each write, so a batch slowed as the table grew)."""
        s = self._s
        fact = write.fact
        params = {name: getattr(fact, name) for name in _COLUMNS}
        params["scope"] = fact.scope.value
        params["search"] = fold(fact.text)
        params["writer"] = write.organization
        names = ", ".join((*_COLUMNS, "search"))
        values = ", ".join(f"%({name})s" for name in _COLUMNS)
        values += ", to_tsvector('english'::regconfig, %(search)s)"
        supersede = ""
        if fact.conflict_group is not None:
            supersede = (
                f", superseded AS (UPDATE {s}.memory_facts SET superseded_by = %(id)s "
                "WHERE conflict_group = %(conflict_group)s AND (superseded_by IS NULL) IS TRUE "
                "AND id <> %(id)s AND (scope <> 'organization' OR organization = %(writer)s) "
                "AND EXISTS (SELECT 1 FROM added))"
            )
        return (
            f"WITH added AS (INSERT INTO {s}.memory_facts AS f ({names}) VALUES ({values}) "
            f"ON CONFLICT (id) DO NOTHING RETURNING {_columns('f')}){supersede} "
            f"SELECT * FROM added UNION ALL SELECT {_columns('f')} FROM {s}.memory_facts f "
            "WHERE f.id = %(id)s AND NOT EXISTS (SELECT 1 FROM added)",
            params,
        )

    def _forget_sql(self, fact_id: str, locked: list[str]) -> tuple[str, dict[str, Any]]:
        """Deleted only if its group is one this transaction locked; every fact it
        superseded is handed to its heir (or made current when it has none). Answers how
        many were deleted and whether the fact was there (both as the statement began)."""
        s = self._s
        return (
            f"WITH gone AS (DELETE FROM {s}.memory_facts WHERE id = %(id)s "
            "AND (conflict_group IS NULL OR conflict_group = ANY(%(locked)s)) "
            "RETURNING id, superseded_by), "
            f"relinked AS (UPDATE {s}.memory_facts f SET superseded_by = CASE "
            "WHEN f.id = gone.superseded_by THEN NULL ELSE gone.superseded_by END "
            "FROM gone WHERE f.superseded_by = gone.id AND f.id <> gone.id) "
            "SELECT (SELECT count(*) FROM gone), "
            f"EXISTS (SELECT 1 FROM {s}.memory_facts WHERE id = %(id)s)",
            {"id": fact_id, "locked": locked},
        )

    # -- reading ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _memory_snapshot(self) -> Iterator[Any]:
        """A connection in a read-only REPEATABLE READ transaction: every statement of one
        read sees the same facts."""
        with self._connections.reading() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield conn
            finally:
                with contextlib.suppress(Exception):  # a lost connection: reading() says
                    conn.execute("ROLLBACK")

    @property
    def dropped(self) -> int:
        """Rows that did not read back as facts (skipped, kept in the table: E7), since
        this store opened."""
        return self._dropped

    def _read_fact(self, row: Sequence[Any]) -> Fact | None:
        fact = _fact(row)
        if fact is None:
            with self._dropped_lock:
                self._dropped += 1
        return fact

    def _fact_on(self, conn: Any, fact_id: str) -> Fact | None:
        row = conn.execute(
            f"SELECT {_columns('f')} FROM {self._s}.memory_facts f WHERE f.id = %s", (fact_id,)
        ).fetchone()
        return self._read_fact(row) if row is not None else None

    def _stored_on(self, conn: Any, fact_id: str) -> bool:
        """Whether a row is stored under ``fact_id``, read back or not."""
        row = conn.execute(
            f"SELECT 1 FROM {self._s}.memory_facts WHERE id = %s", (fact_id,)
        ).fetchone()
        return row is not None

    def _has_memory(self, conn: Any) -> bool:
        """Whether the schema holds the facts table: always once a writable store opened
        it (upgraded), and not in an older schema a read-only store reads (it then reads as
        holding no facts, and creates nothing)."""
        if not self.read_only or self._memory_present:
            return True
        (present,) = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{self._s}.memory_facts",)
        ).fetchone()
        self._memory_present = bool(present)
        return self._memory_present

    def _memory_now(self, where: FactFilter) -> float | None:
        if where.now is not None:
            return where.now
        return self._test_clock() if self._test_clock is not None else None

    def get(self, fact_id: str) -> Fact | None:
        """The stored fact, or None (also for a row that does not read)."""
        check_id(fact_id)
        return self._retrying(self._get_fact, fact_id)

    def _get_fact(self, fact_id: str) -> Fact | None:
        with self._connections.reading() as conn:
            return self._fact_on(conn, fact_id) if self._has_memory(conn) else None

    def count(self) -> int:
        """How many facts are stored (rows that do not read included)."""
        return self._retrying(self._count_facts)

    def _count_facts(self) -> int:
        with self._connections.reading() as conn:
            if not self._has_memory(conn):
                return 0
            (count,) = conn.execute(f"SELECT count(*) FROM {self._s}.memory_facts").fetchone()
        return int(count)

    def listing(
        self, where: FactFilter, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[Fact]:
        """See :meth:`MemoryBackend.memory_list`: keyset on ``(created_at, id)``."""
        where = check_where(where)
        limit = check_limit(limit)
        start = check_after(after)
        visible = not where.include_hidden
        conditions, params = _conditions(where, visible=visible)
        if start is not None:
            conditions.append("(f.created_at, f.id) > (%(after_at)s, %(after_id)s)")
            params["after_at"], params["after_id"] = start
        params["now"] = self._memory_now(where)
        facts: list[Fact] = self._retrying(
            self._select_facts, where, conditions, params, "f.created_at, f.id", limit, visible
        )
        return facts

    def search(self, terms: Sequence[str], where: FactFilter, *, limit: int) -> list[TextHit]:
        """See :meth:`MemoryBackend.memory_search`: each term (diacritics removed) through
        ``plainto_tsquery``, OR-ed (a stop word adds nothing, and errs nothing), ranked by
        ``ts_rank``, ties by id."""
        where = check_where(where)
        limit = check_limit(limit)
        terms = check_terms(terms)
        words = query_terms(fold(" ".join(terms)))  # query_terms' own are left as they are
        if not words:
            return []
        conditions, params = _conditions(where, visible=True)
        query = " || ".join(
            f"plainto_tsquery('english'::regconfig, %(t{n})s)" for n in range(len(words))
        )
        params.update({f"t{n}": word for n, word in enumerate(words)})
        conditions[:0] = [f"numnode({query}) > 0", f"f.search @@ ({query})"]
        params["now"] = self._memory_now(where)
        # Normalization 1: divided by 1 + the log of the fact's length, so that of two facts
        # naming a term as often, the shorter ranks first (as bm25 has it).
        rank = f"ts_rank(f.search, {query}, 1)"
        hits: list[TextHit] = self._retrying(
            self._select_facts, where, conditions, params, "rank DESC, f.id", limit, True, rank
        )
        return hits

    def _select_facts(
        self,
        where: FactFilter,
        conditions: list[str],
        params: dict[str, Any],
        order: str,
        limit: int,
        visible: bool,
        rank: str | None = None,
    ) -> list[Any]:
        """The first ``limit`` facts in ``order`` that meet ``conditions`` and read, and are
        ``visible`` if asked (the chain walked where SQL cannot tell); facts, or hits when
        ``rank`` is given. Batches of rows are fetched, in one snapshot, until ``limit``
        were kept or none are left."""
        s = self._s
        params = dict(params)
        sql = (
            f"WITH clock AS (SELECT {_CLOCK} AS now) "
            f"SELECT {_columns('f')}, s.id IS NOT NULL, clock.now, {rank or 'NULL'} AS rank "
            f"FROM {s}.memory_facts f CROSS JOIN clock "
            f"LEFT JOIN {s}.memory_facts s ON s.id = f.superseded_by "
            f"WHERE {' AND '.join(conditions)} ORDER BY {order} "
            "LIMIT %(batch)s OFFSET %(skip)s"
        )
        found: list[Any] = []
        if not params["scopes"]:
            return found
        skip, batch = 0, limit
        with self._memory_snapshot() as conn:
            if not self._has_memory(conn):
                return found
            stored = functools.partial(self._stored_on, conn)
            while True:
                rows = conn.execute(sql, params | {"batch": batch, "skip": skip}).fetchall()
                for row in rows:
                    fact = self._read_fact(row)
                    if fact is None:
                        continue
                    walk, now, score = row[-3:]
                    if visible and not _shown(fact, where, walk, now, conn, self._fact_on, stored):
                        continue
                    found.append(fact if rank is None else TextHit(fact, float(score)))
                    if len(found) == limit:
                        return found
                if len(rows) < batch:
                    return found
                skip += batch
                batch = min(batch * 2, 10_000)
                params["now"] = rows[-1][-2]  # the same clock for every batch of this read


def _remembered(fact: Fact, row: Sequence[Any] | None) -> Fact | Exception:
    """What a RememberFact answers: the fact stored under its id (the new one if it was
    inserted), or the error of a stored one that does not read (nothing was written)."""
    if row is None:  # another host's insert of this id committed after the statement began
        raise DecideAgain(f"fact {fact.id} was stored by another host meanwhile")
    stored = _fact(row)
    if stored is None:
        return RecordError(f"fact {fact.id}", ["the fact stored under this id does not read"])
    return stored


def _forgotten(fact_id: str, row: Sequence[Any]) -> bool:
    deleted, present = row
    if present and not deleted:  # forgotten and remembered again in another group meanwhile
        raise DecideAgain(f"fact {fact_id} moved to a group this batch did not lock")
    return bool(deleted)


def _shown(
    fact: Fact,
    where: FactFilter,
    walk: bool,
    now: float,
    conn: Any,
    lookup: Callable[[Any, str], Fact | None],
    stored: Callable[[str], bool],
) -> bool:
    """Whether a row SQL found visible is (checked again on the fact as read). A direct
    superseder that expired (``walk``) hides nothing by itself: one further along the chain
    may still be current."""
    if not where.admits(fact) or fact.expired(now):
        return False
    return not (walk and hidden(fact, lambda i: lookup(conn, i), now, stored=stored))


def _checked(write: object) -> MemoryWrite:
    """:func:`check_write`, and a text encodable as UTF-8 (a lone surrogate would fail in
    the driver, after the batch began): a ``ValueError`` answers that write alone."""
    checked = check_write(write)
    if isinstance(checked, RememberFact):
        checked.fact.text.encode()
    return checked


def fold(text: str) -> str:
    """``text`` without its diacritics (``café`` -> ``cafe``), as indexed and as searched:
    PostgreSQL's ``english`` configuration keeps accents, and ``unaccent`` is an extension
    a store cannot count on."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))
