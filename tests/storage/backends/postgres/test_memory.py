"""What PostgresStore's memory adds to the shared contract (``test_memory_backends``): the
schema upgrade that brings it, groups serialised across hosts, the server's clock for
expiry, PostgreSQL's text search (stop words, punctuation, diacritics), rows that do not
read, writes the server refuses. Faults (statements failing, sessions ended before and
during COMMIT) are in ``test_memory_postgres_faults``."""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import random
import re
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest

import mainspring as ms
from mainspring.storage import Fact, Scope
from mainspring.storage._backends.postgres.schema import PG_SCHEMA_VERSION, upgrade
from mainspring.storage._backends.postgres.store import (
    CommitUnknown,
    PostgresStore,
    StoreUnavailable,
)
from mainspring.storage._persistence import open_committer
from mainspring.storage._seam import FactFilter, ForgetFact, RememberFact, query_terms
from tests._postgres import (
    admin,
    postgres_store_url,
    postgres_url,
    require_server,
    server_url,
)
from tests.storage.backends.postgres.test_retry import Terminator, _count_faults

__all__ = ["postgres_store_url", "postgres_url", "store"]

EVERYTHING = FactFilter(include_hidden=True)


def fact(fact_id: str, text: str = "a fact", **fields: Any) -> Fact:
    fields.setdefault("scope", Scope.USER)
    return Fact(id=fact_id, text=text, **fields)


@pytest.fixture
def store(postgres_store_url: str) -> Iterator[PostgresStore]:
    made = PostgresStore(postgres_store_url, reconnect_timeout=10.0)
    yield made
    made.close()


def _sql(store: PostgresStore, statement: str, *args: Any) -> list[Any]:
    """Run ``statement`` ({t}: the facts table) on the harness's own connection."""
    with admin() as conn:
        cursor = conn.execute(statement.replace("{t}", f'"{store.schema}".memory_facts'), args)
        return cursor.fetchall() if cursor.description else []


def _terminate(pid: int) -> None:
    with admin() as conn:
        row = conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()
    assert row == (True,)


def _all(store: PostgresStore) -> dict[str, Fact]:
    facts: list[Fact] = []
    after: tuple[float, str] | None = None
    while page := store.memory_list(EVERYTHING, limit=1_000, after=after):
        facts.extend(page)
        after = (page[-1].created_at, page[-1].id)
    return {f.id: f for f in facts}


def _check_chains(facts: dict[str, Fact]) -> None:
    """Every superseder is a stored fact of the same group, named by one fact at most, and
    each group has one current fact at most."""
    named = collections.Counter(f.superseded_by for f in facts.values() if f.superseded_by)
    assert all(count == 1 for count in named.values()), named
    for f in facts.values():
        if f.superseded_by is not None:
            assert f.superseded_by in facts, f"{f.id} names a fact that is gone"
            assert facts[f.superseded_by].conflict_group == f.conflict_group
    current = collections.Counter(
        f.conflict_group for f in facts.values() if f.conflict_group and not f.superseded_by
    )
    assert all(count == 1 for count in current.values()), current


# -- the schema --------------------------------------------------------------------------


def test_a_version_2_schema_is_upgraded_keeping_executions_and_adding_memory(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as older:  # the library as it was before memory
        older.setattr(
            "mainspring.storage._backends.postgres.store.upgrade", functools.partial(upgrade, to=2)
        )
        before = PostgresStore(postgres_url)
        try:
            assert before.create(
                ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)
            )
        finally:
            before.close()
    store = PostgresStore(postgres_url)
    try:
        version = _sql(store, f'SELECT value FROM "{store.schema}".meta')
        assert version == [(str(PG_SCHEMA_VERSION),)]
        stored = store.get("ex-1")
        assert stored is not None
        assert stored.goal == "g"
        assert [e.kind for e in store.history("ex-1")] == ["created"]
        assert store.memory_count() == 0
        a = fact("fact-a", "kept across the upgrade")
        assert store.memory_apply([RememberFact(a)]) == (a,)
        assert store.memory_get("fact-a") == a
    finally:
        store.close()


def test_a_read_only_store_on_a_schema_older_than_memory_reads_no_facts(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as older:
        older.setattr(
            "mainspring.storage._backends.postgres.store.upgrade", functools.partial(upgrade, to=2)
        )
        PostgresStore(postgres_url).close()
    reader = PostgresStore(postgres_url, read_only=True)
    try:
        assert reader.memory_count() == 0
        assert reader.memory_get("fact-a") is None
        assert reader.memory_list(EVERYTHING, limit=5) == []
        assert reader.memory_search(["anything"], FactFilter(), limit=5) == []
        with pytest.raises(ms.storage.StorageError, match="read-only"):
            reader.memory_apply([RememberFact(fact("fact-a"))])
        assert _sql(reader, f'SELECT value FROM "{reader.schema}".meta') == [("2",)]
        writer = PostgresStore(postgres_url)  # a writable store upgrades it
        try:
            writer.memory_apply([RememberFact(fact("fact-a", "now kept"))])
        finally:
            writer.close()
        assert reader.memory_count() == 1
        assert [h.fact.id for h in reader.memory_search(["kept"], FactFilter(), limit=5)] == [
            "fact-a"
        ]
    finally:
        reader.close()


def test_the_facts_table_has_an_english_tsvector_without_diacritics_and_its_indexes(
    store: PostgresStore,
) -> None:
    indexes = dict(
        _sql(
            store,
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
            "AND tablename = 'memory_facts'",
            store.schema,
        )
    )
    assert "USING gin (search)" in indexes["memory_facts_search"]
    assert "(conflict_group)" in indexes["memory_facts_group"]
    assert "(superseded_by)" in indexes["memory_facts_superseded_by"]
    assert "(created_at, id)" in indexes["memory_facts_order"]
    store.memory_apply(
        [
            RememberFact(fact("fact-a", "The cats were running")),
            RememberFact(fact("fact-b", "Naïve CAFÉ")),
        ]
    )
    assert _sql(store, "SELECT search::text FROM {t} ORDER BY id") == [
        ("'cat':2 'run':4",),
        ("'cafe':2 'naiv':1",),
    ]
    for query in ("cafe", "café", "CAFÉS", "naive"):
        hits = store.memory_search(query_terms(query), FactFilter(), limit=5)
        assert [h.fact.id for h in hits] == ["fact-b"], query
    assert isinstance(store, ms.storage._seam.MemoryBackend)
    assert store.memory_ranking == "ts_rank"


def _generic_plan(store: PostgresStore, statement: str, params: dict[str, Any]) -> str:
    """The plan the server caches for ``statement`` once it stops making custom ones (a
    generic plan, made without the parameters' values), as EXPLAIN prints it."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", numbered, statement)
    with psycopg.connect(
        server_url(), autocommit=True, cursor_factory=psycopg.ClientCursor
    ) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE remember AS {prepared}")
        arguments = ", ".join(["%s"] * len(names))
        rows = conn.execute(
            f"EXPLAIN EXECUTE remember({arguments})", [params[name] for name in names]
        ).fetchall()
    return "\n".join(row[0] for row in rows)


def test_a_remember_s_generic_plan_reads_no_index_entry_per_current_fact(
    store: PostgresStore,
) -> None:
    # Prepared statements run on generic plans after a few executions. A plan that reads
    # superseded_by's index for the current facts reads every one of them on each write:
    # remembering slowed as the table grew (benchmarks/README.md). Without statistics (a
    # table filled faster than autovacuum analyses it) and with them, neither statement
    # may do that: a fact without a group supersedes nothing and must not look.
    _sql(store, "ALTER TABLE {t} SET (autovacuum_enabled = false)")
    for start in range(0, 2_000, 500):
        store.memory_apply(
            [RememberFact(fact(f"fact-{n}", f"fact number {n}")) for n in range(start, start + 500)]
        )
    grouped = fact("fact-new-grouped", "a grouped fact", conflict_group="g")
    for analyzed in (False, True):
        if analyzed:
            _sql(store, "ANALYZE {t}")
        for new in (fact("fact-new", "a new fact"), grouped):
            plan = _generic_plan(store, *store._facts._remember_sql(RememberFact(new)))
            assert "memory_facts_superseded_by" not in plan, plan
            assert "Seq Scan" not in plan, plan
            if new.conflict_group is None:
                assert "Update" not in plan, plan
    store.memory_apply([RememberFact(grouped)])  # the statement still supersedes
    assert store.memory_get("fact-new-grouped") == grouped


# -- two hosts ---------------------------------------------------------------------------


def test_two_stores_writing_one_group_at_once_keep_one_current_fact_and_whole_chains(
    postgres_store_url: str,
) -> None:
    stores = [PostgresStore(postgres_store_url) for _ in range(2)]
    gate = threading.Barrier(2)
    errors: list[BaseException] = []
    kept: list[set[str]] = [set(), set()]

    def host(n: int) -> None:
        rng = random.Random(n)
        try:
            gate.wait(timeout=30)
            for k in range(40):
                new = fact(f"fact-{n}-{k}", conflict_group="g", created_at=float(k))
                (answer,) = stores[n].memory_apply([RememberFact(new)])
                assert answer == new
                kept[n].add(new.id)
                if k % 3 == 2:  # forget one of its own, somewhere along the chain
                    gone = rng.choice(sorted(kept[n]))
                    assert stores[n].memory_apply([ForgetFact(gone)]) == (True,)
                    kept[n].discard(gone)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=host, args=(n,)) for n in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert errors == []
        facts = _all(stores[0])
    finally:
        for made in stores:
            made.close()
    assert set(facts) == kept[0] | kept[1]
    _check_chains(facts)
    current = [f for f in facts.values() if f.superseded_by is None]
    assert len(current) == 1
    # Every other fact reaches the current one along its chain.
    for f in facts.values():
        seen = f
        for _ in range(len(facts)):
            if seen.superseded_by is None:
                break
            seen = facts[seen.superseded_by]
        assert seen == current[0]


# -- the clock -------------------------------------------------------------------------


def test_expiry_is_the_servers_clock_when_the_filter_names_no_now(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_now = store.now()
    facts = [
        fact("fact-gone", "apple pie", valid_until=server_now - 60),
        fact("fact-live", "apple tart", valid_until=server_now + 3_600),
        fact("fact-early", "apple cake", valid_until=100.0),
    ]
    store.memory_apply([RememberFact(f) for f in facts])
    monkeypatch.setattr(time, "time", lambda: 50.0)  # a host whose clock is far behind
    terms = query_terms("apple")
    assert [h.fact.id for h in store.memory_search(terms, FactFilter(), limit=10)] == ["fact-live"]
    assert [f.id for f in store.memory_list(FactFilter(), limit=10)] == ["fact-live"]
    # The filter's own now decides when it names one.
    hits = store.memory_search(terms, FactFilter(now=50.0), limit=10)
    assert sorted(h.fact.id for h in hits) == ["fact-early", "fact-gone", "fact-live"]


def test_a_test_clock_stands_in_for_the_servers(postgres_store_url: str) -> None:
    store = PostgresStore(postgres_store_url, clock=lambda: 150.0)
    try:
        store.memory_apply(
            [
                RememberFact(fact("fact-a", "pear", valid_until=100.0)),
                RememberFact(fact("fact-b", "pear", valid_until=200.0)),
            ]
        )
        assert [f.id for f in store.memory_list(FactFilter(), limit=10)] == ["fact-b"]
    finally:
        store.close()


# -- text search -----------------------------------------------------------------------


def test_stop_words_punctuation_and_odd_words_never_make_a_search_fail(
    store: PostgresStore,
) -> None:
    store.memory_apply(
        [
            RememberFact(fact("fact-a", "The cat is on the mat")),
            RememberFact(fact("fact-b", "naïve café owners in 東京 use snake_case")),
        ]
    )
    for query in ["the", "the a of is", "!!! ... ???", "", "&|!():*<->'\\", "AND OR NOT"]:
        assert store.memory_search(query_terms(query), FactFilter(), limit=5) == [], query
    # Terms that are not in query_terms' form are put in it, never passed as syntax.
    assert store.memory_search(["cat & !mat"], FactFilter(), limit=5)[0].fact.id == "fact-a"
    assert [h.fact.id for h in store.memory_search(["THE", "cat"], FactFilter(), limit=5)] == [
        "fact-a"
    ]
    for word in ["naïve", "café", "東京", "snake_case", "owner"]:
        hits = store.memory_search(query_terms(word), FactFilter(), limit=5)
        assert [h.fact.id for h in hits] == ["fact-b"], word
    with pytest.raises(TypeError):
        store.memory_search("cat", FactFilter(), limit=5)
    hits = store.memory_search((word for word in ["cat"]), FactFilter(), limit=5)  # type: ignore[arg-type]
    assert [h.fact.id for h in hits] == ["fact-a"]


def test_hits_rank_by_ts_rank_best_first_ties_by_id(store: PostgresStore) -> None:
    store.memory_apply(
        [
            RememberFact(fact("fact-c", "river")),
            RememberFact(fact("fact-b", "river")),
            RememberFact(fact("fact-a", "river boat")),
            RememberFact(fact("fact-e", "the river is mentioned once among many other words")),
            RememberFact(fact("fact-d", "mountain")),
        ]
    )
    hits = store.memory_search(query_terms("river boats"), FactFilter(), limit=10)
    assert [h.fact.id for h in hits] == ["fact-a", "fact-b", "fact-c", "fact-e"]
    assert hits[0].score > hits[1].score == hits[2].score > hits[3].score > 0


def test_a_search_fetches_past_facts_hidden_further_along_their_chain(
    store: PostgresStore,
) -> None:
    # Chains old -> expired -> current: SQL sees only the expired direct superseder, the
    # walk hides the old fact. They rank first (the shortest texts), so the visible hits lie
    # beyond a first batch.
    writes: list[ms.storage._seam.MemoryWrite] = []
    for n in range(6):
        group = f"g{n}"
        writes += [
            RememberFact(fact(f"fact-a-old{n}", "plum", conflict_group=group)),
            RememberFact(fact(f"fact-mid{n}", "other", conflict_group=group, valid_until=1.0)),
            RememberFact(fact(f"fact-new{n}", "other", conflict_group=group)),
        ]
    writes += [RememberFact(fact(f"fact-v{n}", "plum tree orchard")) for n in range(3)]
    # A chain whose newer facts all lapsed: its oldest applies again.
    writes += [
        RememberFact(fact("fact-back", "plum tree", conflict_group="h")),
        RememberFact(fact("fact-lapsed", "x", conflict_group="h", valid_until=1.0)),
    ]
    store.memory_apply(writes)
    hits = store.memory_search(query_terms("plum"), FactFilter(now=10.0), limit=3)
    assert [h.fact.id for h in hits] == ["fact-back", "fact-v0", "fact-v1"]
    listed = store.memory_list(FactFilter(now=10.0), limit=2)  # the old ones sort first
    assert [f.id for f in listed] == ["fact-back", "fact-new0"]


# -- rows that do not read -------------------------------------------------------------


def test_a_row_that_does_not_read_is_skipped_never_coerced_or_deleted(
    store: PostgresStore,
) -> None:
    good = fact("fact-ok", "melon")
    store.memory_apply([RememberFact(good)])
    bad = [
        ("fact-bad1", "melon", "galaxy", 1.0, None),  # no such scope
        ("fact-bad2", "melon", "user", 2.0, None),  # confidence beyond 1
        ("fact-bad3", "melon", "user", 1.0, "fact-bad3"),  # its own superseder
        ("fact-bad4", "melon " * 1_000, "user", 1.0, None),  # over MAX_FACT_TEXT
        ("fact bad5", "melon", "user", 1.0, None),  # not an id
    ]
    for row in bad:
        _sql(
            store,
            "INSERT INTO {t} (id, text, scope, domain, confidence, superseded_by, created_at) "
            "VALUES (%s, %s, %s, 'general', %s, %s, 0)",
            *row,
        )
    assert store.memory_get("fact-bad1") is None
    assert store.memory_list(EVERYTHING, limit=2) == [good]
    assert [h.fact for h in store.memory_search(["melon"], FactFilter(), limit=1)] == [good]
    assert store.memory_count() == 6
    # Remembered again under its id, a row that does not read is the answer's error.
    (answer,) = store.memory_apply([RememberFact(fact("fact-bad1", "melon"))])
    assert isinstance(answer, ms.storage.RecordError)
    assert _sql(store, "SELECT count(*) FROM {t}") == [(6,)]
    assert _sql(store, "SELECT scope FROM {t} WHERE id = 'fact-bad1'") == [("galaxy",)]


def test_a_write_the_server_refuses_as_data_answers_alone_and_leaves_nothing(
    store: PostgresStore,
) -> None:
    _sql(store, "ALTER TABLE {t} ADD CONSTRAINT no_secrets CHECK (text <> 'forbidden')")
    old = fact("fact-old", "zero")
    store.memory_apply([RememberFact(old)])
    a, c, e = (fact(f"fact-{n}", n, conflict_group="g") for n in "ace")
    refused = [fact(f"fact-{n}", "forbidden", conflict_group="g") for n in "bd"]
    answers = store.memory_apply(
        [
            RememberFact(a),
            RememberFact(refused[0]),
            RememberFact(c),
            ForgetFact("fact-old"),
            RememberFact(refused[1]),
            RememberFact(e),
        ]
    )
    assert answers[0] == a
    assert answers[2:4] == (c, True)
    assert answers[5] == e
    for answer in (answers[1], answers[4]):
        assert isinstance(answer, ValueError)
        assert "no_secrets" in str(answer)
    stored = _all(store)
    assert set(stored) == {"fact-a", "fact-c", "fact-e"}
    assert stored["fact-a"].superseded_by == "fact-c"
    assert stored["fact-c"].superseded_by == "fact-e"
    # Many at once: a refusal surfaces wherever the driver reads it (while later writes are
    # still being sent, or at the end), and statements prepared meanwhile stay usable.
    many = [
        fact(f"fact-m{n:02}", "forbidden" if n % 9 == 4 else f"m{n}", conflict_group="g")
        for n in range(60)
    ]
    for _ in range(2):
        answers = store.memory_apply([RememberFact(f) for f in many])
        for f, answer in zip(many, answers, strict=True):
            if f.text == "forbidden":
                assert isinstance(answer, ValueError)
            else:
                assert isinstance(answer, Fact)
                assert answer.id == f.id
    stored = _all(store)
    assert len(stored) == 3 + 60 - 7
    _check_chains(stored)
    assert [f.id for f in stored.values() if f.superseded_by is None] == ["fact-m59"]


# -- through the persistence actor ------------------------------------------------------


@pytest.mark.anyio
async def test_memory_writes_through_the_writer_are_durable_once_answered(
    store: PostgresStore,
) -> None:
    a = fact("fact-a", "first", conflict_group="g")
    b = fact("fact-b", "second", conflict_group="g")
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        async with anyio.create_task_group() as tg:
            answers: dict[str, Any] = {}

            async def remember(f: Fact) -> None:
                answers[f.id] = await committer.memory([RememberFact(f)])

            tg.start_soon(remember, a)
            tg.start_soon(remember, b)
        assert answers == {"fact-a": (a,), "fact-b": (b,)}
        forgot, junk = await committer.memory([ForgetFact("fact-zz"), "junk"])  # type: ignore[list-item]
        assert forgot is False
        assert isinstance(junk, TypeError)

    def read() -> dict[str, Fact]:
        other = PostgresStore(f"{server_url()}?schema={store.schema}")
        try:
            return _all(other)
        finally:
            other.close()

    stored = await anyio.to_thread.run_sync(read)
    assert set(stored) == {"fact-a", "fact-b"}
    _check_chains(stored)


# ----------------------------------------------------------------------
# PostgresStore's memory under faults, against the real server: a statement failing at any
# point of a batch, a session ended between two writes or while COMMIT's answer was on its
# way, COMMIT outcomes the server cannot tell, and sessions terminated again and again while
# batches run. Nothing acknowledged is lost, nothing is applied twice, and a batch is applied
# wholly or not at all.


#: How each statement of a memory batch begins (BEGIN, the clock and transaction id, the
#: groups named, a group's lock, the savepoint, a remember, a forget, its release, COMMIT).
STATEMENTS = [
    "BEGIN",
    "WITH locked",
    "SELECT DISTINCT",
    "SELECT pg_advisory",
    "SAVEPOINT",
    "WITH added",
    "WITH gone",
    "RELEASE",
    "COMMIT",
]


@pytest.mark.parametrize("statement", STATEMENTS)
def test_a_statement_the_server_fails_applies_nothing_and_the_store_goes_on(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, statement: str
) -> None:
    store.memory_apply(
        [RememberFact(fact("fact-a", "old", conflict_group="g")), RememberFact(fact("fact-c"))]
    )
    before = _all(store)
    batch = [
        RememberFact(fact("fact-b", "new", conflict_group="g")),
        ForgetFact("fact-c"),
        RememberFact(fact("fact-d", "another")),
    ]
    execute = psycopg.Cursor.execute
    failed = [0]

    def failing(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(query, str) and query.startswith(statement) and not failed[0]:
            failed[0] += 1
            raise psycopg.errors.DiskFull("could not extend file: No space left on device")
        return execute(self, query, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", failing)
        with pytest.raises(ms.storage.StorageError, match="No space left"):
            store.memory_apply(batch)
    assert failed == [1]
    assert _all(store) == before  # nothing of the batch
    answers = store.memory_apply(batch)  # and the same store goes on
    assert [type(a).__name__ for a in answers] == ["Fact", "bool", "Fact"]
    assert set(_all(store)) == {"fact-a", "fact-b", "fact-d"}


# -- lost connections ------------------------------------------------------------------


def test_a_session_ended_between_two_writes_runs_the_batch_again_whole(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    y = fact("fact-y", "to forget", conflict_group="g")
    store.memory_apply([RememberFact(y)])
    x, z = fact("fact-x", "new"), fact("fact-z", "newer", conflict_group="g")
    execute = psycopg.Cursor.execute
    writes: list[str] = []

    def ending(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(query, str) and query.startswith(("WITH added", "WITH gone")):
            writes.append(query)
            if len(writes) == 2:  # the first write done on the server, then the session ends
                self.connection._pipeline.sync()
                _terminate(self.connection.info.backend_pid)
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", ending)
    answers = store.memory_apply([RememberFact(x), ForgetFact("fact-y"), RememberFact(z)])
    monkeypatch.undo()
    assert answers == (x, True, z)  # as one run answers: the first run was rolled back
    assert len(writes) == 5
    assert _all(store) == {"fact-x": x, "fact-z": z}


@contextlib.contextmanager
def _commit_answer_lost(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The next memory batch's COMMIT reaches the server, then its session ends before the
    answer is read (the answer comes with the Sync that leaving the pipeline sends)."""
    leave = psycopg.Pipeline.__exit__
    committing = [False]
    execute = psycopg.Connection.execute

    def noting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query == "COMMIT":
            committing[0] = True
        return execute(self, query, *args, **kwargs)

    def losing(self: Any, *args: Any) -> None:
        leave(self, *args)
        if committing[0]:
            committing[0] = False
            _terminate(store._conn.info.backend_pid)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Connection, "execute", noting)
        patch.setattr(psycopg.Pipeline, "__exit__", losing)
        yield


def test_a_batch_whose_commit_landed_but_whose_answer_was_lost_keeps_its_answers(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    y = fact("fact-y", "to forget")
    store.memory_apply([RememberFact(y)])
    x = fact("fact-x", "new")
    with _commit_answer_lost(store, monkeypatch):
        answers = store.memory_apply([ForgetFact("fact-y"), RememberFact(x)])
    # Settled as committed: never run again, which would answer False for fact-y.
    assert answers == (True, x)
    assert _all(store) == {"fact-x": x}


def test_a_batch_whose_commit_cannot_be_settled_raises_commit_unknown(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    y = fact("fact-y", "to forget")
    store.memory_apply([RememberFact(y)])
    monkeypatch.setattr(store._connections, "settle", lambda *args: None)
    with _commit_answer_lost(store, monkeypatch), pytest.raises(CommitUnknown):
        store.memory_apply([ForgetFact("fact-y"), RememberFact(fact("fact-x", "new"))])
    assert isinstance(CommitUnknown("x"), OSError)  # the writer stops: nothing acknowledged
    assert set(_all(store)) == {"fact-x"}  # it had landed: wholly


@pytest.mark.slow
def test_sessions_terminated_mid_batch_never_lose_or_double_an_acknowledged_write(
    postgres_store_url: str,
) -> None:
    app = f"mainspring-memfaults-{secrets.token_hex(4)}"
    store = PostgresStore(f"{postgres_store_url}&application_name={app}", reconnect_timeout=20.0)
    checker = PostgresStore(postgres_store_url)  # other sessions: never terminated
    model: dict[str, Fact] = {}
    outcomes = collections.Counter[str]()
    rng = random.Random(16)
    terminator = Terminator(require_server(), app)
    terminator.start()
    try:
        lost = _count_faults(store)
        stop_at = time.monotonic() + 60.0
        for n in itertools.count():
            # At least 150 batches and 20 transactions cut short, or as many as fit in 60 s.
            if (n >= 150 and lost[0] >= 20) or (time.monotonic() > stop_at and n >= 60):
                break
            new = [
                fact(f"fact-{n}-{k}", f"note {n} {k}", conflict_group=rng.choice("abc"))
                for k in range(rng.randint(1, 3))
            ]
            gone = rng.sample(sorted(model), min(len(model), rng.randint(0, 2)))
            writes = [RememberFact(f) for f in new] + [ForgetFact(i) for i in gone]
            try:
                answers = store.memory_apply(writes)
            except (StoreUnavailable, CommitUnknown) as exc:
                unknown = isinstance(exc, CommitUnknown)
                outcomes["unknown" if unknown else "unavailable"] += 1
                stored = {i: checker.memory_get(i) for i in [f.id for f in new] + gone}
                applied = all(stored[f.id] is not None for f in new) and not any(
                    stored[i] for i in gone
                )
                untouched = not any(stored[f.id] for f in new) and all(
                    stored[i] is not None for i in gone
                )
                assert applied or untouched, "a batch half applied"
                assert untouched or unknown
                if not applied:
                    continue
            else:
                outcomes["ok"] += 1
                assert answers[: len(new)] == tuple(new)
                assert answers[len(new) :] == (True,) * len(gone)  # each forgotten once
            for f in new:
                model[f.id] = f
                assert checker.memory_get(f.id) is not None  # acknowledged: durable
            for i in gone:
                del model[i]
                assert checker.memory_get(i) is None
    finally:
        terminator.stopping.set()
        terminator.join(timeout=30)
        store.close()
    try:
        assert terminator.error is None, terminator.error
        assert terminator.ended >= 20, terminator.ended
        assert lost[0] >= 10, lost[0]  # the faults hit batches under way
        assert outcomes["ok"] >= 40, outcomes
        facts = _all(checker)
        assert set(facts) == set(model)
        _check_chains(facts)
        assert checker.memory_count() == len(model)
    finally:
        checker.close()
