"""Pause, cancel, the commit funnel and leases (R1, R2, R4, R5, E2-E4, L1-L3), and stopping
one agent task in all four cases (S1, S2). Two runtimes on one store stand in for two
processes here; tests/executions/test_cross_process.py does it with real ones."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms

from ._kit import (
    FAST,
    Gate,
    Ledger,
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

pytestmark = pytest.mark.anyio


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


async def test_R5_an_agent_question_without_an_answer_is_left_alone(tmp_path: Path) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("which?")

    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "curious")))).wait()
        before = stored(rt, result.execution_id)
        again = await (await rt.resume(result.execution_id)).wait()
        assert stored(rt, result.execution_id) == before  # not even the lease was taken
    assert again.status == "waiting_for_clarification"


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


async def test_L3_waiting_for_an_answer_releases_the_lease(tmp_path: Path) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "curious")))).wait()
        record = stored(rt, result.execution_id)
    assert record.lease is not None
    assert record.lease.owner == ""


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
    notices = [e for e in events if isinstance(e, ms.executions.AgentTaskStopped)]
    assert [n.operation_id for n in notices] == [stop.operation_id]


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
