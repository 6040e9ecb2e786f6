"""Durable executions: the Runtime facade, the ExecutionActor that runs one execution, the
step, planner and agent-task actors, and the contexts user code receives.

Built on ``mainspring.actors`` and ``mainspring.storage``.
"""

from .._public import publish
from ._agent import ClarificationNeeded as ClarificationNeeded
from ._agent import PlannerContext as PlannerContext
from ._agent import SaveRefused as SaveRefused
from ._agent_context import AgentContext as AgentContext
from ._embedders import minilm_embedder as minilm_embedder
from ._fleet import Proof as Proof
from ._fleet_base import StaleWorker as StaleWorker
from ._fleet_base import WorkerRefused as WorkerRefused
from ._handle import ExecutionBusy as ExecutionBusy
from ._handle import ExecutionExists as ExecutionExists
from ._handle import ExecutionHandle as ExecutionHandle
from ._handle import NotWaiting as NotWaiting
from ._handle import UnknownExecution as UnknownExecution
from ._host_scripted import ScriptedHost as ScriptedHost
from ._host_subprocess import SubprocessHost as SubprocessHost
from ._hosts import Report as Report
from ._hosts import Seen as Seen
from ._hosts import WorkerHost as WorkerHost
from ._hosts import WorkerProcess as WorkerProcess
from ._hosts import WorkerSpec as WorkerSpec
from ._hosts import WorkerStartFailed as WorkerStartFailed
from ._memory import AgentMemory as AgentMemory
from ._memory import Memory as Memory
from ._memory import MemoryHit as MemoryHit
from ._memory import MemorySearch as MemorySearch
from ._memory import ScopeNotConfigured as ScopeNotConfigured
from ._open import open_runtime as open_runtime
from ._plan import InvalidPlan as InvalidPlan
from ._programs import ProgramFailed as ProgramFailed
from ._programs import ProgramResult as ProgramResult
from ._programs import run_program as run_program
from ._prune import PruneReport as PruneReport
from ._prune import PruneSkip as PruneSkip
from ._recovery import RecoveryReport as RecoveryReport
from ._recovery import SkippedRun as SkippedRun
from ._results import ExecutionResult as ExecutionResult
from ._results import StepFailure as StepFailure
from ._results import StopResult as StopResult
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
from ._run_events import RunEvent as RunEvent
from ._run_events import StepFinished as StepFinished
from ._run_events import StepRetrying as StepRetrying
from ._run_events import StepStarted as StepStarted
from ._run_events import WorkerChanged as WorkerChanged
from ._runtime import Runtime as Runtime
from ._status import IllegalTransition as IllegalTransition
from ._usage import WithUsage as WithUsage
from ._worker_agent import WorkerAgent as WorkerAgent
from ._worker_api import WorkerNotLive as WorkerNotLive
from ._worker_api import WorkersView as WorkersView
from ._worker_driver_base import WorkerStepFailed as WorkerStepFailed

__all__ = [
    "AgentMemory",
    "AgentTaskCompleted",
    "AgentTaskProgress",
    "AgentTaskStarted",
    "AgentTaskStopped",
    "AgentTaskWaiting",
    "ExecutionCancelled",
    "ExecutionCompleted",
    "ExecutionEvent",
    "ExecutionExists",
    "ExecutionFailed",
    "ExecutionPaused",
    "ExecutionResumed",
    "ExecutionStarted",
    "ExecutionWaiting",
    "IllegalTransition",
    "Memory",
    "MemoryHit",
    "MemorySearch",
    "NotWaiting",
    "ProgramFailed",
    "ProgramResult",
    "Proof",
    "PruneReport",
    "PruneSkip",
    "RecoveryReport",
    "Report",
    "RunEvent",
    "SaveRefused",
    "ScopeNotConfigured",
    "ScriptedHost",
    "Seen",
    "SkippedRun",
    "StaleWorker",
    "StepFailure",
    "StepFinished",
    "StepRetrying",
    "StepStarted",
    "StopResult",
    "SubprocessHost",
    "WithUsage",
    "WorkerAgent",
    "WorkerChanged",
    "WorkerHost",
    "WorkerNotLive",
    "WorkerProcess",
    "WorkerRefused",
    "WorkerSpec",
    "WorkerStartFailed",
    "WorkerStepFailed",
    "WorkersView",
    "minilm_embedder",
    "run_program",
]

publish(__name__, globals(), __all__)
