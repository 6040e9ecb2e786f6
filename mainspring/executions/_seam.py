"""The one internal door into executions, for ``mainspring.cli``, ``mainspring.testing`` and
the demos (and the project's own tests).

Not public: nothing here is a promise to users, and any of it may change in any release.
``mainspring.executions`` holds the names users use; this module re-exports those and what
the layers above need besides (the worker host protocol's types, the lifecycle error, the
reports a scripted host makes), so that no other package imports a private module of
executions but this one (trio's ``_core`` idea). ``tests/test_layers.py`` holds every
package to it.
"""

from ._facade.handle import ExecutionBusy as ExecutionBusy
from ._facade.handle import ExecutionExists as ExecutionExists
from ._facade.handle import ExecutionHandle as ExecutionHandle
from ._facade.handle import NotWaiting as NotWaiting
from ._facade.handle import UnknownExecution as UnknownExecution
from ._facade.open import open_runtime as open_runtime
from ._facade.prune import PruneReport as PruneReport
from ._facade.prune import PruneSkip as PruneSkip
from ._facade.record_controls import question_answered as question_answered
from ._facade.record_controls import unanswered as unanswered
from ._facade.recovery import RecoveryReport as RecoveryReport
from ._facade.recovery import SkippedRun as SkippedRun
from ._facade.runtime import Runtime as Runtime
from ._facade.workers import WorkerNotLive as WorkerNotLive
from ._facade.workers import WorkersView as WorkersView
from ._memory.embedders import minilm_embedder as minilm_embedder
from ._memory.memory import AgentMemory as AgentMemory
from ._memory.memory import Memory as Memory
from ._memory.memory import MemoryHit as MemoryHit
from ._memory.memory import MemorySearch as MemorySearch
from ._memory.memory import ScopeNotConfigured as ScopeNotConfigured
from ._programs.programs import ProgramFailed as ProgramFailed
from ._programs.programs import ProgramResult as ProgramResult
from ._programs.programs import run_program as run_program
from ._rules.plan import InvalidPlan as InvalidPlan
from ._rules.usage import WithUsage as WithUsage
from ._run.events import AgentTaskCompleted as AgentTaskCompleted
from ._run.events import AgentTaskProgress as AgentTaskProgress
from ._run.events import AgentTaskStarted as AgentTaskStarted
from ._run.events import AgentTaskStopped as AgentTaskStopped
from ._run.events import AgentTaskWaiting as AgentTaskWaiting
from ._run.events import ExecutionCancelled as ExecutionCancelled
from ._run.events import ExecutionCompleted as ExecutionCompleted
from ._run.events import ExecutionEvent as ExecutionEvent
from ._run.events import ExecutionFailed as ExecutionFailed
from ._run.events import ExecutionPaused as ExecutionPaused
from ._run.events import ExecutionResumed as ExecutionResumed
from ._run.events import ExecutionStarted as ExecutionStarted
from ._run.events import ExecutionWaiting as ExecutionWaiting
from ._run.events import RunEvent as RunEvent
from ._run.events import StepFinished as StepFinished
from ._run.events import StepRetrying as StepRetrying
from ._run.events import StepStarted as StepStarted
from ._run.events import WorkerChanged as WorkerChanged
from ._run.results import ExecutionResult as ExecutionResult
from ._run.results import StepFailure as StepFailure
from ._run.results import StopResult as StopResult
from ._steps.children import ClarificationNeeded as ClarificationNeeded
from ._steps.children import PlannerContext as PlannerContext
from ._steps.children import SaveRefused as SaveRefused
from ._steps.context import AgentContext as AgentContext
from ._workers.agent import WorkerAgent as WorkerAgent
from ._workers.driver import WorkerStepFailed as WorkerStepFailed
from ._workers.fleet import Proof as Proof
from ._workers.fleet import StaleWorker as StaleWorker
from ._workers.fleet import WorkerRefused as WorkerRefused
from ._workers.hosts import Report as Report
from ._workers.hosts import ReportType as ReportType
from ._workers.hosts import Seen as Seen
from ._workers.hosts import WorkerHost as WorkerHost
from ._workers.hosts import WorkerProcess as WorkerProcess
from ._workers.hosts import WorkerSpec as WorkerSpec
from ._workers.hosts import WorkerStartFailed as WorkerStartFailed
from ._workers.hosts import report_of as report_of
from ._workers.subprocess_host import SubprocessHost as SubprocessHost
