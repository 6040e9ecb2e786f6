"""``mainspring show`` says why a run failed (O2): counts by outcome (a failed step is never
"done"), each step's duration, each failed step's error, and with ``--traceback`` the
traceback kept for it; ``--json`` carries them all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

import mainspring as ms
from mainspring.storage import RetryPolicy

from .._cli_kit import run_cli
from ..executions._kit import agent, plan_of, runtime, tool

pytestmark = pytest.mark.anyio


async def boom(**_: Any) -> int:
    raise ValueError("bad input 1")


async def _failed_run(tmp_path: Path, plan: ms.Plan, **options: Any) -> str:
    async with runtime(tmp_path, tools={"boom": boom}, **options) as rt:
        result = await (await rt.start("g", plan, execution_id="run1")).wait()
    assert result.status == "failed"
    return str(tmp_path / "store.sqlite3")


async def test_O2_show_counts_outcomes_and_prints_the_failed_steps_error(tmp_path: Path) -> None:
    store = await _failed_run(tmp_path, plan_of(tool("ok", "inc"), tool("boom", "boom", "ok")))
    code, out = run_cli("--store", store, "show", "run1")
    assert code == 0
    assert "steps:   1 succeeded, 1 failed of 2" in out
    assert "2/2 done" not in out
    assert "  step boom (tool boom): ValueError: bad input 1" in out
    assert "Traceback" not in out  # only with --traceback
    (row,) = [line for line in out.splitlines() if line.startswith("boom ")]
    assert " s " in f"{row} "  # its duration, in seconds


async def test_O2_show_traceback_prints_where_the_step_failed(tmp_path: Path) -> None:
    store = await _failed_run(tmp_path, plan_of(tool("boom", "boom")))
    code, out = run_cli("--store", store, "show", "--traceback", "run1")
    assert code == 0
    assert "Traceback (most recent call last):" in out
    assert "in boom" in out
    assert "ValueError: bad input 1" in out


async def test_O2_show_traceback_prints_each_failed_attempt(tmp_path: Path) -> None:
    retry = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001)
    store = await _failed_run(tmp_path, plan_of(attrs.evolve(tool("boom", "boom"), retry=retry)))
    code, out = run_cli("--store", store, "show", "--traceback", "run1")
    assert code == 0
    assert "step boom: attempt 1 of 2 failed" in out
    assert " after 0." in out  # how long the attempt ran (O2)
    assert "    attempt 1:" in out
    assert "    attempt 2:" in out
    assert out.count("in boom") == 2


async def test_O2_show_prints_an_agents_failure_and_its_traceback(tmp_path: Path) -> None:
    async def scout(ctx: ms.AgentContext, input: Any) -> str:
        raise RuntimeError("the scout got lost")

    plan = plan_of(agent("a", "scout"))
    store = await _failed_run(tmp_path, plan, agents={"scout": scout})
    code, out = run_cli("--store", store, "show", "--traceback", "run1")
    assert code == 0
    assert "RuntimeError: the scout got lost" in out
    assert "in scout" in out


async def test_O2_show_json_carries_tracebacks_and_times(tmp_path: Path) -> None:
    store = await _failed_run(tmp_path, plan_of(tool("ok", "inc"), tool("boom", "boom", "ok")))
    code, out = run_cli("--store", store, "show", "--json", "run1")
    assert code == 0
    shown = {o["step_id"]: o for o in json.loads(out)["observations"]}
    assert shown["boom"]["error_type"] == "ValueError"
    assert "in boom" in shown["boom"]["traceback"]
    for step_id in ("ok", "boom"):
        assert shown[step_id]["started_at"] <= shown[step_id]["ended_at"]
    assert "traceback" not in shown["ok"]  # left out while unset


async def test_O2_show_traceback_prints_where_the_planner_failed(tmp_path: Path) -> None:
    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        raise IndexError("no plan today")

    async with runtime(tmp_path, planner=planner) as rt:
        result = await (await rt.start("g", execution_id="run1")).wait()
    assert result.status == "failed"
    store = str(tmp_path / "store.sqlite3")
    code, out = run_cli("--store", store, "show", "--traceback", "run1")
    assert code == 0
    assert "why:     the planner failed: IndexError: no plan today" in out
    assert "  planner: the planner failed: IndexError: no plan today" in out
    assert "in planner" in out


async def test_O2_show_never_takes_a_step_called_plan_for_the_planner(tmp_path: Path) -> None:
    store = await _failed_run(tmp_path, plan_of(tool("plan", "boom")))
    code, out = run_cli("--store", store, "show", "run1")
    assert code == 0
    assert "  step plan (tool boom): ValueError: bad input 1" in out
    assert "planner:" not in out


async def many_lines(**_: Any) -> int:
    raise ValueError("first\n" + "line\n" * 400 + "the last line says most")


async def test_O2_show_traceback_keeps_the_end_of_a_long_traceback(tmp_path: Path) -> None:
    async with runtime(tmp_path, tools={"many": many_lines}) as rt:
        await (await rt.start("g", plan_of(tool("m", "many")), execution_id="run1")).wait()
    store = str(tmp_path / "store.sqlite3")
    code, out = run_cli("--store", store, "show", "--traceback", "run1")
    assert code == 0
    assert "the last line says most" in out
    assert "[traceback cut: its first " in out


async def test_O2_ls_counts_a_failed_step_as_failed_never_as_done(tmp_path: Path) -> None:
    """``ls``'s steps cell is succeeded of all, then the failed and skipped ones: the
    reproduction's failed run read "2/2" (its failed step counted as done)."""
    plan = plan_of(tool("ok", "inc"), tool("boom", "boom", "ok"), tool("after", "inc", "boom"))
    store = await _failed_run(tmp_path, plan)
    code, out = run_cli("--store", store, "ls")
    (row,) = [line for line in out.splitlines() if line.startswith("run1")]
    assert (code, "1/3 (1 failed, 1 skipped)" in row) == (0, True), row
    code, out = run_cli("--store", store, "ls", "--json")
    assert code == 0
    (listed,) = json.loads(out)
    assert (listed["steps_succeeded"], listed["steps_failed"], listed["steps_total"]) == (1, 1, 3)
