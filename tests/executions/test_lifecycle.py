"""Every lifecycle of the execution layer as a table, tested without an event loop (h11-style):
every state has a row, every legal move is accepted, every other move raises the one
IllegalTransition, finished states are sinks."""

from __future__ import annotations

import importlib
import itertools
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

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
    EXECUTION_TERMINAL,
    STEP_FINISHED,
    TASK_TERMINAL,
    ExecutionStatus,
    StepStatus,
    TaskState,
    WorkerStatus,
    WorkerTaskState,
)
from mainspring.storage._seam import ACTIVE_WORKER

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


def test_the_actor_kernel_raises_the_same_class() -> None:
    from mainspring.actors._lifecycle import ActorState, check_transition

    with pytest.raises(ms.IllegalTransition) as caught:
        check_transition(ActorState.STOPPED, ActorState.RUNNING, "/a/b")
    assert (caught.value.kind, caught.value.name) == ("actor", "/a/b")
    assert (caught.value.old, caught.value.new) == ("stopped", "running")


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
