"""The run events: the types ``Runtime.events()`` yields, for ``match`` statements and
``isinstance`` checks on a runtime's live stream.

Each class is one thing that happened to an execution in this process (a run started, a
step finished, an agent task waits for an answer, a worker moved...); every event carries
the ``execution_id`` it belongs to and the time ``at`` which it happened, and never text an
agent, a tool or a user wrote (V1). :data:`RunEvent` is their union. Besides these, a
subscriber that fell behind gets the kernel's ``mainspring.EventsDropped``; with
``after=seq`` the stream is the durable history instead
(``mainspring.storage.HistoryEvent``).

They have a namespace of their own so that a program that watches runs imports exactly what
it can receive:

    import contextlib

    from mainspring.events import AgentTaskWaiting, ExecutionCompleted, StepFinished

    async with contextlib.aclosing(rt.events()) as events:  # closed at once on break
        async for event in events:
            match event:
                case StepFinished(step_id=step_id, state=state):
                    print(step_id, state)
                case AgentTaskWaiting(execution_id=execution_id):
                    print(execution_id, "waits for an answer")
                case ExecutionCompleted():
                    break

A supervisor's own events (``mainspring.supervision.SupervisionEvent``: a child started,
crashed, restarted), published on ``system.events()``, are not run events: they stay in
``mainspring.supervision``.
"""

from .._public import publish
from ..executions._seam import AgentTaskCompleted as AgentTaskCompleted
from ..executions._seam import AgentTaskProgress as AgentTaskProgress
from ..executions._seam import AgentTaskStarted as AgentTaskStarted
from ..executions._seam import AgentTaskStopped as AgentTaskStopped
from ..executions._seam import AgentTaskWaiting as AgentTaskWaiting
from ..executions._seam import ExecutionCancelled as ExecutionCancelled
from ..executions._seam import ExecutionCompleted as ExecutionCompleted
from ..executions._seam import ExecutionFailed as ExecutionFailed
from ..executions._seam import ExecutionPaused as ExecutionPaused
from ..executions._seam import ExecutionResumed as ExecutionResumed
from ..executions._seam import ExecutionStarted as ExecutionStarted
from ..executions._seam import ExecutionWaiting as ExecutionWaiting
from ..executions._seam import RunEvent as RunEvent
from ..executions._seam import StepFinished as StepFinished
from ..executions._seam import StepRetrying as StepRetrying
from ..executions._seam import StepStarted as StepStarted
from ..executions._seam import WorkerChanged as WorkerChanged

__all__ = [
    "AgentTaskCompleted",
    "AgentTaskProgress",
    "AgentTaskStarted",
    "AgentTaskStopped",
    "AgentTaskWaiting",
    "ExecutionCancelled",
    "ExecutionCompleted",
    "ExecutionFailed",
    "ExecutionPaused",
    "ExecutionResumed",
    "ExecutionStarted",
    "ExecutionWaiting",
    "RunEvent",
    "StepFinished",
    "StepRetrying",
    "StepStarted",
    "WorkerChanged",
]

publish(__name__, globals(), __all__)
