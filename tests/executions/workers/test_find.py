"""A worker start whose process was never recorded (its runtime died in between, R3), with
the subprocess host: its process is found by the session it inherited, stopped and
confirmed gone before the task is stopped (S1) or taken over; with nothing to find, the
takeover goes on. One short-lived real process each, in its own session."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs
import pytest

import mainspring as ms
from mainspring.executions import SubprocessHost, WorkerAgent
from mainspring.testing import ScriptedHost

from .._kit import FAST, agent, plan_of, runtime, stored, tasks_of

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc"),
]

#: A worker that delivers at once (what a takeover starts).
DELIVERS = [
    sys.executable,
    "-c",
    "import json; print(json.dumps({'type': 'result', 'output': {'ok': True}}), flush=True)",
]


async def _starting(tmp_path: Path, session: str, host_name: str) -> ms.storage.Execution:
    """A stored run whose worker is ``starting`` with no process recorded, its trail saying
    it was started on ``host_name`` in ``session`` (as a runtime that died there leaves it)."""
    released = anyio.Event()
    scripted = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    agents = {"coder": WorkerAgent(["scripted"], host=scripted, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            while True:  # polls the store: a worker's start is not an event
                seen = await rt.workers(handle.execution_id)
                if seen.workers and seen.workers[0].status == "running":
                    break
                await anyio.sleep(0.01)
            await rt.pause(handle.execution_id)
        record = stored(rt, handle.execution_id)
    released.set()
    worker = dict(
        ms.storage._seam.unstructure(record.workers[0]),
        status="starting",
        process=None,
        session=session,
    )
    trail = tuple(
        attrs.evolve(e, detail=f"host={host_name}") if e.event == "starting" else e
        for e in record.worker_trail
    )
    return attrs.evolve(record, workers=(worker,), worker_trail=trail)


@asynccontextmanager
async def left_running(session: str) -> AsyncIterator[anyio.abc.Process]:
    """A process of that start, still running (in its own session, as the host makes it)."""
    env = {**os.environ, "MAINSPRING_WORKER_SESSION": session}
    code = "import sys; print('up', flush=True); sys.stdin.read()"
    async with await anyio.open_process(
        [sys.executable, "-c", code], env=env, start_new_session=True
    ) as proc:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            await proc.stdout.receive()
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.kill()
            with anyio.fail_after(30):
                await proc.wait()


def _store(tmp_path: Path, record: ms.storage.Execution) -> ms.storage.SqliteStore:
    store = ms.storage.SqliteStore(tmp_path / "again.sqlite3")
    store.create(record)
    return store


async def test_stop_task_finds_the_unrecorded_start_by_session_and_stops_it(
    tmp_path: Path,
) -> None:
    host = SubprocessHost(grace=0.5)
    session = f"s{uuid.uuid4().hex[:16]}"
    store = _store(tmp_path, await _starting(tmp_path, session, host.host))
    eid = store.list().executions[0].id
    async with left_running(session) as proc:
        agents: dict[str, Any] = {"coder": WorkerAgent(DELIVERS, host=host, grace=0.5)}
        async with runtime(store, agents=agents, **FAST) as rt:
            (task,) = tasks_of(stored(rt, eid))
            with anyio.fail_after(30):
                result = await rt.stop_agent_task(task.id)
            record = stored(rt, eid)
        with anyio.fail_after(30):
            await proc.wait()  # it was stopped
    assert result.ok
    assert proc.returncode is not None
    assert proc.returncode < 0  # by a signal
    view = ms.executions._facade.workers.view_of(record)
    assert view.workers[0].status == "stopped"
    assert view.workers[0].reason == "stop-task"
    assert tasks_of(record)[0].state == "cancelled"


async def test_a_resume_stops_the_unrecorded_start_before_taking_over(tmp_path: Path) -> None:
    host = SubprocessHost(grace=0.5)
    session = f"s{uuid.uuid4().hex[:16]}"
    crashed = await _starting(tmp_path, session, host.host)
    store = _store(tmp_path, attrs.evolve(crashed, status="running", lease=None))
    async with left_running(session) as proc:
        agents: dict[str, Any] = {"coder": WorkerAgent(DELIVERS, host=host, grace=0.5)}
        async with runtime(store, agents=agents, **FAST) as rt:
            with anyio.fail_after(30):
                result = await (await rt.resume(crashed.id)).wait()
            record = stored(rt, crashed.id)
        with anyio.fail_after(30):
            await proc.wait()  # it was stopped
    assert proc.returncode is not None
    assert proc.returncode < 0  # by a signal
    assert result.status == "completed"
    assert result.outputs["a"] == {"ok": True}
    view = ms.executions._facade.workers.view_of(record)
    assert ("takeover", "start-searched") in [(e.event, e.detail) for e in view.trail]
    assert view.workers[0].generation == 2


async def test_a_start_made_on_another_machine_is_not_taken_over(tmp_path: Path) -> None:
    host = SubprocessHost(grace=0.5)
    session = f"s{uuid.uuid4().hex[:16]}"
    crashed = await _starting(tmp_path, session, "another-machine")
    store = _store(tmp_path, attrs.evolve(crashed, status="running", lease=None))
    agents: dict[str, Any] = {"coder": WorkerAgent(DELIVERS, host=host, grace=0.5)}
    async with runtime(store, agents=agents, **FAST) as rt:
        with anyio.fail_after(30):
            result = await (await rt.resume(crashed.id)).wait()
        record = stored(rt, crashed.id)
    (task,) = tasks_of(record)
    assert result.status == "failed"
    assert task.failure is not None
    assert task.failure.code == "worker-unconfirmed"
    assert record.workers[0].generation == 1  # nothing started
