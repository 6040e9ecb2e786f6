"""``mainspring memory ls | search | forget``: what agents remember, seen and forgotten from
outside, on SQLite, file and PostgreSQL stores.

Reads open the store read-only and change nothing (E7); ``forget`` writes through a runtime
(the persistence actor); bad input is a usage error (2), an unknown fact unknown (3), and
neither changes anything. What is printed is redacted (E5)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE
from mainspring.cli._memory import TEXT_WIDTH
from mainspring.cli._parser import MEMORY_SCOPES

from .._cli_kit import run_cli
from .._postgres import postgres_url

__all__ = ["postgres_url", "store"]

SECRET = "ghp_" + "b" * 36
LONG = "the release checklist lives in docs/release.md " + "and it is long " * 20


def _seed(store: str) -> dict[str, str]:
    """Facts of every kind; their ids by name."""

    async def main() -> dict[str, str]:
        ids: dict[str, str] = {}
        async with ms.open_runtime(store=store, organization="acme") as rt:
            memory = rt.memory
            ids["blue"] = (
                await memory.remember("the deploy uses blue-green rollouts", domain="ops")
            ).id
            ids["canary"] = (
                await memory.remember(
                    "deploys use canary releases", domain="ops", conflict_group="deploy"
                )
            ).id
            ids["rolling"] = (
                await memory.remember(
                    "deploys use rolling updates",
                    domain="ops",
                    conflict_group="deploy",
                    confidence=0.7,
                )
            ).id
            ids["tabs"] = (
                await memory.remember(f"the user prefers tabs; token {SECRET}", scope="user")
            ).id
            ids["style"] = (
                await memory.remember("the style guide is in the wiki", scope="organization")
            ).id
            ids["jenkins"] = (
                await memory.remember(
                    "the build server was jenkins", scope="repository", valid_until=1.0
                )
            ).id
            ids["long"] = (await memory.remember(LONG, scope="repository", confidence=0.2)).id
        return ids

    return anyio.run(main)


@pytest.fixture(params=["sqlite", "files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    path = tmp_path / ("s.sqlite3" if request.param == "sqlite" else "files")
    return str(path)


def _json(*argv: str) -> Any:
    code, out = run_cli(*argv, "--json")
    assert code == EXIT_OK, (argv, out)
    return json.loads(out)


def _snapshot(path: str) -> dict[str, str]:
    """Every file of a store by its hash: what a read must not change. SQLite's shared
    memory index, and a WAL with nothing in it, are how a read-only reader opens a WAL
    database, not content."""
    root = Path(path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    files += [Path(f"{path}-wal"), Path(f"{path}-shm")] if root.is_file() else []
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in files
        if p.exists()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


def test_ls_shows_visible_facts_oldest_first_and_all_adds_the_hidden(store: str) -> None:
    ids = _seed(store)
    listed = _json("memory", "ls", "--store", store)
    # Superseded (canary), expired (jenkins) and organization facts (no --organization)
    # are not shown; the low-confidence one is (no --min-confidence).
    assert [f["id"] for f in listed] == [ids["blue"], ids["rolling"], ids["tabs"], ids["long"]]
    assert set(listed[0]) == {
        "id", "text", "scope", "organization", "domain", "confidence", "valid_until",
        "expired", "conflict_group", "superseded_by", "created_at", "execution_id",
        "task_id", "step_id",
    }  # fmt: skip
    assert listed[1]["conflict_group"] == "deploy"
    assert listed[1]["confidence"] == 0.7
    every = {f["id"]: f for f in _json("memory", "ls", "--all", "--store", store)}
    assert set(every) == set(ids.values()) - {ids["style"]}
    assert every[ids["canary"]]["superseded_by"] == ids["rolling"]
    assert every[ids["jenkins"]]["expired"] is True
    assert every[ids["blue"]]["expired"] is False
    code, out = run_cli("memory", "ls", "--all", "--store", store)
    assert code == EXIT_OK
    header, *rows = out.splitlines()
    assert header.split() == ["ID", "SCOPE", "DOMAIN", "CONF", "STATE", "TEXT"]
    assert len(rows) == 6  # one line per fact
    line = {row.split()[0]: row for row in rows}
    assert " superseded " in line[ids["canary"]]
    assert " expired " in line[ids["jenkins"]]
    assert " 0.70 " in line[ids["rolling"]]
    assert line[ids["long"]].endswith("…")
    assert len(line[ids["long"]].split("  ")[-1].strip()) <= TEXT_WIDTH


def test_filters_scope_domain_confidence_and_organization(store: str) -> None:
    ids = _seed(store)

    def listed(*argv: str) -> list[str]:
        return [f["id"] for f in _json("memory", "ls", *argv, "--store", store)]

    assert listed("--scope", "user", "--scope", "repository") == [ids["tabs"], ids["long"]]
    assert listed("--domain", "ops") == [ids["blue"], ids["rolling"]]
    assert listed("--min-confidence", "0.5") == [ids["blue"], ids["rolling"], ids["tabs"]]
    assert listed("--organization", "acme", "--scope", "organization") == [ids["style"]]
    assert ids["style"] in listed("--organization", "acme")
    assert listed("--organization", "other", "--scope", "organization") == []
    org = _json("memory", "ls", "--organization", "acme", "--scope", "organization", "--store",
                store)  # fmt: skip
    assert org[0]["organization"] == "acme"
    assert org[0]["scope"] == "organization"
    _, out = run_cli("memory", "ls", "--organization", "acme", "--store", store)
    assert "organization:acme" in out


def test_search_ranks_visible_facts_by_the_stores_full_text_rank(store: str) -> None:
    ids = _seed(store)
    found = _json("memory", "search", "deploy rollouts", "--store", store)
    assert found["ranking"] == "bm25"
    assert found["fallback"] is None
    hits = [hit["fact"]["id"] for hit in found["hits"]]
    assert hits[0] == ids["blue"]  # both words
    assert set(hits) == {ids["blue"], ids["rolling"]}  # the superseded one is not shown
    scores = [hit["score"] for hit in found["hits"]]
    assert scores == sorted(scores, reverse=True)
    one = _json("memory", "search", "deploy", "--limit", "1", "--store", store)
    assert len(one["hits"]) == 1
    assert (
        _json("memory", "search", "deploy", "--domain", "general", "--store", store)["hits"] == []
    )
    assert _json("memory", "search", "wiki", "--store", store)["hits"] == []  # organization
    wiki = _json("memory", "search", "wiki", "--organization", "acme", "--store", store)
    assert [hit["fact"]["id"] for hit in wiki["hits"]] == [ids["style"]]
    code, out = run_cli("memory", "search", "deploy", "--store", store)
    assert code == EXIT_OK
    header, *rows = out.splitlines()
    assert header.split()[:2] == ["SCORE", "ID"]
    assert rows[-1] == "(ranked by bm25)"
    assert len(rows) == 3


def test_a_query_without_words_finds_nothing(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(store)
    assert _json("memory", "search", " ?! ", "--store", store)["hits"] == []
    code, out = run_cli("memory", "search", "?!", "--store", store)
    assert (code, out) == (EXIT_OK, "no matching facts\n")
    assert "no words" in capsys.readouterr().err


def test_ls_pages_with_after(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = _seed(store)
    seen: list[str] = []
    after: list[str] = []
    while True:
        page = _json("memory", "ls", "--all", "--limit", "2", *after, "--store", store)
        seen += [f["id"] for f in page]
        if len(page) < 2:
            break
        after = ["--after", page[-1]["id"]]
    assert sorted(seen) == sorted(set(ids.values()) - {ids["style"]})
    assert len(seen) == len(set(seen))  # each once
    code, out = run_cli("memory", "ls", "--limit", "2", "--store", store)
    assert out.splitlines()[-1] == f"(more may follow: --after {ids['rolling']})"
    code, _ = run_cli("memory", "ls", "--after", "fact-nope", "--store", store)
    assert code == EXIT_UNKNOWN
    assert "no fact fact-nope" in capsys.readouterr().err


def test_reads_change_nothing_on_disk(store: str) -> None:
    _seed(store)
    before = _snapshot(store)
    for argv in (["ls"], ["ls", "--all"], ["search", "deploy"], ["ls", "--after", "fact-x"]):
        run_cli("memory", *argv, "--store", store)
        run_cli("memory", *argv, "--json", "--store", store)
    assert _snapshot(store) == before


def test_forget_deletes_through_the_runtime_and_what_it_superseded_is_current_again(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _seed(store)
    code, out = run_cli("memory", "forget", ids["rolling"], "--store", store)
    assert (code, out) == (EXIT_OK, f"{ids['rolling']}: forgotten\n")
    listed = [f["id"] for f in _json("memory", "ls", "--store", store)]
    assert ids["rolling"] not in listed
    assert ids["canary"] in listed  # re-linked to no superseder: current again
    assert _json("memory", "forget", ids["blue"], "--store", store) == {
        "id": ids["blue"],
        "forgotten": True,
    }
    capsys.readouterr()
    before = _snapshot(store)
    every = _json("memory", "ls", "--all", "--store", store)
    code, out = run_cli("memory", "forget", ids["blue"], "--json", "--store", store)
    assert (code, out) == (EXIT_UNKNOWN, "")
    assert json.loads(capsys.readouterr().err) == {
        "error": f"no fact {ids['blue']} in this store",
        "code": EXIT_UNKNOWN,
    }
    assert _snapshot(store) == before  # nothing changed
    assert _json("memory", "ls", "--all", "--store", store) == every


@pytest.mark.parametrize("memory_tables", [True, False])
def test_forgetting_an_unknown_fact_writes_nothing(
    store: str, memory_tables: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every memory action reads first: an unknown fact is reported before the store is
    opened for writing, so nothing is written, not even the memory tables of a store made
    before there was memory (dropped here) or a FileStore's memory database."""
    opened = ms.storage.open_store(store)[1]
    opened()
    if not memory_tables and store.endswith(".sqlite3"):
        db = sqlite3.connect(store)
        db.execute("DROP TABLE memory_fts")
        db.execute("DROP TABLE memory_facts")
        db.commit()
        db.close()
    before = _snapshot(store)
    for argv in (["ls"], ["search", "x"], ["forget", "fact-1"]):
        run_cli("memory", *argv, "--store", store)
    assert _snapshot(store) == before
    assert "no fact fact-1 in this store" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["forget", "bad/id"], "is not a valid fact id"),
        (["forget", ".."], "is not a valid fact id"),
        (["ls", "--after", "a b"], "is not a valid fact id"),
        (["ls", "--scope", "organization"], "--scope organization needs --organization"),
        (["search", "x", "--scope", "organization"], "needs --organization"),
        (["ls", "--scope", "team"], "invalid choice"),
        (["ls", "--min-confidence", "1.5"], "not a confidence"),
        (["ls", "--min-confidence", "nan"], "not a confidence"),
        (["ls", "--min-confidence", "high"], "not a confidence"),
        (["ls", "--limit", "0"], "not a limit"),
        (["ls", "--limit", "1001"], "not a limit"),
        (["search", "x", "--limit", "ten"], "not a limit"),
        (["ls", "--domain", "a/b"], "not a valid domain"),
        (["ls", "--domain", "d" * 129], "not a valid domain"),
        (["ls", "--organization", ""], "not a valid organization"),
        (["forget", "fact-1", "--organization", "a b"], "not a valid organization"),
        ([], "required: ACTION"),
        (["search"], "required: QUERY"),
    ],
)
def test_bad_input_is_a_usage_error_and_changes_nothing(
    tmp_path: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s.sqlite3")
    _seed(store)
    capsys.readouterr()
    before = _snapshot(store)
    code, out = run_cli("memory", *argv, "--store", store)
    assert (code, out) == (EXIT_USAGE, "")
    assert says in capsys.readouterr().err
    code, _ = run_cli("memory", *argv, "--json", "--store", store)
    assert code == EXIT_USAGE
    error = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert error["code"] == EXIT_USAGE
    assert says in error["error"]
    assert _snapshot(store) == before


def test_what_is_printed_is_redacted(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = _seed(store)
    for argv in (["ls"], ["ls", "--json"], ["search", "tabs"], ["search", "tabs", "--json"]):
        code, out = run_cli("memory", *argv, "--store", store)
        assert code == EXIT_OK
        assert ids["tabs"] in out
        assert SECRET not in out
    # A secret typed as a query is not searched for, nor echoed in an error.
    code, out = run_cli("memory", "search", SECRET, "--store", store)
    assert code == EXIT_OK
    assert SECRET not in out
    code, _ = run_cli("memory", "forget", SECRET, "--store", store)
    assert code == EXIT_UNKNOWN
    assert SECRET not in capsys.readouterr().err


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("MAINSPRING_HOME", str(path))
    monkeypatch.delenv("MAINSPRING_STORE", raising=False)
    return path


def test_an_empty_home_remembers_nothing_and_creates_nothing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_cli("memory", "ls")
    assert code == EXIT_OK
    assert out.startswith("no facts yet")
    assert run_cli("memory", "ls", "--json") == (EXIT_OK, "[]\n")
    code, out = run_cli("memory", "search", "deploy", "--json")
    assert json.loads(out) == {"ranking": "bm25", "fallback": None, "hits": []}
    code, _ = run_cli("memory", "forget", "fact-1")
    assert code == EXIT_UNKNOWN
    assert "no fact fact-1" in capsys.readouterr().err
    assert not home.exists()


def test_the_scope_choices_are_the_stores_scopes() -> None:
    assert tuple(scope.value for scope in ms.storage.Scope) == MEMORY_SCOPES


def test_the_command_reads_and_forgets_on_postgresql(postgres_url: str) -> None:
    ids = _seed(postgres_url)
    listed = [f["id"] for f in _json("memory", "ls", "--store", postgres_url)]
    assert listed == [ids["blue"], ids["rolling"], ids["tabs"], ids["long"]]
    found = _json("memory", "search", "deploy rollouts", "--store", postgres_url)
    assert found["ranking"] == "ts_rank"
    assert found["hits"][0]["fact"]["id"] == ids["blue"]
    org = _json("memory", "ls", "--scope", "organization", "--organization", "acme",
                "--store", postgres_url)  # fmt: skip
    assert [f["id"] for f in org] == [ids["style"]]
    code, _ = run_cli("memory", "forget", ids["rolling"], "--store", postgres_url)
    assert code == EXIT_OK
    listed = [f["id"] for f in _json("memory", "ls", "--store", postgres_url)]
    assert ids["canary"] in listed
    assert ids["rolling"] not in listed
    code, _ = run_cli("memory", "forget", ids["rolling"], "--store", postgres_url)
    assert code == EXIT_UNKNOWN


# ----------------------------------------------------------------------
# ``mainspring memory``: what the command prints of a fact's text.

#: What a fact's text may hold that a terminal would act on: a screen clear and colours
#: (CSI), a carriage return over the line, a bell, a backspace, DEL, a C1 CSI, a bidi
#: override and a zero-width space.
NASTY = "evil \x1b[2J\x1b[31mred\x1b[0m \rOVER\x07 \x08\x7f \x9b31m \u202eright \u200bzw"


def _remember(store: str, text: str) -> str:
    async def main() -> str:
        async with ms.open_runtime(store=store) as rt:
            return (await rt.memory.remember(text, domain="ops")).id

    return anyio.run(main)


@pytest.fixture(params=["sqlite", "files"])
def store_cli_memory(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / ("s.sqlite3" if request.param == "sqlite" else "files"))


@pytest.mark.parametrize("argv", [["ls"], ["ls", "--all"], ["search", "evil"]])
def test_U7_control_characters_in_a_fact_never_reach_the_terminal_raw(
    store_cli_memory: str, argv: list[str]
) -> None:
    fact_id = _remember(store_cli_memory, NASTY)
    code, out = run_cli("memory", *argv, "--store", store_cli_memory)
    assert code == EXIT_OK
    assert fact_id in out
    for line in out.splitlines():
        assert line.isprintable(), repr(line)
    assert "\\x1b[2J" in out  # shown as what it is, not dropped
    code, out = run_cli("memory", *argv, "--json", "--store", store_cli_memory)
    assert out.isascii()  # JSON escapes them, and keeps the text whole
    found = json.loads(out)
    facts = found if isinstance(found, list) else [hit["fact"] for hit in found["hits"]]
    assert [fact["text"] for fact in facts] == [NASTY]


# ----------------------------------------------------------------------
# ``mainspring memory forget`` of an organization's fact
# needs that organization (``--organization``), as ``ls`` and ``search`` need it to show the
# fact: without it (or with another) the command says so, exits 3 and changes nothing. Before,
# the store's raw read found the fact and the runtime's forget then refused it, or deleted it
# for any organization.


@pytest.mark.parametrize("organization", [[], ["--organization", "globex"]])
def test_K2_forgetting_an_organizations_fact_needs_that_organization(
    store: str, organization: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _seed(store)
    capsys.readouterr()
    before = _snapshot(store)
    code, _ = run_cli("memory", "forget", ids["style"], *organization, "--json", "--store", store)
    assert code == EXIT_UNKNOWN
    error = json.loads(capsys.readouterr().err)["error"]
    assert "--organization" in error
    assert _snapshot(store) == before
    code, out = run_cli(
        "memory", "forget", ids["style"], "--organization", "acme", "--store", store
    )
    assert (code, out) == (EXIT_OK, f"{ids['style']}: forgotten\n")
    org = _json("memory", "ls", "--all", "--organization", "acme", "--store", store)
    assert ids["style"] not in [fact["id"] for fact in org]
