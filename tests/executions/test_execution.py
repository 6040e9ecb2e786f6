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
