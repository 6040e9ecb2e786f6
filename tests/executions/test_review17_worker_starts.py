"""Review of #17: a task that used up its ``max_starts`` leaves no active worker behind
(a phantom ``assigned`` worker held a capacity slot and refused finalize for good)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mainspring.executions import WorkerAgent
from mainspring.testing import ScriptedHost

from ._kit import FAST, agent, plan_of, runtime, stored, tasks_of

pytestmark = pytest.mark.anyio

USAGE = {"type": "usage", "input_tokens": 5}


def coder(host: ScriptedHost, **options: Any) -> dict[str, Any]:
    return {"coder": WorkerAgent(["fake"], host=host, grace=0.1, **options)}


async def test_exits_up_to_max_starts_leave_no_active_worker(tmp_path: Path) -> None:
    crash = [USAGE, ScriptedHost.exit(1)]
    host = ScriptedHost([crash, crash, crash])
    async with runtime(tmp_path, agents=coder(host, max_starts=2), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        record = stored(rt, handle.execution_id)
        seen = await rt.workers(handle.execution_id)
    (task,) = tasks_of(record)
    assert task.failure is not None
    assert task.failure.code == "worker-start-limit"
    assert len(host.starts) == 2
    (worker,) = seen.workers
    assert not worker.active, worker.status
    assert worker.generation == 2
    assert [(e.generation, e.input_tokens) for e in worker.usage] == [(1, 5), (2, 5)]


async def test_failed_starts_up_to_max_starts_leave_no_active_worker(tmp_path: Path) -> None:
    host = ScriptedHost([ScriptedHost.fail_start()] * 3)
    async with runtime(tmp_path, agents=coder(host, max_starts=2), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        seen = await rt.workers(handle.execution_id)
    assert len(host.starts) == 2
    assert [w.status for w in seen.workers] == ["blocked", "blocked"]
