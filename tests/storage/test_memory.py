"""Memory's contract (``storage._memory``), one test per rule, run against every backend
with memory (``tests/storage/_memory_kit.py``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import mainspring as ms
from mainspring.storage import Fact, Scope, StorageError
from mainspring.storage._seam import (
    MAX_FACT_TEXT,
    FactFilter,
    ForgetFact,
    MemoryBackend,
    RememberFact,
    query_terms,
)
from tests._examples import SHRINKING, examples
from tests.storage._memory_kit import (
    MEMORY_BACKENDS,
    FailingConnection,
    drops_stop_words,
    fact,
    forget,
    memory_store,
    open_memory,
    ranking_of,
    remember,
    reopen,
    sqlite_memory,
    store_files,
    tamper,
    total_changes,
    usable_backends,
    wrong_values,
)
from tests.storage._memory_model import VOCABULARY, MemoryModel

__all__ = ["memory_store"]

EVERYTHING = FactFilter(include_hidden=True)


def ids(facts: Any) -> list[str]:
    return [getattr(item, "fact", item).id for item in facts]


def listed(store: Any, where: FactFilter = EVERYTHING) -> dict[str, Any]:
    return {f.id: f for f in store.memory_list(where, limit=1000)}


def search(store: Any, query: str, where: FactFilter | None = None, limit: int = 100) -> list[str]:
    return ids(store.memory_search(query_terms(query), where or FactFilter(), limit=limit))


def test_every_store_keeps_memory_and_names_its_ranking(memory_store: Any) -> None:
    assert isinstance(memory_store, MemoryBackend)
    assert memory_store.memory_ranking == ranking_of(memory_store)


def test_remember_then_get_list_and_count(memory_store: Any) -> None:
    a = fact("a", "the build uses poetry", created_at=2.0, domain="tooling", confidence=0.75)
    b = fact(
        "b",
        "deploys go through staging",
        scope=Scope.PROJECT,
        created_at=1.0,
        valid_until=5e9,
        execution_id="ex-1",
        task_id="t-1",
        step_id="s-1",
    )
    assert remember(memory_store, a, b) == (a, b)
    assert memory_store.memory_get("a") == a
    assert memory_store.memory_get("b") == b
    assert memory_store.memory_get("nope") is None
    assert memory_store.memory_count() == 2
    assert ids(memory_store.memory_list(FactFilter(), limit=10)) == ["b", "a"]  # oldest first
    assert ids(memory_store.memory_list(FactFilter(), limit=1)) == ["b"]
    assert ids(memory_store.memory_list(FactFilter(), limit=10, after=(1.0, "b"))) == ["a"]


def test_listing_pages_by_created_at_then_id(memory_store: Any) -> None:
    facts = [fact(f"f{i:03d}", created_at=float(i % 7)) for i in range(60)]
    remember(memory_store, *facts)
    expected = [f.id for f in sorted(facts, key=lambda f: (f.created_at, f.id))]
    seen: list[str] = []
    after = None
    while True:
        page = memory_store.memory_list(FactFilter(), limit=7, after=after)
        if not page:
            break
        seen += ids(page)
        after = (page[-1].created_at, page[-1].id)
    assert seen == expected


def test_a_listing_for_one_execution_shows_the_facts_it_remembered_only(
    memory_store: Any,
) -> None:
    """``FactFilter.execution_id``: the facts one run remembered (what a view of that run
    lists), in every other respect the filter it is part of."""
    mine = fact("m", "mine", scope=Scope.PROJECT, execution_id="ex-1", step_id="s")
    hidden = fact("h", "old", execution_id="ex-1", conflict_group="g")
    theirs = fact("t", "theirs", scope=Scope.PROJECT, execution_id="ex-2")
    loose = fact("l", "remembered outside a run")
    remember(memory_store, mine, hidden, theirs, loose)
    remember(memory_store, fact("n", "newer", conflict_group="g", created_at=2.0))
    own = FactFilter(execution_id="ex-1", include_hidden=True)
    assert ids(memory_store.memory_list(own, limit=10)) == ["h", "m"]
    assert ids(memory_store.memory_list(FactFilter(execution_id="ex-1"), limit=10)) == ["m"]
    assert ids(memory_store.memory_list(FactFilter(execution_id="ex-3"), limit=10)) == []
    assert FactFilter(execution_id="ex-1").admits(mine)
    assert not FactFilter(execution_id="ex-1").admits(theirs)
    with pytest.raises(ValueError, match="execution_id"):
        FactFilter(execution_id="a b")


def test_remembering_a_stored_id_answers_the_stored_fact_and_changes_nothing(
    memory_store: Any,
) -> None:
    first = fact("a", "first words", conflict_group="g")
    remember(memory_store, first)
    remember(memory_store, fact("b", "newer", conflict_group="g"))
    again = fact("a", "other words", conflict_group="g", created_at=9.0)
    (answer,) = memory_store.memory_apply([RememberFact(again)])
    assert answer == attrs.evolve(first, superseded_by="b")  # as stored: b superseded it
    assert memory_store.memory_get("a") == answer
    assert memory_store.memory_get("b").superseded_by is None  # a did not supersede b again
    assert search(memory_store, "other") == []


def test_a_project_fact_supersedes_a_user_fact_of_its_group(memory_store: Any) -> None:
    user = fact("u", "tabs are four spaces", conflict_group="indent")
    other = fact("x", "tabs are tabs", conflict_group="not-indent")
    remember(memory_store, user, other)
    project = fact("p", "tabs are two spaces", scope=Scope.PROJECT, conflict_group="indent")
    remember(memory_store, project)
    stored = listed(memory_store)
    assert stored["u"].superseded_by == "p"
    assert stored["x"].superseded_by is None  # another group is untouched
    assert sorted(search(memory_store, "tabs")) == ["p", "x"]
    # Hidden even where the superseder itself is not shown (another scope).
    assert search(memory_store, "tabs", FactFilter(scopes=frozenset({Scope.USER}))) == ["x"]


def test_a_chain_forgetting_its_middle_relinks_to_the_heir(memory_store: Any) -> None:
    remember(memory_store, fact("a", "v1", conflict_group="g"))
    remember(memory_store, fact("b", "v2", conflict_group="g"))
    remember(memory_store, fact("c", "v3", conflict_group="g"))
    stored = listed(memory_store)
    assert (stored["a"].superseded_by, stored["b"].superseded_by) == ("b", "c")
    assert stored["c"].superseded_by is None
    assert forget(memory_store, "b") is True
    stored = listed(memory_store)
    assert sorted(stored) == ["a", "c"]
    assert stored["a"].superseded_by == "c"
    assert ids(memory_store.memory_list(FactFilter(), limit=10)) == ["c"]


def test_forgetting_the_head_makes_the_previous_fact_current(memory_store: Any) -> None:
    remember(memory_store, fact("a", "old rule", conflict_group="g"))
    remember(memory_store, fact("b", "new rule", conflict_group="g"))
    assert search(memory_store, "rule") == ["b"]
    assert forget(memory_store, "b") is True
    assert memory_store.memory_get("a").superseded_by is None
    assert search(memory_store, "rule") == ["a"]
    assert memory_store.memory_get("b") is None
    assert search(memory_store, "new") == []  # its text is gone from the index too


def test_forgetting_strips_every_reference_to_the_fact(memory_store: Any) -> None:
    for name in "abcde":
        remember(memory_store, fact(name, f"rule {name}", conflict_group="g"))
    for gone in ("c", "e", "a"):
        assert forget(memory_store, gone) is True
        stored = listed(memory_store)
        assert gone not in stored
        assert all(f.superseded_by != gone for f in stored.values())
    stored = listed(memory_store)
    assert {k: f.superseded_by for k, f in stored.items()} == {"b": "d", "d": None}
    assert memory_store.memory_count() == 2


def test_forgetting_an_unknown_fact_answers_false(memory_store: Any) -> None:
    remember(memory_store, fact("a"))
    assert forget(memory_store, "nope") is False
    assert memory_store.memory_count() == 1


def test_expired_facts_are_not_visible(memory_store: Any) -> None:
    remember(
        memory_store,
        fact("old", "release notes", valid_until=100.0),
        fact("new", "release notes", valid_until=200.0),
        fact("always", "release notes"),
    )
    assert sorted(search(memory_store, "release", FactFilter(now=99.0))) == [
        "always",
        "new",
        "old",
    ]
    assert sorted(search(memory_store, "release", FactFilter(now=100.0))) == ["always", "new"]
    assert search(memory_store, "release", FactFilter(now=200.0)) == ["always"]
    assert search(memory_store, "release") == ["always"]  # the store's clock: now
    assert ids(memory_store.memory_list(FactFilter(now=150.0), limit=10)) == ["always", "new"]
    assert len(memory_store.memory_list(FactFilter(now=150.0, include_hidden=True), limit=9)) == 3


def test_min_confidence(memory_store: Any) -> None:
    remember(
        memory_store,
        fact("low", "guess about caching", confidence=0.2),
        fact("mid", "guess about caching", confidence=0.5),
        fact("high", "guess about caching", confidence=1),
    )
    assert sorted(search(memory_store, "caching", FactFilter(min_confidence=0.5))) == [
        "high",
        "mid",
    ]
    assert search(memory_store, "caching", FactFilter(min_confidence=0.51)) == ["high"]
    assert len(search(memory_store, "caching")) == 3


def test_scope_filter(memory_store: Any) -> None:
    remember(
        memory_store,
        fact("u", "lint rule"),
        fact("p", "lint rule", scope=Scope.PROJECT),
        fact("r", "lint rule", scope=Scope.REPOSITORY),
    )
    only = FactFilter(scopes=frozenset({Scope.PROJECT, Scope.REPOSITORY}))
    assert sorted(search(memory_store, "lint", only)) == ["p", "r"]
    assert sorted(ids(memory_store.memory_list(only, limit=10))) == ["p", "r"]
    assert sorted(search(memory_store, "lint")) == ["p", "r", "u"]
    assert search(memory_store, "lint", FactFilter(scopes=frozenset())) == []


def test_domain_filter(memory_store: Any) -> None:
    remember(
        memory_store,
        fact("a", "cache keys", domain="build"),
        fact("b", "cache keys", domain="deploy"),
        fact("c", "cache keys"),
    )
    assert search(memory_store, "cache", FactFilter(domain="build")) == ["a"]
    assert search(memory_store, "cache", FactFilter(domain="general")) == ["c"]
    assert ids(memory_store.memory_list(FactFilter(domain="deploy"), limit=10)) == ["b"]


def test_organizations_never_see_each_others_facts(memory_store: Any) -> None:
    org = Scope.ORGANIZATION
    remember(
        memory_store,
        fact("a1", "billing policy", scope=org, organization="org-a"),
        fact("b1", "billing policy", scope=org, organization="org-b"),
        fact("u", "billing policy"),
    )
    assert sorted(search(memory_store, "billing", FactFilter(organization="org-a"))) == [
        "a1",
        "u",
    ]
    only_org = FactFilter(scopes=frozenset({org}), organization="org-b")
    assert search(memory_store, "billing", only_org) == ["b1"]
    assert search(memory_store, "billing") == ["u"]  # no organization: none of theirs
    listing = memory_store.memory_list(
        FactFilter(organization="org-a", include_hidden=True), limit=9
    )
    assert sorted(ids(listing)) == ["a1", "u"]
    with pytest.raises(ValueError, match="organization"):
        FactFilter(scopes=frozenset({org}))


def test_a_fact_is_hidden_while_any_newer_fact_of_its_chain_is_live(memory_store: Any) -> None:
    remember(memory_store, fact("a", "port is 8080", conflict_group="port", created_at=1.0))
    remember(
        memory_store,
        fact("b", "port is 8081", conflict_group="port", created_at=2.0, valid_until=100.0),
    )
    remember(
        memory_store,
        fact("c", "port is 8082", conflict_group="port", created_at=3.0, valid_until=200.0),
    )
    at = {now: search(memory_store, "port", FactFilter(now=now)) for now in (50, 150, 250)}
    assert at[50] == ["c"]  # b is hidden by c, a by b
    assert at[150] == ["c"]  # b expired, but c (b's superseder) still hides a
    assert at[250] == ["a"]  # every newer fact lapsed: the old one applies again
    listing = {
        now: ids(memory_store.memory_list(FactFilter(now=now), limit=9)) for now in (150, 250)
    }
    assert listing == {150: ["c"], 250: ["a"]}


def test_hits_rank_by_relevance_then_id(memory_store: Any) -> None:
    remember(
        memory_store,
        fact("weak", "the cache is mentioned once among many other words about builds"),
        fact("strong", "cache cache cache"),
        fact("tie-b", "cache misses"),
        fact("tie-a", "cache misses"),
        fact("none", "nothing relevant here"),
    )
    hits = memory_store.memory_search(query_terms("cache"), FactFilter(), limit=10)
    assert ids(hits) == ["strong", "tie-a", "tie-b", "weak"]
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    assert scores[1] == scores[2]
    assert scores[0] > scores[1] > scores[3]
    assert ids(memory_store.memory_search(query_terms("cache"), FactFilter(), limit=2)) == [
        "strong",
        "tie-a",
    ]


def test_any_term_matches_and_stems_match(memory_store: Any) -> None:
    remember(
        memory_store,
        fact("a", "Running the migrations"),
        fact("b", "the café opens"),
        fact("c", "unrelated"),
    )
    assert search(memory_store, "run") == ["a"]
    assert search(memory_store, "cafe") == ["b"]
    assert sorted(search(memory_store, "zebra migrations OPENS")) == ["a", "b"]


@pytest.mark.parametrize("query", ["", "   ", "!!! ... ???", "-- * ()"])
def test_degenerate_queries_find_nothing(memory_store: Any, query: str) -> None:
    remember(memory_store, fact("a", "anything at all"))
    assert query_terms(query) == []
    assert memory_store.memory_search(query_terms(query), FactFilter(), limit=10) == []


@pytest.mark.parametrize(
    "query",
    [
        'cat"',
        '"cat" OR "dog',
        "NEAR(cat dog)",
        "cat*",
        "-cat",
        "(cat)",
        "text:cat",
        "^cat",
        "cat AND NOT dog",
        "{text}: cat",
    ],
)
def test_query_syntax_is_inert(memory_store: Any, query: str) -> None:
    remember(
        memory_store,
        fact("cat", "the cat"),
        fact("category", "a category"),
        fact("dog", "the dog"),
        fact("near", "near and far, and or not"),
    )
    # Through query_terms: plain words, whatever the punctuation said.
    operators = {"and", "or", "not"} & set(query_terms(query))
    expected = {
        word
        for word in ("cat", "dog", "near")
        if word in query_terms(query)
        or (word == "near" and operators and not drops_stop_words(memory_store))
    }
    assert set(search(memory_store, query)) == expected
    # Raw terms, as if a caller skipped query_terms: still strings, never operators.
    found = set(ids(memory_store.memory_search([query], FactFilter(), limit=10)))
    assert "category" not in found  # no prefix query
    assert found <= {"cat", "dog", "near"}


def test_a_failed_write_changes_nothing_and_the_others_apply(memory_store: Any) -> None:
    remember(memory_store, fact("a", "first", conflict_group="g"))
    forged = fact("bad", "will be emptied", conflict_group="g")
    object.__setattr__(forged, "text", "")  # built around its validators
    pre_superseded = fact("pre", "names a superseder", superseded_by="a", conflict_group="g")
    answers = memory_store.memory_apply(
        [
            RememberFact(forged),
            RememberFact(fact("b", "second", conflict_group="g")),
            RememberFact(pre_superseded),
            ForgetFact("a"),
            "not a write",
            RememberFact(fact("c", "third")),
        ]
    )
    assert isinstance(answers[0], ValueError)
    assert answers[1] == fact("b", "second", conflict_group="g")
    assert isinstance(answers[2], ValueError)
    assert answers[3] is True
    assert isinstance(answers[4], TypeError)
    assert answers[5] == fact("c", "third")
    assert sorted(listed(memory_store)) == ["b", "c"]
    assert memory_store.memory_get("b").superseded_by is None
    assert search(memory_store, "emptied superseder") == []


def test_reads_never_write(memory_store: Any) -> None:
    remember(memory_store, fact("a", "alpha", conflict_group="g", valid_until=1e10))
    remember(memory_store, fact("b", "alpha beta", conflict_group="g", valid_until=10.0))

    def state() -> tuple[Any, ...]:
        files = tuple(
            (p.name, p.stat().st_mtime_ns, p.stat().st_size)
            for p in store_files(memory_store)
            if not p.name.endswith("-shm")  # readers mark their place there: not data
        )
        return files, total_changes(memory_store)

    before = state()
    for where in (FactFilter(), EVERYTHING, FactFilter(now=5.0), FactFilter(min_confidence=1)):
        memory_store.memory_list(where, limit=10)
        memory_store.memory_search(["alpha", "beta"], where, limit=10)
    memory_store.memory_get("a")
    memory_store.memory_get("zzz")
    memory_store.memory_count()
    assert state() == before


def test_a_file_store_that_never_remembered_creates_nothing_on_read(tmp_path: Path) -> None:
    store = ms.storage.FileStore(tmp_path / "store")
    try:
        assert store.memory_count() == 0
        assert store.memory_list(FactFilter(), limit=5) == []
        assert store.memory_search(["x"], FactFilter(), limit=5) == []
        assert store.memory_get("a") is None
        assert not (tmp_path / "store" / "memory.sqlite3").exists()
        remember(store, fact("a", "x marks"))
        assert (tmp_path / "store" / "memory.sqlite3").exists()
    finally:
        store.close()


@pytest.mark.parametrize("kind", MEMORY_BACKENDS)
def test_a_read_only_store_reads_and_refuses_writes(kind: str, tmp_path: Path) -> None:
    with open_memory(kind, tmp_path) as store:
        remember(store, fact("a", "kept words"))
        reader = reopen(store, read_only=True)
        try:
            assert reader.memory_get("a") == fact("a", "kept words")
            assert search(reader, "kept") == ["a"]
            with pytest.raises(ms.storage.StorageError, match="read-only"):
                reader.memory_apply([RememberFact(fact("b"))])
            assert reader.memory_count() == 1
        finally:
            reader.close()


def test_a_read_only_sqlite_store_older_than_memory_answers_empty(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "store.db"
    ms.storage.SqliteStore(path).close()
    db = sqlite3.connect(path)
    with db:
        for name in ("memory_fts", "memory_facts"):
            db.execute(f"DROP TABLE {name}")
    db.close()
    reader = ms.storage.SqliteStore(path, read_only=True)
    try:
        assert reader.memory_count() == 0
        assert reader.memory_get("a") is None
        assert reader.memory_list(EVERYTHING, limit=5) == []
        assert reader.memory_search(["a"], FactFilter(), limit=5) == []
    finally:
        reader.close()
    db = sqlite3.connect(path)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    assert "memory_facts" not in tables  # nothing was created
    writer = ms.storage.SqliteStore(path)  # a writable open adds the tables
    try:
        remember(writer, fact("a"))
        assert writer.memory_count() == 1
    finally:
        writer.close()


def test_a_read_only_file_store_without_memory_answers_empty(tmp_path: Path) -> None:
    ms.storage.FileStore(tmp_path / "store").close()
    reader = ms.storage.FileStore(tmp_path / "store", read_only=True)
    try:
        assert reader.memory_count() == 0
        assert reader.memory_search(["a"], FactFilter(), limit=5) == []
    finally:
        reader.close()
    assert not (tmp_path / "store" / "memory.sqlite3").exists()


def test_text_is_bounded_and_a_damaged_row_is_skipped_not_deleted(memory_store: Any) -> None:
    longest = "x" * MAX_FACT_TEXT
    remember(memory_store, fact("long", longest), fact("ok", "fine words"))
    assert memory_store.memory_get("long").text == longest
    with pytest.raises(ValueError, match="characters"):
        fact("longer", "x" * (MAX_FACT_TEXT + 1))
    for column, value in [
        ("text", "y" * (MAX_FACT_TEXT + 1)),
        ("scope", "galaxy"),
        *wrong_values(memory_store),
        ("id", "x" * 300),
    ]:
        remember(memory_store, fact("victim", "fine words too"))
        tamper(memory_store, f"UPDATE memory_facts SET {column} = ? WHERE id = 'victim'", value)
        dropped = memory_store.memory_dropped
        assert memory_store.memory_get("victim") is None, column
        assert ids(memory_store.memory_list(EVERYTHING, limit=10)) == ["long", "ok"], column
        assert search(memory_store, "fine") == ["ok"], column
        assert memory_store.memory_dropped > dropped
        assert memory_store.memory_count() == 3  # never deleted by a read
        tamper(memory_store, "DELETE FROM memory_facts WHERE id = 'victim'")


def test_limits_are_checked(memory_store: Any) -> None:
    for limit in (0, -1, 1001, 2.0, True):
        with pytest.raises(ValueError, match="limit"):
            memory_store.memory_list(FactFilter(), limit=limit)
        with pytest.raises(ValueError, match="limit"):
            memory_store.memory_search(["a"], FactFilter(), limit=limit)


@pytest.mark.parametrize("kind", [k for k in MEMORY_BACKENDS if k in ("file", "sqlite")])
def test_memory_files_are_0600_even_under_umask_000(kind: str, tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with open_memory(kind, tmp_path) as store:
            remember(store, fact("a", "secret-ish"))
            files = store_files(store)
            assert any(p.name.endswith("-wal") for p in files)
            for path in files:
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    finally:
        os.umask(old)


@pytest.mark.parametrize("statement", ["BEGIN", "SELECT", "INSERT", "UPDATE", "DELETE", "COMMIT"])
def test_a_disk_error_applies_nothing_of_the_batch_and_raises_oserror(
    memory_store: Any, statement: str
) -> None:
    if not isinstance(memory_store, ms.storage.FileStore | ms.storage.SqliteStore):
        pytest.skip("a fault of SQLite's connection")
    remember(memory_store, fact("a", "old", conflict_group="g"), fact("c", "gone soon"))
    before = listed(memory_store)
    memory = sqlite_memory(memory_store)
    real = memory.db
    memory.db = FailingConnection(real, statement)
    batch = [
        RememberFact(fact("b", "new", conflict_group="g")),  # INSERT, then UPDATE of a
        ForgetFact("c"),  # DELETE
        RememberFact(fact("d", "another")),
    ]
    try:
        with pytest.raises(OSError, match="disk I/O error"):
            memory_store.memory_apply(batch)
    finally:
        memory.db = real
    assert not real.in_transaction  # rolled back, nothing half-open
    assert listed(memory_store) == before
    assert search(memory_store, "new another") == []
    assert len(memory_store.memory_apply(batch)) == 3  # and it recovers
    assert sorted(listed(memory_store)) == ["a", "b", "d"]


def test_a_statement_sqlite_refuses_undoes_that_write_alone_index_included(
    memory_store: Any,
) -> None:
    # A fact without a group is one statement and has no savepoint of its own: what SQLite
    # refuses midway (here a trigger, after the full-text row was added) it undoes alone.
    if not isinstance(memory_store, ms.storage.FileStore | ms.storage.SqliteStore):
        pytest.skip("a trigger in SQLite")
    remember(memory_store, fact("a", "old", conflict_group="g"))
    db = sqlite_memory(memory_store).db
    db.execute(
        "CREATE TRIGGER refuse AFTER INSERT ON memory_facts WHEN new.text LIKE 'refused%' "
        "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
    )
    answers = memory_store.memory_apply(
        [
            RememberFact(fact("b", "kept before")),
            RememberFact(fact("r1", "refused alone")),
            RememberFact(fact("r2", "refused grouped", conflict_group="g")),
            RememberFact(fact("c", "kept after")),
        ]
    )
    assert answers[0] == fact("b", "kept before")
    assert isinstance(answers[1], ValueError)
    assert isinstance(answers[2], ValueError)
    assert answers[3] == fact("c", "kept after")
    assert sorted(listed(memory_store)) == ["a", "b", "c"]
    assert memory_store.memory_get("a").superseded_by is None  # r2 superseded nothing
    assert sorted(search(memory_store, "kept refused alone grouped")) == ["b", "c"]
    # Nothing of the refused texts is left in the index itself (its rowids, its terms).
    assert (
        db.execute("SELECT rowid FROM memory_fts WHERE memory_fts MATCH 'refused'").fetchall() == []
    )
    db.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab('main', 'memory_fts', 'row')")
    terms = {term for (term,) in db.execute("SELECT term FROM temp.terms")}
    assert terms == {"old", "kept", "befor", "after"}, terms


def test_a_lone_surrogate_is_refused_by_the_record_on_every_backend() -> None:
    with pytest.raises(ValueError, match="lone surrogates"):
        Fact(id="fact-x", text="half \ud800 a pair", scope=Scope.PROJECT)


# ----------------------------------------------------------------------
# Memory against its reference model (``_memory_model.py``): random remember / forget /
# batch / search / list sequences run on every backend with memory at once, and after each
# step every backend holds exactly the model's facts (``superseded_by`` links included).
#
# What the rules imply, asserted after every step on what the backends store: every
# ``superseded_by`` names a stored fact of the same group remembered later (so there are no
# cycles); a fact without a group is never
# superseded. With one writer in one scope, the surviving facts of a group form one chain in
# the order they were remembered (each superseded by the next, the last one current).

IDS = tuple(f"f{i}" for i in range(8))
WORDS = VOCABULARY[:5]  # few words: searches often match
NOWS = (100.0, 200.0, 300.0, 400.0)


@st.composite
def facts(draw: st.DrawFn, superseded: bool = False) -> Fact:
    fact_id = draw(st.sampled_from(IDS))
    scope = draw(st.sampled_from(list(Scope)))
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    return Fact(
        id=fact_id,
        text=" ".join(words),
        scope=scope,
        organization=draw(st.sampled_from(["org-a", "org-b"]))
        if scope is Scope.ORGANIZATION
        else None,
        domain=draw(st.sampled_from(["general", "build"])),
        confidence=draw(st.sampled_from([0.0, 0.3, 0.5, 1.0])),
        valid_until=draw(st.sampled_from([None, None, 150.0, 250.0, 350.0])),
        conflict_group=draw(st.sampled_from([None, "g1", "g1", "g2"])),
        created_at=float(draw(st.integers(0, 4))),
        superseded_by=draw(st.sampled_from([i for i in IDS if i != fact_id]))
        if superseded
        else None,
    )


@st.composite
def remembers(draw: st.DrawFn, superseded: bool = False) -> RememberFact:
    """A fact and its writer's organization (its own for an organization fact; any for one
    of another scope): whose organization facts it may supersede."""
    fact = draw(facts(superseded))
    if fact.scope is Scope.ORGANIZATION:
        return RememberFact(fact)
    return RememberFact(fact, organization=draw(st.sampled_from([None, "org-a", "org-b"])))


writes = st.one_of(
    remembers(),
    remembers(),
    st.sampled_from(IDS).map(ForgetFact),
    remembers(superseded=True),  # refused: a new fact names no superseder
)


@st.composite
def narrow_filters(draw: st.DrawFn) -> FactFilter:
    organization = draw(st.sampled_from([None, "org-a", "org-b"]))
    scopes = draw(st.none() | st.frozensets(st.sampled_from(list(Scope))))
    if scopes is not None and Scope.ORGANIZATION in scopes and organization is None:
        organization = "org-a"
    return FactFilter(
        scopes=scopes,
        domain=draw(st.sampled_from([None, "general", "build"])),
        min_confidence=draw(st.sampled_from([0.0, 0.5])),
        organization=organization,
        now=draw(st.sampled_from(NOWS)),
        include_hidden=draw(st.booleans()),
    )


# Half the time everything a caller may see at some moment: the chain rules at work.
broad = st.builds(FactFilter, organization=st.just("org-a"), now=st.sampled_from(NOWS))
filters = st.one_of(broad, narrow_filters())
terms = st.lists(st.sampled_from((*WORDS, "zebra")), max_size=3, unique=True)


def check_links(stored: dict[str, Fact], order: dict[str, int]) -> None:
    """Writers of several organizations (no single chain per group): each link names a
    later item of the same group. (That no writer supersedes another organization's facts
    is the model's rule, which every backend matches.)"""
    for item in stored.values():
        if item.superseded_by is None:
            continue
        newer = stored[item.superseded_by]
        assert newer.conflict_group == item.conflict_group is not None, item
        assert order[newer.id] > order[item.id], (item, newer)


def check_chains(stored: dict[str, Fact], order: dict[str, int]) -> None:
    groups: dict[str, list[Fact]] = {}
    for item in stored.values():
        if item.conflict_group is None:
            assert item.superseded_by is None, item
        else:
            groups.setdefault(item.conflict_group, []).append(item)
    for members in groups.values():
        members.sort(key=lambda item: order[item.id])
        links = [item.superseded_by for item in members]
        assert links == [item.id for item in members[1:]] + [None], members


class MemoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = MemoryModel()
        self.root = Path(tempfile.mkdtemp(prefix="memory-machine-"))
        self.exits = contextlib.ExitStack()
        self.stores: list[Any] = []
        for kind in usable_backends():
            (self.root / kind).mkdir()
            opened = open_memory(kind, self.root / kind, examples=True)
            self.stores.append(self.exits.enter_context(opened))

    def _apply(self, batch: list[Any]) -> None:
        expected = self.model.apply(batch)
        for store in self.stores:
            answers = store.memory_apply(batch)
            assert len(answers) == len(expected)
            for answer, wanted in zip(answers, expected, strict=True):
                if isinstance(wanted, type):
                    assert isinstance(answer, wanted), (store, answer)
                else:
                    assert answer == wanted, (store, answer, wanted)

    @rule(write=writes)
    def write_one(self, write: Any) -> None:
        self._apply([write])

    @rule(batch=st.lists(writes, min_size=2, max_size=5))
    def write_a_batch(self, batch: list[Any]) -> None:
        self._apply(batch)

    @rule(words=terms, where=filters, limit=st.sampled_from([1, 2, 3, 1000]))
    def search(self, words: list[str], where: FactFilter, limit: int) -> None:
        assert where.now is not None
        expected = self.model.matches(words, where, where.now)
        for store in self.stores:
            every = store.memory_search(words, where, limit=1000)
            assert {hit.fact.id for hit in every} == expected, store
            keys = [(-hit.score, hit.fact.id) for hit in every]
            assert keys == sorted(keys)  # best first, ties by id
            for hit in every:
                assert hit.fact == self.model.facts[hit.fact.id]
            assert store.memory_search(words, where, limit=limit) == every[:limit]

    @rule(where=filters, limit=st.sampled_from([1, 2, 5, 1000]), data=st.data())
    def list_facts(self, where: FactFilter, limit: int, data: st.DataObject) -> None:
        assert where.now is not None
        keys = sorted((f.created_at, f.id) for f in self.model.facts.values())
        after = data.draw(st.none() | st.sampled_from(keys)) if keys else None
        expected = self.model.listing(where, where.now, limit, after)
        for store in self.stores:
            assert store.memory_list(where, limit=limit, after=after) == expected, store

    @invariant()
    def every_backend_holds_the_models_facts(self) -> None:
        for store in self.stores:
            assert store.memory_count() == len(self.model.facts)
            stored = {fact_id: store.memory_get(fact_id) for fact_id in self.model.facts}
            assert stored == self.model.facts, store
            check_links(stored, self.model.order)
            assert store.memory_dropped == 0

    def teardown(self) -> None:
        self.exits.close()
        shutil.rmtree(self.root, ignore_errors=True)


TestMemoryAgainstTheModel = pytest.mark.timeout(SHRINKING)(MemoryMachine.TestCase)
TestMemoryAgainstTheModel.settings = settings(
    max_examples=examples(100), stateful_step_count=25, deadline=None
)


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@pytest.mark.parametrize("kind", MEMORY_BACKENDS)
@settings(max_examples=examples(60), deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(IDS), st.sampled_from(["g1", "g2"]), st.booleans()),
        min_size=1,
        max_size=40,
    )
)
def test_each_group_is_one_chain_in_remembering_order_whose_head_is_shown(
    kind: str, steps: list[tuple[str, str, bool]]
) -> None:
    """Many facts in few groups, remembered and forgotten in any order, nothing expiring:
    each group is one chain in remembering order, and a search shows its last fact only."""
    with (
        tempfile.TemporaryDirectory() as root,
        open_memory(kind, Path(root), examples=True) as store,
    ):
        check_one_chain_per_group(store, steps)


def check_one_chain_per_group(memory_store: Any, steps: list[tuple[str, str, bool]]) -> None:
    model = MemoryModel()
    for fact_id, group, remembering in steps:
        if remembering:
            batch: list[Any] = [
                RememberFact(
                    Fact(id=fact_id, text=f"ember {group}", scope=Scope.USER, conflict_group=group)
                )
            ]
        else:
            batch = [ForgetFact(fact_id)]
        model.apply(batch)
        memory_store.memory_apply(batch)
    stored = {f.id: f for f in memory_store.memory_list(FactFilter(include_hidden=True), limit=100)}
    assert stored == model.facts
    check_chains(stored, model.order)
    heads = {
        group: max(
            (f for f in stored.values() if f.conflict_group == group),
            key=lambda f: model.order[f.id],
        )
        for group in {f.conflict_group for f in stored.values()}
    }
    shown = memory_store.memory_search(["ember"], FactFilter(), limit=100)
    assert sorted(hit.fact.id for hit in shown) == sorted(f.id for f in heads.values())


# ----------------------------------------------------------------------
# Agent memory: a closed store's memory stays closed. FileStore
# opened ``memory.sqlite3`` again on the next memory call (a connection nobody closes, e.g.
# ``rt.memory.search`` after the runtime exited), where SqliteStore raised StorageError.

CALLS: dict[str, Callable[[Any], object]] = {
    "get": lambda store: store.memory_get("a"),
    "list": lambda store: store.memory_list(FactFilter(), limit=10),
    "search": lambda store: store.memory_search(["fact"], FactFilter(), limit=10),
    "count": lambda store: store.memory_count(),
    "remember": lambda store: store.memory_apply([RememberFact(fact("b"))]),
    "forget": lambda store: store.memory_apply([ForgetFact("a")]),
}


@pytest.mark.parametrize("used", [True, False])
@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_D4_a_closed_store_refuses_memory_calls(
    kind: str, call: str, used: bool, tmp_path: Path
) -> None:
    with open_memory(kind, tmp_path) as store:
        if used:  # its memory opened before the close, or never
            remember(store, fact("a"))
        store.close()
        with pytest.raises(StorageError):
            CALLS[call](store)
        if isinstance(store, ms.storage.FileStore):
            assert store._memory._memory is None  # nothing opened again


# ----------------------------------------------------------------------
# Agent memory: forgetting a stored row that does not read back
# deletes it by its stored columns, the same on every backend (``storage._memory``: such rows
# take part in the rules by their stored columns): what it superseded passes to its stored
# superseder. Before, PostgreSQL deleted it and SQLite refused (``ValueError``), so a damaged
# row that hid its group's facts could not be forgotten there at all.


def _damage(store: Any, fact_id: str) -> None:
    (column, value), *_ = wrong_values(store)
    assert column == "confidence"  # a column no rule looks at
    tamper(store, "UPDATE memory_facts SET confidence = ? WHERE id = ?", value, fact_id)
    assert store.memory_get(fact_id) is None


@pytest.mark.parametrize("with_heir", [False, True])
def test_K4_forgetting_an_unreadable_row_deletes_it_and_relinks(
    memory_store: Any, with_heir: bool
) -> None:
    remember(memory_store, fact("a", "lemon tart", conflict_group="g"))
    remember(memory_store, fact("b", "lemon pie", conflict_group="g", created_at=2.0))
    if with_heir:
        remember(memory_store, fact("c", "lemon cake", conflict_group="g", created_at=3.0))
        remember(memory_store, fact("a2", "lemon curd", created_at=4.0))  # no group
    _damage(memory_store, "b")
    assert forget(memory_store, "b") is True
    assert memory_store.memory_count() == (3 if with_heir else 1)
    assert memory_store.memory_get("a").superseded_by == ("c" if with_heir else None)
    shown = memory_store.memory_list(FactFilter(now=10.0), limit=10)
    assert [f.id for f in shown] == (["c", "a2"] if with_heir else ["a"])
    assert forget(memory_store, "b") is False


# ----------------------------------------------------------------------
# Agent memory, supersession and organizations: a fact remembered in
# a conflict group supersedes the group's current facts of every scope, but never the
# organization facts of another organization (the writer could not see them). Every backend.


def _org(fact_id: str, organization: str, **fields: Any) -> Any:
    return fact(
        fact_id, scope=Scope.ORGANIZATION, organization=organization, conflict_group="g", **fields
    )


@pytest.mark.parametrize("writer", [None, "org-b"])
def test_K2_a_writer_never_supersedes_another_organizations_facts(
    memory_store: Any, writer: str | None
) -> None:
    # Before: org-a's fact was marked superseded by a runtime of org-b (or of none), and
    # org-a could no longer see it (its superseder it cannot even read).
    remember(memory_store, _org("a1", "org-a", text="deploys on friday"))
    remember(memory_store, fact("u1", text="deploys on monday", conflict_group="g"))
    memory_store.memory_apply(
        [
            RememberFact(
                fact("u2", text="deploys on sunday", conflict_group="g", created_at=2.0),
                organization=writer,
            )
        ]
    )
    assert memory_store.memory_get("a1").superseded_by is None
    assert memory_store.memory_get("u1").superseded_by == "u2"  # other scopes: crossed
    seen_by_a = memory_store.memory_search(
        ["deploys"], FactFilter(organization="org-a", now=10.0), limit=10
    )
    assert {hit.fact.id for hit in seen_by_a} == {"a1", "u2"}


def test_K2_a_writer_supersedes_its_own_organizations_facts(memory_store: Any) -> None:
    remember(memory_store, _org("a1", "org-a"), _org("b1", "org-b"))
    memory_store.memory_apply(
        [RememberFact(fact("u2", conflict_group="g", created_at=2.0), organization="org-a")]
    )
    assert memory_store.memory_get("a1").superseded_by == "u2"
    assert memory_store.memory_get("b1").superseded_by is None
    remember(memory_store, _org("b2", "org-b", created_at=3.0))  # its writer: org-b
    assert memory_store.memory_get("b1").superseded_by == "b2"
    assert memory_store.memory_get("u2").superseded_by == "b2"
    assert memory_store.memory_get("a1").superseded_by == "u2"


def test_K2_the_writers_organization_is_checked() -> None:
    with pytest.raises(ValueError, match="its own organization"):
        RememberFact(_org("a1", "org-a"), organization="org-b")
    with pytest.raises(ValueError, match="its own organization"):
        RememberFact(_org("a1", "org-a"), organization=None)
    with pytest.raises(ValueError, match="organization must"):
        RememberFact(fact("u1"), organization="not an id!")
    assert RememberFact(_org("a1", "org-a")).organization == "org-a"  # its own by default
    assert RememberFact(fact("u1")).organization is None


def test_K2_a_forged_writer_organization_is_refused_by_every_backend(memory_store: Any) -> None:
    write = RememberFact(_org("a1", "org-a"))
    object.__setattr__(write, "organization", "org-b")
    (answer,) = memory_store.memory_apply([write])
    assert isinstance(answer, ValueError)
    assert memory_store.memory_count() == 0


# ----------------------------------------------------------------------
# Agent memory: remembering again the id of a stored row that does not
# read back answers that write's error alone, on every backend, with or without a conflict
# group. Before, SQLite's one-statement path for a fact without a group (no savepoint) let the
# error escape ``memory_apply``: the whole batch was rolled back and raised.


@pytest.mark.parametrize("group", [None, "g"])
def test_K4_a_replayed_id_of_an_unreadable_row_answers_its_error_alone(
    memory_store: Any, group: str | None
) -> None:
    remember(memory_store, fact("old", "lemon tart", conflict_group=group))
    (column, value), *_ = wrong_values(memory_store)
    tamper(memory_store, f"UPDATE memory_facts SET {column} = ? WHERE id = ?", value, "old")
    assert memory_store.memory_get("old") is None
    before, again, after = memory_store.memory_apply(
        [
            RememberFact(fact("a", "before")),
            RememberFact(fact("old", "lemon tart", conflict_group=group)),
            RememberFact(fact("b", "after")),
        ]
    )
    assert before == fact("a", "before")
    assert isinstance(again, ValueError)
    assert after == fact("b", "after")
    assert memory_store.memory_count() == 3


# ----------------------------------------------------------------------
# Agent memory, rows that do not read back as facts: every backend
# applies the same rule (``storage._memory``): such a row is never shown, but takes part in
# the rules by its stored columns. Before, PostgreSQL marked one superseded when a new fact
# joined its group and SQLite skipped it; and a damaged superseder hid a fact when it was the
# direct one (the SQL check) but not further down the chain (the walk).

NOW = 10.0


def _damage_unreadable(store: Any, fact_id: str) -> None:
    """Make the row unreadable through a column no rule looks at (its confidence)."""
    (column, value), *_ = wrong_values(store)
    assert column == "confidence"
    tamper(store, "UPDATE memory_facts SET confidence = ? WHERE id = ?", value, fact_id)
    assert store.memory_get(fact_id) is None


def _repair(store: Any, fact_id: str) -> None:
    tamper(store, "UPDATE memory_facts SET confidence = ? WHERE id = ?", 0.5, fact_id)


def _shown(store: Any) -> tuple[list[str], list[str]]:
    where = FactFilter(now=NOW)
    searched = [hit.fact.id for hit in store.memory_search(["lemon"], where, limit=10)]
    listed = [f.id for f in store.memory_list(where, limit=10)]
    return sorted(searched), sorted(listed)


def test_K4_a_new_fact_of_its_group_supersedes_an_unreadable_row(memory_store: Any) -> None:
    remember(memory_store, fact("old", "lemon tart", conflict_group="g"))
    _damage_unreadable(memory_store, "old")
    remember(memory_store, fact("new", "lemon cake", conflict_group="g", created_at=2.0))
    _repair(memory_store, "old")
    assert memory_store.memory_get("old").superseded_by == "new"
    assert _shown(memory_store) == (["new"], ["new"])


@pytest.mark.parametrize("superseder_expired", [False, True])
def test_K4_an_unreadable_direct_superseder_still_hides_what_it_superseded(
    memory_store: Any, superseder_expired: bool
) -> None:
    # Its stored expiry cannot be trusted (the row does not read): it counts as unexpired.
    until = 5.0 if superseder_expired else None
    remember(memory_store, fact("a", "lemon tart", conflict_group="g"))
    remember(
        memory_store,
        fact("c", "lemon cake", conflict_group="g", created_at=2.0, valid_until=until),
    )
    _damage_unreadable(memory_store, "c")
    assert _shown(memory_store) == ([], [])


def test_K4_an_unreadable_superseder_down_the_chain_still_hides_the_first_fact(
    memory_store: Any,
) -> None:
    remember(memory_store, fact("a", "lemon tart", conflict_group="g"))
    remember(memory_store, fact("b", "lemon pie", conflict_group="g", valid_until=5.0))
    remember(memory_store, fact("c", "lemon cake", conflict_group="g", created_at=3.0))
    _damage_unreadable(memory_store, "c")
    # b expired, so a is hidden only if c, further down, hides: as it would directly.
    assert _shown(memory_store) == ([], [])
    _repair(memory_store, "c")
    assert _shown(memory_store) == (["c"], ["c"])
