"""Supervision: supervisors with restart strategies, intensity, backoff and escalation.

Durable executions live here too: the ExecutionActor, AgentTaskActor and the Runtime. It
uses ``mainspring.actors`` and plugs the system's root supervisor into it at import time.
"""

from ._agent import AgentContext as AgentContext
from ._agent import ClarificationNeeded as ClarificationNeeded
from ._agent import PlannerContext as PlannerContext
from ._events import ChildFailed as ChildFailed
from ._events import ChildRestarted as ChildRestarted
from ._events import ChildStarted as ChildStarted
from ._events import Escalated as Escalated
from ._events import IntensityExceeded as IntensityExceeded
from ._events import SupervisionEvent as SupervisionEvent
from ._execution import ExecutionResult as ExecutionResult
from ._execution import StopResult as StopResult
from ._plan import InvalidPlan as InvalidPlan
from ._run_events import AgentTaskCompleted as AgentTaskCompleted
from ._run_events import AgentTaskProgress as AgentTaskProgress
from ._run_events import AgentTaskStarted as AgentTaskStarted
from ._run_events import AgentTaskStopped as AgentTaskStopped
from ._run_events import AgentTaskWaiting as AgentTaskWaiting
from ._run_events import ExecutionCancelled as ExecutionCancelled
from ._run_events import ExecutionCompleted as ExecutionCompleted
from ._run_events import ExecutionEvent as ExecutionEvent
from ._run_events import ExecutionFailed as ExecutionFailed
from ._run_events import ExecutionPaused as ExecutionPaused
from ._run_events import ExecutionResumed as ExecutionResumed
from ._run_events import ExecutionStarted as ExecutionStarted
from ._run_events import ExecutionWaiting as ExecutionWaiting
from ._run_events import StepFinished as StepFinished
from ._run_events import StepStarted as StepStarted
from ._runtime import ExecutionBusy as ExecutionBusy
from ._runtime import ExecutionHandle as ExecutionHandle
from ._runtime import Runtime as Runtime
from ._runtime import UnknownExecution as UnknownExecution
from ._runtime import default_home as default_home
from ._runtime import open_runtime as open_runtime
from ._spec import Backoff as Backoff
from ._spec import ChildSpec as ChildSpec
from ._supervisor import ChildInfo as ChildInfo
from ._supervisor import NoSuchChild as NoSuchChild
from ._supervisor import RestartIntensityExceeded as RestartIntensityExceeded
from ._supervisor import Supervisor as Supervisor
from ._supervisor import SupervisorRef as SupervisorRef

__all__ = [
    "AgentContext",
    "AgentTaskCompleted",
    "AgentTaskProgress",
    "AgentTaskStarted",
    "AgentTaskStopped",
    "AgentTaskWaiting",
    "Backoff",
    "ChildFailed",
    "ChildInfo",
    "ChildRestarted",
    "ChildSpec",
    "ChildStarted",
    "ClarificationNeeded",
    "Escalated",
    "ExecutionBusy",
    "ExecutionCancelled",
    "ExecutionCompleted",
    "ExecutionEvent",
    "ExecutionFailed",
    "ExecutionHandle",
    "ExecutionPaused",
    "ExecutionResult",
    "ExecutionResumed",
    "ExecutionStarted",
    "ExecutionWaiting",
    "IntensityExceeded",
    "InvalidPlan",
    "NoSuchChild",
    "PlannerContext",
    "RestartIntensityExceeded",
    "Runtime",
    "StepFinished",
    "StepStarted",
    "StopResult",
    "SupervisionEvent",
    "Supervisor",
    "SupervisorRef",
    "UnknownExecution",
    "default_home",
    "open_runtime",
]
