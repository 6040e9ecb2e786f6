"""Stopping one agent task leaves an honest run (S1, S2): the stopped task's step counts as
done without a result (``stopped``), so its dependents run; ``cascade=True`` cancels them
instead. A run ends ``completed`` only if something was produced and nothing was cancelled
or failed. The three paths a stop can take — the task live here, a stored task with no
runner, a runner elsewhere meeting a stop request at its heartbeat — end the same way."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from tests import strategies
from tests._examples import examples

from ._kit import (
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
        e.state
        for e in events
        if isinstance(e, ms.executions.StepFinished) and e.step_id == step_id
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
                    if isinstance(event, ms.executions.AgentTaskWaiting):
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
                    if isinstance(event, ms.executions.StepFinished) and event.state == "failed":
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
