"""Worker-backed agent steps (#17) with a scripted host: delivery, start failure, unexpected
exit and takeover, the no-progress rule, usage, heartbeats, stopping, resume, repair,
finalize and capacity. Every worker change is committed through the execution (E2)."""

from __future__ import annotations

import hashlib
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent, WorkerNotLive
from mainspring.testing import ScriptedHost

from ..._postgres import postgres_url  # noqa: F401 - a fixture
from .._kit import FAST, agent, plan_of, runtime, stored, tasks_of
from .._worker_fake import FakeHost, Script

RESULT = ("result", {"output": {"patch": "ok", "n": 3}})


def coder(host: FakeHost, **options: Any) -> dict[str, Any]:
    options.setdefault("grace", 0.1)
    return {"coder": WorkerAgent(["fake-agent"], host=host, **options)}


async def view(rt: ms.Runtime, execution_id: str) -> ms.executions.WorkersView:
    return await rt.workers(execution_id)


@pytest.mark.anyio
async def test_a_result_is_handed_off_and_is_the_step_output(tmp_path: Path) -> None:
    host = FakeHost([Script([("busy", {}), RESULT])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder", goal="fix")))
        with anyio.fail_after(30):
            result = await handle.wait()
        assert result.status == "completed"
        assert result.outputs["a"] == {"patch": "ok", "n": 3}
        seen = await view(rt, handle.execution_id)
    (worker,) = seen.workers
    assert worker.status == "delivered"
    assert worker.generation == 1
    (task,) = seen.tasks
    assert task.state == "delivered"
    assert task.delivery_digest == worker.delivered_digest
    events = [e.event for e in seen.trail]
    assert events[:3] == ["assigned", "starting", "started"]
    assert events[-3:] == ["handoff", "fenced", "delivered"]
    # the process was stopped (and confirmed dead) before the worker was fenced
    assert host.log[-1][0] == "stop"


@pytest.mark.anyio
async def test_a_failed_start_blocks_native_start_and_a_new_worker_starts(tmp_path: Path) -> None:
    host = FakeHost([Script(end="fail"), Script([RESULT])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "completed"
        seen = await view(rt, handle.execution_id)
    first, second = sorted(seen.workers, key=lambda w: w.id)
    assert first.status == "blocked"
    assert first.reason == "native-start"
    assert first.failure is not None
    assert first.failure.failure_class == "native-start"
    assert second.status == "delivered"
    assert seen.tasks[0].attempts == 1  # one process started


@pytest.mark.anyio
async def test_start_failures_up_to_max_starts_fail_the_step_saying_so(tmp_path: Path) -> None:
    host = FakeHost([Script(end="fail")] * 5)
    async with runtime(tmp_path, agents=coder(host, max_starts=2), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert task.failure is not None
    assert task.failure.code == "worker-start-limit"
    assert len(host.specs) == 2


@pytest.mark.anyio
async def test_an_unexpected_exit_is_taken_over_by_generation_2(tmp_path: Path) -> None:
    host = FakeHost([Script([("busy", {})], end="exit"), Script([RESULT])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "completed"
        seen = await view(rt, handle.execution_id)
    (worker,) = seen.workers
    assert worker.generation == 2
    assert worker.status == "delivered"
    assert [s.generation for s in host.specs] == [1, 2]
    events = [(e.event, e.detail) for e in seen.trail]
    assert ("exited", "native-process-exited") in events
    assert ("takeover", "") in events


@pytest.mark.anyio
async def test_the_same_failure_twice_stops_the_worker_no_progress(tmp_path: Path) -> None:
    failure = ("failure", {"class": "tests-fail", "fingerprint": "x", "diagnostic": "secret text"})
    host = FakeHost([Script([failure, failure])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        record = stored(rt, handle.execution_id)
        seen = await view(rt, handle.execution_id)
    (task,) = tasks_of(record)
    assert task.failure is not None
    assert task.failure.code == "no-progress:tests-fail"
    (worker,) = seen.workers
    assert worker.status == "blocked"
    assert worker.reason == "no-progress:tests-fail"
    assert seen.tasks[0].state == "blocked"
    assert ("stop", 1000) in host.log
    assert "secret text" not in repr(record)  # V1: digests only


@pytest.mark.anyio
async def test_usage_is_charged_to_the_worker_epoch_and_the_run(tmp_path: Path) -> None:
    usage = ("usage", {"input_tokens": 100, "output_tokens": 20, "cost": "0.5"})
    host = FakeHost([Script([usage, usage, RESULT])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "completed"
        record = stored(rt, handle.execution_id)
        seen = await view(rt, handle.execution_id)
    assert record.usage.input_tokens == 200
    assert record.usage.output_tokens == 40
    (epoch,) = seen.workers[0].usage
    assert epoch.total_tokens == 240
    assert str(epoch.cost) == "1.0"


@pytest.mark.anyio
async def test_heartbeats_renew_the_lease(tmp_path: Path) -> None:
    host = FakeHost([Script()])
    async with runtime(tmp_path, agents=coder(host, lease=1.0), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            while True:
                seen = await view(rt, handle.execution_id)
                if sum(1 for e in seen.trail if e.event == "heartbeat") >= 2:
                    break
                await anyio.sleep(0.05)
        worker = seen.workers[0]
        assert worker.status == "running"
        assert worker.lease_expires_at is not None
        assert worker.lease_expires_at > worker.created_at + 1
        await rt.cancel(handle.execution_id)


async def _running(rt: ms.Runtime, host: FakeHost) -> ms.ExecutionHandle:
    handle = await rt.start("g", plan_of(agent("a", "coder")))
    with anyio.fail_after(30):
        while True:
            seen = await rt.workers(handle.execution_id)
            if seen.workers and seen.workers[0].status == "running":
                return handle
            await anyio.sleep(0.02)


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["pause", "cancel", "stop-task"])
async def test_stopping_stops_the_process_before_recording_it_stopped(
    tmp_path: Path, how: str
) -> None:
    host = FakeHost([Script()])
    on_disk_at_stop: list[str] = []
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await _running(rt, host)
        eid = handle.execution_id
        host.on_stop = lambda _: on_disk_at_stop.append(
            rt.store.get(eid).workers[0].status  # type: ignore[union-attr]
        )
        with anyio.fail_after(30):
            if how == "pause":
                await rt.pause(eid)
            elif how == "cancel":
                await rt.cancel(eid)
            else:
                (task,) = tasks_of(stored(rt, eid))
                await rt.stop_agent_task(task.id)
                await handle.wait()
        seen = await view(rt, eid)
    assert on_disk_at_stop == ["running"]  # not recorded stopped before the stop
    (worker,) = seen.workers
    assert worker.status == "stopped"
    expected = {"pause": ("pause", "ready"), "cancel": ("cancel", "blocked")}
    reason, state = expected.get(how, ("stop-task", "blocked"))
    assert worker.reason == reason
    assert seen.tasks[0].state == state


@pytest.mark.anyio
async def test_a_process_that_cannot_be_confirmed_dead_is_not_recorded_stopped(
    tmp_path: Path,
) -> None:
    host = FakeHost([Script(end="undying")])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await _running(rt, host)
        with anyio.fail_after(30):
            await rt.pause(handle.execution_id)
        seen = await view(rt, handle.execution_id)
    assert seen.workers[0].status == "running"
    assert seen.trail[-1].event == "stop-unconfirmed"
    host.processes[1000].die()  # the test's own cleanup


@pytest.mark.anyio
async def test_resume_after_a_crash_takes_over_only_after_confirming_death(
    tmp_path: Path,
) -> None:
    host = FakeHost([Script(), Script([RESULT])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await _running(rt, host)
        crashed = stored(rt, handle.execution_id)  # the record as a crash would leave it
        await rt.pause(handle.execution_id)
    # The first process survived "the crash": alive again, as the record says.
    first = host.processes[1000]
    first.dead = anyio.Event()
    store = ms.storage.SqliteStore(tmp_path / "other.sqlite3")
    import attrs

    store.create(attrs.evolve(crashed, lease=None, status="running"))
    async with runtime(store, agents=coder(host), **FAST) as rt:
        with anyio.fail_after(30):
            result = await (await rt.resume(handle.execution_id)).wait()
        seen = await view(rt, handle.execution_id)
    assert result.status == "completed"
    assert host.log.index(("stop", 1000)) < host.log.index(("start", 1001, 2))
    (worker,) = seen.workers
    assert worker.generation == 2
    assert worker.status == "delivered"
    assert ("takeover", "confirmed-dead") in [(e.event, e.detail) for e in seen.trail]


@pytest.mark.anyio
async def test_a_process_of_another_host_blocks_takeover(tmp_path: Path) -> None:
    host = FakeHost([Script()])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await _running(rt, host)
        crashed = stored(rt, handle.execution_id)
        await rt.pause(handle.execution_id)
    store = ms.storage.SqliteStore(tmp_path / "other.sqlite3")
    import attrs

    store.create(attrs.evolve(crashed, lease=None, status="running"))
    elsewhere = FakeHost([Script([RESULT])], name="another")
    async with runtime(store, agents=coder(elsewhere), **FAST) as rt:
        with anyio.fail_after(30):
            result = await (await rt.resume(handle.execution_id)).wait()
        seen = await view(rt, handle.execution_id)
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "failed"
    assert task.failure is not None
    assert task.failure.code == "worker-unknown-host"
    assert ("takeover-refused", "unknown-host") in [(e.event, e.detail) for e in seen.trail]
    assert elsewhere.specs == []  # nothing started


@pytest.mark.anyio
async def test_a_delivered_task_is_not_run_again_after_a_resume(tmp_path: Path) -> None:
    host = FakeHost([Script([RESULT])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            live = await handle.wait()
        done = stored(rt, handle.execution_id)
    # The run crashed after the delivery, before its step's completion was committed.
    import attrs

    raw = [attrs.evolve(t, state="running", ended_at=None) for t in done.task_records]
    plan = attrs.evolve(
        done.plan, steps=tuple(attrs.evolve(s, status="running") for s in done.plan.steps)
    )
    crashed = attrs.evolve(
        done,
        status="running",
        lease=None,
        agent_tasks=tuple(raw),
        plan=plan,
        completed_steps=(),
        observations=(),
    )
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")  # its evidence is kept
    store.delete(done.id)
    store.create(crashed)
    async with runtime(store, agents=coder(host), **FAST) as rt:
        with anyio.fail_after(30):
            resumed = await (await rt.resume(handle.execution_id)).wait()
    assert resumed.status == "completed"
    assert resumed.outputs["a"] == live.outputs["a"]  # E10
    assert len(host.specs) == 1  # never run again


@pytest.mark.anyio
async def test_a_repair_reaches_the_worker_and_only_its_digest_is_kept(tmp_path: Path) -> None:
    host = FakeHost([Script()])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await _running(rt, host)
        worker_id = (await view(rt, handle.execution_id)).workers[0].id
        digest = await rt.repair_worker(handle.execution_id, worker_id, "  fix the test  ")
        assert digest == hashlib.sha256(b"fix the test").hexdigest()
        assert host.sent == [{"type": "repair", "text": "fix the test"}]
        record = stored(rt, handle.execution_id)
        assert "fix the test" not in repr(record)
        assert (await view(rt, handle.execution_id)).workers[0].repair_digest == digest
        with pytest.raises(ms.executions._workers.fleet.WorkerRefused):
            await rt.repair_worker(handle.execution_id, worker_id, "   ")
        with pytest.raises(WorkerNotLive):
            await rt.repair_worker(handle.execution_id, "nobody", "x")
        await rt.cancel(handle.execution_id)


def _proof(receipt: dict[str, Any] | None = None) -> ms.executions.Proof:
    receipt = receipt or {"tests": "passed"}
    return ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )


@pytest.mark.anyio
async def test_finalize_seals_the_proof_once(tmp_path: Path) -> None:
    host = FakeHost([Script([RESULT])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            await handle.wait()
        digest = await rt.finalize(handle.execution_id, _proof())
        assert await rt.finalize(handle.execution_id, _proof()) == digest
        assert stored(rt, handle.execution_id).proof_digest == digest
        sealed = await rt._services.evidence.read(digest)
        assert sealed == _proof().plain()
        with pytest.raises(ms.executions._workers.fleet.WorkerRefused):
            await rt.finalize(handle.execution_id, _proof({"tests": "other"}))


@pytest.mark.anyio
async def test_finalize_is_refused_while_a_worker_is_active(tmp_path: Path) -> None:
    host = FakeHost([Script()])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await _running(rt, host)
        with pytest.raises(ms.executions._workers.fleet.WorkerRefused) as refused:
            await rt.finalize(handle.execution_id, _proof())
        assert refused.value.code == "active-writer"
        await rt.cancel(handle.execution_id)


@pytest.mark.anyio
async def test_a_run_has_at_most_max_workers_active_workers(tmp_path: Path) -> None:
    host = FakeHost([Script(), Script(), Script()])
    steps = [agent(f"a{i}", "coder", i=i) for i in range(3)]
    async with runtime(tmp_path, agents=coder(host), max_workers=2, **FAST) as rt:
        handle = await rt.start("g", plan_of(*steps))
        with anyio.fail_after(30):
            while len(host.specs) < 2:
                await host.started.wait()
        for _ in range(20):
            await anyio.sleep(0.02)
            seen = await view(rt, handle.execution_id)
            assert sum(1 for w in seen.workers if w.active) <= 2
        assert len(host.specs) == 2
        await rt.cancel(handle.execution_id)


@pytest.mark.anyio
async def test_the_run_deadline_stops_the_worker_and_leaves_its_task_ready(
    tmp_path: Path,
) -> None:
    host = FakeHost([Script([("busy", {})])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")), deadline=1.0)
        with anyio.fail_after(30):
            result = await handle.wait()
        seen = await view(rt, handle.execution_id)
    assert result.status == "paused"
    (worker,) = seen.workers
    assert worker.status == "stopped"
    assert worker.reason == "timeout"
    assert seen.tasks[0].state == "ready"
    assert ("stop", 1000) in host.log


@pytest.mark.anyio
async def test_a_lost_lease_stops_the_worker_and_writes_nothing_more(tmp_path: Path) -> None:
    host = FakeHost([Script([("busy", {})])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await _running(rt, host)
        eid = handle.execution_id
        # Another owner takes the lease (as a resume elsewhere would after a lapse).
        assert rt.store.release(eid, rt.owner)
        assert rt.store.acquire(eid, "thief:1:x", ttl=60).acquired
        with anyio.fail_after(30):
            await handle.wait()
        seen = await view(rt, eid)
    assert ("stop", 1000) in host.log  # the process is stopped all the same
    assert seen.workers[0].status == "running"  # not ours to record any more (E3)


@pytest.mark.anyio
def test_worker_agent_options_are_checked() -> None:
    host = FakeHost()
    with pytest.raises(ValueError, match="command"):
        WorkerAgent([], host=host)
    with pytest.raises(ValueError, match="lease"):
        WorkerAgent(["x"], host=host, lease=0.5)
    with pytest.raises(ValueError, match="max_starts"):
        WorkerAgent(["x"], host=host, max_starts=0)
    with pytest.raises(TypeError, match="WorkerHost"):
        WorkerAgent(["x"], host=object())  # type: ignore[arg-type]
    # The definition (R8) follows the command, not the host object.
    assert WorkerAgent(["x"], host=host).version == WorkerAgent(["x"], host=FakeHost()).version
    assert WorkerAgent(["x"], host=host).version != WorkerAgent(["y"], host=host).version


@pytest.mark.anyio
async def test_max_workers_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_workers"):
        async with runtime(tmp_path, max_workers=0):
            pass


# -- controls from another runtime (another host) ---------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Where two runtimes (two hosts) meet: a SQLite file, or a PostgreSQL schema."""
    from .._memory_kit import store_spec

    yield from (spec.target for spec in store_spec(request.param, tmp_path))


async def _running_worker(rt: ms.Runtime, execution_id: str, generation: int = 1) -> None:
    with anyio.fail_after(60):
        while True:  # polls the store: a worker's start is not an event
            seen = await rt.workers(execution_id)
            if any(w.generation == generation and w.status == "running" for w in seen.workers):
                return
            await anyio.sleep(0.02)


def _worker_history(store: Any, execution_id: str) -> list[tuple[str | None, str | None]]:
    return [
        (event.status, event.reason)
        for event in store.history(execution_id, after=0, limit=10_000)
        if event.kind == "worker"
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("control", ["pause", "cancel"])
async def test_e11_a_control_from_another_host_records_the_worker_stopped(
    shared_store: Any, control: str
) -> None:
    """E2 (worker parts): the runner stopped by a pause or cancel written elsewhere stops
    its worker and records it stopped, with the reason and a ``stopped`` history entry, as
    the same control issued on its own host does; no worker is left active."""
    host = ScriptedHost([[ScriptedHost.until_stopped()]])
    agents = {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}
    async with (
        ms.open_runtime(store=shared_store, agents=agents, **FAST) as rt,
        ms.open_runtime(store=shared_store, **FAST) as other,
    ):
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        run = handle.execution_id
        await _running_worker(rt, run)
        await (other.pause(run) if control == "pause" else other.cancel(run))
        with anyio.fail_after(60):
            result = await handle.wait()
        seen = await rt.workers(run)
        history = _worker_history(rt.store, run)
    assert result.status == ("paused" if control == "pause" else "cancelled")
    (worker,) = seen.workers
    assert (worker.status, worker.reason) == ("stopped", control)
    assert not worker.active
    assert ("stopped", control) in history
    assert host.processes[0].stopped


@pytest.mark.anyio
async def test_e11_a_pause_from_another_host_gives_the_start_back(shared_store: Any) -> None:
    """A pause written elsewhere is not a failed start (NOT_FAILED): with ``max_starts=1``
    the resumed step takes the worker over and delivers."""
    host = ScriptedHost([[ScriptedHost.until_stopped()], [{"type": "result", "output": 7}]])
    agents = {"coder": WorkerAgent(["scripted"], host=host, grace=0.1, max_starts=1)}
    async with (
        ms.open_runtime(store=shared_store, agents=agents, **FAST) as rt,
        ms.open_runtime(store=shared_store, **FAST) as other,
    ):
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        run = handle.execution_id
        await _running_worker(rt, run)
        await other.pause(run)
        with anyio.fail_after(60):
            assert (await handle.wait()).status == "paused"
            result = await (await rt.resume(run)).wait()
    assert result.status == "completed", result
    assert result.outputs["a"] == 7


@pytest.mark.anyio
async def test_s1_a_stop_task_from_another_host_records_the_worker_stopped(
    shared_store: Any,
) -> None:
    """S1 with a worker: the stop request written elsewhere stops the task's worker, which
    is recorded stopped (``stop-task``) with its history entry, as a stop issued here."""
    host = ScriptedHost([[ScriptedHost.until_stopped()]])
    agents = {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}
    async with (
        ms.open_runtime(store=shared_store, agents=agents, **FAST) as rt,
        ms.open_runtime(store=shared_store, **FAST) as other,
    ):
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        run = handle.execution_id
        await _running_worker(rt, run)
        stop = await other.stop_agent_task(f"{run}:t1")
        assert stop.ok, stop
        with anyio.fail_after(60):
            await handle.wait()
        seen = await rt.workers(run)
        history = _worker_history(rt.store, run)
    (worker,) = seen.workers
    assert (worker.status, worker.reason) == ("stopped", "stop-task")
    assert ("stopped", "stop-task") in history


@pytest.mark.anyio
async def test_e11_a_stopped_runners_worker_edit_never_overwrites_a_later_tenure(
    tmp_path: Path,
) -> None:
    """E11: the runner stopped by a pause from another host writes its stopped workers
    after it gave its lease up. If that host resumed the run (a new lease tenure, a new
    worker generation) and paused it again before that write lands, the write is not
    applied: the record keeps the later tenure's workers."""
    import threading

    arrived, go = threading.Event(), threading.Event()

    class SlowWorkerEdits(ms.storage.SqliteStore):
        def edit(self, execution_id: str, change: Any) -> Any:
            if "worker_parts_edit" in getattr(change, "__qualname__", ""):
                arrived.set()
                go.wait(60)  # held until the other host resumed and paused the run
            return super().edit(execution_id, change)

    path = tmp_path / "s.sqlite3"
    first = ScriptedHost([[ScriptedHost.until_stopped()]])
    second = ScriptedHost([[ScriptedHost.until_stopped()]])
    store = SlowWorkerEdits(path)
    try:
        async with (
            ms.open_runtime(store=store, agents={"coder": WorkerAgent(["scripted"], host=first,
                            grace=0.1)}, recover=False, **FAST) as rt,
            ms.open_runtime(store=path, agents={"coder": WorkerAgent(["scripted"], host=second,
                            grace=0.1)}, recover=False, **FAST) as other,
        ):  # fmt: skip
            handle = await rt.start("g", plan_of(agent("a", "coder")))
            run = handle.execution_id
            await _running_worker(rt, run)
            await other.pause(run)
            with anyio.fail_after(60):
                await anyio.to_thread.run_sync(arrived.wait)
                resumed = await other.resume(run)
                await _running_worker(other, run, generation=2)
                assert (await other.pause(run)).status == "paused"
                assert (await resumed.wait()).status == "paused"
            before = await other.workers(run)
            go.set()
            with anyio.fail_after(60):
                assert (await handle.wait()).status == "paused"
            after = await other.workers(run)
    finally:
        go.set()
        store.close()
    assert [(w.generation, w.status) for w in before.workers] == [(2, "stopped")]
    assert after.workers == before.workers


# ----------------------------------------------------------------------
# A finalized run (its proof recorded, no active writer) never starts a
# worker afterwards: a worker step that had not started when the run was finalized fails
# ``worker-finalized`` instead of writing into a finalized run.


@pytest.mark.anyio
async def test_W3_a_worker_step_after_finalize_does_not_start_a_worker(tmp_path: Path) -> None:
    gate, started = anyio.Event(), anyio.Event()

    async def waits(ctx: Any, input: Any) -> Any:
        started.set()
        await gate.wait()
        return 1

    host = ScriptedHost([[{"type": "result", "output": 1}]])
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1), "waits": waits}
    receipt = {"tests": "passed"}
    proof = ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        # a delivers (a proof needs a delivered worker task), b waits, c would start a worker.
        plan = plan_of(agent("a", "coder"), agent("b", "waits", "a"), agent("c", "coder", "b"))
        handle = await rt.start("g", plan)
        with anyio.fail_after(30):
            await started.wait()
            digest = await rt.finalize(handle.execution_id, proof)
            gate.set()
            assert (await handle.wait()).status == "failed"
        record = stored(rt, handle.execution_id)
        seen = await rt.workers(handle.execution_id)
    assert len(host.starts) == 1  # a's: no process started after the run was finalized
    assert not any(w.active for w in seen.workers)
    assert record.proof_digest == digest
    failures = [t.failure.code for t in tasks_of(record) if t.failure is not None]
    assert failures == ["worker-finalized"]


@pytest.mark.anyio
async def test_W3_a_proof_recorded_by_another_runtime_survives_the_runs_commits(
    tmp_path: Path,
) -> None:
    gate, started = anyio.Event(), anyio.Event()

    async def waits(ctx: Any, input: Any) -> Any:
        started.set()
        await gate.wait()
        return 1

    receipt = {"tests": "passed"}
    proof = ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )
    host = ScriptedHost([[{"type": "result", "output": 1}]])
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1), "waits": waits}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        # a delivers (a proof needs a delivered worker task), then b and c run.
        plan = plan_of(agent("a", "coder"), agent("b", "waits", "a"), agent("c", "waits", "b"))
        handle = await rt.start("g", plan)
        with anyio.fail_after(30):
            await started.wait()
            async with runtime(tmp_path, agents=agents, **FAST) as other:
                digest = await other.finalize(handle.execution_id, proof)
            gate.set()
            assert (await handle.wait()).status == "completed"
        assert stored(rt, handle.execution_id).proof_digest == digest


# ----------------------------------------------------------------------
# Worker-backed steps on a PostgreSQL store (#17): the worker records go through the same
# commit funnel on the server, the delivery is sealed in its evidence table, and a second
# runtime (another owner, as another host would be) reads the delivered output back without
# running the worker again (E10).

RESULT_workers_postgres = {"type": "result", "output": {"answer": [1, True, "x"]}}


@pytest.mark.anyio
async def test_worker_steps_on_postgres_deliver_and_resume_elsewhere(
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    # The first process exits unexpectedly (a takeover, generation 2), the second delivers.
    host = ScriptedHost([[{"type": "busy"}, ScriptedHost.exit(3)], [RESULT_workers_postgres]])
    agents = {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}
    plan = plan_of(agent("a", "coder"), ms.PlanStep(id="b", tool="echo", depends_on=("a",)))
    gate, reached = anyio.Event(), anyio.Event()

    async def echo() -> str:
        reached.set()  # b runs only once a succeeded (P2)
        await gate.wait()
        return "done"

    async with ms.open_runtime(
        store=postgres_url, agents=agents, tools={"echo": echo}, owner="host-a", **FAST
    ) as rt:
        handle = await rt.start("g", plan)
        with anyio.fail_after(60):
            await reached.wait()
        seen = await rt.workers(handle.execution_id)
        await rt.pause(handle.execution_id)
    (worker,) = seen.workers
    assert (worker.status, worker.generation) == ("delivered", 2)
    assert seen.tasks[0].state == "delivered"
    assert [entry.event for entry in seen.trail].count("exited") == 1
    gate.set()

    # Another owner resumes: the delivered step is not run again, its output comes back.
    later = ScriptedHost([])  # any start would raise: nothing is left to start
    agents = {"coder": WorkerAgent(["scripted"], host=later, grace=0.1)}
    async with ms.open_runtime(
        store=postgres_url, agents=agents, tools={"echo": echo}, owner="host-b", **FAST
    ) as rt:
        with anyio.fail_after(60):
            result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert result.outputs["a"] == {"answer": [1, True, "x"]}
    assert later.starts == []


# ----------------------------------------------------------------------
# Crash trials for worker-backed steps (#17): a runtime whose steps are served by
# subprocess workers (each appending ``<task> <pid> <generation>`` lines to a ledger) is
# SIGKILLed at a random moment; a fresh process resumes the run. Per task, writers never
# interleave: once a new writer appears, no older one writes again (takeover only after the
# old process was confirmed dead, a SIGTERM-ignoring one KILLed first).

REPO = Path(__file__).resolve().parents[3]
CHILD = str(Path(__file__).parents[1] / "_workers_crash_child.py")
EXECUTION = "ex-workers-crash"
#: Trials per batch; five batches (>= 50 trials in all), each well within a test's timeout.
TRIALS = int(os.environ.get("MAINSPRING_WORKER_CRASH_TRIALS", "10"))
BATCHES = 5
SEED = 1717


def _spawn(mode: str, where: Path, seed: int) -> subprocess.Popen[bytes]:
    with (where / f"{mode}.err").open("ab") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                CHILD,
                mode,
                str(where / "store.sqlite3"),
                str(where / "ledger"),
                EXECUTION,
                str(seed),
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


def _stderr(where: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(where.glob("*.err")))


def _check_writers(ledger: Path, about: str) -> dict[str, list[int]]:
    """Per task, the writers in the order they first wrote; no older writer after a newer."""
    order: dict[str, list[int]] = {}
    for line in ledger.read_text().splitlines():
        task, pid_text, _generation = line.split(" ")
        pid = int(pid_text)
        writers = order.setdefault(task, [])
        if pid not in writers:
            writers.append(pid)
        assert writers[-1] == pid, f"{about}: task {task}: writer {pid} wrote after {writers[-1]}"
    return order


def _alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for a PID 1 that may not reap)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] != b"Z"


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(BATCHES))
def test_kill_9_while_workers_write_never_leaves_two_writers(tmp_path: Path, batch: int) -> None:
    rng = random.Random(f"{SEED}:{batch}")
    outcomes: dict[str, int] = {}
    takeovers = 0
    for trial in range(TRIALS):
        where = tmp_path / f"t{trial}"
        where.mkdir()
        seed = rng.randrange(2**31)
        delay = rng.uniform(0.0, 0.5)
        about = f"trial {trial} (seed {seed}, kill after {delay * 1000:.0f} ms) in {where}"
        child = _spawn("start", where, seed)
        assert child.stdout is not None
        readable, _, _ = select.select([child.stdout], [], [], 30.0)
        line = child.stdout.readline().strip() if readable else b""
        assert line == b"ready", f"{about}: {line!r}\n{_stderr(where)}"
        time.sleep(delay)  # the kill lands at a random moment: the thing under test
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        child.stdout.close()

        resume = _spawn("resume", where, seed)
        try:
            out, _ = resume.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            resume.kill()
            resume.communicate()
            pytest.fail(f"{about}: the resume hung\n{_stderr(where)}")
        assert resume.returncode == 0, f"{about}: {out!r}\n{_stderr(where)}"
        status = out.decode().strip().splitlines()[-1]
        outcomes[status] = outcomes.get(status, 0) + 1

        ledger = where / "ledger"
        order = _check_writers(ledger, about) if ledger.exists() else {}
        stored = ms.storage.SqliteStore(where / "store.sqlite3").get(EXECUTION)
        assert stored is not None
        workers, dropped = ms.storage._seam.parse_workers(stored.workers)
        assert dropped == 0
        assert not any(w.active for w in workers), f"{about}: {workers}"
        takeovers += sum(1 for w in workers if w.generation > 1)
        if status == "completed":
            for pids in order.values():  # every writer of a completed run is dead now
                assert not any(_alive(pid) for pid in pids[:-1]), about
        # A run may fail only by refusing a takeover it cannot make safely (a start whose
        # process was never recorded), never by two writers.
        if status != "completed":
            tasks, _ = ms.storage._seam.parse_agent_tasks(stored)
            codes = {t.failure.code for t in tasks if t.failure is not None}
            assert codes <= {"worker-unconfirmed"}, f"{about}: {status} {codes}"
    assert outcomes.get("completed", 0) >= TRIALS // 2, outcomes
    assert takeovers > 0, outcomes  # the trials did exercise takeover
