"""Review #17: stopping worker-backed steps served by real subprocesses: a pause is not a
failure (it does not use up the task's starts), a stop-task from another runtime stops the
orphaned process of a crashed runtime before anything is recorded stopped, and a repair to
a worker that never reads its stdin does not block its caller forever."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent

from ._kit import FAST, agent, plan_of, runtime

pytestmark = pytest.mark.anyio

#: Says busy, then waits for one line on stdin and delivers it; its pid goes to argv[1].
WAITS = """
import json, os, sys
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
print(json.dumps({"type": "busy"}), flush=True)
line = json.loads(sys.stdin.readline())
print(json.dumps({"type": "result", "output": {"got": line["text"]}}), flush=True)
"""


def worker(tmp_path: Path, source: str, *args: str, **options: Any) -> WorkerAgent:
    script = tmp_path / "worker.py"
    script.write_text(source)
    options.setdefault("grace", 0.2)
    return WorkerAgent([sys.executable, str(script), *args], **options)


def alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


async def busy(rt: ms.Runtime, execution_id: str, generation: int) -> ms.executions.WorkersView:
    """The run's worker of ``generation`` said busy (polls the store: no event for it)."""
    with anyio.fail_after(60):
        while True:
            seen = await rt.workers(execution_id)
            if any(e.event == "busy" and e.generation == generation for e in seen.trail):
                return seen
            await anyio.sleep(0.02)


async def test_pauses_do_not_use_up_the_starts_of_a_task(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    agents = {"coder": worker(tmp_path, WAITS, str(pids), max_starts=1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        run = handle.execution_id
        for generation in (1, 2, 3):
            await busy(rt, run, generation)
            if generation == 3:
                break
            await rt.pause(run)
            seen = await rt.workers(run)
            assert (seen.workers[0].status, seen.workers[0].reason) == ("stopped", "pause")
            assert seen.tasks[0].state == "ready"
            handle = await rt.resume(run)
        seen = await rt.workers(run)
        await rt.repair_worker(run, seen.workers[0].id, "go")
        with anyio.fail_after(60):
            result = await handle.wait()
        seen = await rt.workers(run)
    assert result.status == "completed", result
    assert result.outputs["a"] == {"got": "go"}
    assert seen.tasks[0].attempts == 1
    assert not any(alive(int(pid)) for pid in pids.read_text().split())
