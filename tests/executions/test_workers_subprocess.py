"""Worker-backed steps with the built-in SubprocessHost and tiny Python workers: a result,
a repair on stdin, a process that ignores SIGTERM stopped (KILLed) before it is recorded
stopped."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent

from ._kit import FAST, agent, plan_of, runtime

pytestmark = pytest.mark.anyio

DELIVER = """
import json, os
given = json.loads(os.environ["MAINSPRING_WORKER_INPUT"])
print(json.dumps({"type": "usage", "input_tokens": 7, "output_tokens": 3}), flush=True)
print(json.dumps({"type": "result", "output": {"doubled": given["n"] * 2}}), flush=True)
"""

REPAIRED = """
import json, sys
print(json.dumps({"type": "busy"}), flush=True)
line = json.loads(sys.stdin.readline())
print(json.dumps({"type": "result", "output": {"repaired": line["type"]}}), flush=True)
"""

STUBBORN = """
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
print(json.dumps({"type": "busy"}), flush=True)
while True:
    time.sleep(0.05)
"""


def worker(tmp_path: Path, source: str, *args: str, **options: Any) -> WorkerAgent:
    script = tmp_path / f"w{abs(hash(source))}.py"
    script.write_text(source)
    options.setdefault("grace", 0.2)
    return WorkerAgent([sys.executable, str(script), *args], **options)


async def _wait_running(rt: ms.Runtime, execution_id: str) -> ms.executions._seam.WorkersView:
    with anyio.fail_after(60):
        while True:
            seen = await rt.workers(execution_id)
            if seen.workers and seen.workers[0].status == "running":
                return seen
            await anyio.sleep(0.02)


async def test_a_subprocess_worker_delivers_its_result(tmp_path: Path) -> None:
    agents = {"coder": worker(tmp_path, DELIVER)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder", n=21)))
        with anyio.fail_after(60):
            result = await handle.wait()
        seen = await rt.workers(handle.execution_id)
    assert result.status == "completed"
    assert result.outputs["a"] == {"doubled": 42}
    assert seen.workers[0].status == "delivered"
    assert seen.workers[0].usage[0].total_tokens == 10


async def test_a_repair_reaches_a_subprocess_worker(tmp_path: Path) -> None:
    agents = {"coder": worker(tmp_path, REPAIRED)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        seen = await _wait_running(rt, handle.execution_id)
        await rt.repair_worker(handle.execution_id, seen.workers[0].id, "try again")
        with anyio.fail_after(60):
            result = await handle.wait()
    assert result.outputs["a"] == {"repaired": "repair"}


@pytest.mark.slow
async def test_a_worker_ignoring_sigterm_is_killed_before_it_is_recorded_stopped(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pid"
    agents = {"coder": worker(tmp_path, STUBBORN, str(pidfile))}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(60):  # its SIGTERM handler is set once it wrote its pid
            written = anyio.Path(pidfile)
            while True:
                if await written.exists() and (await written.read_text()).strip():
                    break
                await anyio.sleep(0.02)  # polls the file the worker writes: no event for it
            await rt.pause(handle.execution_id)
        seen = await rt.workers(handle.execution_id)
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert seen.workers[0].status == "stopped"
    assert seen.workers[0].reason == "pause"


#: A worker that delivers at once, then ignores SIGTERM: its handoff's stop lasts the grace.
DELIVERS_THEN_LINGERS = """
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
print(json.dumps({"type": "result", "output": {"late": True}}), flush=True)
while True:
    time.sleep(0.05)
"""


async def test_B1_a_worker_handing_off_past_its_steps_timeout_is_recorded_stopped_not_delivered(
    tmp_path: Path,
) -> None:
    # The result arrives long before the step's timeout; stopping the worker for its handoff
    # takes the whole grace (SIGTERM ignored), past the timeout. The step fails
    # agent-timeout, and its worker must say so: stopped (its process killed and confirmed
    # dead) with the timeout as the reason, never handing_off (active, for good, under a
    # failed step) nor delivered. A result that came late (a loaded machine) ends the same.
    pidfile = tmp_path / "pid"
    agents = {"coder": worker(tmp_path, DELIVERS_THEN_LINGERS, str(pidfile), grace=3.0)}
    options: dict[str, Any] = {**FAST, "timeouts": {"agent": 1.5}}
    async with runtime(tmp_path, agents=agents, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(60):
            result = await handle.wait()
        seen = await rt.workers(handle.execution_id)
        record = rt.store.get(handle.execution_id)
    assert result.status == "failed"
    assert result.outputs == {}
    assert record is not None
    (observation,) = record.observations
    assert observation.code == "agent-timeout"
    (only,) = seen.workers
    assert only.status == "stopped"
    assert only.reason == "timeout"
    (task,) = record.worker_tasks
    assert task.state == "ready"  # type: ignore[union-attr]
    assert task.delivery_digest is None  # type: ignore[union-attr]
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)
