"""How an ExecutionActor's run ends on disk: every final write (completed, failed,
cancelled, paused, waiting) releases the lease in that same write (L3), never in a
second write a crash could fall between."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from tests._cli_kit import run_cli

from ._kit import FAST, Gate, Ledger, RecordingSqliteStore, agent, linear, plan_of, runtime, tool

ROOT = Path(__file__).resolve().parents[2]


class _ReleaseCounting(RecordingSqliteStore):
    """Every version committed (as RecordingSqliteStore) and every separate release."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.releases: list[str] = []

    def release(self, execution_id: str, owner: str) -> bool:
        self.releases.append(execution_id)
        return super().release(execution_id, owner)


def _ended_in_one_write(store: _ReleaseCounting, execution_id: str, status: str) -> None:
    last = [v for v in store.versions if v.id == execution_id][-1]
    assert last.status == status
    assert last.lease is not None
    assert last.lease.owner == ""  # L3: the final write itself gives the lease up
    assert store.releases == []  # and no second write does
    on_disk = store.get(execution_id)
    assert on_disk is not None
    assert on_disk.status == status
    assert on_disk.lease is not None
    assert (on_disk.lease.owner, on_disk.lease.epoch) == ("", last.lease.epoch)


async def _asker(ctx: ms.AgentContext, input: Any) -> str:
    return await ctx.ask("which one?")


@pytest.mark.anyio
@pytest.mark.parametrize("ending", ["completed", "failed", "waiting_for_clarification"])
async def test_L5_a_run_that_finishes_releases_its_lease_in_its_final_write(
    tmp_path: Path, ending: str
) -> None:
    store = _ReleaseCounting(tmp_path / "s.sqlite3")
    plans = {
        "completed": linear(2),
        "failed": plan_of(tool("s0", "fail")),
        "waiting_for_clarification": plan_of(agent("a", "asker")),
    }
    try:
        async with runtime(store, Ledger(), agents={"asker": _asker}, **FAST) as rt:
            result = await (await rt.start("g", plans[ending], execution_id="ex-1")).wait()
            assert result.status == ending
            _ended_in_one_write(store, "ex-1", ending)
    finally:
        store.close()


@pytest.mark.anyio
@pytest.mark.parametrize("control", ["pause", "cancel"])
async def test_L5_a_paused_or_cancelled_run_releases_its_lease_in_that_write(
    tmp_path: Path, control: str
) -> None:
    store = _ReleaseCounting(tmp_path / "s.sqlite3")
    gate = Gate()
    try:
        async with runtime(store, Ledger(), tools={"gate": gate}, **FAST) as rt:
            handle = await rt.start("g", plan_of(tool("s0", "gate")), execution_id="ex-1")
            with anyio.fail_after(30):
                await gate.entered.wait()
            await (rt.pause if control == "pause" else rt.cancel)("ex-1")
            result = await handle.wait()
            status = "paused" if control == "pause" else "cancelled"
            assert result.status == status
            _ended_in_one_write(store, "ex-1", status)
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_L5_a_run_killed_right_after_its_final_write_is_held_by_nobody(tmp_path: Path) -> None:
    """A real process, SIGKILLed as soon as its run's final write is durable: the run is
    completed, its lease already released by that write, and doctor finds nothing."""
    store = tmp_path / "files"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.executions._final_kill_worker", str(store), "ex-1"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    on_disk = ms.storage.FileStore(store, read_only=True).get("ex-1")
    assert on_disk is not None
    assert on_disk.status == "completed"
    assert on_disk.lease is not None
    assert on_disk.lease.owner == ""  # released by the final write itself
    code, out = run_cli("doctor", "--store", str(store), "--json")
    assert (code, json.loads(out)["findings"]) == (0, [])


@pytest.mark.anyio
async def test_R3_a_cancelled_host_leaves_its_running_tool_step_to_the_resume(
    tmp_path: Path,
) -> None:
    # A server's lifespan cancelled while a tool runs is a shutdown, not a failure of the
    # step: the tool reads a reason whose root is Shutdown, the run stays ``running`` on disk
    # (the step in flight), and a resume runs the step again and completes.
    seen: list[ms.CancelReason | None] = []
    entered = anyio.Event()

    async def slow(**_: Any) -> str:
        if seen:
            return "second time"
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            seen.append(ms.cancel_reason())
        return "unreachable"  # pragma: no cover

    ids: list[str] = []
    with anyio.CancelScope() as host:
        async with runtime(tmp_path, tools={"slow": slow}, recover=False) as rt:
            handle = await rt.start("g", plan_of(tool("s", "slow")))
            ids.append(handle.execution_id)
            await entered.wait()
            host.cancel()
            await anyio.sleep_forever()
    [reason] = seen
    assert reason is not None
    assert isinstance(reason.root, ms.Shutdown)
    async with runtime(tmp_path, tools={"slow": slow}, recover=False) as rt:
        record = rt.store.get(ids[0])
        assert record is not None
        assert record.status == "running"
        assert record.plan is not None
        assert {s.id: s.status for s in record.plan.steps} == {"s": "running"}
        with anyio.fail_after(30):
            result = await (await rt.resume(ids[0])).wait()
    assert result.status == "completed", result
    assert result.outputs == {"s": "second time"}


@pytest.mark.anyio
async def test_O2_a_tool_raising_generator_exit_fails_its_step_and_the_runtime_lives(
    tmp_path: Path,
) -> None:
    # GeneratorExit raised by a tool's own code is the tool's failure: its step fails with
    # the exception and its traceback (O2), the run goes on, and nothing escapes open_runtime
    # as an exception group taking every other run down with it.
    def closing(**_: Any) -> None:
        raise GeneratorExit

    with anyio.fail_after(30):
        async with runtime(tmp_path, tools={"closing": closing}) as rt:
            plan = plan_of(tool("s", "closing"), tool("other", "inc", x=1))
            result = await (await rt.start("g", plan)).wait()
            assert result.status == "failed"
            assert result.outputs == {"other": 2}
            observation = {o.step_id: o for o in result.observations}["s"]
            assert not observation.ok
            assert observation.error_type == "GeneratorExit"
            assert observation.traceback


@pytest.mark.anyio
async def test_O2_a_tool_raising_an_unasked_cancellation_fails_its_step_and_the_block_goes_on(
    tmp_path: Path,
) -> None:
    # asyncio's CancelledError raised by a tool nobody cancelled is the tool's failure: the
    # step fails, the run says so, and the caller's block goes on (on asyncio it used to end
    # the block silently; on trio to escape it).
    import asyncio

    def cancelling(**_: Any) -> None:
        raise asyncio.CancelledError("raised by the tool itself")

    after: list[str] = []
    with anyio.fail_after(30):
        async with runtime(tmp_path, tools={"cancelling": cancelling}) as rt:
            plan = plan_of(tool("s", "cancelling"), tool("other", "inc", x=1))
            result = await (await rt.start("g", plan)).wait()
            after.append("the block went on")
    assert after == ["the block went on"]
    assert result.status == "failed"
    assert result.outputs == {"other": 2}
    assert not {o.step_id: o for o in result.observations}["s"].ok
