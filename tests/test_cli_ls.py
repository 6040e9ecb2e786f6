"""``ls``: newest first, ``--status S[,S]``, ``--limit N`` and ``--since DURATION|ISO``, and a
table that fits the terminal (``$COLUMNS``), the goal cut with an ellipsis."""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_OK, EXIT_USAGE
from mainspring.cli._reads import _chosen
from mainspring.storage import SqliteStore

from ._cli_kit import inc, run_cli

LONG_GOAL = "Survey every open dataset on river temperatures and summarise the trends by decade"


async def _asker(ctx: ms.AgentContext, input: Any) -> str:
    return str(await ctx.ask("which rivers?"))


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, float]:
    """ex-old (completed), then ex-ask (waiting for an answer) and ex-new (completed);
    with the time between the first and the others."""
    path = tmp_path / "s.sqlite3"
    between = 0.0

    async def build() -> None:
        nonlocal between
        tools = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="inc"),))
        asks = ms.Plan(id="q", goal="g", steps=(ms.PlanStep(id="a", agent="asker"),))
        async with ms.open_runtime(store=path, tools={"inc": inc}, agents={"asker": _asker}) as rt:
            await (await rt.start(LONG_GOAL, tools, execution_id="ex-old")).wait()
            between = time.time()
            await (await rt.start("ask", asks, execution_id="ex-ask")).wait()
            await (await rt.start("short", tools, execution_id="ex-new")).wait()

    anyio.run(build)
    return path, between


def _ids(*argv: str) -> list[str]:
    code, out = run_cli("ls", "--json", *argv)
    assert code == EXIT_OK
    return [e["id"] for e in json.loads(out)]


def test_ls_filters_by_status_limit_and_since(built: tuple[Path, float]) -> None:
    path, between = built
    store = ("--store", str(path))
    assert _ids(*store) == ["ex-new", "ex-ask", "ex-old"]  # newest first
    assert _ids(*store, "--status", "completed") == ["ex-new", "ex-old"]
    both = ["ex-new", "ex-ask", "ex-old"]
    assert _ids(*store, "--status", "completed,waiting_for_clarification") == both
    assert _ids(*store, "--status", "completed", "--status", "failed") == ["ex-new", "ex-old"]
    assert _ids(*store, "--limit", "2") == ["ex-new", "ex-ask"]
    assert _ids(*store, "--status", "completed", "--limit", "1") == ["ex-new"]
    assert _ids(*store, "--since", "1h") == both
    local = datetime.fromtimestamp(between).isoformat()  # no zone: local time
    assert _ids(*store, "--since", local) == ["ex-new", "ex-ask"]
    utc = datetime.fromtimestamp(between).astimezone().isoformat()
    assert _ids(*store, "--since", utc) == ["ex-new", "ex-ask"]
    code, out = run_cli("ls", *store, "--status", "paused")
    assert (code, out.split()) == (EXIT_OK, ["ID", "STATUS", "GOAL", "STEPS", "CALLS",
                                             "TOKENS", "COST", "LEASE", "UPDATED"])  # fmt: skip


def test_ls_since_a_duration_counts_back_from_the_stores_clock(built: tuple[Path, float]) -> None:
    path, _ = built
    db = SqliteStore(path, read_only=True)
    try:
        executions = db.list().executions
        now = db.now()
    finally:
        db.close()

    def chosen(since: tuple[str, float], at: float) -> list[str]:
        args = argparse.Namespace(statuses=None, since=since, limit=None)
        return [e.id for e in _chosen(executions, args, at)]

    assert len(chosen(("ago", 3600), now)) == 3
    assert chosen(("ago", 3600), now + 7200) == []  # two hours on: none in the last hour


@pytest.mark.parametrize("argv", [["--status", "done"], ["--limit", "0"], ["--limit", "x"]])
def test_ls_bad_filters_are_usage_errors(built: tuple[Path, float], argv: list[str]) -> None:
    path, _ = built
    assert run_cli("ls", "--store", str(path), *argv)[0] == EXIT_USAGE


def test_ls_fits_the_terminal(built: tuple[Path, float], monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = built
    monkeypatch.setenv("COLUMNS", "120")
    code, out = run_cli("ls", "--store", str(path))
    assert code == EXIT_OK
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 120  # it used to: 40 goal columns, 131 wide
    [old] = [line for line in lines if line.startswith("ex-old")]
    assert "  Survey every open dataset" in old
    assert "\u2026  1/1" in old  # cut with the ellipsis, the next column still lines up
    assert old.index("1/1") == lines[0].index("STEPS")

    monkeypatch.setenv("COLUMNS", "250")  # wide: the whole goal
    _, out = run_cli("ls", "--store", str(path))
    assert f"  {LONG_GOAL}  1/1" in out

    monkeypatch.delenv("COLUMNS")  # no terminal (a pipe): 40 columns of goal, as before
    _, out = run_cli("ls", "--store", str(path))
    assert f"  {LONG_GOAL[:39]}\u2026  1/1" in out
