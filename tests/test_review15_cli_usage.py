"""Review of B3 in the command: each agent task's tokens and cost are shown by ``show`` and
``tasks`` (not only in --json), and ``events`` prints a cost as ``ls`` / ``show`` do
(0.0000001, not 1E-7)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_OK
from mainspring.executions import WithUsage
from mainspring.storage import Usage

from ._cli_kit import run_cli

TINY = Usage(input_tokens=1200, output_tokens=34, cost=Decimal("1E-7"))


async def _chat(prompt: str = "") -> WithUsage:
    return WithUsage(f"said {prompt}", usage=TINY)


async def _writer(ctx: ms.AgentContext, input: Any) -> str:
    return str(await ctx.call_skill("chat", "draft"))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite3"
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="w", agent="writer"),))

    async def build() -> None:
        async with ms.open_runtime(
            store=path, skills={"chat": _chat}, agents={"writer": _writer}
        ) as rt:
            result = await (await rt.start("g", plan, execution_id="ex-1")).wait()
            assert result.status == "completed"

    anyio.run(build)
    return path


@pytest.mark.parametrize("command", [["show", "ex-1"], ["tasks", "ex-1"]])
def test_B3_the_agent_task_table_says_each_tasks_tokens_and_cost(
    store: Path, command: list[str]
) -> None:
    code, out = run_cli(*command, "--store", str(store))
    assert code == EXIT_OK
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:2] == ["TASK", "STATE"])
    header, row = lines[at].split(), lines[at + 1].split()
    assert header[header.index("CALLS") + 1 : header.index("CALLS") + 3] == ["TOKENS", "COST"]
    assert row[header.index("TOKENS")] == "1,234"
    assert row[header.index("COST")] == "0.0000001"


def test_B3_events_print_a_cost_as_plain_decimal_text_and_json_stays_exact(
    store: Path,
) -> None:
    code, out = run_cli("events", "ex-1", "--store", str(store))
    assert code == EXIT_OK
    assert "1234 tokens, cost 0.0000001" in out
    assert "1E-7" not in out
    code, out = run_cli("events", "ex-1", "--store", str(store), "--json")
    costs = {json.loads(line).get("cost") for line in out.splitlines()} - {None}
    assert {Decimal(cost) for cost in costs} == {Decimal("1E-7")}
