"""Review of memory on the SQLite family (issue #16): a row whose text is not UTF-8 (written
by another tool, or a damaged page) is skipped like any other row that does not read back,
instead of failing every read of memory (and so every ``mainspring memory`` command)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mainspring.cli import EXIT_OK, EXIT_UNKNOWN
from mainspring.storage._seam import FactFilter, query_terms
from tests._cli_kit import run_cli
from tests.storage._memory_kit import fact, open_memory, remember, tamper

EVERYTHING = FactFilter(include_hidden=True)
#: "deploy", a byte no UTF-8 text holds, " notes".
NOT_UTF8 = "CAST(X'6465706c6f79ff206e6f746573' AS TEXT)"


@pytest.mark.parametrize("kind", ["sqlite", "file"])
@pytest.mark.parametrize("column", ["text", "domain", "id", "conflict_group", "organization"])
def test_a_row_that_is_not_utf8_is_skipped_not_fatal(
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
def test_the_command_lists_and_searches_past_a_row_that_is_not_utf8(
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
