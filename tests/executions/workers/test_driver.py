"""The worker driver (#17) with ScriptedHost: the protocol reports it records (idle/busy,
a line that is not JSON, a failure report that does not validate), a resume that cannot
confirm the old process dead (it survives; its start was never recorded) and so starts
nothing, and a handoff interrupted by a crash finished from the sealed delivery (E10)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent, WorkerNotLive
from mainspring.testing import ScriptedHost

from .._kit import FAST, RecordingSqliteStore, agent, plan_of, runtime, stored, tasks_of

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
    from .._worker_fake import FakeHost, Script

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
        raw={**ms.storage._seam.unstructure(delivered), "written_by_a_newer_version": 1},
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


# ----------------------------------------------------------------------
# The worker lifecycle driven through WorkerAgent: useful progress resets the
# no-progress rule, a chatty worker does not flood the trail nor the store, and two
# finalizes racing with different proofs never overwrite each other.

FAIL = {"type": "failure", "class": "tests-fail", "fingerprint": "x"}
RESULT_worker_lifecycle = {"type": "result", "output": {"ok": 1}}


def coder_worker_lifecycle(host: ScriptedHost) -> dict[str, Any]:
    return {"coder": WorkerAgent(["fake"], host=host, grace=0.1)}


async def test_W4_useful_progress_between_two_same_failures_resets_the_no_progress_rule(
    tmp_path: Path,
) -> None:
    useful = {"type": "progress", "useful": True}
    host = ScriptedHost([[FAIL, useful, FAIL, RESULT_worker_lifecycle]])
    async with runtime(tmp_path, agents=coder_worker_lifecycle(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            result = await handle.wait()
        assert result.status == "completed", tasks_of(stored(rt, handle.execution_id))
        assert result.outputs["a"] == {"ok": 1}


async def test_W4_progress_that_is_not_useful_does_not_reset_the_no_progress_rule(
    tmp_path: Path,
) -> None:
    host = ScriptedHost([[FAIL, {"type": "progress"}, {"type": "progress", "useful": "yes"}, FAIL]])
    async with runtime(tmp_path, agents=coder_worker_lifecycle(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert task.failure is not None
    assert task.failure.code == "no-progress:tests-fail"


async def test_W5_a_chatty_worker_keeps_the_trail_and_the_commits_bounded(tmp_path: Path) -> None:
    chatter: list[Any] = []
    for _ in range(1500):
        chatter += ["a log line, not a report", {"type": "busy"}, {"type": "progress"}]
    host = ScriptedHost([[*chatter, RESULT_worker_lifecycle]])
    store = RecordingSqliteStore(tmp_path / "store.sqlite3")
    async with runtime(store, agents=coder_worker_lifecycle(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(60):
            assert (await handle.wait()).status == "completed"
        seen = await rt.workers(handle.execution_id)
    events = [e.event for e in seen.trail]
    # the lifecycle is still in the trail: chatter did not push it out
    assert events[:3] == ["assigned", "starting", "started"]
    protocol = [e.detail for e in seen.trail if e.event == "protocol"]
    assert protocol[0] == "not-json n=1"
    assert len(protocol) <= 12  # 1, 2, 4, ... 1024 of 1500
    assert len(store.versions) < 60  # not one commit per line


def _proof(receipt: dict[str, Any]) -> ms.executions.Proof:
    return ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )


async def test_W3_two_finalizes_racing_with_different_proofs_never_overwrite(
    tmp_path: Path,
) -> None:
    gate, started = anyio.Event(), anyio.Event()

    async def waits(ctx: Any, input: Any) -> Any:  # keeps the run (and its board) live
        started.set()
        await gate.wait()
        return 1

    host = ScriptedHost([[RESULT_worker_lifecycle]])
    async with runtime(
        tmp_path, agents={**coder_worker_lifecycle(host), "waits": waits}, **FAST
    ) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder"), agent("b", "waits", "a")))
        with anyio.fail_after(30):
            await started.wait()  # b depends on a: a was delivered
        answers: list[Any] = []

        async def finalize(receipt: dict[str, Any]) -> None:
            try:
                answers.append(await rt.finalize(handle.execution_id, _proof(receipt)))
            except ms.executions._workers.fleet.WorkerRefused as exc:
                answers.append(exc.code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(finalize, {"x": 1})
            tg.start_soon(finalize, {"x": 2})
        (digest,) = [a for a in answers if a != "proof"]
        assert answers.count("proof") == 1
        assert stored(rt, handle.execution_id).proof_digest == digest
        gate.set()
        with anyio.fail_after(30):
            await handle.wait()
        assert stored(rt, handle.execution_id).proof_digest == digest


async def test_W4_a_long_failure_class_reaches_the_step_failure_whole(tmp_path: Path) -> None:
    name = "c" * 64  # the longest failure class
    failure = {"type": "failure", "class": name, "fingerprint": "x"}
    host = ScriptedHost([[failure, failure]])
    async with runtime(tmp_path, agents=coder_worker_lifecycle(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        (task,) = tasks_of(stored(rt, handle.execution_id))
        seen = await rt.workers(handle.execution_id)
    assert task.failure is not None
    assert task.failure.code == f"no-progress:{name}"
    assert seen.workers[0].reason == task.failure.code
    assert seen.tasks[0].reason == task.failure.code


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
async def test_W5_a_flood_of_state_and_usage_reports_is_committed_together(tmp_path: Path) -> None:
    flood: list[Any] = []
    for _ in range(2000):
        flood += [{"type": "busy"}, {"type": "idle"}, {"type": "usage", "input_tokens": 1}]
    host = ScriptedHost([[*flood, RESULT_worker_lifecycle]])
    store = RecordingSqliteStore(tmp_path / "store.sqlite3")
    async with runtime(store, agents=coder_worker_lifecycle(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(60):
            assert (await handle.wait()).status == "completed"
        record = stored(rt, handle.execution_id)
        seen = await rt.workers(handle.execution_id)
    # every report counted, but not one commit each (6,000 reports)
    assert record.usage.input_tokens == 2000
    assert seen.workers[0].usage[0].input_tokens == 2000
    assert len(store.versions) < 600


# ----------------------------------------------------------------------
# A repair instruction whose line takes time to reach the worker (a full
# stdin pipe) never overwrites what the driver recorded meanwhile (V2: stale writes), and a
# repair to a process that just ended is ``WorkerNotLive``, not a raw OS error.


class SlowSend(ScriptedHost):
    """A host whose sends wait for ``gate`` (like a worker that does not read its stdin)."""

    def __init__(self, scripts: Any) -> None:
        super().__init__(scripts)
        self.gate = anyio.Event()
        self.sending = anyio.Event()

    async def send(
        self, process: ms.storage._seam.ProcessIdentity, line: Mapping[str, Any]
    ) -> None:
        self.sending.set()
        await self.gate.wait()
        await super().send(process, line)


async def _worker(rt: ms.Runtime, execution_id: str, status: str) -> ms.storage.WorkerRecord:
    for _ in range(3000):
        seen = await rt.workers(execution_id)
        if seen.workers and seen.workers[0].status == status:
            return seen.workers[0]
        await anyio.sleep(0.01)
    raise AssertionError(f"the worker never became {status}")


async def test_W2_a_slow_repair_does_not_overwrite_a_failure_recorded_meanwhile(
    tmp_path: Path,
) -> None:
    go = anyio.Event()
    host = SlowSend([[{"type": "busy"}, ScriptedHost.wait(go), FAIL, ScriptedHost.until_stopped()]])
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            worker = await _worker(rt, handle.execution_id, "running")
            answers: list[Any] = []

            async def repair() -> None:
                try:
                    answers.append(await rt.repair_worker(handle.execution_id, worker.id, "fix"))
                except Exception as exc:
                    answers.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(repair)
                await host.sending.wait()
                go.set()  # the failure is reported while the repair line is on its way
                for _ in range(3000):
                    if (await rt.workers(handle.execution_id)).workers[0].failure is not None:
                        break
                    await anyio.sleep(0.01)
                host.gate.set()
            after = (await rt.workers(handle.execution_id)).workers[0]
            assert after.failure is not None  # not overwritten by the repair
            assert after.repeats == 1
            assert after.repairs == 1
            assert len(answers) == 1
            assert isinstance(answers[0], str)
        await rt.cancel(handle.execution_id)


async def test_W2_a_repair_to_a_process_that_just_ended_is_worker_not_live(tmp_path: Path) -> None:
    go = anyio.Event()
    result = {"type": "result", "output": 1}
    host = SlowSend([[{"type": "busy"}, ScriptedHost.wait(go), result]])
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            worker = await _worker(rt, handle.execution_id, "running")
            answers: list[Any] = []

            async def repair() -> None:
                try:
                    answers.append(await rt.repair_worker(handle.execution_id, worker.id, "fix"))
                except Exception as exc:
                    answers.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(repair)
                await host.sending.wait()
                go.set()  # it delivers (and is stopped) while the repair is on its way
                assert (await handle.wait()).status == "completed"
                host.gate.set()
            assert isinstance(answers[0], WorkerNotLive), answers
            (after,) = (await rt.workers(handle.execution_id)).workers
            assert after.status == "delivered"


async def test_W2_a_repair_while_the_result_is_sealed_is_kept_by_the_handoff(
    tmp_path: Path,
) -> None:
    go, gate, sealing = anyio.Event(), anyio.Event(), anyio.Event()
    result = {"type": "result", "output": {"big": "x" * 1000}}
    host = ScriptedHost(
        [[{"type": "busy"}, ScriptedHost.wait(go), result, ScriptedHost.until_stopped()]]
    )
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        shelf = rt._services.evidence
        seal = shelf.seal

        async def slow_seal(value: Any) -> str:
            sealing.set()
            await gate.wait()
            return await seal(value)

        shelf.seal = slow_seal  # type: ignore[method-assign]
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            worker = await _worker(rt, handle.execution_id, "running")
            go.set()
            await sealing.wait()  # the handoff read the worker and seals its result
            await rt.repair_worker(handle.execution_id, worker.id, "fix")
            gate.set()
            assert (await handle.wait()).status == "completed"
        (after,) = (await rt.workers(handle.execution_id)).workers
    assert after.status == "delivered"
    assert after.repairs == 1  # the repair recorded meanwhile was not overwritten


# ----------------------------------------------------------------------
# A task that used up its ``max_starts`` leaves no active worker behind
# (a phantom ``assigned`` worker held a capacity slot and refused finalize for good).

USAGE = {"type": "usage", "input_tokens": 5}


def coder_worker_starts(host: ScriptedHost, **options: Any) -> dict[str, Any]:
    return {"coder": WorkerAgent(["fake"], host=host, grace=0.1, **options)}


async def test_W4_exits_up_to_max_starts_leave_no_active_worker(tmp_path: Path) -> None:
    crash = [USAGE, ScriptedHost.exit(1)]
    host = ScriptedHost([crash, crash, crash])
    async with runtime(tmp_path, agents=coder_worker_starts(host, max_starts=2), **FAST) as rt:
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


async def test_W4_failed_starts_up_to_max_starts_leave_no_active_worker(tmp_path: Path) -> None:
    host = ScriptedHost([ScriptedHost.fail_start()] * 3)
    async with runtime(tmp_path, agents=coder_worker_starts(host, max_starts=2), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        seen = await rt.workers(handle.execution_id)
    assert len(host.starts) == 2
    assert [w.status for w in seen.workers] == ["blocked", "blocked"]
