"""Resuming: crash reconciliation (R3), drift and replanning (R6, R7), matching agent tasks
(R8), the pending slot (R9), answers (R10), terminal tasks (R11), completion with its task
(R12), and what reading must never do (E7, E8)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.storage._codec import unstructure

from ._kit import (
    Gate,
    Ledger,
    RecordingSqliteStore,
    agent,
    linear,
    plan_of,
    runtime,
    statuses,
    stored,
    tasks_of,
    tool,
)

pytestmark = pytest.mark.anyio


def _crashed(record: ms.storage.Execution) -> ms.storage.Execution:
    """The record as a crashed owner leaves it: its lease lapsed, its work marked running."""
    assert record.lease is not None
    lapsed = attrs.evolve(record.lease, owner="dead:1:x", expires_at=time.time() - 1)
    return attrs.evolve(record, status="running", lease=lapsed)


async def test_R3_a_crashed_run_requeues_its_tasks_with_interruption_crash(
    tmp_path: Path,
) -> None:
    gate = Gate()
    ran: list[str] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: ran.append("first") or 1)
        await ctx.step("park", gate)
        return "ok"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        await gate.entered.wait()
        snapshot = stored(rt, handle.execution_id)  # what a kill -9 now would leave
        await rt.pause(handle.execution_id)
    (task,) = tasks_of(snapshot)
    assert task.state == "running"
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    store.edit(snapshot.id, lambda _, now: _crashed(snapshot))
    store.close()
    gate.opened.set()
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handles = await rt.recover()
        assert [h.execution_id for h in handles] == [snapshot.id]
        result = await handles[0].wait()
        record = stored(rt, snapshot.id)
    assert result.status == "completed"
    (task,) = tasks_of(record)
    assert task.state == "completed"
    assert task.interruption is not None
    assert task.interruption.kind == "crash"  # an explanation, not a state
    assert ran == ["first"]  # the durable inner step was not run again


async def test_R6_drift_replans_with_a_fenced_brief_of_active_findings(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("v1")
    gate = Gate()
    contexts: list[ms.PlannerContext] = []

    async def scout(ctx: ms.AgentContext, input: Any) -> str:
        ctx.report_finding("notes say v1", confidence=0.8)
        return "scouted"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(agent("scout", "scout", path="notes.txt"),
                           tool("wait", "gate", "scout", path="notes.txt"))  # fmt: skip
        return plan_of(tool("fresh", "inc", x=1))

    options: dict[str, Any] = {
        "tools": {"gate": gate}, "agents": {"scout": scout}, "planner": planner,
        "workspace": workspace,
    }  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("read the notes")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (workspace / "notes.txt").write_text("v2")
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert len(contexts) == 2
    replan = contexts[1]
    assert replan.drift == ("file notes.txt changed",)
    assert replan.findings is not None
    assert replan.findings.startswith("<<<findings\n")
    assert "notes say v1" in replan.findings
    assert replan.previous_plan is not None
    assert record.plan is not None
    assert record.plan.version == 2
    assert record.completed_steps == ("fresh",)


async def test_R6_a_vanished_tool_is_drift(tmp_path: Path) -> None:
    gate = Gate()
    contexts: list[ms.PlannerContext] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(tool("w", "gate"))
        return plan_of(tool("n", "inc"))

    async with runtime(tmp_path, tools={"gate": gate}, planner=planner) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    async with runtime(tmp_path, planner=planner) as rt:  # no "gate" tool any more
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert contexts[1].drift == ("tool gate vanished",)


async def test_R7_without_drift_resume_skips_completed_steps(tmp_path: Path) -> None:
    ledger = Ledger()
    gate = Gate()
    plan = plan_of(*linear(3).steps, tool("g", "gate", "s2"), tool("z", "inc", "g", x=99))
    async with runtime(tmp_path, ledger, tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert ledger.names() == ["inc:0", "inc:1", "inc:2", "inc:99"]
    assert gate.calls == 2


async def test_R8_tasks_match_by_agent_and_input_hash_never_by_step_id(tmp_path: Path) -> None:
    runs: list[str] = []
    gate = Gate()

    async def analyst(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(ctx.step_id)
        return f"analysed {input['topic']}"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if context.previous_plan is None:
            return plan_of(
                agent("first-name", "analyst", topic="x"), tool("w", "gate", "first-name")
            )
        # Replanned with new step ids: the same agent and input match the finished task.
        return plan_of(agent("renamed", "analyst", topic="x"), agent("other", "analyst", topic="y"))

    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"analyst": analyst},
                               "planner": planner, "config": {"round": 1}}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    options["config"] = {"round": 2}  # configuration changed: drift, so a replan
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert runs == ["first-name", "other"]  # "renamed" reused the completed task
    assert result.outputs["renamed"] == "analysed x"
    matched = {t.step_id: t for t in tasks_of(record)}
    assert set(matched) == {"renamed", "other"}


async def test_R8_a_task_whose_own_checkpoint_drifted_restarts_its_inner_work(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "data.txt").write_text("one")
    gates = [Gate()]
    inner_runs: list[str] = []

    async def reader(ctx: ms.AgentContext, input: Any) -> str:
        text = await ctx.step("read", lambda: inner_runs.append("read") or "content")
        await ctx.step("wait", gates[-1])
        return str(text)

    plan = plan_of(agent("r", "reader", path="data.txt"))

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return plan  # the same plan again: the task is matched by agent and input (R8)

    options: dict[str, Any] = {"agents": {"reader": reader}, "workspace": workspace,
                               "planner": planner}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan)
        await gates[-1].entered.wait()
        await rt.pause(handle.execution_id)
        gates[-1].opened.set()
        done = await (await rt.resume(handle.execution_id)).wait()
        assert done.status == "completed"
        assert inner_runs == ["read"]  # unchanged: replayed from the record

        gates.append(Gate())
        handle = await rt.start("g", plan)
        await gates[-1].entered.wait()
        await rt.pause(handle.execution_id)
        assert inner_runs == ["read", "read"]
        (workspace / "data.txt").write_text("two")  # the task's own input changed
        gates[-1].opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "completed"
    assert inner_runs == ["read", "read", "read"]
    assert task.attempt == 2


async def test_R9_one_pending_slot_first_wins_and_answers_go_to_the_task_that_asked(
    tmp_path: Path,
) -> None:
    answers: dict[str, str] = {}

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        answer = await ctx.ask(f"question {input['n']}")
        answers[ctx.step_id] = answer
        return answer

    plan = plan_of(agent("q1", "curious", n=1), agent("q2", "curious", n=2))
    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        first = await (await rt.start("the goal", plan)).wait()
        assert first.status == "waiting_for_clarification"
        assert first.pending is not None
        assert first.pending.question == "question 1"
        second = await (await rt.resume(first.execution_id, answer="one")).wait()
        assert second.status == "waiting_for_clarification"
        assert second.pending is not None
        assert second.pending.question == "question 2"  # found again from the records
        done = await (await rt.resume(first.execution_id, answer="two")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    assert answers == {"q1": "one", "q2": "two"}
    assert record.goal == "the goal"  # R10: an agent's answer never joins the goal


async def test_R10_an_outer_clarification_answer_is_appended_to_the_goal(tmp_path: Path) -> None:
    goals: list[str] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        goals.append(goal)
        if "Clarification" not in goal:
            raise ms.ClarificationNeeded("which city?")
        return plan_of(tool("t", "inc"))

    async with runtime(tmp_path, planner=planner) as rt:
        first = await (await rt.start("book a hotel")).wait()
        assert first.status == "waiting_for_clarification"
        assert first.pending is not None
        assert first.pending.asked_at is not None
        assert first.pending == ms.storage.Pending(
            kind="clarification", question="which city?", asked_at=first.pending.asked_at
        )
        done = await (await rt.resume(first.execution_id, answer="Lisbon")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    assert record.goal == "book a hotel\n\nClarification: Lisbon"
    assert goals[-1] == record.goal


async def test_R11_a_late_write_from_a_stopped_task_never_reopens_it(tmp_path: Path) -> None:
    gate = Gate()
    late: list[BaseException] = []

    async def stubborn(ctx: ms.AgentContext, input: Any) -> None:
        try:
            await ctx.step("park", gate)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await ctx.step("late", lambda: "sneaky")
                except BaseException as exc:  # the refusal
                    late.append(exc)

    async with runtime(tmp_path, agents={"stubborn": stubborn}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "stubborn")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"  # its only step was stopped: nothing was produced
    assert result.stopped_steps == ("a",)
    (task,) = tasks_of(record)
    assert task.state == "cancelled"
    assert "late" not in task.inner_completed
    assert late, "the late save was refused"


async def test_R12_a_completed_task_and_its_step_are_committed_together(tmp_path: Path) -> None:
    store = RecordingSqliteStore(tmp_path / "rec.sqlite3")

    async def worker(ctx: ms.AgentContext, input: Any) -> int:
        for i in range(3):
            await ctx.step(f"i{i}", lambda i=i: i)
        return 3

    plan = plan_of(agent("a", "worker"), agent("b", "worker", "a", n=2), tool("t", "inc", "b"))
    async with runtime(store, agents={"worker": worker}) as rt:
        result = await (await rt.start("g", plan)).wait()
    assert result.status == "completed"
    assert len(store.versions) > 5
    for version in store.versions:
        for task in tasks_of(version):
            assert (task.state == "completed") == (task.step_id in version.completed_steps)
    store.close()


async def test_E7_E8_unreadable_task_records_are_dropped_from_the_view_never_from_disk(
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan_of(tool("w", "gate"), tool("t", "inc", "w")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        good = ms.storage.AgentTaskRecord(
            id=f"{handle.execution_id}:t1", agent_id="x", step_id="w", created_at=1.0,
            updated_at=1.0, execution_id=handle.execution_id, state="completed",
        )  # fmt: skip
        raw_good = unstructure(good)
        bad = [
            {**raw_good, "id": "bad1", "surprise": 1},  # unknown key
            {**raw_good, "id": "bad2", "v": 2},  # another version
            {**raw_good, "id": "bad3", "calls_used": 1_000_001},  # counter out of range
            {
                **raw_good,
                "id": "bad4",
                "findings": [{"id": f"f{i}", "claim": "c"} for i in range(201)],
            },
            {**raw_good, "id": "bad5", "calls_used": "5"},  # never coerced
        ]

        def plant(record: ms.storage.Execution, now: float) -> ms.storage.Execution:
            return attrs.evolve(record, agent_tasks=(raw_good, *bad))

        rt.store.edit(handle.execution_id, plant)
        before = stored(rt, handle.execution_id)
        tasks = await rt.agent_tasks(handle.execution_id)
        assert [t.id for t in tasks] == [good.id]
        assert ms.storage._seam.parse_agent_tasks(before)[1] == 5
        await rt.executions()
        assert stored(rt, handle.execution_id) == before  # E7: reading never writes
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        after = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert len(after.agent_tasks) == 6  # the run kept what it could not read
    kept = after.unreadable_tasks
    assert [u.key for u in kept] == [b["id"] for b in bad]
    assert [u.raw for u in kept] == bad  # as they were stored (E7)


async def test_a_failed_step_replans_with_the_failure_evidence_and_the_previous_plan(
    tmp_path: Path,
) -> None:
    contexts: list[ms.PlannerContext] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(tool("ok", "inc", x=1), tool("bad", "fail", "ok"))
        return plan_of(tool("ok", "inc", x=1), tool("instead", "inc", "ok", x=2))

    ledger = Ledger()
    async with runtime(tmp_path, ledger, planner=planner, max_replans=1) as rt:
        result = await (await rt.start("g")).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed"
    assert len(contexts) == 2
    assert contexts[1].failure is not None
    assert "step bad failed: RuntimeError: this tool always fails" in contexts[1].failure
    assert contexts[1].previous_plan is not None
    assert [s.id for s in contexts[1].previous_plan.steps] == ["ok", "bad"]
    assert record.plan is not None
    assert record.plan.version == 2
    # The step the new plan kept unchanged was not run again.
    assert ledger.names() == ["inc:1", "fail", "inc:2"]
    assert record.completed_steps == ("ok", "instead")


async def test_without_replans_left_a_failed_step_fails_the_execution(tmp_path: Path) -> None:
    calls: list[int] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        calls.append(1)
        return plan_of(tool("bad", "fail"))

    async with runtime(tmp_path, planner=planner, max_replans=1) as rt:
        result = await (await rt.start("g")).wait()
    assert result.status == "failed"
    assert len(calls) == 2  # the first plan and one replan, then it gives up


async def test_R3_R5_a_run_that_crashed_after_its_question_was_saved_still_recovers(
    tmp_path: Path,
) -> None:
    gate = Gate()

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("ok?")

    plan = plan_of(agent("a", "curious"), tool("slow", "gate"))
    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"curious": curious}}
    async with runtime(tmp_path, **options) as rt:
        async with contextlib.aclosing(rt.events()) as events:  # type: ignore[type-var]
            handle = await rt.start("g", plan)
            with anyio.fail_after(30):
                async for event in events:
                    if isinstance(event, ms.executions.AgentTaskWaiting):
                        break  # the question is durable
        await gate.entered.wait()
        snapshot = stored(rt, handle.execution_id)
        await rt.pause(handle.execution_id)
    assert snapshot.status == "running"
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    store.edit(snapshot.id, lambda _, now: _crashed(snapshot))
    store.close()
    gate.opened.set()
    async with runtime(tmp_path, **options) as rt:
        (recovered,) = await rt.recover()
        result = await recovered.wait()
        record = stored(rt, snapshot.id)
    # The step in flight at the crash ran again; the run now waits for its answer.
    assert result.status == "waiting_for_clarification"
    assert statuses(record)["slow"] == "succeeded"
    assert gate.calls == 2


async def test_max_replans_counts_across_resumes(tmp_path: Path) -> None:
    calls: list[int] = []
    gate = Gate()

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        calls.append(1)
        if len(calls) == 1:
            return plan_of(tool("w", "gate"), tool("bad", "fail", "w"))
        return plan_of(tool("bad2", "fail"))

    options: dict[str, Any] = {"tools": {"gate": gate}, "planner": planner, "max_replans": 1}
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"
    assert record.replans == 1
    assert len(calls) == 2  # the one replan allowed; the counter is on the record


async def _asks(ctx: ms.AgentContext, input: Any) -> str:
    return await ctx.ask("which city?")


async def test_R8_a_resume_whose_answer_cannot_be_stored_gives_the_lease_back(
    tmp_path: Path,
) -> None:
    """An answer that makes the record too large (or one with no UTF-8 form) is refused,
    and the lease the resume took is given back at once: another host's resume with a
    good answer is not told ``ExecutionBusy`` until the lease lapses."""
    path = tmp_path / "s.sqlite3"
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asks"),))
    agents = {"asks": _asks}
    async with ms.open_runtime(store=path, agents=agents, lease_ttl=60) as rt:
        result = await (await rt.start("g", plan, execution_id="ex-big")).wait()
        assert result.status == "waiting_for_clarification"
        before = await rt.get("ex-big")
        with pytest.raises(ValueError, match="UTF-8"):
            await rt.resume("ex-big", answer="caf\udce9")  # undecodable bytes, as argv has them
        assert await rt.get("ex-big") == before  # refused before anything was taken
        with pytest.raises(ms.storage.TooLarge):
            await rt.resume("ex-big", answer="x" * (17 * 1024 * 1024))
        after = await rt.get("ex-big")
    assert after is not None
    assert after.status == "waiting_for_clarification"
    assert after.lease is not None
    assert not after.lease.owner
    async with ms.open_runtime(store=path, agents=agents, lease_ttl=60) as elsewhere:
        with anyio.fail_after(30):
            done = await (await elsewhere.resume("ex-big", answer="Lisbon")).wait()
    assert (done.status, done.outputs) == ("completed", {"a": "Lisbon"})


async def test_R8_a_resumes_answer_to_a_question_answered_already_is_refused_not_dropped(
    tmp_path: Path,
) -> None:
    """``Runtime.answer`` stored "A"; ``resume(answer="B")`` then neither drops "B" in
    silence (the task got "A") nor, for the run's own question, leaves "A" stored to
    answer the planner's next question by itself: it is refused, as a second
    ``Runtime.answer`` is, and nothing changes."""
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asks"),))
    goals: list[str] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        goals.append(goal)
        if goal.count("Clarification") < 2:
            raise ms.ClarificationNeeded(f"question {goal.count('Clarification')}?")
        return plan

    path = tmp_path / "s.sqlite3"
    async with ms.open_runtime(store=path, agents={"asks": _asks}, planner=planner) as rt:
        inner = await (await rt.start("g", plan, execution_id="ex-inner")).wait()
        outer = await (await rt.start("book", execution_id="ex-outer")).wait()
        assert inner.status == outer.status == "waiting_for_clarification"
        for execution_id in ("ex-inner", "ex-outer"):
            await rt.answer(execution_id, "A")
            before = await rt.get(execution_id)
            with pytest.raises(ms.ExecutionBusy, match="has an answer already"):
                await rt.resume(execution_id, answer="B")
            after = await rt.get(execution_id)
            assert after is not None
            assert before is not None
            assert (after.answer_requests, after.goal, after.status, after.lease) == (
                before.answer_requests,
                before.goal,
                before.status,
                before.lease,
            )
        with anyio.fail_after(30):
            done = await (await rt.resume("ex-inner")).wait()
            asked_again = await (await rt.resume("ex-outer")).wait()
        record = await rt.get("ex-outer")
    assert (done.status, done.outputs) == ("completed", {"a": "A"})
    # The planner's second question waits for its own answer: "A" answered the first only.
    assert asked_again.status == "waiting_for_clarification"
    assert record is not None
    assert record.answer_requests == ()
    assert record.goal == "book\n\nClarification: A"
