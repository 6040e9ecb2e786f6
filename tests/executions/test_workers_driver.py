"""The worker driver (#17) with ScriptedHost: the protocol reports it records (idle/busy,
a line that is not JSON, a failure report that does not validate), a resume that cannot
confirm the old process dead (it survives; its start was never recorded) and so starts
nothing, and a handoff interrupted by a crash finished from the sealed delivery (E10)."""

from __future__ import annotations

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

RESULT = {"type": "result", "output": {"patch": "ok"}}


def coder(host: ScriptedHost) -> dict[str, WorkerAgent]:
    return {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}


def events(record: ms.storage.Execution) -> list[tuple[str, str]]:
    return [(e.event, e.detail) for e in record.worker_trail]


async def _run(tmp_path: Path, host: ScriptedHost) -> tuple[Any, ms.storage.Execution]:
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            result = await handle.wait()
        return result, stored(rt, handle.execution_id)


async def test_idle_and_busy_reports_are_recorded_in_order(tmp_path: Path) -> None:
    host = ScriptedHost([[{"type": "busy"}, {"type": "idle"}, {"type": "busy"}, RESULT]])
    result, record = await _run(tmp_path, host)
    assert result.outputs["a"] == {"patch": "ok"}
    seen = [e for e, _ in events(record) if e in ("busy", "idle")]
    # The first busy changes nothing (a started worker runs): not recorded (bounded trail).
    assert seen == ["idle", "busy"]


async def test_a_line_that_is_not_json_is_a_protocol_event_not_a_failure(tmp_path: Path) -> None:
    host = ScriptedHost([["not json", RESULT]])
    result, record = await _run(tmp_path, host)
    assert result.status == "completed"
    assert ("protocol", "not-json n=1") in events(record)
    assert len(host.starts) == 1  # the worker was not stopped for it


@pytest.mark.parametrize(
    "report",
    [
        {"type": "failure", "class": "Not A Class"},
        {"type": "failure", "class": "lint", "round": -1},
        {"type": "failure", "class": "lint", "phase": "PHASE"},
    ],
)
async def test_a_failure_report_that_does_not_validate_is_recorded_as_protocol(
    tmp_path: Path, report: dict[str, Any]
) -> None:
    # Twice: a valid failure repeated would stop the worker (no progress); a bad one never
    # counts as a failure at all.
    host = ScriptedHost([[report, report, RESULT]])
    result, record = await _run(tmp_path, host)
    assert result.status == "completed"
    assert events(record).count(("protocol", "bad-failure")) == 2
    worker = ms.storage._seam.parse_workers(record.workers)[0][0]
    assert worker.failure is None
    assert worker.repeats == 0


async def _crashed_while_running(tmp_path: Path, host: ScriptedHost) -> ms.storage.Execution:
    """The record of a run whose runtime ended with its worker running (as a crash leaves
    it: the pause could not stop the process)."""
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            while True:  # polls the store: a worker's start is not an event
                seen = await rt.workers(handle.execution_id)
                if seen.workers and seen.workers[0].status == "running":
                    break
                await anyio.sleep(0.01)
            await rt.pause(handle.execution_id)
        return stored(rt, handle.execution_id)


async def _resume(store: ms.storage.Store, host: ScriptedHost, eid: str) -> Any:
    async with runtime(store, agents=coder(host), **FAST) as rt:
        with anyio.fail_after(30):
            result = await (await rt.resume(eid)).wait()
        return result, stored(rt, eid)


async def test_a_resume_does_not_take_over_a_process_that_survives_its_stop(
    tmp_path: Path,
) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    crashed = await _crashed_while_running(tmp_path, host)
    result, record = await _resume(tmp_path / "store.sqlite3", host, crashed.id)
    released.set()
    (task,) = tasks_of(record)
    assert result.status == "failed"
    assert task.failure is not None
    assert task.failure.code == "worker-not-dead"
    assert ("takeover-refused", "not-dead") in events(record)
    assert len(host.starts) == 1  # no second worker beside the live one
    assert record.workers[0].generation == 1


async def test_a_resume_does_not_take_over_a_start_it_cannot_look_for(tmp_path: Path) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    crashed = await _crashed_while_running(tmp_path, host)
    raw = dict(ms.storage._seam.unstructure(crashed.workers[0]), status="starting", process=None)
    store = ms.storage.SqliteStore(tmp_path / "again.sqlite3")
    store.create(attrs.evolve(crashed, workers=(raw,)))
    result, record = await _resume(store, host, crashed.id)
    released.set()
    (task,) = tasks_of(record)
    assert result.status == "failed"
    assert task.failure is not None
    assert task.failure.code == "worker-unconfirmed"
    assert ("takeover-refused", "start-unconfirmed") in events(record)
    assert len(host.starts) == 1


@pytest.mark.parametrize("status", ["handing_off", "fenced"])
async def test_a_handoff_cut_by_a_crash_is_finished_from_the_sealed_delivery(
    tmp_path: Path, status: str
) -> None:
    host = ScriptedHost([[RESULT]])
    live, done = await _run(tmp_path, host)
    # The runtime died after sealing the delivery and recording the intent, before the
    # delivery was recorded.
    worker = dict(
        ms.storage._seam.unstructure(done.workers[0]), status=status, delivered_digest=None
    )
    # (A fence moves the worker and its task in one write: a fenced worker's task awaits
    # the delivery.)
    state = "awaiting_delivery" if status == "fenced" else "running"
    wtask = dict(
        ms.storage._seam.unstructure(done.worker_tasks[0]), state=state, delivery_digest=None
    )
    assert done.plan is not None
    plan = attrs.evolve(
        done.plan, steps=tuple(attrs.evolve(s, status="running") for s in done.plan.steps)
    )
    crashed = attrs.evolve(
        done,
        status="running",
        lease=None,
        agent_tasks=tuple(
            attrs.evolve(t, state="running", ended_at=None) for t in done.task_records
        ),
        plan=plan,
        completed_steps=(),
        observations=(),
        workers=(worker,),
        worker_tasks=(wtask,),
    )
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")  # its evidence is kept
    store.delete(done.id)
    store.create(crashed)
    result, record = await _resume(store, host, done.id)
    assert result.status == "completed"
    assert result.outputs["a"] == live.outputs["a"]  # E10: the sealed delivery
    assert len(host.starts) == 1  # never run again
    view = ms.executions._facade.workers.view_of(record)
    assert view.workers[0].status == "delivered"
    assert view.tasks[0].state == "delivered"
    trail = [e for e, _ in events(record)]
    assert trail[-1] == "delivered"
    assert trail.count("fenced") == (2 if status == "handing_off" else 1)


async def test_E8_an_unreadable_worker_task_is_not_taken_for_absent_and_run_again(
    tmp_path: Path,
) -> None:
    """A delivered worker task whose stored record does not parse is an Unreadable: not an
    absent task. A resume must not serve the task again from a fresh record (a second
    worker process, its delivery replaced: E10), nor store two worker tasks under one id."""
    from ._worker_fake import FakeHost, Script

    host = FakeHost([Script([("result", {"output": {"patch": "ok"}})])] * 2)
    agents = {"coder": WorkerAgent(["fake-agent"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "completed"
        done = stored(rt, handle.execution_id)
    (delivered,) = done.worker_tasks
    assert type(delivered) is ms.storage.WorkerTask
    unreadable = ms.storage.Unreadable(
        raw={**ms.storage.unstructure(delivered), "written_by_a_newer_version": 1},
        key=delivered.id,
    )
    # The run crashed after the delivery, before its step's completion was committed.
    crashed = attrs.evolve(
        done,
        status="running",
        lease=None,
        agent_tasks=tuple(
            attrs.evolve(t, state="running", ended_at=None) for t in done.task_records
        ),
        plan=attrs.evolve(
            done.plan, steps=tuple(attrs.evolve(s, status="running") for s in done.plan.steps)
        ),
        completed_steps=(),
        observations=(),
        worker_tasks=(unreadable,),
    )
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    store.delete(done.id)
    store.create(crashed)
    async with runtime(store, agents=agents, **FAST) as rt:
        with anyio.fail_after(30):
            await (await rt.resume(handle.execution_id)).wait()
        after = stored(rt, handle.execution_id)
    assert len(host.specs) == 1  # the task was not served again by a second process
    ids = [t.id if type(t) is ms.storage.WorkerTask else t.key for t in after.worker_tasks]
    assert ids.count(delivered.id) == 1, ids
