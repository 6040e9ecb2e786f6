"""Running plans: durability order (E1), redaction (E5), checkpoints (E6), budgets (E9, P4),
validation (P1), scheduling (P2, P3, P5, P6), events (V1) and fencing (X3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions._rules.plan import fence, findings_brief

from ._kit import (
    Gate,
    Ledger,
    RecordingSqliteStore,
    agent,
    linear,
    plan_of,
    recorded_events,
    runtime,
    skill,
    statuses,
    stored,
    tasks_of,
    tool,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("backend", ["sqlite", "file"])
async def test_a_linear_plan_completes_on_both_backends(tmp_path: Path, backend: str) -> None:
    ledger = Ledger()
    store: ms.storage.Store = (
        ms.storage.SqliteStore(tmp_path / "s.sqlite3")
        if backend == "sqlite"
        else ms.storage.FileStore(tmp_path)
    )
    async with runtime(store, ledger) as rt:
        result = await (await rt.start("count to five", linear(5))).wait()
        assert result.status == "completed"
        assert result.outputs == {f"s{i}": i + 1 for i in range(5)}
        assert ledger.names() == [f"inc:{i}" for i in range(5)]
        record = stored(rt, result.execution_id)
        assert record.status == "completed"
        assert record.completed_steps == tuple(f"s{i}" for i in range(5))
        assert record.lease is not None
        assert record.lease.owner == ""  # L3: the end of a run releases the lease


async def test_E1_plan_and_every_dependency_are_durable_before_a_step_starts(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, tuple[str, ...], int, bool]] = []
    holder: dict[str, ms.Runtime] = {}

    async def probe(x: int = 0) -> int:
        record = await anyio.to_thread.run_sync(holder["rt"].store.get, holder["id"])
        assert record is not None
        seen.append(
            (f"s{x}", record.completed_steps, len(record.checkpoints), record.plan is not None)
        )
        return x

    async with runtime(tmp_path, tools={"probe": probe}) as rt:
        holder["rt"] = rt
        holder["id"] = "ex-e1"
        handle = await rt.start("g", linear(4, tool="probe"), execution_id="ex-e1")
        assert (await handle.wait()).status == "completed"
    for index, (_, completed, checkpoints, has_plan) in enumerate(seen):
        assert has_plan
        assert checkpoints >= 1  # a checkpoint exists from the first commit
        assert completed == tuple(f"s{i}" for i in range(index))  # every completion committed


async def test_E1_a_planned_execution_commits_its_plan_before_the_first_step(
    tmp_path: Path,
) -> None:
    store = RecordingSqliteStore(tmp_path / "rec.sqlite3")

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return linear(3)

    async with runtime(store, planner=planner) as rt:
        result = await (await rt.start("plan it yourself")).wait()
    assert result.status == "completed"
    first_running = next(v for v in store.versions if v.plan is not None)
    assert first_running.completed_steps == ()
    assert first_running.checkpoints, "the first commit with a plan carries a checkpoint"
    store.close()


SECRET = "sk-ant-api03-" + "A" * 40


def _everything_on_disk(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


async def test_E5_what_reaches_disk_and_events_is_redacted_but_the_live_result_is_not(
    tmp_path: Path,
) -> None:
    async def leaky(**_: Any) -> str:
        return f"token {SECRET}"

    async def finder(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("look", leaky)
        ctx.report_finding(f"found {SECRET}", confidence=0.5)
        return f"done with {SECRET}"

    plan = plan_of(tool("t1", "leaky", note=SECRET), agent("a1", "finder", "t1"))
    async with runtime(tmp_path, tools={"leaky": leaky}, agents={"finder": finder}) as rt:
        async with recorded_events(rt) as events:
            result = await (await rt.start(f"goal with {SECRET}", plan)).wait()
        raw = _everything_on_disk(tmp_path)
        record = stored(rt, result.execution_id)
    assert result.status == "completed"
    assert SECRET.encode() not in raw
    assert SECRET not in repr(record)
    # The live result keeps what the steps returned.
    assert result.outputs["t1"] == f"token {SECRET}"
    assert result.outputs["a1"] == f"done with {SECRET}"
    assert SECRET not in repr(events)
    # Findings are stored once, on the task; the observation keeps only their ids.
    (task,) = tasks_of(record)
    (finding,) = task.findings
    observation = next(o for o in record.observations if o.step_id == "a1")
    assert observation.finding_ids == (finding.id,)
    assert "found" not in repr(record.observations)


async def test_E6_at_most_five_checkpoints_each_for_a_new_completed_set(tmp_path: Path) -> None:
    async def chatty(ctx: ms.AgentContext, input: Any) -> int:
        for i in range(4):  # inner steps commit without changing the completed set
            await ctx.step(f"i{i}", lambda i=i: i)
        return 1

    plan = plan_of(*linear(8).steps, agent("a", "chatty", "s7"))
    async with runtime(tmp_path, agents={"chatty": chatty}) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed"
    assert len(record.checkpoints) == 5
    sets = [c.completed_steps for c in record.checkpoints]
    assert len(set(sets)) == 5
    assert [len(s) for s in sets] == sorted(len(s) for s in sets)
    assert sets[-1] == record.completed_steps


async def test_E9_calls_accumulate_and_raising_the_budget_makes_progress(tmp_path: Path) -> None:
    ledger = Ledger()
    plan = plan_of(skill("k1", prompt="a"), skill("k2", "model", "k1", prompt="b"),
                   skill("k3", "model", "k2", prompt="c"))  # fmt: skip
    async with runtime(tmp_path, ledger, max_calls=2) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_budget"
        assert first.calls_used == 2
        assert first.pending is not None
        assert first.pending.budget == ms.storage.BudgetInfo(calls_used=2, max_calls=2, needed=1)
        assert ledger.count("model:c") == 0
        again = await (await rt.resume(first.execution_id)).wait()
        assert again.status == "waiting_for_budget"  # same budget: still waiting, nothing lost
        assert again.calls_used == 2
        done = await (await rt.resume(first.execution_id, max_calls=5)).wait()
    assert done.status == "completed"
    assert done.calls_used == 3
    assert ledger.names("skill") == ["model:a", "model:b", "model:c"]


async def test_P4_an_agent_holds_its_reservation_and_is_charged_what_it_spent(
    tmp_path: Path,
) -> None:
    async def thrifty(ctx: ms.AgentContext, input: Any) -> int:
        assert ctx.calls_remaining == 3
        await ctx.call_skill("model", prompt="once")
        return ctx.calls_remaining

    async def greedy(ctx: ms.AgentContext, input: Any) -> None:
        for _ in range(10):
            await ctx.call_skill("model", prompt="more")

    plan = plan_of(agent("a1", "thrifty"), agent("a2", "greedy", "a1"), tool("t", "inc", "a2"))
    async with runtime(
        tmp_path, agents={"thrifty": thrifty, "greedy": greedy}, max_calls=10,
        reservation=lambda remaining: 3,
    ) as rt:  # fmt: skip
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    thrifty_task, greedy_task = tasks_of(record)
    assert thrifty_task.calls_reserved == 3
    assert thrifty_task.calls_used == 1
    assert result.outputs["a1"] == 2
    assert greedy_task.state == "failed"
    assert greedy_task.failure is not None
    assert greedy_task.failure.code == "agent-call-budget"
    assert greedy_task.calls_used == 3
    # Charged what was spent (1 + 3), never the unspent part of a reservation.
    assert result.calls_used == 4
    assert result.status == "failed"
    assert statuses(record)["t"] == "skipped"


async def test_P4_a_step_that_does_not_fit_waits_for_budget_with_work_kept(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    plan = plan_of(tool("t1", x=1), skill("k", "model", "t1", prompt="p"), tool("t2", "inc", x=2))
    async with runtime(tmp_path, ledger, max_calls=0) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "waiting_for_budget"
    assert set(record.completed_steps) == {"t1", "t2"}  # tools cost nothing
    assert statuses(record)["k"] == "pending"
    assert ledger.names("skill") == []


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ((tool("a", "inc", "b"), tool("b", "inc", "a")), "cycle"),
        ((tool("a", "inc", "ghost"),), "unknown step ghost"),
        ((tool("a", "nope"),), "unknown tool nope"),
        ((tool("a", "inc", "a"),), "depends on itself"),
    ],
)
async def test_P1_an_invalid_plan_is_refused_and_nothing_is_stored(
    tmp_path: Path, steps: tuple[ms.PlanStep, ...], problem: str
) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(ms.InvalidPlan, match=problem):
            await rt.start("g", plan_of(*steps))
        assert await rt.executions() == []


def test_P1_records_refuse_duplicate_ids_and_steps_naming_two_kinds() -> None:
    with pytest.raises(ValueError, match="unique"):
        plan_of(tool("a"), tool("a"))
    with pytest.raises(ValueError, match="exactly one"):
        ms.PlanStep(id="x", tool="inc", skill="model")


async def test_P1_an_invalid_plan_from_the_planner_fails_the_execution(tmp_path: Path) -> None:
    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return plan_of(tool("a", "inc", "b"), tool("b", "inc", "a"))

    ledger = Ledger()
    async with runtime(tmp_path, ledger, planner=planner) as rt:
        result = await (await rt.start("g")).wait()
    assert result.status == "failed"
    assert "cycle" in (result.error or "")
    assert ledger.entries == []


async def test_P2_failed_dependency_skips_with_an_observation(tmp_path: Path) -> None:
    ledger = Ledger()
    plan = plan_of(tool("f", "fail"), tool("d1", "inc", "f", x=1), tool("d2", "inc", "d1", x=2),
                   tool("free", "inc", x=3))  # fmt: skip
    async with runtime(tmp_path, ledger) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "failed"
    assert statuses(record) == {
        "f": "failed",
        "d1": "skipped",
        "d2": "skipped",
        "free": "succeeded",
    }
    observations = {o.step_id: o for o in record.observations}
    assert observations["d1"].error == "skipped: dependency f failed"
    assert observations["d2"].error == "skipped: dependency d1 skipped"
    assert "RuntimeError: this tool always fails" in (observations["f"].error or "")
    assert ledger.count("inc:1") == 0
    assert ledger.count("inc:2") == 0


async def test_P2_a_cancelled_dependency_cancels_its_dependents_never_silently(
    tmp_path: Path,
) -> None:
    gate = Gate()

    async def waits(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.step("wait", gate)

    plan = plan_of(agent("a", "waits"), tool("after", "inc", "a"), tool("other", "inc", x=9))
    async with runtime(tmp_path, agents={"waits": waits}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        stop = await rt.stop_agent_task(task.id, cascade=True)  # the user asks for the cascade
        assert stop.ok
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert statuses(record) == {"a": "cancelled", "after": "cancelled", "other": "succeeded"}
    observations = {o.step_id: o for o in record.observations}
    assert observations["after"].code == "cancelled"
    assert observations["after"].error == "cancelled: dependency a cancelled"
    # The run went on and ended, but not completed: what it was asked for did not happen.
    assert result.status == "failed"
    assert result.error == "not completed: steps were cancelled: a, after"


async def test_P3_concurrency_is_bounded_globally_and_per_key(tmp_path: Path) -> None:
    active: dict[str, int] = {"all": 0, "slow": 0}
    peak: dict[str, int] = {"all": 0, "slow": 0}

    full = anyio.Event()  # three steps ran at once: the bound was reached, not just obeyed

    def worker(kind: str) -> Any:
        async def run(**_: Any) -> None:
            for key in ("all", kind):
                active[key] = active.get(key, 0) + 1
                peak[key] = max(peak.get(key, 0), active[key])
            if active["all"] == 3:
                full.set()
            with anyio.fail_after(30):  # the first steps hold on until the third one starts
                await full.wait()
            await anyio.lowlevel.checkpoint()
            for key in ("all", kind):
                active[key] -= 1

        return run

    steps = [tool(f"s{i}", "slow") for i in range(6)] + [tool(f"f{i}", "fast") for i in range(6)]
    tools = {"slow": worker("slow"), "fast": worker("fast")}
    async with runtime(tmp_path, tools=tools, max_parallel_steps=3, limits={"slow": 1}) as rt:
        result = await (await rt.start("g", plan_of(*steps))).wait()
    assert result.status == "completed"
    assert peak["all"] == 3
    assert peak["slow"] == 1


async def test_P5_a_question_leaves_the_step_pending_and_starts_nothing_new(
    tmp_path: Path,
) -> None:
    ledger = Ledger()

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("may I?")

    plan = plan_of(agent("q", "curious"), tool("dep", "inc", "q", x=1), tool("later", "inc", x=2))
    async with runtime(tmp_path, ledger, agents={"curious": curious}, max_parallel_steps=1) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
        assert result.status == "waiting_for_clarification"
        assert statuses(record) == {"q": "pending", "dep": "pending", "later": "pending"}
        assert ledger.entries == []  # the dependent neither ran nor skipped; nothing new
        (task,) = tasks_of(record)
        assert task.state == "waiting_for_clarification"
        assert task.pending_question_at is not None  # the task's question has its time
        assert record.pending == ms.storage.Pending(
            kind="clarification",
            question="may I?",
            agent_task_id=task.id,
            asked_at=task.pending_question_at,
        )
        done = await (await rt.resume(result.execution_id, answer="yes")).wait()
    assert done.status == "completed"
    assert done.outputs["q"] == "yes"


async def test_P5_an_agent_that_asks_unwinds_by_a_cancellation_with_a_reason_not_ours(
    tmp_path: Path,
) -> None:
    """ctx.ask stops the agent's run without a private exception passing through its code: an
    ``except BaseException`` or ``finally`` around it sees anyio's own cancellation (which it
    re-raises, STYLE.md habit 5) and ``cancel_reason()`` says why; the resumed agent is handed
    the answer as before."""
    caught: list[tuple[str, bool, ms.CancelReason | None]] = []
    finally_reasons: list[ms.CancelReason | None] = []

    async def careful(ctx: ms.AgentContext, input: Any) -> str:
        try:
            try:
                answer = await ctx.ask("which one?")
            except BaseException as exc:
                cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
                caught.append((type(exc).__module__, cancelled, ctx.cancel_reason()))
                raise
        finally:
            finally_reasons.append(ctx.cancel_reason())
        return f"took {answer}"

    plan = plan_of(agent("q", "careful"), tool("after", "inc", "q", x=1))
    async with runtime(tmp_path, agents={"careful": careful}) as rt:
        async with recorded_events(rt) as events:
            first = await (await rt.start("g", plan)).wait()
        record = stored(rt, first.execution_id)
        done = await (await rt.resume(first.execution_id, answer="this one")).wait()
    assert first.status == "waiting_for_clarification"
    assert statuses(record) == {"q": "pending", "after": "pending"}  # pending, not failed
    (task,) = tasks_of(record)
    assert task.state == "waiting_for_clarification"
    assert task.failure is None
    assert [type(e).__name__ for e in events if "Task" in type(e).__name__] == [
        "AgentTaskStarted",
        "AgentTaskWaiting",
    ]
    ((module, cancelled, reason),) = caught
    assert cancelled
    assert not module.startswith("mainspring")  # the backend's, never a private type of ours
    assert isinstance(reason, ms.Stop)
    assert "waits for an answer" in reason.detail
    assert finally_reasons == [reason, None]  # the resumed run returned normally
    assert done.status == "completed"
    assert done.outputs["q"] == "took this one"


async def test_P6_cancel_skips_unstarted_steps_and_agent_steps_say_cancelled(
    tmp_path: Path,
) -> None:
    gate = Gate()

    async def helper(ctx: ms.AgentContext, input: Any) -> None:
        await ctx.step("park", gate)

    plan = plan_of(tool("running", "gate"), agent("a", "helper", "running"),
                   tool("later", "inc", "running"))  # fmt: skip
    async with runtime(tmp_path, tools={"gate": gate}, agents={"helper": helper}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        result = await rt.cancel(handle.execution_id)
        record = stored(rt, handle.execution_id)
    assert result.status == "cancelled"
    assert statuses(record) == {"running": "cancelled", "a": "cancelled", "later": "skipped"}
    observations = {o.step_id: o for o in record.observations}
    assert observations["a"].code == "cancelled"
    assert observations["later"].error == f"skipped: the execution was cancelled by {rt.owner}"


async def test_V1_events_carry_ids_states_and_counts_only(tmp_path: Path) -> None:
    async def talker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("say", lambda: "agent-authored words")
        ctx.report_finding("agent-authored claim")
        return "agent-authored result"

    plan = plan_of(tool("t", x=1), agent("a", "talker", "t"))
    async with (
        runtime(tmp_path, agents={"talker": talker}) as rt,
        recorded_events(rt) as events,
    ):
        result = await (await rt.start("a goal in words", plan)).wait()
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "ExecutionStarted"
    assert kinds[-1] == "ExecutionCompleted"
    for name in ("StepStarted", "StepFinished", "AgentTaskStarted", "AgentTaskProgress",
                 "AgentTaskCompleted"):  # fmt: skip
        assert name in kinds
    for event in events:
        assert isinstance(event, ms.executions._seam.ExecutionEvent)
        assert event.execution_id == result.execution_id
        for value in vars(event).values() if hasattr(event, "__dict__") else ():
            assert not isinstance(value, str) or " " not in value
        text = repr(event)
        assert "agent-authored" not in text
        assert "goal in words" not in text


def test_V1_RunEvent_is_the_union_of_every_event_class() -> None:
    import typing

    from mainspring.executions._run import events as _run_events

    classes = {
        value
        for value in vars(_run_events).values()
        if isinstance(value, type)
        and issubclass(value, ms.executions._seam.ExecutionEvent)
        and value is not ms.executions._seam.ExecutionEvent
    }
    assert set(typing.get_args(ms.executions.RunEvent)) == classes
    assert set(_run_events.__all__) >= {cls.__name__ for cls in classes}


async def test_V1_a_subscriber_that_falls_behind_is_told_what_it_lost() -> None:
    from mainspring.executions._run.events import RunEventBus

    bus = RunEventBus(anyio.Event)
    with pytest.raises(ValueError, match="at least 1"):
        await bus.subscribe(0).__anext__()
    events = [ms.executions.ExecutionPaused(execution_id="e", at=0.0, requeued=n) for n in range(5)]
    got: list[object] = []

    async def read() -> None:
        async for event in bus.subscribe(2):
            got.append(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        while bus.subscribers == 0:
            await anyio.lowlevel.checkpoint()
        for event in events:
            bus.publish(event)  # all at once: the reader lags, publishing never waits
        bus.close()
    assert got == [ms.EventsDropped(3), events[3], events[4]]
    assert bus.subscribers == 0


def test_X3_the_findings_brief_is_bounded_fenced_and_clamped() -> None:
    findings = [
        ms.storage.Finding(
            id=f"f{i}", claim=f"claim {i} >>> escape " + "x" * 500, created_at=float(i)
        )
        for i in range(30)
    ]
    findings.append(ms.storage.Finding(id="old", claim="superseded", status="superseded"))
    brief = findings_brief(findings)
    assert brief.startswith("<<<findings\n")
    assert brief.endswith("\n>>>")
    assert brief.count(">>>") == 1  # the text cannot close the fence
    assert "[f29]" in brief  # newest first
    assert "[f19]" not in brief  # bounded to 10
    assert "and 20 more" in brief or "[truncated]" in brief
    assert "superseded" not in brief
    assert len(brief) < 2_100
    assert fence("z" * 5000).count("z") == 2_000
