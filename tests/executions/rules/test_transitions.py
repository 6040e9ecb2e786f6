"""Stopping one agent task leaves an honest run (S1, S2): the stopped task's step counts as
done without a result (``stopped``), so its dependents run; ``cascade=True`` cancels them
instead. A run ends ``completed`` only if something was produced and nothing was cancelled
or failed. The three paths a stop can take — the task live here, a stored task with no
runner, a runner elsewhere meeting a stop request at its heartbeat — end the same way."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.executions._rules import transitions as tr
from mainspring.executions._rules.plan import step_input_hash
from tests import strategies
from tests._cli_kit import run_cli
from tests._examples import examples

from .._kit import (
    FAST,
    Gate,
    Ledger,
    agent,
    plan_of,
    recorded_events,
    runtime,
    statuses,
    stored,
    tasks_of,
    tool,
)

pytestmark = pytest.mark.anyio


def _parker(gate: Gate) -> Any:
    async def worker(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.step("park", gate)

    return worker


def _step_events(events: list[object], step_id: str) -> list[str]:
    return [
        e.state for e in events if isinstance(e, ms.events.StepFinished) and e.step_id == step_id
    ]


async def test_S2_a_stopped_live_task_counts_as_done_and_its_dependents_run(
    tmp_path: Path,
) -> None:
    gate = Gate()
    ledger = Ledger()
    plan = plan_of(agent("a", "worker"), tool("after", "inc", "a", x=1), tool("free", "inc", x=2))
    async with runtime(tmp_path, ledger, agents={"worker": _parker(gate)}) as rt:
        async with recorded_events(rt) as events:
            handle = await rt.start("g", plan)
            await gate.entered.wait()
            (task,) = await rt.agent_tasks(handle.execution_id)
            stop = await rt.stop_agent_task(task.id)
            assert (stop.ok, stop.state) == (True, "stopping")
            with anyio.fail_after(30):
                result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert statuses(record) == {"a": "stopped", "after": "succeeded", "free": "succeeded"}
    assert ledger.count("inc:1") == 1  # the dependent ran, with no output from a
    assert result.status == "completed"
    assert result.stopped_steps == ("a",)
    assert result.summary == "completed: 2 succeeded, 1 stopped of 3 steps"
    assert (result.steps_done, result.steps_total) == (3, 3)
    assert "a" not in result.outputs
    (stopped,) = tasks_of(record)
    assert stopped.state == "cancelled"
    assert stopped.interruption is not None
    assert stopped.interruption.kind == "parent-cancel"
    observation = next(o for o in record.observations if o.step_id == "a")
    assert (observation.ok, observation.code) == (False, "stopped")
    assert _step_events(events, "a") == ["stopped"]


async def test_S2_a_cascade_cancels_the_dependents_and_the_run_fails_saying_why(
    tmp_path: Path,
) -> None:
    gate = Gate()
    ledger = Ledger()
    plan = plan_of(agent("a", "worker"), tool("after", "inc", "a", x=1), tool("free", "inc", x=2))
    async with runtime(tmp_path, ledger, agents={"worker": _parker(gate)}) as rt:
        async with recorded_events(rt) as events:
            handle = await rt.start("g", plan)
            await gate.entered.wait()
            (task,) = await rt.agent_tasks(handle.execution_id)
            stop = await rt.stop_agent_task(task.id, cascade=True)
            assert (stop.ok, stop.state) == (True, "stopping")
            with anyio.fail_after(30):
                result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert statuses(record) == {"a": "cancelled", "after": "cancelled", "free": "succeeded"}
    assert ledger.count("inc:1") == 0
    assert result.status == "failed"
    assert record.status == "failed"
    assert result.error is not None
    assert "cancelled" in result.error
    assert "a" in result.error.split(":")[-1]
    assert result.stopped_steps == ()
    assert _step_events(events, "a") == ["cancelled"]
    assert _step_events(events, "after") == ["cancelled"]


async def test_stopping_the_only_step_does_not_complete_the_run(tmp_path: Path) -> None:
    gate = Gate()
    async with runtime(tmp_path, agents={"worker": _parker(gate)}) as rt:
        handle = await rt.start("g", plan_of(agent("only", "worker")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"
    assert record.status == "failed"
    assert result.stopped_steps == ("only",)
    assert result.error is not None
    assert "only" in result.error
    assert "nothing" in result.error


async def _ask_then_stop(
    tmp_path: Path, *, cascade: bool
) -> tuple[ms.executions.ExecutionResult, ms.storage.Execution, ms.storage.Execution]:
    """A run waits for an answer; its waiting task is stopped on the record (no runner);
    the run is resumed."""
    ledger = Ledger()

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    plan = plan_of(agent("q", "curious"), tool("after", "inc", "q", x=1), tool("free", "inc"))
    async with runtime(tmp_path, ledger, agents={"curious": curious}) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_clarification"
        (task,) = await rt.agent_tasks(first.execution_id)
        stop = await rt.stop_agent_task(task.id, cascade=cascade)
        assert (stop.ok, stop.state) == (True, "cancelled")
        between = stored(rt, first.execution_id)
        with anyio.fail_after(30):
            result = await (await rt.resume(first.execution_id)).wait()
        return result, between, stored(rt, first.execution_id)


async def test_S2_a_stored_task_stopped_without_a_runner_ends_the_same_way(
    tmp_path: Path,
) -> None:
    result, between, record = await _ask_then_stop(tmp_path, cascade=False)
    assert between.status == "waiting_for_clarification"  # S2: the status is untouched
    assert between.pending is None  # its question is withdrawn
    assert statuses(between)["q"] == "stopped"
    assert statuses(record) == {"q": "stopped", "after": "succeeded", "free": "succeeded"}
    assert result.status == "completed"
    assert result.stopped_steps == ("q",)


async def test_S2_a_stored_task_stopped_with_cascade_fails_the_run_on_resume(
    tmp_path: Path,
) -> None:
    result, between, record = await _ask_then_stop(tmp_path, cascade=True)
    assert statuses(between)["q"] == "cancelled"
    assert statuses(record) == {"q": "cancelled", "after": "cancelled", "free": "succeeded"}
    assert result.status == "failed"
    assert result.error is not None
    assert "q" in result.error


@pytest.mark.parametrize("cascade", [False, True])
async def test_S2_a_stop_request_met_at_the_runners_heartbeat_ends_the_same_way(
    tmp_path: Path, cascade: bool
) -> None:
    """Runtime B stops a task runtime A runs: B writes a stop request (the cascade choice
    travels with it), A meets it at its next heartbeat."""
    gate = Gate()
    worker = _parker(gate)
    plan = plan_of(agent("a", "worker"), tool("after", "inc", "a", x=1), tool("free", "inc", x=2))
    async with (
        runtime(tmp_path, agents={"worker": worker}, **FAST) as a,
        runtime(tmp_path, agents={"worker": worker}, **FAST) as b,
    ):
        handle = await a.start("g", plan)
        await gate.entered.wait()
        (task,) = await b.agent_tasks(handle.execution_id)
        stop = await b.stop_agent_task(task.id, cascade=cascade)
        assert (stop.ok, stop.state) == (True, "stopping")
        assert "within one heartbeat" in stop.reason
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(a, handle.execution_id)
    if cascade:
        assert statuses(record) == {"a": "cancelled", "after": "cancelled", "free": "succeeded"}
        assert result.status == "failed"
    else:
        assert statuses(record) == {"a": "stopped", "after": "succeeded", "free": "succeeded"}
        assert result.status == "completed"
        assert result.stopped_steps == ("a",)
    (stopped,) = tasks_of(record)
    assert stopped.state == "cancelled"


def test_stop_requests_carry_the_cascade_choice_and_old_ones_still_parse() -> None:
    from mainspring.executions._rules.transitions import stop_request
    from mainspring.storage import StopRequest
    from mainspring.storage._seam import BadEncoding

    requests = (stop_request("op-1", "ex-1:t1"), stop_request("op-2", "ex-1:t2", cascade=True))
    assert [(r.operation_id, r.task_id, r.cascade) for r in requests] == [
        ("op-1", "ex-1:t1", False),
        ("op-2", "ex-1:t2", True),
    ]
    # As storage v2 wrote them (read by `mainspring migrate`): the third before the cascade
    # choice existed.
    old = ("op-1:ex-1:t1", "op-2.cascade:ex-1:t2", "op-3:ex-1:t3")
    assert [StopRequest.parse_v2(text) for text in old] == [
        *requests,
        StopRequest(operation_id="op-3", task_id="ex-1:t3"),
    ]
    with pytest.raises(BadEncoding, match="not a v2 stop request"):
        StopRequest.parse_v2("garbage")
    with pytest.raises(ValueError, match="task_id"):
        StopRequest(operation_id="op-1", task_id="bad id")  # X1: its ids are ids


@settings(max_examples=examples(200), deadline=None)
@given(
    operation=st.from_regex(r"op-[0-9a-f]{1,12}", fullmatch=True),
    task_id=strategies.ids,
    cascade=st.booleans(),
)
def test_a_stop_request_round_trips_and_is_a_valid_id(
    operation: str, task_id: str, cascade: bool
) -> None:
    from mainspring.executions._rules.transitions import stop_request
    from mainspring.storage import StopRequest

    request = stop_request(operation, task_id, cascade=cascade)
    stored = ms.storage._seam.unstructure(request)
    assert ms.storage._seam.structure(stored, StopRequest) == request
    v2 = f"{operation}{'.cascade' if cascade else ''}:{task_id}"
    assert StopRequest.parse_v2(v2) == request


async def test_S2_the_step_is_left_to_run_again_if_the_plan_no_longer_holds_that_exact_step(
    tmp_path: Path,
) -> None:
    async def asks_first(ctx: ms.AgentContext, input: Any) -> Any:
        if input["v"] == 1:
            return await ctx.ask("?")
        return input["v"]

    plan = plan_of(agent("a", "asks", v=1), tool("after", "inc", "a", x=1))
    async with runtime(tmp_path, agents={"asks": asks_first}) as rt:
        first = await (await rt.start("g", plan)).wait()
        (task,) = await rt.agent_tasks(first.execution_id)

        def replanned(record: ms.storage.Execution, now: float) -> ms.storage.Execution:
            assert record.plan is not None
            step = attrs.evolve(record.plan.steps[0], input={"v": 2})
            steps = (step, *record.plan.steps[1:])
            return attrs.evolve(record, plan=attrs.evolve(record.plan, steps=steps))

        rt.store.edit(first.execution_id, replanned)
        assert (await rt.stop_agent_task(task.id)).ok
        between = stored(rt, first.execution_id)
        with anyio.fail_after(30):
            result = await (await rt.resume(first.execution_id)).wait()
        record = stored(rt, first.execution_id)
    assert statuses(between)["a"] == "pending"  # not that exact step: not marked done
    assert statuses(record) == {"a": "succeeded", "after": "succeeded"}
    assert result.status == "completed"
    assert result.stopped_steps == ()
    assert result.outputs["a"] == 2
    old, new = sorted(tasks_of(record), key=lambda t: t.created_at)
    assert (old.id, old.state) == (task.id, "cancelled")
    assert new.state == "completed"


async def test_S2_stopping_a_waiting_task_in_a_live_run_withdraws_its_question(
    tmp_path: Path,
) -> None:
    """q1 asks while q2 still runs (the run is live): stopping q1 withdraws its question,
    frees the slot, and q1's dependent runs once q2 is done."""
    gate = Gate()

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("which one?")

    plan = plan_of(agent("q1", "curious"), agent("q2", "worker"), tool("after", "inc", "q1", x=1))
    agents = {"curious": curious, "worker": _parker(gate)}
    async with runtime(tmp_path, agents=agents) as rt:
        async with contextlib.aclosing(rt.events()) as events:  # type: ignore[type-var]
            handle = await rt.start("g", plan)
            with anyio.fail_after(30):
                async for event in events:
                    if isinstance(event, ms.events.AgentTaskWaiting):
                        break  # the question is durable
        await gate.entered.wait()
        assert stored(rt, handle.execution_id).pending is not None
        asking = next(t for t in await rt.agent_tasks(handle.execution_id) if t.step_id == "q1")
        stop = await rt.stop_agent_task(asking.id)
        assert (stop.ok, stop.state) == (True, "cancelled")
        between = stored(rt, handle.execution_id)
        gate.opened.set()
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert between.pending is None
    withdrawn = next(t for t in tasks_of(between) if t.id == asking.id)
    assert withdrawn.pending_question is None
    assert statuses(record) == {"q1": "stopped", "q2": "succeeded", "after": "succeeded"}
    assert result.status == "completed"
    assert result.stopped_steps == ("q1",)
    assert result.pending is None


async def test_S2_a_replan_after_a_failure_keeps_a_stopped_step_the_new_plan_holds_unchanged(
    tmp_path: Path,
) -> None:
    """The user stopped a; another step failed and the planner replans. The new plan holds
    that exact step again: it stays stopped, its agent is not run again."""
    gate = Gate()
    runs: list[int] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        if len(runs) > 1:
            return "ran again"
        await ctx.step("park", gate)
        return "unreachable"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return plan_of(agent("a", "worker"), tool("fixed", "inc", x=5))

    plan = plan_of(agent("a", "worker"), tool("broken", "fail"))
    options: dict[str, Any] = {"agents": {"worker": worker}, "planner": planner, "max_replans": 1}
    async with runtime(tmp_path, **options) as rt:
        async with contextlib.aclosing(rt.events()) as events:  # type: ignore[type-var]
            handle = await rt.start("g", plan)
            with anyio.fail_after(30):
                async for event in events:
                    if isinstance(event, ms.events.StepFinished) and event.state == "failed":
                        break
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert record.plan is not None
    assert record.plan.version == 2
    assert statuses(record) == {"a": "stopped", "fixed": "succeeded"}
    assert len(runs) == 1
    assert result.status == "completed"
    assert result.stopped_steps == ("a",)


# ----------------------------------------------------------------------
# A live stop is durable from the moment it is answered "stopping" (S1, R11): it is written
# as a stop request before the task is cancelled, so whatever ends the run before the task has
# unwound applies it; once the task is recorded cancelled, the request is applied nowhere again.


async def test_a_completed_live_stop_is_recorded_once_through_pause_and_resume(
    tmp_path: Path,
) -> None:
    gate = Gate()
    parked = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", gate)
        return "worked"

    plan = plan_of(agent("w", "worker"), tool("p", "parked"), tool("after", "inc", "w", x=1))
    async with runtime(tmp_path, agents={"worker": worker}, tools={"parked": parked}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await parked.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert stop.state == "stopping"
        written = stored(rt, handle.execution_id)
        # Durable before the task unwound: the request names the task.
        assert [r.task_id for r in written.stop_requests] == [task.id]
        await rt.pause(handle.execution_id)  # the stop under way is recorded as it ends
        assert tasks_of(stored(rt, handle.execution_id))[0].state == "cancelled"
        parked.opened.set()
        with anyio.fail_after(30):
            result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed", result
    assert statuses(record) == {"w": "stopped", "p": "succeeded", "after": "succeeded"}
    assert gate.calls == 1
    assert len([c for c in record.controls if c.action == "stop-task"]) == 1


async def test_a_cascade_stop_under_way_keeps_its_cascade_through_a_pause_from_elsewhere(
    tmp_path: Path,
) -> None:
    cleaning = anyio.Event()
    go_on = anyio.Event()
    runs: list[int] = []

    async def slow_to_stop(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                cleaning.set()
                await go_on.wait()
        return "unreachable"  # pragma: no cover

    plan = plan_of(agent("w", "slow"), tool("after", "inc", "w", x=4))
    agents = {"slow": slow_to_stop}
    async with (
        runtime(tmp_path, agents=agents, **FAST) as a,
        runtime(tmp_path, agents=agents, **FAST) as b,
    ):
        handle = await a.start("g", plan)
        with anyio.fail_after(30):
            while not await a.agent_tasks(handle.execution_id):
                await anyio.lowlevel.checkpoint()
        (task,) = await a.agent_tasks(handle.execution_id)
        stop = await a.stop_agent_task(task.id, cascade=True)
        assert stop.state == "stopping"
        with anyio.fail_after(30):
            await cleaning.wait()
        await b.pause(handle.execution_id)
        go_on.set()
        with anyio.fail_after(30):
            await handle.wait()
        between = stored(b, handle.execution_id)
        with anyio.fail_after(30):
            result = await (await b.resume(handle.execution_id)).wait()
        record = stored(b, handle.execution_id)
    assert runs == [1]
    assert tasks_of(between)[0].state == "cancelled"
    assert statuses(record) == {"w": "cancelled", "after": "cancelled"}
    assert result.status == "failed"


def test_a_pause_applies_the_stop_requests_first() -> None:
    now = time.time()
    step = ms.PlanStep(id="w", agent="worker", input={}, status="running")
    task = ms.storage.AgentTaskRecord(
        id="ex:t1",
        agent_id="worker",
        step_id="w",
        state="running",
        created_at=now,
        updated_at=now,
        execution_id="ex",
        input_hash=step_input_hash(step),
    )
    record = ms.storage.Execution(
        id="ex",
        goal="g",
        status="running",
        plan=ms.Plan(id="p", goal="g", steps=(step,)),
        agent_tasks=(ms.storage._seam.unstructure(task),),
        stop_requests=(tr.stop_request("op-1", "ex:t1"),),
        created_at=now,
        updated_at=now,
    )
    paused = tr.pause_execution(record, "me", now)
    (after,) = ms.storage._seam.parse_agent_tasks(paused)[0]
    assert paused.status == "paused"
    assert after.state == "cancelled"
    assert paused.plan is not None
    assert paused.plan.steps[0].status == "stopped"
    # A request for a task already cancelled changes nothing more.
    again = tr.pause_execution(attrs.evolve(paused, status="running"), "me", now)
    assert len([c for c in again.controls if c.action == "stop-task"]) == 1


# ----------------------------------------------------------------------
# Stopping one task leaves an honest run (S1, S2).


def _parker_stop(gate: Gate) -> Any:
    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", gate)
        return "worked"

    return worker


def _diamond() -> ms.Plan:
    # top -> (b: agent, c: tool) -> d
    return plan_of(
        tool("top", "inc", x=0),
        agent("b", "worker", "top"),
        tool("c", "inc", "top", x=1),
        tool("d", "inc", "b", "c", x=2),
    )


async def test_S2_stop_in_a_diamond_lets_the_join_run_and_the_run_complete(tmp_path: Path) -> None:
    gate = Gate()
    ledger = Ledger()
    async with runtime(tmp_path, ledger, agents={"worker": _parker_stop(gate)}) as rt:
        handle = await rt.start("g", _diamond())
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert stop.state == "stopping"
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert statuses(record) == {
        "top": "succeeded",
        "b": "stopped",
        "c": "succeeded",
        "d": "succeeded",
    }
    assert ledger.count("inc:2") == 1
    assert result.status == "completed"
    assert result.stopped_steps == ("b",)
    assert result.summary == "completed: 3 succeeded, 1 stopped of 4 steps"


async def test_P2_cascade_in_a_diamond_cancels_the_join_and_fails_the_run(tmp_path: Path) -> None:
    gate = Gate()
    ledger = Ledger()
    async with runtime(tmp_path, ledger, agents={"worker": _parker_stop(gate)}) as rt:
        handle = await rt.start("g", _diamond())
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id, cascade=True)
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert statuses(record) == {
        "top": "succeeded",
        "b": "cancelled",
        "c": "succeeded",
        "d": "cancelled",
    }
    assert ledger.count("inc:2") == 0
    assert result.status == "failed"
    assert record.status == "failed"
    assert result.error is not None
    assert "d" in result.error


async def test_S1_stop_twice_and_after_the_end_say_what_happened(tmp_path: Path) -> None:
    gate = Gate()
    async with runtime(tmp_path, agents={"worker": _parker_stop(gate)}) as rt:
        handle = await rt.start("g", plan_of(agent("w", "worker"), tool("t", "inc")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        first = await rt.stop_agent_task(task.id)
        again = await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            result = await handle.wait()
        after = await rt.stop_agent_task(task.id)
        record = stored(rt, handle.execution_id)
    assert (first.ok, first.state) == (True, "stopping")
    assert again.state in ("stopping", "cancelled")
    assert (after.ok, after.state) == (False, "cancelled")
    assert result.status == "completed"
    assert len([o for o in record.observations if o.step_id == "w"]) == 1


async def test_S1_a_task_of_a_paused_run_stopped_then_resumed(tmp_path: Path) -> None:
    gate = Gate()
    ledger = Ledger()
    plan = plan_of(agent("w", "worker"), tool("after", "inc", "w", x=7))
    async with runtime(tmp_path, ledger, agents={"worker": _parker_stop(gate)}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        paused = await rt.pause(handle.execution_id)
        assert paused.status == "paused"
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert (stop.ok, stop.state) == (True, "cancelled")
        between = stored(rt, handle.execution_id)
        assert between.status == "paused"
        assert between.lease is None or between.lease.owner == ""
        with anyio.fail_after(30):
            result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert gate.calls == 1  # the stopped agent was not run again
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.status == "completed"
    assert result.stopped_steps == ("w",)


async def test_S1_a_task_waiting_for_budget_stopped_then_resumed(tmp_path: Path) -> None:
    ledger = Ledger()
    runs: list[int] = []

    async def spender(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        for i in range(5):
            await ctx.step(f"s{i}", ctx.call_skill, "model", f"p{i}")
        return "spent"

    plan = plan_of(agent("w", "spender"), tool("after", "inc", "w", x=3))
    async with runtime(tmp_path, ledger, agents={"spender": spender}, max_calls=2) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_budget"
        (task,) = await rt.agent_tasks(first.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert (stop.ok, stop.state) == (True, "cancelled")
        with anyio.fail_after(30):
            result = await (await rt.resume(first.execution_id)).wait()
        record = stored(rt, first.execution_id)
    assert len(runs) == 1
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.status == "completed"
    assert result.calls_used == 2
    assert result.pending is None


async def test_S1_the_command_lists_stopped_steps(tmp_path: Path) -> None:
    gate = Gate()
    store = tmp_path / "store.sqlite3"
    async with runtime(tmp_path, agents={"worker": _parker_stop(gate)}) as rt:
        handle = await rt.start("g", plan_of(agent("w", "worker"), tool("t", "inc")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            await handle.wait()
    code, out = await anyio.to_thread.run_sync(
        lambda: run_cli("--store", str(store), "--json", "ls")
    )
    assert code == 0
    (row,) = json.loads(out)
    assert row["stopped_steps"] == ["w"]
    code, out = await anyio.to_thread.run_sync(
        lambda: run_cli("--store", str(store), "show", handle.execution_id)
    )
    assert code == 0
    assert "stopped" in out


async def test_S2_a_stopped_task_is_not_run_again_after_a_drift_replan(tmp_path: Path) -> None:
    """Stop during a replan: the run was paused with w queued, the workspace drifted, and
    while the planner works the user stops w. The new plan holds that exact step: the user's
    stop stands (the agent is not run again)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "in.txt").write_text("one")
    gate = Gate()
    planning = anyio.Event()
    release = anyio.Event()
    runs: list[int] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        if len(runs) == 1:
            await ctx.step("park", gate)
        return "ran"

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        planning.set()
        await release.wait()
        return plan_of(agent("w", "worker", path="in.txt"), tool("t", "inc", x=1))

    plan = plan_of(agent("w", "worker", path="in.txt"), tool("t", "inc", x=1))
    options: dict[str, Any] = {
        "agents": {"worker": worker},
        "planner": planner,
        "workspace": workspace,
    }
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (workspace / "in.txt").write_text("two")  # drift
        resumed = await rt.resume(handle.execution_id)
        with anyio.fail_after(30):
            await planning.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id)
        assert stop.ok
        release.set()
        with anyio.fail_after(30):
            result = await resumed.wait()
    assert len(runs) == 1, "the stopped agent ran again"
    assert result.stopped_steps == ("w",)
    assert result.status == "completed", (result.status, result.error, result.summary)
    assert stop.state == "cancelled"


async def test_S1_a_stop_under_way_is_not_undone_by_a_pause_from_elsewhere(tmp_path: Path) -> None:
    """S1/R11: stop_agent_task answered "stopping". While the task unwinds (its cleanup
    takes a moment), another process pauses the run. The stop must stand: on resume the
    stopped agent is not run again and its step is stopped."""
    cleaning = anyio.Event()
    go_on = anyio.Event()
    runs: list[int] = []

    async def slow_to_stop(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        if len(runs) > 1:
            return "ran again"
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                cleaning.set()
                await go_on.wait()
        return "unreachable"  # pragma: no cover

    plan = plan_of(agent("w", "slow"), tool("after", "inc", "w", x=4))
    agents = {"slow": slow_to_stop}
    async with (
        runtime(tmp_path, agents=agents, **FAST) as a,
        runtime(tmp_path, agents=agents, **FAST) as b,
    ):
        handle = await a.start("g", plan)
        with anyio.fail_after(30):
            while not await a.agent_tasks(handle.execution_id):
                await anyio.lowlevel.checkpoint()
        (task,) = await a.agent_tasks(handle.execution_id)
        stop = await a.stop_agent_task(task.id)
        assert (stop.ok, stop.state) == (True, "stopping")
        with anyio.fail_after(30):
            await cleaning.wait()
        await b.pause(handle.execution_id, reason="hold")
        go_on.set()
        with anyio.fail_after(30):
            await handle.wait()
        between = stored(b, handle.execution_id)
        with anyio.fail_after(30):
            result = await (await b.resume(handle.execution_id)).wait()
        record = stored(b, handle.execution_id)
    assert len(runs) == 1, "the stopped agent ran again"
    (stopped,) = [t for t in tasks_of(between) if t.id == task.id]
    assert stopped.state == "cancelled", stopped.state
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.stopped_steps == ("w",)


async def test_S2_a_stop_while_the_planner_replans_does_not_finish_the_old_plan(
    tmp_path: Path,
) -> None:
    """R6: the workspace drifted, so the run is replanned. A stop that lands while the
    planner works must not settle the drifted old plan behind the planner's back: the run
    goes on with the new plan (version 2, its new step runs)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "in.txt").write_text("one")
    gate = Gate()
    ledger = Ledger()
    planning = anyio.Event()
    release = anyio.Event()

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        planning.set()
        await release.wait()
        return plan_of(
            agent("w", "worker", path="in.txt"),
            tool("t", "inc", x=1),
            tool("new", "inc", x=99),
        )

    plan = plan_of(agent("w", "worker", path="in.txt"), tool("t", "inc", x=1))
    options: dict[str, Any] = {
        "agents": {"worker": _parker_stop(gate)},
        "planner": planner,
        "workspace": workspace,
    }
    async with runtime(tmp_path, ledger, **options) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (workspace / "in.txt").write_text("two")  # drift
        resumed = await rt.resume(handle.execution_id)
        with anyio.fail_after(30):
            await planning.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        release.set()
        with anyio.fail_after(30):
            result = await resumed.wait()
        record = stored(rt, handle.execution_id)
    assert record.plan is not None
    assert record.plan.version == 2, statuses(record)
    assert ledger.count("inc:99") == 1
    assert result.status == "completed"


async def test_S1_a_stop_request_the_runner_never_saw_is_applied_on_resume(tmp_path: Path) -> None:
    """B asks A's runner to stop a task; A shuts down before its next heartbeat. The
    request was answered "stopping": it must stand when B resumes the run."""
    gate = Gate()
    ledger = Ledger()
    worker = _parker_stop(gate)
    slow = {"lease_ttl": 600.0, "heartbeat_interval": 299.0}
    plan = plan_of(agent("w", "worker"), tool("after", "inc", "w", x=5))
    async with runtime(tmp_path, ledger, agents={"worker": worker}, **FAST) as b:
        async with runtime(tmp_path, ledger, agents={"worker": worker}, **slow) as a:
            handle = await a.start("g", plan)
            await gate.entered.wait()
            (task,) = await b.agent_tasks(handle.execution_id)
            stop = await b.stop_agent_task(task.id)
            assert stop.state == "stopping"
        # A is gone (shut down, lease released) without having met the request.
        with anyio.fail_after(30):
            result = await (await b.resume(handle.execution_id)).wait()
        record = stored(b, handle.execution_id)
    assert gate.calls == 1
    assert statuses(record) == {"w": "stopped", "after": "succeeded"}
    assert result.status == "completed"
    assert result.stopped_steps == ("w",)
