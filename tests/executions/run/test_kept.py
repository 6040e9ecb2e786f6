"""Review 14: how the parts of #12 combine — masked inputs, redacted inner steps, budget
waits, stops and accounting (E9, E10, S2, B3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from tests.executions._kit import (
    Ledger,
    agent,
    plan_of,
    runtime,
    statuses,
    stored,
    tasks_of,
    tool,
)

pytestmark = pytest.mark.anyio

SECRET = "ghp_" + "Q" * 36
TERMINAL_TASK = {"completed", "failed", "cancelled"}


async def test_P6_a_run_failed_for_a_masked_input_leaves_no_agent_task_queued(
    tmp_path: Path,
) -> None:
    """An agent step planned with a secret input asks a question; answered, the resume fails
    the step for its masked input (E10). The run ends failed: its agent task must not be left
    `queued` (an operator sees a live task in a finished run, `doctor` says all is well)."""

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("go on?")

    async with runtime(tmp_path, agents={"asker": asker}) as rt:
        first = await (await rt.start("g", plan_of(agent("a", "asker", pw=SECRET)))).wait()
        assert first.status == "waiting_for_clarification"
    # Answered in another runtime, which has only the masked input (in the runtime that
    # planned it, the agent runs on with its real input: see the test further down).
    async with runtime(tmp_path, agents={"asker": asker}) as rt:
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, answer="yes")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "failed"
    assert record.terminal
    assert [t.state for t in tasks_of(record)] != ["queued"]
    assert all(t.state in TERMINAL_TASK for t in tasks_of(record)), tasks_of(record)


def _secretive_skills(ledger: Ledger) -> dict[str, Any]:
    async def vault(**_: Any) -> dict[str, Any]:
        ledger.add("skill", "vault")
        return {"token": "tok-" + "x" * 24, "n": 1}

    async def model(prompt: str = "", **_: Any) -> str:
        ledger.add("skill", f"model:{prompt}")
        return f"model says {prompt}"

    return {"vault": vault, "model": model}


def _vault_then_work(runs: list[int], seen: list[Any], n: int = 4) -> Any:
    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        got = await ctx.step("fetch", ctx.call_skill, "vault")
        seen.append(got)
        parts = [await ctx.step(f"p{i}", ctx.call_skill, "model", f"p{i}") for i in range(n)]
        return "|".join(parts)

    return worker


async def test_E10_a_redacted_inner_step_reruns_after_a_budget_wait_and_every_call_is_counted(
    tmp_path: Path,
) -> None:
    """The agent's first ctx.step is redacted on disk, then the run waits for budget. On the
    resume with more budget in another runtime (which has only the masked value) the redacted
    step runs again (the agent gets the real value, E10), the durable ones are replayed, and
    calls_used counts every call made, re-runs included, once (E9, B3)."""
    ledger = Ledger()
    runs: list[int] = []
    seen: list[Any] = []
    skills = _secretive_skills(ledger)
    agents = {"w": _vault_then_work(runs, seen)}
    async with runtime(tmp_path, ledger, skills=skills, agents=agents, max_calls=2) as rt:
        first = await (await rt.start("g", plan_of(agent("a", "w")))).wait()
        assert (first.status, first.calls_used) == ("waiting_for_budget", 2)
    async with runtime(tmp_path, ledger, skills=skills, agents=agents, max_calls=2) as rt:
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_calls=50)).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed", done
    assert ledger.names("skill") == ["vault", "model:p0", "vault"] + [
        f"model:p{i}" for i in range(1, 4)
    ]
    assert all(v == {"token": "tok-" + "x" * 24, "n": 1} for v in seen), seen
    (task,) = tasks_of(record)
    assert any("fetch" in line and "redacted" in line for line in task.diagnostics)
    calls = len(ledger.names("skill"))
    assert (done.calls_used, record.calls_used, task.calls_used) == (calls, calls, calls)


async def test_S2_stop_from_another_runtime_while_waiting_for_budget_then_resume_runs_its_dependent(
    tmp_path: Path,
) -> None:
    """A run waiting for budget; another runtime on the same store stops its agent task;
    the first resumes: the step is stopped, its dependent runs, calls never go backwards."""
    ledger = Ledger()
    runs: list[int] = []
    seen: list[Any] = []
    skills = _secretive_skills(ledger)
    plan = plan_of(agent("a", "w"), tool("after", "inc", "a", x=1))
    agents = {"w": _vault_then_work(runs, seen)}
    async with runtime(tmp_path, ledger, skills=skills, agents=agents, max_calls=2) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_budget"
        async with runtime(tmp_path, skills=skills, agents=agents) as other:
            (task,) = await other.agent_tasks(first.execution_id)
            stop = await other.stop_agent_task(task.id)
            assert stop.ok
        assert stored(rt, first.execution_id).calls_used == 2
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_calls=50)).wait()
        record = stored(rt, first.execution_id)
    assert statuses(record) == {"a": "stopped", "after": "succeeded"}
    assert done.status == "completed"
    assert done.stopped_steps == ("a",)
    assert len(runs) == 1
    assert (done.calls_used, record.calls_used) == (2, 2)


def _versioned_asker(version: str, got: list[Any], answers: list[str]) -> Any:
    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        got.append(await ctx.step("fetch", ctx.call_skill, "vault"))
        answers.append(await ctx.ask("go on?"))
        return "done"

    asker.version = version  # type: ignore[attr-defined]
    return asker


async def test_R8_a_redefined_agent_with_a_redacted_inner_step_keeps_its_answer_and_its_calls(
    tmp_path: Path,
) -> None:
    """R8 + E10 + E9: the agent asked after a ctx.step whose result was redacted; it is
    resumed, with the answer, under a new definition. Its inner work starts over (a new
    attempt, a diagnostic saying why), the answer it was given is kept, it gets the real value
    of the redacted step, and calls_used counts both calls to the vault, never going back."""
    ledger = Ledger()
    got: list[Any] = []
    answers: list[str] = []
    skills = _secretive_skills(ledger)
    plan = plan_of(agent("a", "w"))
    async with runtime(
        tmp_path, ledger, skills=skills, agents={"w": _versioned_asker("1", got, answers)}
    ) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_clarification"
        before = stored(rt, first.execution_id)
    assert before.calls_used == 1
    async with runtime(
        tmp_path, ledger, skills=skills, agents={"w": _versioned_asker("2", got, answers)}
    ) as rt:
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, answer="yes")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed", done
    assert answers == ["yes"]
    assert got == [{"token": "tok-" + "x" * 24, "n": 1}] * 2
    (task,) = tasks_of(record)
    assert task.attempt == 2
    assert any("definition" in line or "changed" in line for line in task.diagnostics)
    assert ledger.count("vault") == 2
    assert (done.calls_used, record.calls_used, task.calls_used) == (2, 2, 2)


async def test_V3_a_cancel_from_elsewhere_while_a_redacted_step_reruns_is_that_cancel_and_counted(
    tmp_path: Path,
) -> None:
    """V3 + E10 + E9: on resume the agent re-runs its redacted ctx.step (which calls a skill,
    then waits); another runtime cancels the run. The step's code sees ParentCancel of that
    Cancel, the run ends cancelled, and the skill call the re-run made is in calls_used."""
    from tests.executions._kit import FAST, Gate

    ledger = Ledger()
    skills = _secretive_skills(ledger)
    gate = Gate()
    resumed = {"now": False}

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        async def fetch() -> Any:
            value = await ctx.call_skill("vault")
            if resumed["now"]:
                await gate()
            return value

        await ctx.step("fetch", fetch)
        await ctx.ask("go on?")
        return "done"

    agents = {"w": worker}
    async with runtime(tmp_path, ledger, skills=skills, agents=agents, **FAST) as rt:
        first = await (await rt.start("g", plan_of(agent("a", "w")))).wait()
        assert first.status == "waiting_for_clarification"
        assert stored(rt, first.execution_id).calls_used == 1
    # Resumed in another runtime: only the masked value is known there, so the step re-runs.
    async with runtime(tmp_path, ledger, skills=skills, agents=agents, **FAST) as rt:
        resumed["now"] = True
        handle = await rt.resume(first.execution_id, answer="yes")
        with anyio.fail_after(30):
            await gate.entered.wait()
        async with runtime(tmp_path, skills=skills, agents=agents, **FAST) as other:
            await other.cancel(first.execution_id, reason="operator says stop")
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, first.execution_id)
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel), seen
    assert isinstance(seen.root, ms.Cancel)
    assert seen.root.detail == "operator says stop"
    assert result.status == "cancelled"
    assert ledger.count("vault") == 2
    assert (result.calls_used, record.calls_used) == (2, 2)


async def test_E10_a_masked_input_step_resumed_elsewhere_is_planned_again_and_runs_with_the_secret(
    tmp_path: Path,
) -> None:
    """README: resumed elsewhere before it ran, a step whose input was masked fails saying
    why, and "with max_replans, the planner can plan it again". The new plan's step gets the
    real input; steps the new plan holds unchanged stay done; masked_inputs is about the plan
    as it is now."""
    from tests.executions._kit import FAST, Gate

    ledger = Ledger()
    gate = Gate()
    got: list[Any] = []

    async def secretive(pw: str) -> str:
        got.append(pw)
        return "used"

    def the_plan() -> ms.Plan:
        return plan_of(
            tool("a", "inc", x=1),
            tool("g", "gate", "a"),
            tool("b", "secretive", "g", pw=SECRET),
        )

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return the_plan()

    tools = {"gate": gate, "secretive": secretive}
    async with runtime(tmp_path, ledger, tools=tools, **FAST) as rt:
        handle = await rt.start("g", the_plan())
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        with anyio.fail_after(30):
            await handle.wait()
        assert stored(rt, handle.execution_id).masked_inputs == ("b",)
    gate.opened.set()
    async with runtime(tmp_path, ledger, tools=tools, planner=planner, max_replans=1) as rt:
        with anyio.fail_after(30):
            result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed", (result.status, result.error)
    assert got == [SECRET]
    assert ledger.count("inc:1") == 1, "a completed step the new plan holds unchanged ran again"
    assert SECRET not in str(record)


async def test_E9_calls_across_pauses_from_elsewhere_resumes_and_a_stop_never_go_back_or_double(
    tmp_path: Path,
) -> None:
    """E9/B3 over a cycle: pause from elsewhere, resume, pause from elsewhere, resume, stop
    the task. Three durable calls once, a call outside ctx.step once per run; every stored
    version's calls_used is >= the one before; the end equals the calls made."""
    from tests.executions._kit import FAST, Gate, RecordingSqliteStore

    ledger = Ledger()
    store = RecordingSqliteStore(tmp_path / "store.sqlite3")
    gates: list[Gate] = []

    async def spender(ctx: ms.AgentContext, input: Any) -> str:
        for i in range(3):
            await ctx.step(f"s{i}", ctx.call_skill, "model", f"p{i}")
        await ctx.call_skill("model", "loose")
        await gates[-1]()
        return "spent"

    agents = {"spender": spender}
    plan = plan_of(agent("w", "spender"), tool("after", "inc", "w", x=1))
    async with runtime(store, ledger, agents=agents, **FAST) as rt:
        gates.append(Gate())
        handle = await rt.start("g", plan)
        for _ in range(2):
            await gates[-1].entered.wait()
            async with runtime(tmp_path, agents=agents, **FAST) as other:
                await other.pause(handle.execution_id)
            with anyio.fail_after(30):
                paused = await handle.wait()
            assert paused.status == "paused"
            gates.append(Gate())
            handle = await rt.resume(handle.execution_id)
        await gates[-1].entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    made = len(ledger.names("skill"))
    assert made == 3 + 3
    assert result.status == "completed"
    (task,) = tasks_of(record)
    assert (result.calls_used, record.calls_used, task.calls_used) == (made, made, made)
    used = [v.calls_used for v in store.versions if v.id == handle.execution_id]
    assert used == sorted(used), used


async def test_R4_why_a_run_with_every_step_stopped_failed_is_told_by_another_runtime_too(
    tmp_path: Path,
) -> None:
    """S2: a run whose only step was stopped ends failed "with an error naming them". The
    result another runtime gets for that stored run (resume of a terminal run, R4) must say
    why too, not error=None."""
    from tests.executions._kit import Gate

    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", gate)
        return "x"

    agents = {"w": worker}
    async with runtime(tmp_path, agents=agents) as rt:
        handle = await rt.start("g", plan_of(agent("a", "w")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            live = await handle.wait()
    assert live.status == "failed"
    assert live.error is not None
    assert "a" in live.error
    async with runtime(tmp_path, agents=agents) as rt:
        again = await (await rt.resume(handle.execution_id)).wait()
    assert again.status == "failed"
    assert again.stopped_steps == ("a",)
    assert again.error == live.error


async def test_S2_a_stopped_step_with_a_secret_input_stays_stopped_after_a_replan_elsewhere(
    tmp_path: Path,
) -> None:
    """S2 + masked inputs: "a replan after a failure keeps a stopped step the new plan holds
    unchanged". The stopped step's input held a secret; the run is resumed in another runtime,
    a step fails, and the planner returns the same plan (with the real secret). The user's
    stop stands: the agent is not run again."""
    from tests.executions._kit import FAST, Gate

    gate = Gate()
    slow = Gate()
    runs: list[int] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(1)
        await ctx.step("park", gate)
        return "worked"

    def the_plan() -> ms.Plan:
        return plan_of(
            agent("w", "worker", pw=SECRET),
            tool("g", "slow"),
            tool("f", "fail", "g"),
        )

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return the_plan()

    options: dict[str, Any] = {"agents": {"worker": worker}, "tools": {"slow": slow}, **FAST}
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", the_plan())
        await gate.entered.wait()
        await slow.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        assert (await rt.stop_agent_task(task.id)).ok
        await rt.pause(handle.execution_id)
        with anyio.fail_after(30):
            await handle.wait()
        assert statuses(stored(rt, handle.execution_id))["w"] == "stopped"
    slow.opened.set()
    async with runtime(tmp_path, planner=planner, max_replans=1, **options) as rt:
        with anyio.fail_after(30):
            result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert record.replans == 1, record.replans
    assert len(runs) == 1, "the stopped agent ran again after the replan"
    assert statuses(record)["w"] == "stopped"
    assert result.stopped_steps == ("w",)


async def test_E10_a_plan_with_a_secret_input_approved_in_the_process_that_planned_it_runs(
    tmp_path: Path,
) -> None:
    """README: a plan step whose input held a secret "runs with its real input in the process
    that planned it"; only a resume elsewhere, before it ran, fails it. With
    require_plan_approval the run must wait for approval; approved in the very runtime that
    started it, the step runs with its real input instead of failing."""
    got: list[str] = []

    async def secretive(pw: str) -> str:
        got.append(pw)
        return "used"

    async with runtime(tmp_path, tools={"secretive": secretive}, require_plan_approval=True) as rt:
        first = await (await rt.start("g", plan_of(tool("b", "secretive", pw=SECRET)))).wait()
        assert first.status == "waiting_for_approval", first
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, approve=True)).wait()
    assert done.status == "completed", (done.status, done.error, done.observations)
    assert got == [SECRET]


async def test_E10_an_agent_with_a_secret_input_answered_in_the_process_that_planned_it_completes(
    tmp_path: Path,
) -> None:
    """Same promise for a question: the agent ran live with its real input and asked; the
    answer is given in the same runtime. The agent runs on with its real input."""
    inputs: list[Any] = []

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        inputs.append(input)
        return await ctx.ask("go on?")

    async with runtime(tmp_path, agents={"asker": asker}) as rt:
        first = await (await rt.start("g", plan_of(agent("a", "asker", pw=SECRET)))).wait()
        assert first.status == "waiting_for_clarification"
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, answer="yes")).wait()
    assert done.status == "completed", (done.status, done.observations)
    assert inputs == [{"pw": SECRET}, {"pw": SECRET}]


async def test_E9_raising_the_budget_by_one_makes_progress_with_a_redacted_inner_step(
    tmp_path: Path,
) -> None:
    """E9: "raising the budget and resuming makes progress". The agent's first ctx.step calls
    a skill whose result is redacted on disk, so it re-runs on every resume (E10) — spending
    the one call the user just added, and waiting again: the run never gets further."""
    ledger = Ledger()
    runs: list[int] = []
    seen: list[Any] = []
    skills = _secretive_skills(ledger)
    async with runtime(
        tmp_path, ledger, skills=skills, agents={"w": _vault_then_work(runs, seen, 3)}, max_calls=2
    ) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "w")))).wait()
        budget = 2
        progress = [len(ledger.names("skill"))]
        while result.status == "waiting_for_budget" and budget < 12:
            budget += 1
            with anyio.fail_after(30):
                result = await (await rt.resume(result.execution_id, max_calls=budget)).wait()
            progress.append(len([n for n in ledger.names("skill") if n.startswith("model")]))
    assert result.status == "completed", (budget, progress, ledger.names("skill"))


async def test_E10_a_skill_step_with_a_secret_input_runs_after_a_budget_wait_in_the_same_runtime(
    tmp_path: Path,
) -> None:
    """The same promise across a budget wait (B3: "exhausting a budget waits with work
    kept"): the step that waits for budget was planned here with its real input; raising the
    budget in the same runtime runs it with that input instead of failing it."""
    ledger = Ledger()
    got: list[str] = []

    async def model(prompt: str = "", pw: str = "", **_: Any) -> str:
        got.append(pw)
        return "ok"

    plan = plan_of(
        ms.PlanStep(id="one", skill="model", input={"prompt": "a"}),
        ms.PlanStep(id="two", skill="model", input={"pw": SECRET}, depends_on=("one",)),
    )
    async with runtime(tmp_path, ledger, skills={"model": model}, max_calls=1) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_budget", first
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_calls=2)).wait()
    assert done.status == "completed", (done.status, done.observations)
    assert got == ["", SECRET]


async def test_P4_a_stopped_agent_s_reservation_is_given_back_to_the_steps_after_it(
    tmp_path: Path,
) -> None:
    """P4/B3: the agent holds a reservation of the run's whole budget and makes no call; the
    user stops it. What it reserved and did not use goes back: the skill steps after it run
    within max_calls, the run completes and calls_used counts only calls made."""
    from tests.executions._kit import Gate

    ledger = Ledger()
    gate = Gate()

    async def idle(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", gate)
        return "idle"

    plan = plan_of(
        agent("w", "idle"),
        ms.PlanStep(id="s1", skill="model", input={"prompt": "a"}, depends_on=("w",)),
        ms.PlanStep(id="s2", skill="model", input={"prompt": "b"}, depends_on=("s1",)),
    )
    async with runtime(tmp_path, ledger, agents={"idle": idle}, max_calls=2) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        assert (await rt.stop_agent_task(task.id)).ok
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed", (result.status, result.pending)
    assert ledger.names("skill") == ["model:a", "model:b"]
    assert (result.calls_used, record.calls_used) == (2, 2)


@pytest.mark.parametrize("control", ["cancel", "pause"])
async def test_E9_durable_calls_are_counted_once_when_the_run_is_stopped_from_elsewhere(
    tmp_path: Path, control: str
) -> None:
    """E9/B3: three calls inside ctx.step (durable, on the task), one outside, then the agent
    waits; another runtime cancels or pauses the run. calls_used is 4 — the calls made
    before the stop are added once, not on top of the ones already committed."""
    from tests.executions._kit import FAST, Gate

    ledger = Ledger()
    gate = Gate()

    async def spender(ctx: ms.AgentContext, input: Any) -> str:
        for i in range(3):
            await ctx.step(f"s{i}", ctx.call_skill, "model", f"p{i}")
        await ctx.call_skill("model", "loose")
        await gate()
        return "spent"

    agents = {"spender": spender}
    async with runtime(tmp_path, ledger, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("w", "spender")))
        await gate.entered.wait()
        async with runtime(tmp_path, agents=agents, **FAST) as other:
            await getattr(other, control)(handle.execution_id)
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert len(ledger.names("skill")) == 4
    (task,) = tasks_of(record)
    assert (result.calls_used, record.calls_used, task.calls_used) == (4, 4, 4)
