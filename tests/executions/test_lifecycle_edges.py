"""Legal user-visible flows must not raise IllegalTransition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from tests.executions._kit import (
    FAST,
    Gate,
    agent,
    plan_of,
    recorded_events,
    runtime,
    skill,
    statuses,
    stored,
    tool,
)

pytestmark = pytest.mark.anyio


async def test_a_question_too_large_to_store_fails_its_step_like_any_unstorable_result(
    tmp_path: Path,
) -> None:
    """X2 for a question: the step was moved back to pending for the wait, then _unstorable
    moves it pending -> failed, which the step table refuses (IllegalTransition)."""

    async def verbose(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("q" * 300_000)

    store = ms.storage.SqliteStore(tmp_path / "s.sqlite3", max_bytes=200_000)
    async with runtime(store, agents={"a": verbose}, **FAST) as rt:
        with anyio.fail_after(30):
            result = await (await rt.start("g", plan_of(agent("q", "a")))).wait()
        record = stored(rt, result.execution_id)
    # The run failed because its step did (O2: the error says which), not the runtime.
    assert (result.error or "").startswith("step q failed: its result could not be stored")
    assert record.terminal, record.status
    assert statuses(record)["q"] == "failed"


async def test_approval_of_one_step_while_others_run_then_budget(tmp_path: Path) -> None:
    gate = Gate()
    gated = ms.PlanStep(id="g", tool="gate")
    needs = ms.PlanStep(id="n", tool="inc", requires_approval=True)
    s1 = skill("m1", "model", "n")
    s2 = skill("m2", "model", "m1")
    async with runtime(tmp_path, tools={"gate": gate}, max_calls=1, **FAST) as rt:
        with anyio.fail_after(30):
            h = await rt.start("g", plan_of(gated, needs, s1, s2))
            await gate.entered.wait()
            gate.opened.set()
            r = await h.wait()
            assert r.status == "waiting_for_approval", r
            r = await (await rt.resume(r.execution_id, approve=True)).wait()
            assert r.status == "waiting_for_budget", r
            paused = await rt.pause(r.execution_id)
            assert paused.status == "paused"
            r = await (await rt.resume(r.execution_id, max_calls=5)).wait()
    assert r.status == "completed", r


async def test_cancel_and_pause_while_planning(tmp_path: Path) -> None:
    entered = anyio.Event()
    release = anyio.Event()

    async def planner(goal: str, ctx: Any) -> ms.Plan:
        entered.set()
        await release.wait()
        return plan_of(tool("a", "inc"))

    async with runtime(tmp_path, planner=planner, **FAST) as rt:
        with anyio.fail_after(30):
            h = await rt.start("g")
            await entered.wait()
            p = await rt.pause(h.execution_id)
            assert p.status == "paused", p
            release.set()
            r = await (await rt.resume(h.execution_id)).wait()
            assert r.status == "completed", r
            anyio.Event()
            h2 = await rt.start("g2")
            c = await rt.cancel(h2.execution_id)
            assert c.status == "cancelled", c


async def test_max_replans_then_failed_then_resume_is_left_alone(tmp_path: Path) -> None:
    calls = 0

    async def planner(goal: str, ctx: ms.PlannerContext) -> ms.Plan:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("no better plan")
        return plan_of(tool("a", "fail"))

    async with runtime(tmp_path, planner=planner, max_replans=2, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g")).wait()
            assert r.status == "failed", r
            again = await (await rt.resume(r.execution_id)).wait()
    assert again.status == "failed"


async def test_planner_question_then_pause_then_answer(tmp_path: Path) -> None:
    async def planner(goal: str, ctx: ms.PlannerContext) -> ms.Plan:
        if "Clarification" not in goal:
            raise ms.ClarificationNeeded("which city?")
        return plan_of(tool("a", "inc"))

    async with runtime(tmp_path, planner=planner, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g")).wait()
            assert r.status == "waiting_for_clarification"
            await rt.pause(r.execution_id)
            r = await (await rt.resume(r.execution_id, answer="Lisbon")).wait()
    assert r.status == "completed", r


async def test_question_open_while_other_steps_run(tmp_path: Path) -> None:
    gate = Gate()

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    plan = plan_of(agent("q", "a"), ms.PlanStep(id="g", tool="gate"), tool("after", "inc", "g"))
    async with (
        runtime(tmp_path, agents={"a": asker}, tools={"gate": gate}, **FAST) as rt,
        recorded_events(rt) as events,
    ):
        with anyio.fail_after(30):
            h = await rt.start("goal", plan)
            await gate.entered.wait()
            # The question is durable (its event follows the commit) before "g" may end:
            # then "after" becomes ready while the question is open.
            while not any(isinstance(e, ms.executions.AgentTaskWaiting) for e in events):
                await anyio.lowlevel.checkpoint()
            gate.opened.set()
            r = await h.wait()
            assert r.status == "waiting_for_clarification"
            # P5: while the question is open, "after" did not start
            assert statuses(stored(rt, r.execution_id))["after"] == "pending"
            r = await (await rt.resume(r.execution_id, answer="x")).wait()
    assert r.status == "completed", r


async def test_limits_and_max_parallel(tmp_path: Path) -> None:
    running = 0
    peak = 0
    per: dict[str, int] = {}
    peak_per: dict[str, int] = {}
    anyio.Event()

    def make(name: str) -> Any:
        async def t(**_: Any) -> str:
            nonlocal running, peak
            running += 1
            per[name] = per.get(name, 0) + 1
            peak = max(peak, running)
            peak_per[name] = max(peak_per.get(name, 0), per[name])
            for _ in range(20):
                await anyio.lowlevel.checkpoint()
            running -= 1
            per[name] -= 1
            return name

        return t

    tools = {"x": make("x"), "y": make("y")}
    steps = [ms.PlanStep(id=f"x{i}", tool="x") for i in range(6)]
    steps += [ms.PlanStep(id=f"y{i}", tool="y") for i in range(6)]
    async with runtime(tmp_path, tools=tools, max_parallel_steps=3, limits={"x": 1}, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g", plan_of(*steps))).wait()
    assert r.status == "completed"
    assert peak <= 3
    assert peak_per["x"] == 1
