"""Deadlines (B1): "Every step, planner call and run can have a deadline; expiry cancels with
``Timeout``." Step timeouts (tools, skills, agents) from the step or the runtime's defaults,
the planner's timeout, and the run's deadline that pauses it, resumably.

No test asserts how long anything took: the limits are tiny where they must expire and the
code that must expire waits forever (a hang guard bounds it), or huge where they must not.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest

import mainspring as ms
from mainspring.executions._run import children as _children
from mainspring.executions._steps import children as _agent
from mainspring.storage import RetryPolicy

from ..._cli_kit import run_cli
from .._kit import Ledger, agent, plan_of, recorded_events, runtime, skill, stored, tasks_of, tool
from ..run.test_children import A_DAY, Flaky, seen

pytestmark = pytest.mark.anyio

SHORT = 0.05  # a limit that must expire: what it bounds waits forever
RUN = 1.0  # a run's deadline that must expire after its first step started


class Hang:
    """A tool that waits forever (or returns, once told to), recording why it was stopped."""

    def __init__(self) -> None:
        self.reasons: list[ms.CancelReason | None] = []
        self.calls = 0
        self.finish = False

    async def __call__(self, **_: Any) -> str:
        self.calls += 1
        if self.finish:
            return "done"
        try:
            await anyio.sleep_forever()
        finally:
            self.reasons.append(ms.cancel_reason())
        raise AssertionError("unreachable")  # pragma: no cover


def _obs(execution: ms.storage.Execution, step_id: str) -> ms.storage.Observation:
    return next(o for o in execution.observations if o.step_id == step_id)


def _block_until_stopped() -> None:
    """Blocking code, run in a worker thread the README's way, that returns only once its
    actor was told why it stops: its value then arrives after the timeout fired however
    loaded the machine is (what ``time.sleep(0.6)`` under a 0.2 s timeout does by luck)."""
    end = time.monotonic() + 60  # a hang guard, never reached when the timeout works
    while ms.cancel_reason() is None and time.monotonic() < end:
        time.sleep(0.005)


async def _late(**_: Any) -> str:
    """A tool (or skill) whose blocking call ignores its cancellation and returns late."""
    return await anyio.to_thread.run_sync(lambda: (_block_until_stopped(), "late")[1])


async def test_B1_a_hanging_tool_times_out_with_Timeout_and_step_timeout(tmp_path: Path) -> None:
    hang = Hang()
    ledger = Ledger()
    plan = plan_of(
        attrs.evolve(tool("slow", "hang"), timeout=SHORT),
        tool("other", "inc", x=1),
        tool("after", "inc", "other", x=2),
    )
    async with runtime(tmp_path, ledger, tools={"hang": hang}) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    # Inside the tool, its finally saw why: Timeout, naming the step and the limit.
    (reason,) = hang.reasons
    assert isinstance(reason, ms.Timeout)
    assert "slow" in reason.detail
    assert "0.05" in reason.detail
    observation = _obs(record, "slow")
    assert observation.code == "step-timeout"
    assert not observation.ok
    assert observation.error is not None
    assert "timed out after 0.05 s" in observation.error
    # The other steps were not affected.
    assert {s.id: s.status for s in record.plan.steps} == {  # type: ignore[union-attr]
        "slow": "failed",
        "other": "succeeded",
        "after": "succeeded",
    }
    assert ledger.names() == ["inc:1", "inc:2"]
    assert result.status == "failed"


async def test_B1_runtime_defaults_apply_per_kind_and_target_and_a_step_overrides_them(
    tmp_path: Path,
) -> None:
    hang = Hang()
    plan = plan_of(
        tool("by_target", "hang"),
        # The step's own limit wins over the runtime's: this one would hang for a day.
        attrs.evolve(tool("by_step", "slow"), timeout=SHORT),
    )
    slow = Hang()
    options: dict[str, Any] = {
        "timeouts": {"tool": 86_400.0, "tool:hang": SHORT, "tool:slow": 86_400.0}
    }
    async with runtime(tmp_path, tools={"hang": hang, "slow": slow}, **options) as rt:
        handle = await rt.start("g", plan)
        await handle.wait()
        record = stored(rt, handle.execution_id)
    assert _obs(record, "by_target").code == "step-timeout"
    assert _obs(record, "by_step").code == "step-timeout"
    assert "0.05" in (_obs(record, "by_target").error or "")
    assert isinstance(hang.reasons[0], ms.Timeout)
    assert isinstance(slow.reasons[0], ms.Timeout)


async def test_B1_a_step_within_its_timeout_is_not_stopped(tmp_path: Path) -> None:
    ledger = Ledger()
    async with runtime(tmp_path, ledger, timeouts={"tool": 86_400.0}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "inc", x=1)))
        result = await handle.wait()
    assert result.status == "completed"
    assert ledger.names() == ["inc:1"]


async def test_B1_an_agent_timing_out_fails_its_task_with_agent_timeout(tmp_path: Path) -> None:
    seen: list[ms.CancelReason | None] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: 1)
        try:
            await anyio.sleep_forever()
        finally:
            seen.append(ms.cancel_reason())
        return "never"  # pragma: no cover

    options: dict[str, Any] = {"timeouts": {"agent": SHORT}}
    async with runtime(tmp_path, agents={"worker": worker}, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker"), tool("b", "inc", x=1)))
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert isinstance(seen[0], ms.Timeout)
    observation = _obs(record, "a")
    assert observation.code == "agent-timeout"
    (task,) = tasks_of(record)
    assert task.state == "failed"
    assert task.failure is not None
    assert task.failure.code == "agent-timeout"
    assert task.inner_completed == ("first",)  # its durable inner steps stay
    assert result.status == "failed"
    assert _obs(record, "b").ok  # the other step ran


async def test_B1_the_planner_timing_out_fails_the_start_with_a_clear_error(
    tmp_path: Path,
) -> None:
    seen: list[ms.CancelReason | None] = []

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        try:
            await anyio.sleep_forever()
        finally:
            seen.append(ms.cancel_reason())
        raise AssertionError("unreachable")  # pragma: no cover

    options: dict[str, Any] = {"planner": planner, "timeouts": {"planner": SHORT}}
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("plan something")
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert isinstance(seen[0], ms.Timeout)
    assert result.status == "failed"
    assert record.status == "failed"
    assert result.error == "the planner timed out after 0.05 s"


async def test_B1_the_run_deadline_pauses_with_Timeout_and_resume_completes(
    tmp_path: Path,
) -> None:
    hang = Hang()
    ledger = Ledger()
    plan = plan_of(tool("b", "hang"), tool("a", "inc", x=1), tool("c", "inc", "b", "a", x=2))
    async with runtime(tmp_path, ledger, tools={"hang": hang}) as rt:
        async with recorded_events(rt) as events:
            # Long enough for b to start on a loaded machine: b's reason is asserted.
            handle = await rt.start("g", plan, deadline=RUN)
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
        # E3/V3: the code stopped sees the run's Timeout, not Pause.
        (reason,) = hang.reasons
        assert isinstance(reason, ms.Timeout)
        assert "deadline" in reason.detail
        assert result.status == "paused"
        assert isinstance(result.stopped_by, ms.Timeout)
        assert record.status == "paused"
        assert record.deadline_at is not None
        assert record.controls[-1].action == "pause"
        assert record.controls[-1].reason.startswith("timeout: ")
        assert record.lease is not None
        assert record.lease.owner == ""  # L3: released
        paused = [e for e in events if isinstance(e, ms.events.ExecutionPaused)]
        assert [e.cause for e in paused] == ["timeout"]
        assert {s.id: s.status for s in record.plan.steps}["b"] == "pending"  # type: ignore[union-attr]
        # Resuming a run its deadline paused goes on (the passed deadline is dropped).
        hang.finish = True
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert record.deadline_at is None
    assert "deadline had passed" in record.controls[-1].reason
    assert ledger.names().count("inc:1") == 1  # a ran once (E1/R7)
    assert ledger.names()[-1] == "inc:2"


async def test_B1_resume_with_a_new_deadline_stops_again_with_Timeout(tmp_path: Path) -> None:
    hang = Hang()
    async with runtime(tmp_path, tools={"hang": hang}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "hang")), deadline=SHORT)
        assert (await handle.wait()).status == "paused"
        first = stored(rt, handle.execution_id).deadline_at
        result = await (await rt.resume(handle.execution_id, deadline=RUN)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "paused"
    assert isinstance(result.stopped_by, ms.Timeout)
    assert hang.calls >= 1
    assert all(isinstance(r, ms.Timeout) for r in hang.reasons)
    assert first is not None
    assert record.deadline_at is not None
    assert record.deadline_at > first
    assert [c.action for c in record.controls[-3:]] == ["pause", "resume", "pause"]
    assert record.controls[-2].reason == "new deadline in 1 s"
    assert record.controls[-1].reason.startswith("timeout: ")


async def test_B1_a_run_deadline_is_wall_clock_whatever_the_store_clock_reads() -> None:
    # A store's clock decides leases (a PostgreSQL server's, a test's ManualClock); a run's
    # deadline is wall-clock, set and checked on time.time(): a resume judges and sets it
    # on the same clock, so a passed deadline is dropped and a new one counts from now.
    from mainspring.testing import ManualClock, MemoryStore

    hang = Hang()
    store = MemoryStore(clock=ManualClock(start=1_000.0))
    async with runtime(store, tools={"hang": hang}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "hang")), deadline=SHORT)
        assert (await handle.wait()).status == "paused"
        hang.finish = True
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
        assert result.status == "completed"
        assert record.deadline_at is None
        assert "deadline had passed" in record.controls[-1].reason
        hang.finish = False
        again = await rt.start("g", plan_of(tool("a", "hang")), deadline=SHORT)
        assert (await again.wait()).status == "paused"
        before = time.time()
        resumed = await rt.resume(again.execution_id, deadline=86_400)
        renewed = stored(rt, again.execution_id)
        assert renewed.deadline_at is not None
        assert renewed.deadline_at >= before + 86_400
        hang.finish = True
        assert (await resumed.wait()).status == "completed"


async def test_B1_a_deadline_not_reached_changes_nothing(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        handle = await rt.start("g", plan_of(tool("a", "inc", x=1)), deadline=86_400)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert record.deadline_at is not None
    assert record.deadline_at > record.created_at


async def test_B1_a_crashed_run_past_its_deadline_stops_again_on_recover(tmp_path: Path) -> None:
    # A run left "running" (the process died) whose deadline passed meanwhile: recovering
    # it runs nothing new; the deadline acts at once and the run is paused with Timeout.
    ledger = Ledger()
    async with runtime(tmp_path, ledger) as rt:
        handle = await rt.start("g", plan_of(tool("a", "inc", x=1)), deadline=86_400)
        await handle.wait()
        execution_id = handle.execution_id

    def crashed(stored: ms.storage.Execution, now: float) -> ms.storage.Execution:
        plan = stored.plan
        assert plan is not None
        steps = tuple(attrs.evolve(s, status="pending") for s in plan.steps)
        return attrs.evolve(
            stored,
            status="running",
            plan=attrs.evolve(plan, steps=steps),
            completed_steps=(),
            observations=(),
            deadline_at=now - 1,
        )

    async with runtime(tmp_path, ledger) as rt:
        rt.store.edit(execution_id, crashed)
        (handle,) = await rt.recover()
        result = await handle.wait()
    assert result.status == "paused"
    assert isinstance(result.stopped_by, ms.Timeout)
    assert ledger.names() == ["inc:1"]  # only the first run's


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"timeouts": {"tool": 0}}, ValueError, "positive, finite"),
        ({"timeouts": {"tool": float("nan")}}, ValueError, "positive, finite"),
        ({"timeouts": {"tool": "10"}}, TypeError, "number of seconds"),
        ({"timeouts": {"tools": 10}}, ValueError, "use a kind"),
        ({"timeouts": {"planner:x": 10}}, ValueError, "use a kind"),
        ({"timeouts": {"tool:nope": 10}}, ValueError, "no tool 'nope'"),
        ({"timeouts": [("tool", 1)]}, TypeError, "mapping"),
        ({"retries": {"agent": ms.storage.RetryPolicy()}}, ValueError, "use a kind"),
        ({"retries": {"tool": 3}}, TypeError, "RetryPolicy"),
    ],
)
async def test_B1_bad_limits_are_clear_errors(
    tmp_path: Path, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        async with runtime(tmp_path, **options):
            pass  # pragma: no cover


@pytest.mark.parametrize(
    ("deadline", "error"), [(0, ValueError), (-1, ValueError), ("1", TypeError), (True, TypeError)]
)
async def test_B1_a_bad_deadline_is_refused_and_nothing_is_stored(
    tmp_path: Path, deadline: Any, error: type[Exception]
) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(error, match="deadline"):
            await rt.start("g", plan_of(tool("a")), execution_id="ex-bad", deadline=deadline)
        assert rt.store.get("ex-bad") is None


async def test_B1_a_deadline_not_passed_survives_a_pause_and_resume(tmp_path: Path) -> None:
    hang = Hang()
    async with runtime(tmp_path, tools={"hang": hang}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "hang")), deadline=86_400)
        execution_id = handle.execution_id
        at = stored(rt, execution_id).deadline_at
        await rt.pause(execution_id)
        resumed = await rt.resume(execution_id)
        assert stored(rt, execution_id).deadline_at == at  # absolute: not moved by a resume
        hang.finish = True
        await rt.pause(execution_id)
        result = await (await rt.resume(execution_id)).wait()
    assert at is not None
    assert result.status == "completed"
    assert (await resumed.wait()).status == "paused"


async def test_B1_show_says_the_deadline_and_a_steps_timeout(tmp_path: Path) -> None:
    from ..._cli_kit import run_cli

    hang = Hang()
    plan = plan_of(attrs.evolve(tool("slow", "hang"), timeout=SHORT))
    async with runtime(tmp_path, tools={"hang": hang}) as rt:
        handle = await rt.start("g", plan, execution_id="ex-show", deadline=86_400)
        await handle.wait()
    code, out = run_cli("--store", str(tmp_path / "store.sqlite3"), "show", "ex-show")
    assert code == 0
    assert "deadline: " in out
    assert "step slow: timeout 0.05 s" in out


# -- a value that arrives after the timeout fired (B1) ------------------------------------


@pytest.fixture(params=["child-declines", "child-reports"])
def late_reports(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each late-value test twice: with the children as they are (one cancelled with
    ``Timeout`` reports no success), and with children that report whatever their code
    returned, so that the execution alone, which armed the timeout, must refuse it."""
    if request.param == "child-reports":
        monkeypatch.setattr(_agent, "_timed_out", lambda: False)


@pytest.mark.usefixtures("late_reports")
async def test_B1_a_tool_returning_after_its_timeout_fails_step_timeout_not_late(
    tmp_path: Path,
) -> None:
    plan = plan_of(attrs.evolve(tool("slow", "late"), timeout=SHORT), tool("after", "inc", "slow"))
    ledger = Ledger()
    async with runtime(tmp_path, ledger, tools={"late": _late}) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    observation = _obs(record, "slow")
    assert not observation.ok
    assert observation.code == "step-timeout"
    assert observation.output is None
    assert "late" not in result.outputs.values()
    assert result.status == "failed"
    assert {s.id: s.status for s in record.plan.steps} == {  # type: ignore[union-attr]
        "slow": "failed",
        "after": "skipped",
    }
    assert ledger.names() == []  # its dependent never ran on the late value


@pytest.mark.usefixtures("late_reports")
@pytest.mark.parametrize("retry_timeouts", [True, False])
async def test_B1_a_tool_returning_after_its_timeout_is_retried_when_its_policy_says_so(
    tmp_path: Path, retry_timeouts: bool
) -> None:
    calls: list[int] = []

    async def late_once(**_: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            return await _late()
        return "ok"

    policy = ms.storage.RetryPolicy(
        max_attempts=3, base_delay=0.001, max_delay=0.001, retry_timeouts=retry_timeouts
    )
    plan = plan_of(attrs.evolve(tool("a", "late_once"), timeout=SHORT, retry=policy))
    async with runtime(tmp_path, tools={"late_once": late_once}) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    observation = _obs(record, "a")
    if retry_timeouts:
        assert len(calls) == 2
        assert result.status == "completed"
        assert observation.ok
        assert result.outputs["a"] == "ok"
        (first,) = observation.data["attempts"]
        assert first["timed_out"] is True
        assert "timed out after 0.05 s" in first["error"]
    else:
        assert len(calls) == 1
        assert result.status == "failed"
        assert observation.code == "step-timeout"
        assert observation.output is None


@pytest.mark.usefixtures("late_reports")
async def test_B1_a_skill_returning_after_its_timeout_fails_step_timeout_and_is_charged(
    tmp_path: Path,
) -> None:
    plan = plan_of(attrs.evolve(skill("think", "late"), timeout=SHORT))
    async with runtime(tmp_path, skills={"late": _late}) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    observation = _obs(record, "think")
    assert not observation.ok
    assert observation.code == "step-timeout"
    assert observation.output is None
    assert result.status == "failed"
    assert "late" not in result.outputs.values()
    assert record.calls_used == 1  # the model call was made (P4)


@pytest.mark.usefixtures("late_reports")
async def test_B1_an_agent_returning_after_its_timeout_fails_agent_timeout(
    tmp_path: Path,
) -> None:
    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: 1)
        await anyio.to_thread.run_sync(_block_until_stopped)
        return "late"

    options: dict[str, Any] = {"timeouts": {"agent": SHORT}}
    async with runtime(tmp_path, agents={"worker": worker}, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker"), tool("b", "inc", "a", x=1)))
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    observation = _obs(record, "a")
    assert not observation.ok
    assert observation.code == "agent-timeout"
    assert observation.output is None
    (task,) = tasks_of(record)
    assert task.state == "failed"
    assert task.failure is not None
    assert task.failure.code == "agent-timeout"
    assert task.inner_completed == ("first",)
    assert result.status == "failed"
    assert "late" not in result.outputs.values()
    assert {s.id: s.status for s in record.plan.steps}["b"] == "skipped"  # type: ignore[union-attr]


@pytest.mark.usefixtures("late_reports")
async def test_B1_a_planner_returning_after_its_timeout_fails_the_run(tmp_path: Path) -> None:
    ledger = Ledger()

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        await anyio.to_thread.run_sync(_block_until_stopped)
        return plan_of(tool("a", "inc", x=1))

    options: dict[str, Any] = {"planner": planner, "timeouts": {"planner": SHORT}}
    async with runtime(tmp_path, ledger, **options) as rt:
        handle = await rt.start("plan something")
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"
    assert record.status == "failed"
    assert result.error == "the planner timed out after 0.05 s"
    assert ledger.names() == []  # the late plan never ran


# -- a timeout that passed while the event loop was blocked (B1) --------------------------

BLOCKED = 0.15  # a plain call blocking the event loop (under the loop guard's limit)


def _blocking_on_the_loop() -> str:
    """A plain (non-async) call, run on the event loop as the README says, that blocks it
    past its caller's timeout: no timer can fire meanwhile, so the value it returns is
    handled before the timer's message, with the timeout already passed."""
    time.sleep(BLOCKED)
    return "late"


async def test_B1_a_plain_tool_blocking_past_its_timeout_fails_step_timeout(
    tmp_path: Path,
) -> None:
    plan = plan_of(attrs.evolve(tool("slow", "block"), timeout=SHORT), tool("after", "inc", "slow"))
    ledger = Ledger()
    tools = {"block": lambda **_: _blocking_on_the_loop()}
    async with runtime(tmp_path, ledger, tools=tools) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    observation = _obs(record, "slow")
    assert not observation.ok
    assert observation.code == "step-timeout"
    assert observation.output is None
    assert result.status == "failed"
    assert "late" not in result.outputs.values()
    assert ledger.names() == []  # its dependent never ran on the late value


async def test_B1_a_plain_tool_blocking_past_its_timeout_is_retried_when_its_policy_says_so(
    tmp_path: Path,
) -> None:
    calls: list[int] = []

    def block_once(**_: Any) -> str:
        calls.append(1)
        return _blocking_on_the_loop() if len(calls) == 1 else "ok"

    policy = ms.storage.RetryPolicy(
        max_attempts=2, base_delay=0.001, max_delay=0.001, retry_timeouts=True
    )
    plan = plan_of(attrs.evolve(tool("a", "block_once"), timeout=SHORT, retry=policy))
    async with runtime(tmp_path, tools={"block_once": block_once}) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert len(calls) == 2
    assert result.status == "completed"
    assert result.outputs["a"] == "ok"
    (first,) = _obs(record, "a").data["attempts"]
    assert first["timed_out"] is True


async def test_B1_an_agent_blocking_past_its_timeout_fails_agent_timeout(tmp_path: Path) -> None:
    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        return _blocking_on_the_loop()

    options: dict[str, Any] = {"timeouts": {"agent": SHORT}}
    async with runtime(tmp_path, agents={"worker": worker}, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    observation = _obs(record, "a")
    assert observation.code == "agent-timeout"
    (task,) = tasks_of(record)
    assert task.state == "failed"
    assert task.failure is not None
    assert task.failure.code == "agent-timeout"
    assert result.status == "failed"
    assert "late" not in result.outputs.values()


async def test_B1_a_plain_planner_blocking_past_its_timeout_fails_the_run(tmp_path: Path) -> None:
    ledger = Ledger()

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        _blocking_on_the_loop()
        return plan_of(tool("a", "inc", x=1))

    options: dict[str, Any] = {"planner": planner, "timeouts": {"planner": SHORT}}
    async with runtime(tmp_path, ledger, **options) as rt:
        handle = await rt.start("plan something")
        result = await handle.wait()
    assert result.status == "failed"
    assert result.error == "the planner timed out after 0.05 s"
    assert ledger.names() == []  # the late plan never ran


async def test_B1_an_inner_step_returning_after_its_agents_timeout_is_not_recorded(
    tmp_path: Path,
) -> None:
    # ctx.step: "a cancellation while fn runs leaves the step unrecorded". An inner step
    # whose blocking code returns after its agent's timeout fired is not recorded done.
    async def late_inner() -> str:
        return await anyio.to_thread.run_sync(lambda: (_block_until_stopped(), "late")[1])

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: 1)
        await ctx.step("second", late_inner)
        return "done"

    options: dict[str, Any] = {"timeouts": {"agent": SHORT}}
    async with runtime(tmp_path, agents={"worker": worker}, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"
    assert _obs(record, "a").code == "agent-timeout"
    (task,) = tasks_of(record)
    assert task.inner_completed == ("first",)
    assert [o.step_id for o in task.inner_observations] == ["first"]


@pytest.mark.parametrize("call", ["call_tool", "call_skill", "step", "run"])
async def test_B1_an_agent_whose_timeout_fired_starts_no_new_call(
    tmp_path: Path, call: str
) -> None:
    # Its blocking code returns after its timeout fired, and the agent goes on to its next
    # call: that call never starts (a plain function would run whole, after the deadline).
    made: list[str] = []
    marker = tmp_path / "ran"

    def side_effect(**_: Any) -> str:
        made.append(call)
        return "made"

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await anyio.to_thread.run_sync(_block_until_stopped)
        if call == "call_tool":
            await ctx.call_tool("effect")
        elif call == "call_skill":
            await ctx.call_skill("effect")
        elif call == "step":
            await ctx.step("effect", side_effect)
        else:
            await ctx.run(["touch", str(marker)])
        return "late"

    options: dict[str, Any] = {"timeouts": {"agent": SHORT}}
    tools = {"effect": side_effect}
    skills = {"effect": side_effect}
    async with runtime(
        tmp_path, agents={"worker": worker}, tools=tools, skills=skills, **options
    ) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"
    assert _obs(record, "a").code == "agent-timeout"
    assert made == []
    assert not marker.exists()
    (task,) = tasks_of(record)
    assert task.calls_used == 0
    assert task.tool_calls_used == 0


# -- a child that does not end when its timeout fires (B1) --------------------------------


class Stuck:
    """Blocking code in a worker thread that ignores its cancellation altogether (a call
    with no timeout of its own), until the test lets it go."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def block(self) -> str:
        self.release.wait(120)  # a hang guard: the test sets it before it ends
        return "late"


async def _until_the_run_ends(rt: ms.Runtime, execution_id: str) -> object:
    """The event that says the run ended (its final write is durable): the run's children
    may still be running (a wind-down waits for them), so its handle is not awaited."""
    async with contextlib.aclosing(rt.events()) as stream:  # type: ignore[type-var]
        async for event in stream:
            ended = (ms.events.ExecutionCompleted, ms.events.ExecutionFailed)
            if isinstance(event, ended) and event.execution_id == execution_id:
                return event
    raise AssertionError("the events ended first")  # pragma: no cover


@pytest.fixture
def quick_unwind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_children, "UNWIND", SHORT)


@pytest.mark.usefixtures("quick_unwind")
@pytest.mark.parametrize("kind", ["tool", "agent", "planner"])
async def test_B1_a_child_stuck_past_its_timeout_fails_without_waiting_for_it(
    tmp_path: Path, kind: str
) -> None:
    stuck = Stuck()

    async def tool_fn(**_: Any) -> str:
        return await anyio.to_thread.run_sync(stuck.block)

    async def agent_fn(ctx: ms.AgentContext, input: Any) -> str:
        return await anyio.to_thread.run_sync(stuck.block)

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        await anyio.to_thread.run_sync(stuck.block)
        return plan_of(tool("a", "inc", x=1))

    options: dict[str, Any] = {"tools": {"stuck": tool_fn}, "agents": {"worker": agent_fn}}
    if kind == "planner":
        options.update(planner=planner, timeouts={"planner": SHORT})
        plan = None
    elif kind == "agent":
        options.update(timeouts={"agent": SHORT})
        plan = plan_of(agent("a", "worker"))
    else:
        plan = plan_of(attrs.evolve(tool("a", "stuck"), timeout=SHORT))
    async with runtime(tmp_path, **options) as rt:
        try:
            # Bounded well below the hang guard: without the fix, the run ended only when
            # the blocking code returned.
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    before = rt._bus.subscribers
                    tg.start_soon(_until_the_run_ends, rt, "ex-stuck")
                    while rt._bus.subscribers == before:  # subscribed: its end is not missed
                        await anyio.lowlevel.checkpoint()
                    handle = await rt.start("g", plan, execution_id="ex-stuck")
            # The run ended, its step (or planner) failed with its timeout, while the
            # blocking code still blocks.
            assert not stuck.release.is_set()
            record = stored(rt, handle.execution_id)
            assert record.status == "failed"
            if kind != "planner":
                code = "agent-timeout" if kind == "agent" else "step-timeout"
                assert _obs(record, "a").code == code
        finally:
            stuck.release.set()  # before the runtime closes: it awaits the thread
        result = await handle.wait()
    assert result.status == "failed"
    if kind == "planner":
        assert result.error == "the planner timed out after 0.05 s"


# ----------------------------------------------------------------------
# Deadlines and retries (B1) as a user of the public API meets them.
#
# Backoffs are a day where the test acts during one: nothing here depends on how long
# anything takes.


async def test_B1_V3_a_run_cancelled_while_a_step_waits_to_retry_no_longer_says_it_waits(
    tmp_path: Path,
) -> None:
    # The cancel ends the step for good: neither the record nor `show` may still say the
    # step is waiting for its next attempt; its failed attempt stays listed.
    flaky = Flaky(10)
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool": A_DAY}) as rt:
        async with seen(rt, lambda e: isinstance(e, ms.events.StepRetrying)) as retrying:
            handle = await rt.start("g", plan_of(tool("a", "flaky")), execution_id="ex-c")
            with anyio.fail_after(60):  # a hang guard only
                await retrying.wait()
        await rt.cancel(handle.execution_id)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "cancelled"
    observations = [o for o in record.observations if o.step_id == "a"]
    assert observations
    assert all(o.data.get("retrying") is not True for o in observations)
    assert [a["attempt"] for a in observations[-1].data["attempts"]] == [1]
    code, out = run_cli("--store", str(tmp_path / "store.sqlite3"), "show", "ex-c")
    assert code == 0
    assert "step a: attempt 1 of 3 failed" in out
    assert "waiting to try again" not in out
    assert "step a: stopped before its next attempt" in out


async def test_B1_a_deadline_past_the_longest_allowed_says_the_longest(tmp_path: Path) -> None:
    # 30 days is positive and finite: the error must say what is wrong with it.
    async with runtime(tmp_path) as rt:
        with pytest.raises(ValueError, match="at most 1000000"):
            await rt.start("g", plan_of(tool("a", "inc", x=1)), deadline=30 * 86_400)
        assert rt.store.list().executions == ()


def test_B1_a_non_bool_retry_timeouts_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"^retry_timeouts must be True or False, not int$"):
        RetryPolicy(retry_timeouts=1)  # type: ignore[arg-type]


def test_B1_a_policy_without_a_base_delay_never_waits_however_many_attempts_failed() -> None:
    policy = RetryPolicy(base_delay=0.0, max_delay=1.0, multiplier=20.0, jitter=0.0)
    assert policy.delay(238) == 0.0


@pytest.mark.parametrize(
    ("option", "key", "value"),
    [
        ("timeouts", "tool:", 5),
        ("timeouts", "planner:", 5),
        ("retries", "skill:", RetryPolicy()),
    ],
)
async def test_B1_a_limit_key_with_an_empty_name_is_refused_not_silently_unused(
    tmp_path: Path, option: str, key: str, value: object
) -> None:
    # "tool:" was taken, stored under "tool:" and never matched any step: a limit the user
    # set that nothing applied.
    with pytest.raises(ValueError, match="kind:name"):
        async with runtime(tmp_path, **{option: {key: value}}):
            pass  # pragma: no cover


async def test_B1_attempts_made_under_a_default_policy_stay_listed_when_resumed_without_it(
    tmp_path: Path,
) -> None:
    # The policy was the first runtime's default; the runtime that resumes has none. The
    # failed attempt is durable (B1) and the step's last observation must still list it.
    flaky = Flaky(1)
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool": A_DAY}) as rt:
        async with seen(rt, lambda e: isinstance(e, ms.events.StepRetrying)) as retrying:
            handle = await rt.start("g", plan_of(tool("a", "flaky")), execution_id="ex-r")
            with anyio.fail_after(60):  # a hang guard only
                await retrying.wait()
        await rt.pause(handle.execution_id)
    async with runtime(tmp_path, tools={"flaky": flaky}) as rt:
        result = await (await rt.resume("ex-r")).wait()
        record = stored(rt, "ex-r")
    assert result.status == "completed"
    observation = [o for o in record.observations if o.step_id == "a"][-1]
    assert observation.ok
    assert [a["attempt"] for a in observation.data["attempts"]] == [1]
    assert observation.data["attempt"] == 2


async def test_B1_R6_a_step_replanned_onto_another_tool_counts_its_own_attempts(
    tmp_path: Path,
) -> None:
    # Step a waited to retry tool "flaky" when the run was paused; the workspace drifted and
    # the new plan's step a runs tool "other". Its attempts are its own: the one "flaky"
    # made does not use up "other"'s policy.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    flaky, other = Flaky(10), Flaky(10)
    twice = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001)

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if context.previous_plan is None:
            return plan_of(attrs.evolve(tool("a", "flaky"), retry=A_DAY))
        return plan_of(attrs.evolve(tool("a", "other"), retry=twice))

    tools = {"flaky": flaky, "other": other}
    async with runtime(tmp_path, tools=tools, planner=planner, workspace=workspace) as rt:
        async with seen(rt, lambda e: isinstance(e, ms.events.StepRetrying)) as retrying:
            handle = await rt.start("g")
            with anyio.fail_after(60):  # a hang guard only
                await retrying.wait()
        await rt.pause(handle.execution_id)
        (workspace / ".git").mkdir()  # drift (R6): the resume replans
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"
    assert flaky.calls == 1
    assert other.calls == 2
    observation = [o for o in record.observations if o.step_id == "a"][-1]
    assert [a["error"] for a in observation.data["attempts"]] == [
        "ConnectionError: boom 1",
        "ConnectionError: boom 2",
    ]


async def test_B1_an_error_inside_a_task_group_is_retried_by_its_own_name(tmp_path: Path) -> None:
    # A tool that works concurrently raises its ConnectionError wrapped in an exception
    # group (anyio's task groups always do): retry_on=("ConnectionError",) still means it.
    calls = 0

    async def fetch_all(**_: object) -> str:
        nonlocal calls
        calls += 1

        async def fetch() -> None:
            if calls == 1:
                raise ConnectionError("reset")

        async with anyio.create_task_group() as tg:
            tg.start_soon(fetch)
        return "ok"

    policy = RetryPolicy(base_delay=0.001, max_delay=0.001, retry_on=("ConnectionError",))
    plan = plan_of(attrs.evolve(tool("a", "fetch_all"), retry=policy))
    async with runtime(tmp_path, tools={"fetch_all": fetch_all}) as rt:
        result = await (await rt.start("g", plan)).wait()
    assert result.status == "completed"
    assert calls == 2


def test_B1_a_group_is_retried_only_when_every_error_in_it_is_named() -> None:
    from mainspring.executions._rules.deadlines import error_types

    policy = RetryPolicy(retry_on=("ConnectionError",))
    both = ExceptionGroup("g", [ConnectionError("a"), ValueError("b")])
    nested = ExceptionGroup("g", [ExceptionGroup("h", [ConnectionResetError("a")])])
    assert not policy.retries(error_types(both))
    assert policy.retries(error_types(nested))
    assert RetryPolicy(retry_on=("Exception",)).retries(error_types(both))
