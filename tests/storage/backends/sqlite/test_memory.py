"""Review of memory on the SQLite family (issue #16): a row whose text is not UTF-8 (written
by another tool, or a damaged page) is skipped like any other row that does not read back,
instead of failing every read of memory (and so every ``mainspring memory`` command)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mainspring.cli import EXIT_OK, EXIT_UNKNOWN
from mainspring.storage import FileStore
from mainspring.storage._backends.file.memory import MEMORY_FILE
from mainspring.storage._seam import FactFilter, query_terms
from tests._cli_kit import run_cli
from tests.storage._memory_kit import fact, memory_store, open_memory, remember, tamper

__all__ = ["memory_store"]

EVERYTHING = FactFilter(include_hidden=True)
#: "deploy", a byte no UTF-8 text holds, " notes".
NOT_UTF8 = "CAST(X'6465706c6f79ff206e6f746573' AS TEXT)"


@pytest.mark.parametrize("kind", ["sqlite", "file"])
@pytest.mark.parametrize("column", ["text", "domain", "id", "conflict_group", "organization"])
def test_K4_a_row_that_is_not_utf8_is_skipped_not_fatal(
    kind: str, column: str, tmp_path: Path
) -> None:
    with open_memory(kind, tmp_path) as store:
        remember(store, fact("ok", "deploy notes that read"), fact("victim", "deploy words"))
        tamper(store, f"UPDATE memory_facts SET {column} = {NOT_UTF8} WHERE id = 'victim'")
        dropped = store.memory_dropped
        where = "victim" if column != "id" else "nothing-matches-this"
        assert store.memory_get(where) is None
        assert [f.id for f in store.memory_list(EVERYTHING, limit=10)] == ["ok"]
        hits = store.memory_search(query_terms("deploy"), FactFilter(), limit=10)
        assert [hit.fact.id for hit in hits] == ["ok"]
        assert store.memory_dropped > dropped
        assert store.memory_count() == 2  # skipped, never deleted by a read


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_K4_the_command_lists_and_searches_past_a_row_that_is_not_utf8(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_memory(kind, tmp_path) as store:
        remember(store, fact("ok", "deploy notes that read"), fact("victim", "deploy words"))
        tamper(store, f"UPDATE memory_facts SET text = {NOT_UTF8} WHERE id = 'victim'")
    path = str(tmp_path / ("store.db" if kind == "sqlite" else "store"))  # the kit's
    for argv in (["ls"], ["ls", "--all"], ["search", "deploy"]):
        code, out = run_cli("memory", *argv, "--store", path)
        assert code == EXIT_OK, capsys.readouterr().err
        assert "ok" in out.split()
        assert "victim" not in out
    code, _ = run_cli("memory", "forget", "victim", "--store", path)
    assert code == EXIT_UNKNOWN  # a row that does not read back is not a fact


# ----------------------------------------------------------------------
# Agent memory in the stores: bugs found by attacking SqliteStore,
# FileStore and PostgresStore directly, each pinned by a test (every backend).


def _search(store: Any, query: str) -> list[str]:
    hits = store.memory_search(query_terms(query), FactFilter(), limit=10)
    return [hit.fact.id for hit in hits]


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("İstanbul in spring", "İstanbul"),  # lowercased, İ becomes i + a combining dot
        ("हिन्दी भाषा", "हिन्दी"),  # Devanagari: vowel signs and virama are marks
        ("עִבְרִית מְדֻבֶּרֶת", "עִבְרִית"),  # Hebrew with its vowel points
        ("ஒரு தமிழ் சொல்", "தமிழ்"),  # Tamil
    ],
)
def test_a_word_with_combining_marks_finds_the_fact_it_came_from(
    memory_store: Any, text: str, query: str
) -> None:
    # A query's words keep their combining marks: cut at each mark, a word became
    # fragments that no backend's index holds as such (PostgreSQL found nothing).
    remember(memory_store, fact("word", text), fact("other", "something else entirely"))
    assert _search(memory_store, query) == ["word"]
    assert _search(memory_store, text) == ["word"]


def test_query_terms_keep_marks_inside_words_and_drop_lone_ones() -> None:
    assert query_terms("हिन्दी, भाषा!") == ["हिन्दी", "भाषा"]
    assert query_terms("café") == ["café"]
    assert query_terms("cafe\u0301 au lait") == ["cafe\u0301", "au", "lait"]
    assert query_terms("\u0301\u0301 alone") == ["alone"]  # marks with no letter: nothing
    assert query_terms("a-b c_d") == ["a", "b", "c_d"]


@pytest.mark.parametrize(
    "after",
    [
        ("1.0", "a"),
        (True, "a"),
        (float("nan"), "a"),
        (float("inf"), "a"),
        [1.0, "a"],
        (1.0, "a", "x"),
    ],
)
def test_K5_a_listing_refuses_a_malformed_after_on_every_backend(
    memory_store: Any, after: Any
) -> None:
    # SQLite and the file store took these (a string or a bool as the time, NaN: silently
    # an empty page, a third item ignored); PostgreSQL refused them.
    remember(memory_store, fact("a"), fact("b"))
    with pytest.raises(ValueError, match="after"):
        memory_store.memory_list(FactFilter(include_hidden=True), limit=10, after=after)


def test_K5_reads_refuse_what_is_not_a_filter_or_terms_on_every_backend(memory_store: Any) -> None:
    remember(memory_store, fact("a", "alpha"))
    for where in ({}, None, "user"):
        with pytest.raises(TypeError, match="FactFilter"):
            memory_store.memory_list(where, limit=10)
        with pytest.raises(TypeError, match="FactFilter"):
            memory_store.memory_search(["alpha"], where, limit=10)
    # One str is not a sequence of terms: on SQLite each character was a term (nothing found).
    with pytest.raises(TypeError, match="terms"):
        memory_store.memory_search("alpha", FactFilter(), limit=10)
    with pytest.raises(TypeError, match="terms"):
        memory_store.memory_search([1, 2], FactFilter(), limit=10)
    assert [h.fact.id for h in memory_store.memory_search(("alpha",), FactFilter(), limit=1)] == [
        "a"
    ]


def _file_state(path: Path) -> list[tuple[str, int, bytes]]:
    return sorted((p.name, p.stat().st_mtime_ns, p.read_bytes()) for p in path.iterdir())


def test_E7_a_read_of_an_empty_sidecar_writes_nothing_and_a_write_marks_its_layout(
    tmp_path: Path,
) -> None:
    # An empty memory.sqlite3 (left by a crash between creating it and its first write):
    # a read wrote a database header into it, and the write after never set its layout.
    store_dir = tmp_path / "store"
    FileStore(store_dir).close()
    sidecar = store_dir / MEMORY_FILE
    os.close(os.open(sidecar, os.O_CREAT | os.O_RDWR, 0o600))
    before = _file_state(store_dir)
    store = FileStore(store_dir)
    try:
        assert store.memory_count() == 0
        assert store.memory_list(FactFilter(), limit=5) == []
        assert store.memory_search(["x"], FactFilter(), limit=5) == []
        assert _file_state(store_dir) == before
        remember(store, fact("a", "x marks"))
    finally:
        store.close()
    db = sqlite3.connect(sidecar)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()


def test_E7_a_read_never_changes_a_sidecar_journal_mode(tmp_path: Path) -> None:
    # A sidecar in rollback-journal mode (a restored copy): a read switched it to WAL.
    store_dir = tmp_path / "store"
    store = FileStore(store_dir)
    try:
        remember(store, fact("a", "kept words"))
    finally:
        store.close()
    sidecar = store_dir / MEMORY_FILE
    db = sqlite3.connect(sidecar)
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    before = _file_state(store_dir)
    store = FileStore(store_dir)
    try:
        assert [h.fact.id for h in store.memory_search(["kept"], FactFilter(), limit=5)] == ["a"]
        assert store.memory_get("a") is not None
        assert _file_state(store_dir) == before
        remember(store, fact("b", "more words"))  # a write makes it WAL again
        assert store.memory_count() == 2
    finally:
        store.close()
    db = sqlite3.connect(sidecar)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()
