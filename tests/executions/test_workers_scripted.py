"""Worker-backed steps against the hosts branch's ScriptedHost (#17): the rules as the
runtime meets them through a second, independent fake of the host interface."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mainspring.executions import WorkerAgent
from mainspring.testing import ScriptedHost

from ._kit import FAST, agent, plan_of, runtime, stored, tasks_of

pytestmark = pytest.mark.anyio

RESULT = {"type": "result", "output": {"ok": True}}
FAILURE = {"type": "failure", "class": "lint", "fingerprint": "e501"}


def coder(host: ScriptedHost) -> dict[str, WorkerAgent]:
    return {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}


async def test_scripted_result_then_crash_takeover_then_result(tmp_path: Path) -> None:
    host = ScriptedHost([[{"type": "busy"}, ScriptedHost.exit(3)], [RESULT]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            result = await handle.wait()
        seen = await rt.workers(handle.execution_id)
    assert result.outputs["a"] == {"ok": True}
    assert [spec.generation for spec in host.starts] == [1, 2]
    assert seen.workers[0].generation == 2


async def test_scripted_failure_twice_is_no_progress(tmp_path: Path) -> None:
    host = ScriptedHost([[FAILURE, FAILURE, ScriptedHost.until_stopped()]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert task.failure is not None
    assert task.failure.code == "no-progress:lint"
    assert len(host.stops) >= 1
    assert not host.processes[0].alive


async def test_scripted_failed_start_then_result(tmp_path: Path) -> None:
    host = ScriptedHost([ScriptedHost.fail_start(), [RESULT]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "completed"
        seen = await rt.workers(handle.execution_id)
    assert sorted(w.status for w in seen.workers) == ["blocked", "delivered"]


async def test_scripted_stubborn_worker_is_not_recorded_stopped(tmp_path: Path) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            while True:  # polls the store: a worker's start is not an event
                seen = await rt.workers(handle.execution_id)
                if seen.workers and seen.workers[0].status == "running":
                    break
                await anyio.sleep(0.01)
            await rt.cancel(handle.execution_id)
        seen = await rt.workers(handle.execution_id)
        released.set()
    assert seen.workers[0].status != "stopped"
    assert "stop-unconfirmed" in [e.event for e in seen.trail]
