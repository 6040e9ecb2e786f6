"""The scheduler without an event loop: tables of plans and events in, decisions out
(P2 dependencies and cascades, P3 capacity and limits, P4 budget, P5 questions)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring import IllegalTransition
from mainspring.executions._rules.scheduler import Schedule, approval_key, cost, pick
from mainspring.executions._run.results import shortfall
from tests._examples import examples


def _plan(*steps: tuple[str, str, Sequence[str]], approval: bool = False) -> ms.Plan:
    """Steps as (id, "tool:name" | "skill:name" | "agent:name", depends_on)."""
    built = []
    for step_id, target, deps in steps:
        kind, name = target.split(":")
        built.append(ms.PlanStep(id=step_id, depends_on=tuple(deps), **{kind: name}))
    return ms.Plan(id="p", goal="g", steps=tuple(built), requires_approval=approval)


def _fresh(plan: ms.Plan) -> Schedule:
    return Schedule(plan, {s.id: "pending" for s in plan.steps})


def _pick(schedule: Schedule, plan: ms.Plan, **overrides: object) -> list[str]:
    options: dict[str, object] = {
        "plan": plan,
        "running_targets": (),
        "max_parallel": 10,
        "limits": {},
        "remaining": 100,
        "reservation": lambda remaining: 5,
        "approvals": (),
        "question_open": False,
        **overrides,
    }
    picked = pick(schedule, **options)  # type: ignore[arg-type]
    return [step.id for step, _ in picked.starts]


DIAMOND = _plan(
    ("a", "tool:t", ()), ("b", "tool:t", ("a",)), ("c", "tool:u", ("a",)), ("d", "tool:t", "bc")
)


def test_P2_a_step_is_ready_only_when_every_dependency_succeeded() -> None:
    schedule = _fresh(DIAMOND)
    assert schedule.ready == {"a"}
    schedule.set("a", "running")
    assert schedule.ready == set()
    schedule.set("a", "succeeded")
    assert schedule.ready == {"b", "c"}
    schedule.set("b", "running")
    schedule.set("b", "succeeded")
    assert schedule.ready == {"c"}  # d still waits for c
    schedule.set("c", "running")
    schedule.set("c", "succeeded")
    assert schedule.ready == {"d"}
    assert [s.id for s in schedule.ready_in_plan_order()] == ["d"]


def test_P2_failure_skips_dependents_and_cancellation_cancels_them() -> None:
    schedule = _fresh(DIAMOND)
    schedule.set("a", "running")
    schedule.set("a", "failed")
    changes = schedule.cascade()
    assert {(c.step_id, c.status) for c in changes} == {
        ("b", "skipped"),
        ("c", "skipped"),
        ("d", "skipped"),
    }
    assert schedule.all_finished
    assert schedule.cascade() == []  # nothing twice

    schedule = _fresh(DIAMOND)
    schedule.set("a", "running")
    schedule.set("a", "succeeded")
    schedule.set("b", "running")
    schedule.set("b", "cancelled")
    (change,) = schedule.cascade()
    assert (change.step_id, change.status) == ("d", "cancelled")  # never a silent skip
    assert change.why == "cancelled: dependency b cancelled"
    assert schedule.status["c"] == "pending"


def test_S2_a_stopped_step_lets_its_dependents_run_and_never_cascades() -> None:
    schedule = _fresh(DIAMOND)
    schedule.set("a", "running")
    schedule.set("a", "stopped")  # its agent task was stopped: done without a result
    assert schedule.ready == {"b", "c"}
    assert schedule.cascade() == []
    schedule.set("b", "stopped")  # stopped while queued: straight from pending
    schedule.set("c", "running")
    schedule.set("c", "succeeded")
    assert schedule.ready == {"d"}
    loaded = Schedule(DIAMOND, {"a": "stopped", "b": "stopped", "c": "pending", "d": "pending"})
    assert loaded.ready == {"c"}
    assert loaded.cascade() == []


def test_S2_a_run_completes_only_if_something_was_produced_and_nothing_cancelled() -> None:
    steps = DIAMOND.steps
    done = dict.fromkeys("abcd", "succeeded")
    assert shortfall(steps, done) is None
    assert shortfall(steps, {**done, "b": "stopped"}) is None  # the rest was produced
    assert shortfall((), {}) is None  # an empty plan asked for nothing
    nothing = shortfall(steps, {"a": "stopped", "b": "stopped", "c": "stopped", "d": "stopped"})
    assert nothing == (
        "nothing was produced: every step was stopped or skipped; stopped: a, b, c, d"
    )
    cascaded = shortfall(steps, {**done, "b": "cancelled", "c": "stopped", "d": "cancelled"})
    assert cascaded == "not completed: steps were cancelled: b, d; stopped: c"


def test_a_result_that_cannot_be_stored_fails_a_succeeded_step_and_its_dependents_wait() -> None:
    schedule = _fresh(DIAMOND)
    schedule.set("a", "running")
    schedule.set("a", "succeeded")
    assert schedule.ready == {"b", "c"}
    schedule.set("a", "failed")  # X2: succeeded -> failed
    assert schedule.ready == set()
    assert {c.step_id for c in schedule.cascade()} == {"b", "c", "d"}


def test_E6_completed_steps_are_kept_in_the_order_they_completed() -> None:
    schedule = _fresh(DIAMOND)
    schedule.set("a", "running")
    schedule.set("a", "succeeded")
    schedule.set("c", "running")
    schedule.set("b", "running")
    schedule.set("c", "succeeded")  # c before b, although b comes first in the plan
    first = schedule.completed_steps()
    assert first == ("a", "c")
    assert schedule.completed_steps() is first  # unchanged: the very same tuple
    schedule.set("b", "succeeded")
    assert schedule.completed_steps() == ("a", "c", "b")
    schedule.set("c", "failed")  # X2: its result could not be stored: no longer completed
    assert schedule.completed_steps() == ("a", "b")
    assert schedule.finished == 3
    assert not schedule.all_finished


def test_a_loaded_schedule_keeps_the_stored_completion_order() -> None:
    status: dict[str, ms.storage.StepStatus] = {
        "a": "succeeded",
        "b": "succeeded",
        "c": "succeeded",
        "d": "pending",
    }
    # As stored; a stale id (no longer succeeded) is left out, a succeeded step the stored
    # order lacks follows in plan order.
    loaded = Schedule(DIAMOND, status, completed=("c", "d", "a"))
    assert loaded.completed_steps() == ("c", "a", "b")
    assert loaded.finished == 3
    assert loaded.ready == {"d"}


def test_many_ready_steps_come_in_plan_order_and_lazily() -> None:
    plan = _plan(*((f"s{i}", "tool:t", ()) for i in range(2_000)))
    schedule = _fresh(plan)
    for i in range(0, 2_000, 3):
        schedule.set(f"s{i}", "running")
    order = schedule.ready_in_plan_order()
    assert [next(order).id for _ in range(3)] == ["s1", "s2", "s4"]
    assert len(list(schedule.ready_in_plan_order())) == 2_000 - 667
    assert schedule.tools == frozenset({"t"})


def test_an_illegal_step_move_is_refused() -> None:
    schedule = _fresh(DIAMOND)
    schedule.set("a", "running")
    schedule.set("a", "failed")
    with pytest.raises(IllegalTransition):
        schedule.set("a", "succeeded")


def test_a_loaded_schedule_resumes_where_the_record_stands() -> None:
    schedule = Schedule(DIAMOND, {"a": "succeeded", "b": "failed", "c": "pending", "d": "pending"})
    assert schedule.ready == {"c"}
    assert {(c.step_id, c.status) for c in schedule.cascade()} == {("d", "skipped")}
    assert schedule.dirty == {"a", "b", "c", "d"}  # a load may differ from the stored plan


def test_P3_capacity_and_per_key_limits() -> None:
    plan = _plan(*((f"s{i}", "tool:slow" if i % 2 else "tool:fast", ()) for i in range(8)))
    schedule = _fresh(plan)
    assert _pick(schedule, plan, max_parallel=3) == ["s0", "s1", "s2"]
    assert _pick(schedule, plan, max_parallel=3, running_targets=["fast"]) == ["s0", "s1"]
    assert _pick(schedule, plan, limits={"slow": 1}) == ["s0", "s1", "s2", "s4", "s6"]
    assert _pick(schedule, plan, limits={"slow": 1}, running_targets=["slow"]) == [
        "s0", "s2", "s4", "s6",
    ]  # fmt: skip


def test_P4_an_agent_given_all_that_remained_is_marked_to_wait_for_budget() -> None:
    plan = _plan(("a1", "agent:a", ()), ("a2", "agent:a", ()), ("a3", "agent:a", ()))
    picked = pick(
        _fresh(plan), plan=plan, running_targets=(), max_parallel=9, limits={}, remaining=5,
        reservation=lambda r: min(r, 3), approvals=(), question_open=False,
    )  # fmt: skip
    assert [(s.id, price) for s, price in picked.starts] == [("a1", 3), ("a2", 2)]
    assert picked.takes_all == {"a2"}  # a1's own reservation limits it, not the budget
    assert picked.short_of_budget  # a3 does not fit


def test_P4_costs_and_budget() -> None:
    tool, skill, agent = (ms.PlanStep(id="x", **{k: "n"}) for k in ("tool", "skill", "agent"))
    assert cost(tool, 0, lambda r: 5) == 0
    assert cost(skill, 1, lambda r: 5) == 1
    assert cost(skill, 0, lambda r: 5) is None
    assert cost(agent, 3, lambda r: 5) == 3  # at most what remains
    assert cost(agent, 10, lambda r: 0) == 1  # at least one call
    assert cost(agent, 0, lambda r: 5) is None
    plan = _plan(("m1", "skill:m", ()), ("m2", "skill:m", ()), ("t", "tool:t", ()))
    schedule = _fresh(plan)
    picked = pick(
        schedule, plan=plan, running_targets=(), max_parallel=9, limits={}, remaining=1,
        reservation=lambda r: 1, approvals=(), question_open=False,
    )  # fmt: skip
    assert [s.id for s, _ in picked.starts] == ["m1", "t"]
    assert picked.short_of_budget  # m2 waits for budget, with work kept


def test_P5_an_open_question_starts_nothing_new_but_lets_answered_and_interrupted_work_go_on() -> (
    None
):
    plan = _plan(("a1", "agent:a", ()), ("a2", "agent:a", ()), ("t", "tool:t", ()))
    schedule = _fresh(plan)
    assert _pick(schedule, plan, question_open=True) == []
    assert _pick(schedule, plan, question_open=True, answered={"a1"}, in_flight={"t"}) == [
        "a1", "t",
    ]  # fmt: skip
    assert _pick(schedule, plan, asking={"a1"}) == ["a2", "t"]  # the asker's step waits


def test_approvals_gate_the_plan_and_single_steps() -> None:
    plan = _plan(("a", "tool:t", ()), approval=True)
    picked = pick(
        _fresh(plan), plan=plan, running_targets=(), max_parallel=9, limits={}, remaining=9,
        reservation=lambda r: 1, approvals=(), question_open=False,
    )  # fmt: skip
    assert picked.needs_approval
    assert picked.approval is None  # the plan itself
    assert _pick(_fresh(plan), plan, approvals={approval_key(plan.version, None)}) == ["a"]
    gated = ms.Plan(
        id="p", goal="g", steps=(ms.PlanStep(id="a", tool="t", requires_approval=True),)
    )
    picked = pick(
        _fresh(gated), plan=gated, running_targets=(), max_parallel=9, limits={}, remaining=9,
        reservation=lambda r: 1, approvals=(), question_open=False,
    )  # fmt: skip
    assert picked.needs_approval
    assert picked.approval is not None
    assert picked.approval.id == "a"
    step = gated.steps[0]
    assert _pick(_fresh(gated), gated, approvals={approval_key(gated.version, step)}) == ["a"]


@st.composite
def _dags(draw: st.DrawFn) -> ms.Plan:
    n = draw(st.integers(min_value=1, max_value=12))
    steps = []
    for i in range(n):
        deps = draw(st.sets(st.integers(min_value=0, max_value=i - 1), max_size=3)) if i else set()
        steps.append((f"s{i}", "tool:t", tuple(f"s{d}" for d in sorted(deps))))
    return _plan(*steps)


@settings(max_examples=examples(200), deadline=None)
@given(plan=_dags(), data=st.data())
def test_any_dag_runs_to_the_end_and_never_starts_a_step_early(
    plan: ms.Plan, data: st.DataObject
) -> None:
    schedule = _fresh(plan)
    deps = {s.id: set(s.depends_on) for s in plan.steps}
    running: list[str] = []
    succeeded: list[str] = []  # in the order they succeeded
    while True:
        schedule.cascade()
        # What the schedule keeps as it goes equals a recount of the whole plan.
        assert schedule.finished == schedule.count(
            *(s for s in ms.storage.StepStatus if s.finished)
        )
        assert schedule.completed_steps() == tuple(succeeded)
        ready = sorted(schedule.ready, key=schedule.order.__getitem__)
        assert [s.id for s in schedule.ready_in_plan_order()] == ready
        capacity = data.draw(st.integers(min_value=1, max_value=4))
        starts = _pick(schedule, plan, max_parallel=capacity, running_targets=["t"] * len(running))
        assert len(running) + len(starts) <= max(capacity, len(running))  # P3
        for step_id in starts:
            assert all(schedule.status[d] == "succeeded" for d in deps[step_id])  # P2
            schedule.set(step_id, "running")
            running.append(step_id)
        if not running:
            break
        done = running.pop(data.draw(st.integers(min_value=0, max_value=len(running) - 1)))
        outcome = data.draw(st.sampled_from(["succeeded", "succeeded", "failed", "cancelled"]))
        schedule.set(done, outcome)
        if outcome == "succeeded":
            succeeded.append(done)
    assert schedule.all_finished
    assert schedule.completed_steps() == tuple(succeeded)
    for step in plan.steps:  # P2: a step whose dependency did not succeed never succeeded
        if schedule.status[step.id] == "succeeded":
            assert all(schedule.status[d] == "succeeded" for d in step.depends_on)
        if schedule.status[step.id] == "skipped":
            assert any(schedule.status[d] in ("failed", "skipped") for d in step.depends_on)
