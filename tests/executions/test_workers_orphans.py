"""Stopping the worker of an agent task whose runtime is gone (#17, S1), with ScriptedHost:
the worker left active on the record is stopped through the agent's host and recorded
stopped only once confirmed dead; a process that survives, one on another host, an agent
not registered here, or a start whose process cannot be looked for keeps anything from
being recorded, and the caller is told why."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent
from mainspring.testing import ScriptedHost

from ._kit import FAST, agent, plan_of, runtime, stored, tasks_of

pytestmark = pytest.mark.anyio


class WatchedHost(ScriptedHost):
    """A ScriptedHost that notes, at each stop, the worker's status as stored then."""

    def __init__(self, *scripts: Any) -> None:
        super().__init__(scripts)
        self.store: ms.storage.Store | None = None
        self.execution_id = ""
        self.stored_at_stop: list[str] = []

    async def stop(
        self, process: ms.storage._seam.ProcessIdentity, *, grace: float | None = None
    ) -> Any:
        if self.store is not None:
            record = self.store.get(self.execution_id)
            assert record is not None
            self.stored_at_stop.append(record.workers[0].status)
        return await super().stop(process, grace=grace)


def coder(host: ScriptedHost) -> dict[str, WorkerAgent]:
    return {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}


@asynccontextmanager
async def orphaned(tmp_path: Path, host: ScriptedHost) -> AsyncIterator[str]:
    """A run whose runtime ended with its worker still running (its stop unconfirmed, as
    a crash leaves it): yields the execution id, its store under ``tmp_path``."""
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            while True:  # polls the store: a worker's start is not an event
                seen = await rt.workers(handle.execution_id)
                if seen.workers and seen.workers[0].status == "running":
                    break
                await anyio.sleep(0.01)
            await rt.pause(handle.execution_id)
        seen = await rt.workers(handle.execution_id)
        assert seen.workers[0].status == "running"  # the process survived the pause
    yield handle.execution_id


async def _stop(tmp_path: Path, host: ScriptedHost, eid: str) -> tuple[Any, ms.storage.Execution]:
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        (task,) = tasks_of(stored(rt, eid))
        with anyio.fail_after(30):
            result = await rt.stop_agent_task(task.id)
        return result, stored(rt, eid)


async def test_an_orphan_is_recorded_stopped_only_after_it_is_confirmed_dead(
    tmp_path: Path,
) -> None:
    released = anyio.Event()
    host = WatchedHost([ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()])
    async with orphaned(tmp_path, host) as eid:
        # It survives the stop: nothing is recorded, and the caller is told why.
        refused, record = await _stop(tmp_path, host, eid)
        assert not refused.ok
        assert refused.reason == "its worker process could not be stopped"
        assert record.workers[0].status == "running"
        assert tasks_of(record)[0].state != "cancelled"
        assert host.processes[0].alive
        # Once it can be stopped, it is: and then recorded stopped with its task blocked.
        released.set()
        host.store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
        host.execution_id = eid
        done, record = await _stop(tmp_path, host, eid)
    assert done.ok
    assert done.state == "cancelled"
    assert not host.processes[0].alive
    assert host.stored_at_stop == ["running"]  # the stop came before the record
    view = ms.executions._facade.workers.view_of(record)
    (worker,) = view.workers
    assert worker.status == "stopped"
    assert worker.reason == "stop-task"
    assert view.tasks[0].state == "blocked"
    assert tasks_of(record)[0].state == "cancelled"
    assert ("stopped", "stop-task") in [(e.event, e.detail) for e in view.trail]


async def test_an_orphan_on_another_host_is_not_recorded_stopped(tmp_path: Path) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    async with orphaned(tmp_path, host) as eid:
        elsewhere = ScriptedHost()
        elsewhere.host = "another-machine"  # type: ignore[misc]
        result, record = await _stop(tmp_path, elsewhere, eid)
        released.set()
    assert not result.ok
    assert "cannot be inspected from here" in result.reason
    assert elsewhere.stops == []
    assert record.workers[0].status == "running"
    assert tasks_of(record)[0].state != "cancelled"


async def test_an_orphan_whose_agent_is_not_registered_is_refused(tmp_path: Path) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    async with orphaned(tmp_path, host) as eid:
        async with runtime(tmp_path, **FAST) as rt:
            (task,) = tasks_of(stored(rt, eid))
            with anyio.fail_after(30):
                result = await rt.stop_agent_task(task.id)
            record = stored(rt, eid)
        released.set()
    assert not result.ok
    assert result.reason == "its worker's agent 'coder' is not registered here"
    assert record.workers[0].status == "running"


@pytest.mark.parametrize(
    ("status", "ok"),
    [
        ("starting", False),  # its process never recorded, and not searchable here
        ("assigned", True),  # no process was started for it
    ],
)
async def test_an_orphan_without_a_recorded_process(tmp_path: Path, status: str, ok: bool) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    async with orphaned(tmp_path, host) as eid:
        store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
        record = store.get(eid)
        assert record is not None
        raw = dict(ms.storage._seam.unstructure(record.workers[0]), status=status, process=None)
        if status == "starting":
            raw["session"] = "sess-1"
        again = ms.storage.SqliteStore(tmp_path / "again.sqlite3")
        stops = len(host.stops)
        again.create(attrs.evolve(record, workers=(raw,)))
        result, after = await _stop(tmp_path / "again.sqlite3", host, eid)
        released.set()
    assert result.ok is ok
    assert len(host.stops) == stops  # no process of it is stopped: none is known
    if ok:
        assert after.workers[0].status == "stopped"
    else:
        assert result.reason == "its worker was starting and its process cannot be looked for here"
        assert after.workers[0].status == "starting"
