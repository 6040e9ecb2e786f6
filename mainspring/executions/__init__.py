"""Durable executions: the Runtime facade, the ExecutionActor that runs one execution, the
step, planner and agent-task actors, and the contexts user code receives.

Built on ``mainspring.actors`` and ``mainspring.storage``. ``__all__`` lists what programs
use beyond the top level's names (results and reports, the errors to catch, memory, external
workers and their hosts, programs); the events ``Runtime.events()`` yields have a namespace
of their own, ``mainspring.events``. The rest is internal, reached by the command line,
``mainspring.events`` and ``mainspring.testing`` through ``mainspring.executions._seam``,
the one internal door.
"""

from typing import TYPE_CHECKING, get_args

from .._public import publish
from . import _seam as _seam  # the internal door (not public): see its docstring
from ._facade.handle import ExecutionBusy as ExecutionBusy
from ._facade.handle import ExecutionExists as ExecutionExists
from ._facade.handle import ExecutionHandle as ExecutionHandle
from ._facade.handle import NotWaiting as NotWaiting
from ._facade.handle import UnknownExecution as UnknownExecution
from ._facade.open import open_runtime as open_runtime
from ._facade.prune import PruneReport as PruneReport
from ._facade.prune import PruneSkip as PruneSkip
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
from ._run.results import ExecutionResult as ExecutionResult
from ._run.results import StepFailure as StepFailure
from ._run.results import StopResult as StopResult
from ._steps.children import ClarificationNeeded as ClarificationNeeded
from ._steps.children import PlannerContext as PlannerContext
from ._steps.children import SaveRefused as SaveRefused
from ._steps.context import AgentContext as AgentContext
from ._workers.agent import WorkerAgent as WorkerAgent
from ._workers.fleet import Proof as Proof
from ._workers.fleet import StaleWorker as StaleWorker
from ._workers.fleet import WorkerRefused as WorkerRefused
from ._workers.hosts import WorkerHost as WorkerHost
from ._workers.hosts import WorkerSpec as WorkerSpec
from ._workers.subprocess_host import SubprocessHost as SubprocessHost

__all__ = [
    "AgentMemory",
    "ExecutionExists",
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
    "SaveRefused",
    "ScopeNotConfigured",
    "SkippedRun",
    "StaleWorker",
    "StepFailure",
    "StopResult",
    "SubprocessHost",
    "WorkerAgent",
    "WorkerHost",
    "WorkerNotLive",
    "WorkerRefused",
    "WorkerSpec",
    "WorkersView",
    "minilm_embedder",
    "run_program",
]

publish(__name__, globals(), __all__)

#: The run events left this namespace for ``mainspring.events``: asked for here, the error
#: says where they are (no alias: each name lives in one namespace).
_MOVED_TO_EVENTS = frozenset({"RunEvent", *(c.__name__ for c in get_args(_seam.RunEvent))})

if not TYPE_CHECKING:  # for type checkers an unknown name stays an error of its own

    def __getattr__(name: str) -> object:
        if name in _MOVED_TO_EVENTS:
            raise AttributeError(
                f"mainspring.executions.{name} moved to mainspring.events: "
                f"from mainspring.events import {name}"
            )
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
