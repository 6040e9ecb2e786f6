"""Every lifecycle of the execution layer, as tables of legal moves (h11's ``_state.py`` idea).

Five tables, one per thing that has a state:

- ``EXECUTION_MOVES``: an execution's ``status`` (checked by the commit funnel, the pure
  controls of :mod:`.transitions`, and a resume's prepared record);
- ``STEP_MOVES``: a plan step's ``status`` (the scheduler, the controls);
- ``TASK_MOVES``: an agent task's ``state`` (the run's task book, the controls);
- ``WORKER_MOVES``: an external worker's ``status`` (the fleet's rules);
- ``WORKER_TASK_MOVES``: the ``state`` of the task a worker serves (the fleet's rules).

Each table maps a state to the states it may move to in one step; staying put is always
legal. A move not in the table raises :class:`~mainspring.IllegalTransition` (a bug in
mainspring, never the user's; the one class every lifecycle raises, the actor kernel's own
table included, which stays in the kernel). The finished states are written once, in
``mainspring.storage`` (the records define them), and every table makes them sinks: terminal
is sticky (E2 for executions, R11 for tasks). A step's only way out of a finished state is
``succeeded -> failed``: a result that could not be stored fails its step after all (X2).

The worker tables hold every move the fleet's rules make, so a rule that forgot one of its
guards is caught here; the rules still refuse, first and with a code, what a caller may
legitimately get wrong (``WorkerRefused``: a stale view, a worker not live any more).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...actors import IllegalTransition
from ...storage import (
    ExecutionStatus,
    StepStatus,
    TaskState,
    WorkerStatus,
    WorkerTaskState,
)
from ...storage._seam import EXECUTION_TERMINAL, TASK_TERMINAL

__all__ = [
    "EXECUTION_MOVES",
    "STEP_MOVES",
    "TASK_MOVES",
    "WORKER_MOVES",
    "WORKER_TASK_MOVES",
    "execution_move",
    "step_move",
    "task_move",
    "worker_move",
    "worker_task_move",
]

# -- executions ---------------------------------------------------------------------------

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

# -- plan steps ---------------------------------------------------------------------------

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

# -- agent tasks --------------------------------------------------------------------------

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

# -- external workers ---------------------------------------------------------------------
#
#     assigned -> starting -> running <-> idle -> handing_off -> fenced -> delivered
#     any active -> stopped (process confirmed dead) | blocked (a failed start, no progress)
#     stopped or active -> assigned: a takeover, generation + 1 (process confirmed dead)
#
# (The active statuses, ACTIVE_WORKER, are the records': those in which a worker may still
# write into its task's workspace.)

_W = WorkerStatus
WORKER_MOVES: Mapping[WorkerStatus, frozenset[WorkerStatus]] = {
    # (assigned again: takeover)
    _W.ASSIGNED: frozenset({_W.STARTING, _W.STOPPED, _W.BLOCKED}),
    _W.STARTING: frozenset({_W.RUNNING, _W.IDLE, _W.STOPPED, _W.BLOCKED, _W.ASSIGNED}),
    _W.RUNNING: frozenset({_W.IDLE, _W.HANDING_OFF, _W.STOPPED, _W.BLOCKED, _W.ASSIGNED}),
    _W.IDLE: frozenset({_W.RUNNING, _W.HANDING_OFF, _W.STOPPED, _W.BLOCKED, _W.ASSIGNED}),
    _W.HANDING_OFF: frozenset({_W.FENCED, _W.STOPPED, _W.BLOCKED, _W.ASSIGNED}),
    _W.FENCED: frozenset({_W.DELIVERED}),
    _W.DELIVERED: frozenset(),
    _W.STOPPED: frozenset({_W.ASSIGNED}),  # taken over once its process is confirmed dead
    _W.BLOCKED: frozenset(),
}

#: The task a worker serves: ready for a worker; running while one's process runs;
#: awaiting_delivery once the handing-off worker is fenced; delivered. Back to ready when its
#: process ended unexpectedly, failed to start, was stopped (pause, deadline, lease loss) or
#: taken over; blocked when it made no progress or was stopped for good.
_T = WorkerTaskState
WORKER_TASK_MOVES: Mapping[WorkerTaskState, frozenset[WorkerTaskState]] = {
    _T.READY: frozenset({_T.RUNNING, _T.BLOCKED}),
    _T.RUNNING: frozenset({_T.READY, _T.AWAITING_DELIVERY, _T.BLOCKED}),
    _T.AWAITING_DELIVERY: frozenset({_T.DELIVERED}),
    _T.DELIVERED: frozenset(),
    _T.BLOCKED: frozenset(),
}
del _W, _T


# -- the checks ---------------------------------------------------------------------------


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


def worker_move(name: str, old: WorkerStatus, new: WorkerStatus) -> WorkerStatus:
    """``new``, if a worker may move there from ``old``."""
    _check(WORKER_MOVES, "worker", name, old, new)
    return new


def worker_task_move(name: str, old: WorkerTaskState, new: WorkerTaskState) -> WorkerTaskState:
    """``new``, if a worker's task may move there from ``old``."""
    _check(WORKER_TASK_MOVES, "worker task", name, old, new)
    return new
