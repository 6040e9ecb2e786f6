"""U1: the command prints on any stdout encoding. What the stream cannot encode is written as
an ASCII stand-in ("..." for "…"), never a UnicodeEncodeError; tested in real processes
with ``PYTHONIOENCODING=ascii`` and ``LANG=C``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_OK, EXIT_USAGE
from mainspring.cli._console import ascii_stand_in

from .._cli_kit import inc

#: The checkout, for the command's own processes.
ROOT = Path(__file__).resolve().parents[2]

GOAL = "Compare café prices — then write a résumé of the “findings” at length, please"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite3"

    async def build() -> None:
        async with ms.open_runtime(store=path, tools={"inc": inc}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="inc"),))
            await (await rt.start(GOAL, plan, execution_id="ex-1")).wait()

    anyio.run(build)
    return path


def _run_ascii(*argv: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LC_ALL", "LC_CTYPE")}
    env.update(PYTHONIOENCODING="ascii", LANG="C", LC_ALL="C", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "mainspring.cli", *argv],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_u1_ls_on_an_ascii_stdout_shortens_goals_with_three_dots(store: Path) -> None:
    done = _run_ascii("ls", "--store", str(store))
    assert done.returncode == EXIT_OK, done.stderr  # it used to: UnicodeEncodeError on "…"
    assert b"Traceback" not in done.stderr
    out = done.stdout.decode("ascii")  # nothing but ASCII
    header, row = out.splitlines()
    assert "  Compare cafe prices - then write a re...  1/1  " in row  # 40 columns, "..." too
    assert row.index("1/1") == header.index("STEPS")  # the columns line up


def test_u1_show_and_errors_on_an_ascii_stream(store: Path) -> None:
    done = _run_ascii("show", "ex-1", "--store", str(store))
    assert done.returncode == EXIT_OK, done.stderr
    assert b'goal:    Compare cafe prices - then write a resume of the "findings"' in done.stdout
    bad = _run_ascii("show", "caf\u00e9", "--store", str(store))  # the id is echoed, on stderr
    assert bad.returncode == EXIT_USAGE
    assert b"Traceback" not in bad.stderr
    assert b"is not a valid execution id" in bad.stderr


def test_u1_ascii_stand_ins() -> None:
    assert ascii_stand_in("\u2026") == "..."
    assert ascii_stand_in("\u2014") == "-"
    assert ascii_stand_in("\u00e9") == "e"
    assert ascii_stand_in("\u2603") == "\\u2603"  # nothing closer: its escape
    assert ascii_stand_in("\udcff") == "\\udcff"  # a byte a file name could not decode
