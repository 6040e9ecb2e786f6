"""B3 in the command: `ls`, `show`, `events` and their --json say what a run's model calls
spent, and a run waiting for budget says which budget ran out and what the rest needs."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_OK, EXIT_USAGE
from mainspring.executions import WithUsage
from mainspring.storage import Usage

from ._cli_kit import run_cli

SPENT = Usage(input_tokens=1200, output_tokens=300, cost=Decimal("0.0450"))


async def _chat(prompt: str = "") -> WithUsage:
    return WithUsage(f"said {prompt}", usage=SPENT)


def _plan() -> ms.Plan:
    return ms.Plan(id="p", goal="g", steps=(
        ms.PlanStep(id="a", skill="chat", input={"prompt": "one"}),
        ms.PlanStep(id="b", skill="chat", input={"prompt": "two"}, depends_on=("a",)),
    ))  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite3"

    async def build() -> None:
        async with ms.open_runtime(store=path, skills={"chat": _chat}, max_tokens=1000) as rt:
            result = await (await rt.start("g", _plan(), execution_id="ex-1")).wait()
            assert result.status == "waiting_for_budget"

    anyio.run(build)
    return path


def test_B3_ls_shows_tokens_and_cost_as_a_table_and_as_json(store: Path) -> None:
    code, out = run_cli("ls", "--store", str(store))
    assert code == EXIT_OK
    header, row = out.splitlines()
    columns = header.split()
    assert columns[4:7] == ["CALLS", "TOKENS", "COST"]
    cells = row.split()
    assert cells[0] == "ex-1"
    assert cells[4:7] == ["1", "1,500", "0.0450"]
    code, out = run_cli("ls", "--store", str(store), "--json")
    (entry,) = json.loads(out)
    assert entry["usage"] == {"input_tokens": 1200, "output_tokens": 300, "cost": "0.0450"}


def test_B3_show_says_the_usage_its_limits_and_the_budget_that_ran_out(store: Path) -> None:
    code, out = run_cli("show", "ex-1", "--store", str(store))
    assert code == EXIT_OK
    assert "usage:   1,500 tokens (1,200 in, 300 out) of 1,000, cost 0.0450" in out
    assert "budget:  tokens exhausted; the rest of the plan needs 1 more calls" in out
    # A budget wait has no question: its line ends with when it began, not with ": ".
    (pending,) = [line for line in out.splitlines() if line.startswith("pending: budget")]
    assert not pending.rstrip().endswith(":"), pending
    code, out = run_cli("show", "ex-1", "--store", str(store), "--json")
    data: dict[str, Any] = json.loads(out)
    assert data["usage"] == {"input_tokens": 1200, "output_tokens": 300, "cost": "0.0450"}
    assert data["max_tokens"] is None  # the runtime's default, not set for this run
    assert data["pending"]["budget"]["max_tokens"] == 1000
    assert data["pending"]["budget"]["budget"] == "tokens"
    assert data["pending"]["budget"]["needed"] == 1


def test_B3_V1_the_history_carries_tokens_and_cost_as_numbers(store: Path) -> None:
    code, out = run_cli("events", "ex-1", "--store", str(store), "--json")
    assert code == EXIT_OK
    steps = [e for e in map(json.loads, out.splitlines()) if e["kind"] == "step"]
    done = next(e for e in steps if e["step_id"] == "a" and e["status"] == "succeeded")
    assert (done["input_tokens"], done["output_tokens"], done["cost"]) == (1200, 300, "0.0450")
    code, out = run_cli("events", "ex-1", "--store", str(store))
    assert "1500 tokens, cost 0.0450" in out


_APP = """
from decimal import Decimal
from mainspring.executions import WithUsage
from mainspring.storage import Usage

SPENT = Usage(input_tokens=1200, output_tokens=300, cost=Decimal("0.0450"))

async def _chat(prompt=""):
    return WithUsage(f"said {prompt}", usage=SPENT)

def config():
    return {"skills": {"chat": _chat}, "max_tokens": 1000}
"""


def test_B3_resume_from_the_command_raises_a_budget_and_the_run_goes_on(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mainspring resume ID --max-tokens N --app ...` is `rt.resume(id, max_tokens=N)`: the
    run that waited for its tokens budget finishes; bad budgets and deadlines are usage
    errors, refused before anything is opened."""
    (tmp_path / "usageapp.py").write_text(_APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    where = ("--store", str(store), "--app", "usageapp:config")
    for bad in (("--max-tokens", "-1"), ("--max-tokens", "1.5"), ("--max-cost", "NaN"),
                ("--max-calls", "2000000"), ("--deadline", "soon")):  # fmt: skip
        code, _ = run_cli("resume", "ex-1", *where, *bad)
        assert code == EXIT_USAGE, bad
    sqlite = ms.storage.SqliteStore(store)
    try:
        waiting = sqlite.get("ex-1")
    finally:
        sqlite.close()
    assert waiting is not None
    assert waiting.status == "waiting_for_budget"  # nothing was changed by the refusals
    code, out = run_cli("resume", "ex-1", *where, "--max-tokens", "5000", "--deadline", "1h")
    assert code == EXIT_OK, out
    assert "ex-1: completed" in out, out
    code, out = run_cli("show", "ex-1", "--store", str(store), "--json")
    data: dict[str, Any] = json.loads(out)
    assert data["status"] == "completed"
    assert data["max_tokens"] == 5000
    assert data["usage"]["input_tokens"] == 2400  # both calls, across the resume (E9)
