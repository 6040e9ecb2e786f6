"""Review 14: a run resumed twice in a row, in fresh runtimes, hands user code what the live
run handed it (E10): typed values in outputs, ctx.step results and step inputs."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from tests._exact import same
from tests._raw import read_raw, write_raw
from tests.executions._kit import FAST, Gate, plan_of, runtime, stored

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

VALUES: dict[Any, Any] = {
    "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "day": dt.date(2024, 2, 29),
    "raw": b"\x00\xff",
    "set": {1, 2, 3},
    "fs": frozenset({"a"}),
    (1, 2): "pair",
    "tuple": (1, (2, 3)),
    "dec": decimal.Decimal("1.10"),
    "id": uuid.UUID(int=7),
    "big": 2**70,
    "nan": float("nan"),
    "tag-like": {"$ms": "set", "v": [1]},
}


async def test_E10_two_resumes_in_a_row_hand_back_the_live_values(tmp_path: Path) -> None:
    gate = Gate()
    handed: dict[str, list[Any]] = {"produce": [], "inner": [], "echo": []}

    async def produce(**_: Any) -> dict[Any, Any]:
        return VALUES

    async def echo(values: Any) -> Any:
        handed["echo"].append(values)
        return values

    async def keep(ctx: ms.AgentContext, input: Any) -> Any:
        got = await ctx.step("v", lambda: VALUES)
        handed["inner"].append(got)
        await ctx.step("park", gate)
        return got

    tools = {"produce": produce, "echo": echo, "gate": gate}
    agents = {"keep": keep}
    plan = plan_of(
        ms.PlanStep(id="produce", tool="produce"),
        ms.PlanStep(id="keep", agent="keep", depends_on=("produce",)),
        ms.PlanStep(id="echo", tool="echo", input={"values": VALUES}, depends_on=("keep",)),
    )
    async with runtime(tmp_path, tools=tools, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        with anyio.fail_after(30):
            await handle.wait()
    for last in (False, True):
        gate.entered = anyio.Event()
        async with runtime(tmp_path, tools=tools, agents=agents, **FAST) as rt:
            handle = await rt.resume(handle.execution_id)
            await gate.entered.wait()
            if last:
                gate.opened.set()
            else:
                await rt.pause(handle.execution_id)
            with anyio.fail_after(30):
                result = await handle.wait()
            record = stored(rt, handle.execution_id)
    assert result.status == "completed", result
    assert len(handed["inner"]) == 3
    for got in handed["inner"]:
        assert same(got, VALUES), got
    (echoed,) = handed["echo"]
    assert same(echoed, VALUES), echoed
    for step_id in ("produce", "keep", "echo"):
        assert same(result.outputs[step_id], VALUES), (step_id, result.outputs[step_id])
    assert record.plan is not None
    assert same(record.plan.steps[2].input, {"values": VALUES})


def _worker(mode: str, store: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.executions._twice_worker", mode, str(store), "ex-twice"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def _until_ready(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.strip() == "ready":
            break
    return lines


def test_E10_killed_twice_and_resumed_in_fresh_processes_hands_back_the_live_values(
    tmp_path: Path,
) -> None:
    """Real processes: start, SIGKILL once the agent's inner work is durable, resume in a
    fresh process, SIGKILL again, resume in a third. Every process hands the agent, its
    input and the tool the values the live run had; no durable inner step runs again."""
    store = tmp_path / "store.sqlite3"
    seen: list[str] = []
    for mode in ("start", "resume"):
        proc = _worker(mode, store)
        try:
            lines = _until_ready(proc)
        finally:
            proc.kill()
            proc.wait(timeout=30)
            assert proc.stdout is not None
            proc.stdout.close()
        assert lines[-1:] == ["ready"], (mode, lines)
        seen += [f"{mode}: {line}" for line in lines]
    proc = _worker("finish", store)
    out, _ = proc.communicate(timeout=60)
    seen += [f"finish: {line}" for line in out.splitlines()]
    assert proc.returncode == 0, seen
    assert "finish: status completed" in seen, seen
    assert not [line for line in seen if "ran again" in line or line.endswith("False")], seen
    assert sum(1 for line in seen if line.endswith("same inner True")) == 3, seen
    assert "finish: same echo True" in seen, seen


async def test_E10_an_old_record_s_masked_inner_result_is_not_replayed_as_the_original(
    tmp_path: Path,
) -> None:
    """The issue's own reproduction, on a record the previous version wrote: a ctx.step's
    result `{"token": ...}` was stored as `{"token": "[redacted secret]"}`, with no `redacted`
    flag (the field did not exist). Resumed after upgrading, the agent must not be handed the
    masked value as if it were the original: the step runs again (E10)."""

    token = "tok-" + "y" * 28
    got: list[Any] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        got.append(await ctx.step("fetch", lambda: {"token": token}))
        await ctx.ask("go on?")
        return "done"

    async with runtime(tmp_path, agents={"w": worker}) as rt:
        first = await (await rt.start("g", plan_of(ms.PlanStep(id="a", agent="w")))).wait()
    assert first.status == "waiting_for_clarification"
    body = read_raw(tmp_path / "store.sqlite3", first.execution_id)
    for task in body["agent_tasks"]:
        for obs in task["inner_observations"]:
            assert obs.pop("redacted") is (obs["step_id"] == "fetch")
    write_raw(tmp_path / "store.sqlite3", first.execution_id, body)
    async with runtime(tmp_path, agents={"w": worker}) as rt:
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, answer="yes")).wait()
    assert done.status == "completed", done
    assert got == [{"token": token}, {"token": token}], got


async def test_E10_a_masked_output_read_back_after_a_resume_is_named_in_result_redacted(
    tmp_path: Path,
) -> None:
    """README: "a result read back from disk has the masked value in outputs, names the step
    in ExecutionResult.redacted, and its observation says redacted=True" — for a run resumed
    after that step completed, in another runtime, with more steps run after it."""
    token = "tok-" + "z" * 28
    gate = Gate()

    async def leaky(**_: Any) -> dict[str, str]:
        return {"token": token, "page": "1"}

    tools = {"leaky": leaky, "gate": gate}
    plan = plan_of(
        ms.PlanStep(id="t", tool="leaky"),
        ms.PlanStep(id="g", tool="gate", depends_on=("t",)),
    )
    async with runtime(tmp_path, tools=tools, **FAST) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        with anyio.fail_after(30):
            await handle.wait()
    gate.opened.set()
    async with runtime(tmp_path, tools=tools, **FAST) as rt:
        with anyio.fail_after(30):
            done = await (await rt.resume(handle.execution_id)).wait()
    assert done.status == "completed", done
    assert done.outputs["t"] == {"token": "[redacted secret]", "page": "1"}
    assert done.redacted == ("t",)
    (obs,) = [o for o in done.observations if o.step_id == "t"]
    assert obs.redacted is True
