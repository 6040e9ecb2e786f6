"""The lifecycles as tables, tested without an event loop (h11-style): every state has a row,
finished states are sinks, and an illegal move raises."""

from __future__ import annotations

import pytest

import mainspring as ms
from mainspring.executions._rules.status import (
    EXECUTION_MOVES,
    STEP_MOVES,
    TASK_MOVES,
    IllegalTransition,
    execution_move,
    step_move,
    task_move,
)
from mainspring.storage import (
    EXECUTION_TERMINAL,
    STEP_FINISHED,
    TASK_TERMINAL,
    ExecutionStatus,
    StepStatus,
    TaskState,
)

TABLES = [
    (EXECUTION_MOVES, ExecutionStatus, EXECUTION_TERMINAL),
    (STEP_MOVES, StepStatus, STEP_FINISHED),
    (TASK_MOVES, TaskState, TASK_TERMINAL),
]


@pytest.mark.parametrize(("table", "literal", "finished"), TABLES, ids=["exec", "step", "task"])
def test_every_state_has_a_row_and_every_move_names_a_state(
    table: dict[str, frozenset[str]], literal: object, finished: frozenset[str]
) -> None:
    states = set(literal)  # type: ignore[call-overload]
    assert set(table) == states
    for moves in table.values():
        assert moves <= states
    assert finished <= states


@pytest.mark.parametrize(("table", "literal", "finished"), TABLES, ids=["exec", "step", "task"])
def test_finished_states_are_sinks_and_every_other_state_can_finish(
    table: dict[str, frozenset[str]], literal: object, finished: frozenset[str]
) -> None:
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


def test_the_terminal_sets_are_the_records_own() -> None:
    assert {"completed", "failed", "cancelled"} == EXECUTION_TERMINAL
    assert {"completed", "failed", "cancelled"} == TASK_TERMINAL
    assert {"succeeded", "failed", "skipped", "cancelled", "stopped"} == STEP_FINISHED


def test_legal_moves_pass_and_staying_put_is_always_legal() -> None:
    assert execution_move("ex-1", "running", "paused") == "paused"
    assert execution_move("ex-1", "completed", "completed") == "completed"
    assert step_move("s1", "running", "pending") == "pending"
    assert task_move("t1", "waiting_for_clarification", "queued") == "queued"


@pytest.mark.parametrize(
    ("check", "old", "new"),
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
    ],
)
def test_an_illegal_move_raises_a_typed_error(check: object, old: str, new: str) -> None:
    with pytest.raises(IllegalTransition) as caught:
        check("thing-1", old, new)  # type: ignore[operator]
    assert isinstance(caught.value, ms.MainspringError)
    assert (caught.value.old, caught.value.new, caught.value.name) == (old, new, "thing-1")
    assert f"{old} -> {new}" in str(caught.value)
