"""The lifecycles of executions, steps and agent tasks, as tables of legal moves.

Each table maps a state to the states it may move to in one step; a move not in the table
raises :class:`IllegalTransition` (a bug in mainspring, never the user's). The finished
states are written once, in ``mainspring.storage`` (the records define them), and every table
makes them sinks: terminal is sticky (E2 for executions, R11 for tasks). A step's only way
out of a finished state is ``succeeded -> failed``: a result that could not be stored fails
its step after all (X2). The tables are checked where the execution layer changes a state —
the scheduler for steps, the commit funnel for executions, the task setter for tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...actors import MainspringError
from ...storage import EXECUTION_TERMINAL, TASK_TERMINAL, ExecutionStatus, StepStatus, TaskState

__all__ = [
    "EXECUTION_MOVES",
    "STEP_MOVES",
    "TASK_MOVES",
    "IllegalTransition",
    "execution_move",
    "step_move",
    "task_move",
]

_WAITING: frozenset[ExecutionStatus] = frozenset(
    {
        ExecutionStatus.WAITING_FOR_INPUT,
        ExecutionStatus.WAITING_FOR_CLARIFICATION,
        ExecutionStatus.WAITING_FOR_APPROVAL,
        ExecutionStatus.WAITING_FOR_BUDGET,
    }
)
_STOPPED: frozenset[ExecutionStatus] = frozenset(
    {ExecutionStatus.PAUSED, ExecutionStatus.CANCELLED, ExecutionStatus.FAILED}
)

EXECUTION_MOVES: Mapping[ExecutionStatus, frozenset[ExecutionStatus]] = {
    # A new execution plans first; the planner may fail, ask, or want approval.
    ExecutionStatus.PLANNED: frozenset({ExecutionStatus.RUNNING, *_WAITING, *_STOPPED}),
    ExecutionStatus.RUNNING: frozenset({ExecutionStatus.COMPLETED, *_WAITING, *_STOPPED}),
    # Resumed (with an answer, an approval, more budget), or stopped from outside.
    **{waiting: frozenset({ExecutionStatus.RUNNING, *_STOPPED}) for waiting in _WAITING},
    ExecutionStatus.PAUSED: frozenset({ExecutionStatus.RUNNING, ExecutionStatus.CANCELLED}),
    **{end: frozenset() for end in EXECUTION_TERMINAL},
}

STEP_MOVES: Mapping[StepStatus, frozenset[StepStatus]] = {
    # succeeded at once: a finished agent task is reused (R8); skipped / cancelled: cascades
    # and aborts (P2, P6); stopped: its queued or waiting agent task was stopped (S2).
    StepStatus.PENDING: frozenset(
        {
            StepStatus.RUNNING,
            StepStatus.SUCCEEDED,
            StepStatus.SKIPPED,
            StepStatus.CANCELLED,
            StepStatus.STOPPED,
        }
    ),
    # pending again: interrupted by a pause, a crash or a stop before it could finish.
    StepStatus.RUNNING: frozenset(
        {
            StepStatus.SUCCEEDED,
            StepStatus.FAILED,
            StepStatus.CANCELLED,
            StepStatus.STOPPED,
            StepStatus.PENDING,
        }
    ),
    StepStatus.SUCCEEDED: frozenset({StepStatus.FAILED}),  # its result could not be stored (X2)
    StepStatus.FAILED: frozenset(),
    StepStatus.SKIPPED: frozenset(),
    StepStatus.CANCELLED: frozenset(),
    StepStatus.STOPPED: frozenset(),
}

TASK_MOVES: Mapping[TaskState, frozenset[TaskState]] = {
    TaskState.CREATED: frozenset(
        {TaskState.RUNNING, TaskState.QUEUED, TaskState.CANCELLED, TaskState.FAILED}
    ),
    TaskState.QUEUED: frozenset({TaskState.RUNNING, TaskState.CANCELLED, TaskState.FAILED}),
    TaskState.RUNNING: frozenset(
        {
            TaskState.COMPLETED,
            TaskState.FAILED,
            TaskState.CANCELLED,
            TaskState.QUEUED,  # requeued after a pause or a crash (R1, R3)
            TaskState.PAUSED,
            TaskState.WAITING_FOR_INPUT,
            TaskState.WAITING_FOR_CLARIFICATION,
        }
    ),
    # Answered (queued to run again), or stopped.
    TaskState.WAITING_FOR_INPUT: frozenset(
        {TaskState.QUEUED, TaskState.RUNNING, TaskState.CANCELLED, TaskState.FAILED}
    ),
    TaskState.WAITING_FOR_CLARIFICATION: frozenset(
        {TaskState.QUEUED, TaskState.RUNNING, TaskState.CANCELLED, TaskState.FAILED}
    ),
    TaskState.PAUSED: frozenset(
        {TaskState.QUEUED, TaskState.RUNNING, TaskState.CANCELLED, TaskState.FAILED}
    ),
    **{end: frozenset() for end in TASK_TERMINAL},
}


class IllegalTransition(MainspringError, RuntimeError):
    """A state was about to move where its lifecycle does not allow: a bug in mainspring.

    ``kind`` is ``"execution"``, ``"step"`` or ``"agent task"``; ``name`` says which one.
    """

    def __init__(self, kind: str, name: str, old: str, new: str) -> None:
        super().__init__(f"illegal {kind} move for {name}: {old} -> {new}")
        self.kind = kind
        self.name = name
        self.old = old
        self.new = new


def _check(table: Mapping[Any, frozenset[Any]], kind: str, name: str, old: str, new: str) -> None:
    if old != new and new not in table[old]:
        raise IllegalTransition(kind, name, old, new)


def execution_move(name: str, old: ExecutionStatus, new: ExecutionStatus) -> ExecutionStatus:
    """``new``, if an execution may move there from ``old`` (staying put always may)."""
    _check(EXECUTION_MOVES, "execution", name, old, new)
    return new


def step_move(name: str, old: StepStatus, new: StepStatus) -> StepStatus:
    """``new``, if a step may move there from ``old``."""
    _check(STEP_MOVES, "step", name, old, new)
    return new


def task_move(name: str, old: TaskState, new: TaskState) -> TaskState:
    """``new``, if an agent task may move there from ``old``."""
    _check(TASK_MOVES, "agent task", name, old, new)
    return new
