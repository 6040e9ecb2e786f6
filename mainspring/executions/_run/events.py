"""What a runtime reports while executions run (V1): ids, states and counts, never text an
agent, a tool or a user wrote. Every event carries the execution id it belongs to.

:data:`RunEvent` is the union of the event classes (what ``Runtime.events()`` yields, with
the kernel's :class:`EventsDropped` when a subscriber fell behind); :class:`RunEventBus`
fans them out to subscribers without ever blocking a run.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal, TypeAlias

import attrs

from ...actors._seam import EventBus

if TYPE_CHECKING:
    from ...storage import WorkerRecord

__all__ = [
    "AgentTaskCompleted",
    "AgentTaskProgress",
    "AgentTaskStarted",
    "AgentTaskStopped",
    "AgentTaskWaiting",
    "ExecutionCancelled",
    "ExecutionCompleted",
    "ExecutionEvent",
    "ExecutionFailed",
    "ExecutionPaused",
    "ExecutionResumed",
    "ExecutionStarted",
    "ExecutionWaiting",
    "RunEvent",
    "RunEventBus",
    "StepFinished",
    "StepRetrying",
    "StepStarted",
    "WorkerChanged",
    "worker_changed",
]


@attrs.frozen(kw_only=True)
class ExecutionEvent:
    """Base of every runtime event."""

    execution_id: str
    at: float


@attrs.frozen(kw_only=True)
class ExecutionStarted(ExecutionEvent):
    """A run began (or resumed) in this process: its plan version and step count."""

    plan_version: int
    steps: int


@attrs.frozen(kw_only=True)
class ExecutionResumed(ExecutionEvent):
    """A resume picked the run up; ``completed`` steps are kept and will not run again."""

    completed: int
    drifted: bool


@attrs.frozen(kw_only=True)
class StepStarted(ExecutionEvent):
    """A step began: ``kind`` is tool, skill or agent."""

    step_id: str
    kind: str


@attrs.frozen(kw_only=True)
class StepFinished(ExecutionEvent):
    """A step ended: ``state`` is succeeded, failed, skipped, cancelled or stopped (its
    agent task was stopped by a user: done without a result, S2)."""

    step_id: str
    state: str
    done: int
    total: int
    calls_used: int


@attrs.frozen(kw_only=True)
class StepRetrying(ExecutionEvent):
    """Attempt ``attempt`` of ``step_id`` failed (``timed_out``: it ran past its timeout);
    attempt ``attempt + 1`` of at most ``max_attempts`` starts after ``delay`` seconds. The
    failed attempt is durable when this is published (B1)."""

    step_id: str
    attempt: int
    max_attempts: int
    delay: float
    timed_out: bool = False


@attrs.frozen(kw_only=True)
class AgentTaskStarted(ExecutionEvent):
    """An agent step's task began (or began again on a resume), holding ``calls_reserved``."""

    task_id: str
    step_id: str
    calls_reserved: int


@attrs.frozen(kw_only=True)
class AgentTaskProgress(ExecutionEvent):
    """An agent's inner step became durable."""

    task_id: str
    inner_done: int
    calls_used: int


@attrs.frozen(kw_only=True)
class AgentTaskWaiting(ExecutionEvent):
    """An agent asked a question; the answer comes with a resume (P5)."""

    task_id: str


@attrs.frozen(kw_only=True)
class AgentTaskCompleted(ExecutionEvent):
    """An agent task ended: ``state`` is completed, failed or cancelled."""

    task_id: str
    state: str
    calls_used: int


@attrs.frozen(kw_only=True)
class AgentTaskStopped(ExecutionEvent):
    """An out-of-band stop of one agent task; ``operation_id`` names that request."""

    task_id: str
    operation_id: str
    state: str


@attrs.frozen(kw_only=True)
class ExecutionWaiting(ExecutionEvent):
    """The run stopped to wait: ``status`` says for what (clarification, approval, budget)."""

    status: str
    task_id: str | None = None


@attrs.frozen(kw_only=True)
class ExecutionPaused(ExecutionEvent):
    """The run paused (R1); ``requeued`` agent tasks went back to queued. ``cause`` is
    ``timeout`` when the run's deadline passed (B1), ``pause`` otherwise."""

    requeued: int
    cause: Literal["pause", "timeout"] = "pause"


@attrs.frozen(kw_only=True)
class ExecutionCancelled(ExecutionEvent):
    """The run was cancelled for good (R2); ``cancelled_tasks`` were stamped."""

    cancelled_tasks: int


@attrs.frozen(kw_only=True)
class ExecutionCompleted(ExecutionEvent):
    """Every step of the run succeeded."""

    steps: int
    calls_used: int


@attrs.frozen(kw_only=True)
class ExecutionFailed(ExecutionEvent):
    """The run failed (``failed`` steps) or stopped without finishing (``status`` is what is
    on disk, e.g. running after a lost lease)."""

    status: str
    failed: int


@attrs.frozen(kw_only=True)
class WorkerChanged(ExecutionEvent):
    """An external worker's status or generation changed, and the change is durable:
    ``status`` is its status now, ``generation`` 1 at first and one more at each takeover,
    ``reason`` a short code (``takeover``, ``native-start``, ``no-progress:lint``) or None:
    ids, states and counts only, never text a worker wrote (V1)."""

    worker_id: str
    task_id: str
    step_id: str
    generation: int
    status: str
    reason: str | None = None


#: Every event a runtime publishes; ``Runtime.events()`` yields these and ``EventsDropped``.
RunEvent: TypeAlias = (
    ExecutionStarted
    | ExecutionResumed
    | StepStarted
    | StepFinished
    | StepRetrying
    | AgentTaskStarted
    | AgentTaskProgress
    | AgentTaskWaiting
    | AgentTaskCompleted
    | AgentTaskStopped
    | ExecutionWaiting
    | ExecutionPaused
    | ExecutionCancelled
    | ExecutionCompleted
    | ExecutionFailed
    | WorkerChanged
)
"""Every event a runtime publishes: ``Runtime.events()`` yields these (and the kernel's
``EventsDropped`` when a subscriber fell behind); match on the class."""


#: The runtime's bus: the kernel's, typed for run events.
RunEventBus = EventBus[RunEvent]


#: A worker's ``reason`` announced as it is: a short code; anything else is left out (V1).
_REASON = re.compile(r"[a-z0-9._:-]{1,64}\Z")


def worker_changed(execution_id: str, worker: WorkerRecord, at: float) -> WorkerChanged:
    """The event for ``worker``'s durable move: ids, states and counts only (V1)."""
    reason = worker.reason if _REASON.match(worker.reason) else None
    return WorkerChanged(
        execution_id=execution_id,
        at=at,
        worker_id=worker.id,
        task_id=worker.task_id,
        step_id=worker.step_id,
        generation=worker.generation,
        status=worker.status,
        reason=reason,
    )
