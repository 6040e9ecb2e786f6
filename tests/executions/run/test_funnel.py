"""Pause, cancel, the commit funnel and leases (R1, R2, R4, R5, E2-E4, L1-L3), and stopping
one agent task in all four cases (S1, S2). Two runtimes on one store stand in for two
processes here; tests/executions/facade/test_record_controls.py does it with real ones."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs
import psycopg
import pytest

import mainspring as ms
from tests._cli_kit import run_cli

from ..._postgres import postgres_url, server_url  # noqa: F401 - a fixture
from .._kit import (
    FAST,
    Gate,
    Ledger,
    RecordingSqliteStore,
    agent,
    linear,
    plan_of,
    recorded_events,
    runtime,
    statuses,
    stored,
    tasks_of,
    tool,
)


@pytest.mark.anyio
async def test_R1_pause_stops_live_work_with_Pause_requeues_tasks_and_releases(
    tmp_path: Path,
) -> None:
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("before", lambda: 1)
        await ctx.step("park", gate)
        return "done"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        await gate.entered.wait()
        result = await rt.pause(handle.execution_id, reason="lunch")
        record = stored(rt, handle.execution_id)
        assert isinstance(gate.reasons[0], ms.Pause)
        assert result.status == "paused"
        assert isinstance(result.stopped_by, ms.Pause)
        (task,) = tasks_of(record)
        assert task.state == "queued"
        assert task.interruption is not None
        assert task.interruption.kind == "pause"
        assert task.inner_completed == ("before",)
        assert record.lease is not None
        assert record.lease.owner == ""  # L3
        assert record.controls[-1].action == "pause"
        assert record.controls[-1].reason == "lunch"
        gate.opened.set()
        done = await (await rt.resume(handle.execution_id)).wait()
    assert done.status == "completed"
    assert gate.calls == 2  # only the step in flight ran again


@pytest.mark.anyio
async def test_R2_cancel_is_terminal_descendants_see_ParentCancel(tmp_path: Path) -> None:
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.step("park", gate)

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker"), tool("t", "inc", "a")))
        await gate.entered.wait()
        result = await rt.cancel(handle.execution_id, reason="not needed")
        record = stored(rt, handle.execution_id)
        (reason,) = gate.reasons
        assert isinstance(reason, ms.ParentCancel)
        assert isinstance(reason.root, ms.Cancel)
        assert result.status == "cancelled"
        (task,) = tasks_of(record)
        assert task.state == "cancelled"
        assert task.interruption is not None
        assert task.interruption.kind == "parent-cancel"
        assert record.lease is not None
        assert record.lease.owner == ""
        # Terminal: resume changes nothing (R4), pause changes nothing.
        again = await (await rt.resume(handle.execution_id)).wait()
        assert again.status == "cancelled"
        assert (await rt.pause(handle.execution_id)).status == "cancelled"


@pytest.mark.anyio
async def test_R4_resuming_a_terminal_execution_changes_nothing(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        result = await (await rt.start("g", linear(2))).wait()
        before = stored(rt, result.execution_id)
        again = await (await rt.resume(result.execution_id)).wait()
        # An answer is refused, never dropped silently; nothing changes either way.
        with pytest.raises(ms.executions.NotWaiting):
            await rt.resume(result.execution_id, answer="ignored")
        assert stored(rt, result.execution_id) == before
    assert again.status == "completed"
    assert again.outputs == {"s0": 1, "s1": 2}


@pytest.mark.anyio
async def test_R5_an_agent_question_without_an_answer_is_left_alone(tmp_path: Path) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("which?")

    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "curious")))).wait()
        before = stored(rt, result.execution_id)
        again = await (await rt.resume(result.execution_id)).wait()
        assert stored(rt, result.execution_id) == before  # not even the lease was taken
    assert again.status == "waiting_for_clarification"


@pytest.mark.anyio
async def test_E2_E3_a_pause_written_by_another_runtime_stops_the_run_within_a_heartbeat(
    tmp_path: Path,
) -> None:
    gate = Gate()
    ledger = Ledger()
    plan = plan_of(tool("g1", "gate"), tool("after", "inc", "g1", x=7))
    async with (
        runtime(tmp_path, ledger, tools={"gate": gate}, **FAST) as a,
        runtime(tmp_path, ledger, tools={"gate": gate}, **FAST) as b,
    ):
        handle = await a.start("g", plan)
        await gate.entered.wait()
        elsewhere = await b.pause(handle.execution_id)
        assert elsewhere.status == "paused"
        with anyio.fail_after(30):
            result = await handle.wait()
        (reason,) = gate.reasons
        assert isinstance(reason, ms.Pause)  # E3: Pause for paused
        assert isinstance(result.stopped_by, ms.Pause)
        record = stored(a, handle.execution_id)
        assert record.status == "paused"
        assert record.lease is not None
        assert record.lease.owner == ""  # A released (L3)
        assert ledger.count("inc:7") == 0  # no further call by that owner
        gate.opened.set()
        done = await (await b.resume(handle.execution_id)).wait()
    assert done.status == "completed"
    assert ledger.count("inc:7") == 1


@pytest.mark.anyio
async def test_E3_a_lost_lease_stops_the_run_with_LeaseLost_and_writes_nothing(
    tmp_path: Path,
) -> None:
    gate = Gate()
    ledger = Ledger()
    plan = plan_of(tool("g1", "gate"), tool("after", "inc", "g1", x=7))
    async with runtime(tmp_path, ledger, tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        store = rt.store
        # A thief takes the lease (as if ours had lapsed while we were frozen).
        assert store.release(handle.execution_id, rt.owner)
        assert store.acquire(handle.execution_id, "thief:1:x", ttl=60).acquired
        before = stored(rt, handle.execution_id)
        with anyio.fail_after(30):
            result = await handle.wait()
        (reason,) = gate.reasons
        assert isinstance(reason, ms.LeaseLost)
        assert isinstance(result.stopped_by, ms.LeaseLost)
        assert stored(rt, handle.execution_id) == before  # nothing written after the loss
        assert ledger.count("inc:7") == 0
        with pytest.raises(ms.ExecutionBusy, match="thief"):  # L1
            await rt.resume(handle.execution_id)


@pytest.mark.anyio
async def test_E4_a_cancel_landing_while_the_run_finishes_is_never_overwritten(
    tmp_path: Path,
) -> None:
    holder: dict[str, Any] = {}

    async def last(**_: Any) -> str:
        await holder["b"].cancel(holder["id"], reason="changed my mind")
        return "finished anyway"

    async with runtime(tmp_path, tools={"last": last}) as a, runtime(tmp_path) as b:
        holder["b"] = b
        handle = await a.start("g", plan_of(tool("x", "inc"), tool("end", "last", "x")))
        holder["id"] = handle.execution_id
        result = await handle.wait()
        record = stored(a, handle.execution_id)
    assert record.status == "cancelled"
    assert "end" not in record.completed_steps
    # V3: the refusal is told as the cancel that caused it, with its detail and issuer.
    assert isinstance(result.stopped_by, ms.Cancel)
    assert result.stopped_by.detail == "changed my mind"
    assert result.stopped_by.source == b.owner


@pytest.mark.anyio
async def test_L1_resume_refuses_while_another_owner_holds_a_live_lease(tmp_path: Path) -> None:
    gate = Gate()
    async with (
        runtime(tmp_path, tools={"gate": gate}) as a,
        runtime(tmp_path) as b,
    ):
        handle = await a.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        with pytest.raises(ms.ExecutionBusy) as caught:
            await b.resume(handle.execution_id)
        assert caught.value.lease is not None
        assert caught.value.lease.owner == a.owner
        gate.opened.set()
        assert (await handle.wait()).status == "completed"


@pytest.mark.anyio
async def test_L2_a_run_heartbeats_so_its_lease_never_lapses(tmp_path: Path) -> None:
    # The store's clock is the test's: it moves three lease lengths while the tool works,
    # half a lease at a time and only after the runner renewed, so the test does not depend
    # on how fast a loaded machine heartbeats (the old version raced a 0.2 s lease).
    now = [time.time()]
    ttl = 60.0
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3", clock=lambda: now[0])
    holder: dict[str, Any] = {}

    def expiry() -> float:
        record = store.get(holder["id"])
        assert record is not None
        assert record.lease is not None
        assert record.lease.owner  # still ours: never lapsed, never taken
        return record.lease.expires_at

    async def long(**_: Any) -> str:
        for _ in range(6):
            before = await anyio.to_thread.run_sync(expiry)
            now[0] += ttl / 2
            with anyio.fail_after(30):
                while await anyio.to_thread.run_sync(expiry) <= before:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # the next heartbeat renews from the new time
        return "ok"

    async with runtime(store, tools={"long": long}, lease_ttl=ttl,
                       heartbeat_interval=0.02) as rt:  # fmt: skip
        handle = await rt.start("g", plan_of(tool("l", "long"), tool("n", "inc", "l")))
        holder["id"] = handle.execution_id
        result = await handle.wait()
    assert result.status == "completed"  # a lapsed lease would have refused the commit


@pytest.mark.anyio
async def test_L3_waiting_for_an_answer_releases_the_lease(tmp_path: Path) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "curious")))).wait()
        record = stored(rt, result.execution_id)
    assert record.lease is not None
    assert record.lease.owner == ""


@pytest.mark.anyio
async def test_S1_a_live_task_is_stopped_with_Cancel_and_the_run_goes_on(tmp_path: Path) -> None:
    gate = Gate()
    ledger = Ledger()

    async def worker(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.step("park", gate)

    plan = plan_of(agent("a", "worker"), tool("free", "inc", x=3), tool("dep", "inc", "a", x=4))
    async with runtime(tmp_path, ledger, agents={"worker": worker}) as rt:
        async with recorded_events(rt) as events:
            handle = await rt.start("g", plan)
            await gate.entered.wait()
            (task,) = await rt.agent_tasks(handle.execution_id)
            stop = await rt.stop_agent_task(task.id)
            assert stop.ok
            assert stop.state == "stopping"
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    (reason,) = gate.reasons
    assert isinstance(reason, ms.Cancel)  # just this child, with Cancel
    assert reason.source == rt.owner  # who asked (V3)
    (stopped,) = tasks_of(record)
    assert stopped.state == "cancelled"
    assert statuses(record)["a"] == "stopped"  # S2: done without a result
    assert result.status == "completed"
    assert result.stopped_steps == ("a",)
    assert ledger.count("inc:3") == 1
    assert ledger.count("inc:4") == 1  # its dependent ran
    notices = [e for e in events if isinstance(e, ms.events.AgentTaskStopped)]
    assert [n.operation_id for n in notices] == [stop.operation_id]


@pytest.mark.anyio
async def test_S1_S2_a_stored_waiting_task_is_cancelled_under_a_lease_and_the_slot_passes(
    tmp_path: Path,
) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask(f"question from {ctx.step_id}")

    plan = plan_of(agent("q1", "curious", n=1), agent("q2", "curious", n=2))
    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
        first, second = sorted(tasks_of(record), key=lambda t: t.created_at)
        assert record.pending is not None
        assert record.pending.agent_task_id == first.id
        stop = await rt.stop_agent_task(first.id)
        assert (stop.ok, stop.state) == (True, "cancelled")
        after = stored(rt, result.execution_id)
        assert after.status == "waiting_for_clarification"  # S2: status untouched
        assert after.pending is not None
        assert after.pending.agent_task_id == second.id  # the slot passes on (R9)
        assert after.pending.question == "question from q2"
        assert statuses(after)["q1"] == "stopped"  # same id and input hash: done
        cancelled = next(t for t in tasks_of(after) if t.id == first.id)
        assert cancelled.interruption is not None
        assert cancelled.interruption.kind == "parent-cancel"
        assert cancelled.pending_question is None  # the question is withdrawn
        assert after.lease is not None
        assert after.lease.owner == ""  # acquired properly, then released
        # The last one: the slot is cleared.
        assert (await rt.stop_agent_task(second.id)).ok
        assert stored(rt, result.execution_id).pending is None


@pytest.mark.anyio
async def test_S1_a_finished_task_is_reported_and_an_unknown_one_is_unknown(
    tmp_path: Path,
) -> None:
    async def quick(ctx: ms.AgentContext, input: Any) -> int:
        return 1

    async with runtime(tmp_path, agents={"quick": quick}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "quick")))).wait()
        (task,) = await rt.agent_tasks(result.execution_id)
        before = stored(rt, result.execution_id)
        finished = await rt.stop_agent_task(task.id)
        assert (finished.ok, finished.state) == (False, "completed")
        assert stored(rt, result.execution_id) == before
        for unknown_id in (f"{result.execution_id}:t99", "nope:t1", "../etc:t1", ""):
            unknown = await rt.stop_agent_task(unknown_id)
            assert (unknown.ok, unknown.state) == (False, "unknown")


@pytest.mark.anyio
async def test_S2_the_step_is_left_alone_if_the_plan_no_longer_holds_that_exact_step(
    tmp_path: Path,
) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "curious", v=1)))).wait()
        (task,) = await rt.agent_tasks(result.execution_id)

        def replanned(record: ms.storage.Execution, now: float) -> ms.storage.Execution:
            assert record.plan is not None
            step = attrs.evolve(record.plan.steps[0], input={"v": 2})
            return attrs.evolve(record, plan=attrs.evolve(record.plan, steps=(step,)))

        rt.store.edit(result.execution_id, replanned)
        assert (await rt.stop_agent_task(task.id)).ok
        record = stored(rt, result.execution_id)
    assert statuses(record) == {"a": "pending"}
    assert tasks_of(record)[0].state == "cancelled"


# ----------------------------------------------------------------------
# How an ExecutionActor's run ends on disk: every final write (completed, failed,
# cancelled, paused, waiting) releases the lease in that same write (L3), never in a
# second write a crash could fall between.

ROOT = Path(__file__).resolve().parents[3]


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


@pytest.mark.anyio
async def test_R3_a_cancelled_host_leaves_its_running_tool_step_to_the_resume(
    tmp_path: Path,
) -> None:
    # A server's lifespan cancelled while a tool runs is a shutdown, not a failure of the
    # step: the tool reads a reason whose root is Shutdown, the run stays ``running`` on disk
    # (the step in flight), and a resume runs the step again and completes.
    seen: list[ms.CancelReason | None] = []
    entered = anyio.Event()

    async def slow(**_: Any) -> str:
        if seen:
            return "second time"
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            seen.append(ms.cancel_reason())
        return "unreachable"  # pragma: no cover

    ids: list[str] = []
    with anyio.CancelScope() as host:
        async with runtime(tmp_path, tools={"slow": slow}, recover=False) as rt:
            handle = await rt.start("g", plan_of(tool("s", "slow")))
            ids.append(handle.execution_id)
            await entered.wait()
            host.cancel()
            await anyio.sleep_forever()
    [reason] = seen
    assert reason is not None
    assert isinstance(reason.root, ms.Shutdown)
    async with runtime(tmp_path, tools={"slow": slow}, recover=False) as rt:
        record = rt.store.get(ids[0])
        assert record is not None
        assert record.status == "running"
        assert record.plan is not None
        assert {s.id: s.status for s in record.plan.steps} == {"s": "running"}
        with anyio.fail_after(30):
            result = await (await rt.resume(ids[0])).wait()
    assert result.status == "completed", result
    assert result.outputs == {"s": "second time"}


@pytest.mark.anyio
async def test_O2_a_tool_raising_generator_exit_fails_its_step_and_the_runtime_lives(
    tmp_path: Path,
) -> None:
    # GeneratorExit raised by a tool's own code is the tool's failure: its step fails with
    # the exception and its traceback (O2), the run goes on, and nothing escapes open_runtime
    # as an exception group taking every other run down with it.
    def closing(**_: Any) -> None:
        raise GeneratorExit

    with anyio.fail_after(30):
        async with runtime(tmp_path, tools={"closing": closing}) as rt:
            plan = plan_of(tool("s", "closing"), tool("other", "inc", x=1))
            result = await (await rt.start("g", plan)).wait()
            assert result.status == "failed"
            assert result.outputs == {"other": 2}
            observation = {o.step_id: o for o in result.observations}["s"]
            assert not observation.ok
            assert observation.error_type == "GeneratorExit"
            assert observation.traceback


@pytest.mark.anyio
async def test_O2_a_tool_raising_an_unasked_cancellation_fails_its_step_and_the_block_goes_on(
    tmp_path: Path,
) -> None:
    # asyncio's CancelledError raised by a tool nobody cancelled is the tool's failure: the
    # step fails, the run says so, and the caller's block goes on (on asyncio it used to end
    # the block silently; on trio to escape it).
    import asyncio

    def cancelling(**_: Any) -> None:
        raise asyncio.CancelledError("raised by the tool itself")

    after: list[str] = []
    with anyio.fail_after(30):
        async with runtime(tmp_path, tools={"cancelling": cancelling}) as rt:
            plan = plan_of(tool("s", "cancelling"), tool("other", "inc", x=1))
            result = await (await rt.start("g", plan)).wait()
            after.append("the block went on")
    assert after == ["the block went on"]
    assert result.status == "failed"
    assert result.outputs == {"other": 2}
    assert not {o.step_id: o for o in result.observations}["s"].ok


# ----------------------------------------------------------------------
# PostgreSQL: a run's last write (a pause) meets a row lock another connection holds for
# longer than the stop's time (E2): the runner's wind-down is cut short while its write waits.
# What ``pause`` and the handle's ``wait`` return must be where the run stands on the store
# once the lock is let go.

_entered: dict[str, anyio.Event] = {}


async def _block(x: int = 0) -> int:
    if x == 1 and "gate" in _entered and not _entered["gate"].is_set():
        _entered["gate"].set()
        await anyio.sleep_forever()
    return x + 1


PLAN = ms.Plan(
    id="locked",
    goal="a pause under a held row lock",
    steps=(
        ms.PlanStep(id="a", tool="inc", input={"x": 0}),
        ms.PlanStep(id="b", tool="inc", input={"x": 1}),
    ),
)


def _lock_waits(conn: Any, schema: str, want: int) -> None:
    """Return once the runtime's sessions were seen waiting for a row lock ``want`` times
    (each wait ends at lock_timeout and the store tries again)."""
    seen: set[Any] = set()
    deadline = time.monotonic() + 60
    while len(seen) < want and time.monotonic() < deadline:
        rows = conn.execute(
            "SELECT pid, query_start FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE %s",
            (f"%{schema}%",),
        ).fetchall()
        seen.update(rows)
        time.sleep(0.05)


@pytest.mark.anyio
@pytest.mark.slow
async def test_E2_a_pause_whose_write_waited_for_a_row_lock_returns_the_stored_status(
    postgres_url: str,  # noqa: F811
) -> None:
    schema = postgres_url.rsplit("schema=", 1)[1].split("&")[0]
    _entered["gate"] = anyio.Event()
    holder = await anyio.to_thread.run_sync(lambda: psycopg.connect(server_url()))
    watcher = await anyio.to_thread.run_sync(lambda: psycopg.connect(server_url(), autocommit=True))
    try:
        async with ms.open_runtime(
            store=postgres_url, tools={"inc": _block}, lease_ttl=120.0, heartbeat_interval=60.0
        ) as rt:
            handle = await rt.start("locked", PLAN, execution_id="ex-locked")
            with anyio.fail_after(30):
                await _entered["gate"].wait()
            await anyio.to_thread.run_sync(
                lambda: holder.execute(
                    f'SELECT 1 FROM "{schema}".executions WHERE id = %s FOR UPDATE',
                    ("ex-locked",),
                )
            )
            async with anyio.create_task_group() as tg:

                async def release() -> None:
                    await anyio.to_thread.run_sync(_lock_waits, watcher, schema, 4)
                    await anyio.to_thread.run_sync(holder.rollback)

                tg.start_soon(release)
                with anyio.fail_after(90):
                    paused = await rt.pause("ex-locked", reason="held")
            with anyio.fail_after(30):
                result = await handle.wait()
            stored = await rt.get("ex-locked")
            assert stored is not None
            assert stored.status == "paused"
            # Returned where the run stands: the store says paused, so must the answer.
            assert paused.status == stored.status, (paused.status, paused.error)
            assert result.status == stored.status, (result.status, result.error)
    finally:
        holder.close()
        watcher.close()
        _entered.pop("gate", None)
