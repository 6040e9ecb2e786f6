"""Every lifecycle of the execution layer as a table, tested without an event loop (h11-style):
every state has a row, every legal move is accepted, every other move raises the one
IllegalTransition, finished states are sinks."""

from __future__ import annotations

import importlib
import itertools
import pkgutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions._rules.lifecycle import (
    EXECUTION_MOVES,
    STEP_MOVES,
    TASK_MOVES,
    WORKER_MOVES,
    WORKER_TASK_MOVES,
    execution_move,
    step_move,
    task_move,
    worker_move,
    worker_task_move,
)
from mainspring.storage import (
    ExecutionStatus,
    StepStatus,
    TaskState,
    WorkerStatus,
    WorkerTaskState,
)
from mainspring.storage._seam import (
    ACTIVE_WORKER,
    EXECUTION_TERMINAL,
    STEP_FINISHED,
    TASK_TERMINAL,
)
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

Move = Callable[[str, Any, Any], Any]

#: (table, the states' enum, the finished states, the check, the kind it names)
LIFECYCLES: dict[str, tuple[Mapping[Any, frozenset[Any]], object, frozenset[str], Move, str]] = {
    "execution": (
        EXECUTION_MOVES,
        ExecutionStatus,
        EXECUTION_TERMINAL,
        execution_move,
        "execution",
    ),
    "step": (STEP_MOVES, StepStatus, STEP_FINISHED, step_move, "step"),
    "task": (TASK_MOVES, TaskState, TASK_TERMINAL, task_move, "agent task"),
    "worker": (
        WORKER_MOVES,
        WorkerStatus,
        frozenset({"delivered", "blocked"}),
        worker_move,
        "worker",
    ),
    "worker-task": (
        WORKER_TASK_MOVES,
        WorkerTaskState,
        frozenset({"delivered", "blocked"}),
        worker_task_move,
        "worker task",
    ),
}


def _all_moves() -> list[tuple[str, str, str]]:
    return [
        (lifecycle, old, new)
        for lifecycle, (_, literal, *_rest) in LIFECYCLES.items()
        for old, new in itertools.product(list(literal), repeat=2)  # type: ignore[call-overload]
    ]


@pytest.mark.parametrize("lifecycle", list(LIFECYCLES))
def test_every_state_has_a_row_and_every_move_names_a_state(lifecycle: str) -> None:
    table, literal, finished, _, _ = LIFECYCLES[lifecycle]
    states = set(literal)  # type: ignore[call-overload]
    assert set(table) == states
    for moves in table.values():
        assert moves <= states
    assert finished <= states


@pytest.mark.parametrize("lifecycle", list(LIFECYCLES))
def test_finished_states_are_sinks_and_every_other_state_can_finish(lifecycle: str) -> None:
    table, _, finished, _, _ = LIFECYCLES[lifecycle]
    for state, moves in table.items():
        if state in finished:
            # E2 / R11: terminal is sticky. A step's one way back: succeeded -> failed (X2).
            assert moves == (frozenset({"failed"}) if state == "succeeded" else frozenset())
            continue
        reachable, frontier = {state}, [state]
        while frontier:
            for nxt in table[frontier.pop()]:
                if nxt not in reachable:
                    reachable.add(nxt)
                    frontier.append(nxt)
        assert reachable & finished, f"{state} can never finish"


@pytest.mark.parametrize(("lifecycle", "old", "new"), _all_moves())
def test_every_legal_move_passes_and_every_other_raises_the_one_illegal_transition(
    lifecycle: str, old: str, new: str
) -> None:
    table, _, _, move, kind = LIFECYCLES[lifecycle]
    if old == new or new in table[old]:  # staying put is always legal
        assert move("thing-1", old, new) == new
        return
    with pytest.raises(ms.IllegalTransition) as caught:
        move("thing-1", old, new)
    error = caught.value
    assert isinstance(error, ms.MainspringError)
    assert (error.kind, error.name, error.old, error.new) == (kind, "thing-1", old, new)
    assert f"{old} -> {new}" in str(error)


def test_the_terminal_sets_are_the_records_own() -> None:
    assert {"completed", "failed", "cancelled"} == EXECUTION_TERMINAL
    assert {"completed", "failed", "cancelled"} == TASK_TERMINAL
    assert {"succeeded", "failed", "skipped", "cancelled", "stopped"} == STEP_FINISHED
    # What users read: a property of each state (the sets are internal).
    assert {status for status in ExecutionStatus if status.terminal} == EXECUTION_TERMINAL
    assert {state for state in TaskState if state.terminal} == TASK_TERMINAL
    assert {status for status in StepStatus if status.finished} == STEP_FINISHED


def test_a_takeover_leaves_from_a_stopped_or_an_active_worker_only() -> None:
    takeovers = {status for status, moves in WORKER_MOVES.items() if "assigned" in moves}
    assert takeovers == ({"stopped", *ACTIVE_WORKER} - {"assigned"})
    assert WORKER_MOVES["fenced"] == {"delivered"}  # a fenced worker only delivers


def test_a_worker_task_is_delivered_only_through_awaiting_delivery() -> None:
    into = {state for state, moves in WORKER_TASK_MOVES.items() if "delivered" in moves}
    assert into == {"awaiting_delivery"}
    into = {state for state, moves in WORKER_TASK_MOVES.items() if "awaiting_delivery" in moves}
    assert into == {"running"}


@pytest.mark.parametrize(
    ("move", "old", "new"),
    [
        (execution_move, "completed", "running"),  # E2: terminal is sticky
        (execution_move, "cancelled", "paused"),
        (execution_move, "paused", "completed"),  # a paused run finishes only after resuming
        (step_move, "skipped", "succeeded"),
        (step_move, "pending", "failed"),  # a step fails only once it ran
        (step_move, "stopped", "pending"),  # S2: a stopped step is done
        (step_move, "stopped", "succeeded"),
        (task_move, "completed", "queued"),  # R11
        (task_move, "cancelled", "running"),
        (worker_move, "blocked", "assigned"),  # a blocked worker is never taken over
        (worker_move, "assigned", "running"),  # a start is recorded before its process
        (worker_task_move, "ready", "delivered"),  # only a fenced worker's delivery counts
        (worker_task_move, "blocked", "ready"),
    ],
)
def test_the_moves_the_invariants_forbid_raise(move: Move, old: str, new: str) -> None:
    with pytest.raises(ms.IllegalTransition):
        move("thing-1", old, new)


def test_exactly_one_class_named_illegal_transition_exists_in_mainspring() -> None:
    found: set[type] = set()
    for info in pkgutil.walk_packages(ms.__path__, "mainspring."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__name__ == "IllegalTransition":
                found.add(value)
    assert found == {ms.IllegalTransition}
    assert issubclass(ms.IllegalTransition, ms.MainspringError)
    assert ms.IllegalTransition.__module__ == "mainspring"  # its public home, in tracebacks
    assert not hasattr(ms.executions, "IllegalTransition")


# ----------------------------------------------------------------------
# Legal user-visible flows must not raise IllegalTransition.


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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
            while not any(isinstance(e, ms.events.AgentTaskWaiting) for e in events):
                await anyio.lowlevel.checkpoint()
            gate.opened.set()
            r = await h.wait()
            assert r.status == "waiting_for_clarification"
            # P5: while the question is open, "after" did not start
            assert statuses(stored(rt, r.execution_id))["after"] == "pending"
            r = await (await rt.resume(r.execution_id, answer="x")).wait()
    assert r.status == "completed", r


@pytest.mark.anyio
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
