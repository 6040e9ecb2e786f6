"""mainspring: an embedded actor runtime for durable AI-agent executions, on asyncio and trio.

Everything public is importable from here and listed in ``__all__``; other modules are private.
"""

from .actors import DEFAULT_MAILBOX_SIZE as DEFAULT_MAILBOX_SIZE
from .actors import Actor as Actor
from .actors import ActorDeadError as ActorDeadError
from .actors import ActorFailed as ActorFailed
from .actors import ActorRef as ActorRef
from .actors import ActorSystem as ActorSystem
from .actors import AskTimeout as AskTimeout
from .actors import BudgetExhausted as BudgetExhausted
from .actors import Cancel as Cancel
from .actors import CancelReason as CancelReason
from .actors import Crash as Crash
from .actors import EventsDropped as EventsDropped
from .actors import LeaseLost as LeaseLost
from .actors import MailboxFull as MailboxFull
from .actors import MainspringError as MainspringError
from .actors import NameTaken as NameTaken
from .actors import ParentCancel as ParentCancel
from .actors import Pause as Pause
from .actors import Shutdown as Shutdown
from .actors import Stop as Stop
from .actors import Terminated as Terminated
from .actors import Timeout as Timeout
from .actors import Timer as Timer
from .actors import cancel_reason as cancel_reason
from .actors import current_actor as current_actor
from .actors import open_system as open_system
from .executions import AgentContext as AgentContext
from .executions import AgentTaskCompleted as AgentTaskCompleted
from .executions import AgentTaskProgress as AgentTaskProgress
from .executions import AgentTaskStarted as AgentTaskStarted
from .executions import AgentTaskStopped as AgentTaskStopped
from .executions import AgentTaskWaiting as AgentTaskWaiting
from .executions import ClarificationNeeded as ClarificationNeeded
from .executions import ExecutionBusy as ExecutionBusy
from .executions import ExecutionCancelled as ExecutionCancelled
from .executions import ExecutionCompleted as ExecutionCompleted
from .executions import ExecutionEvent as ExecutionEvent
from .executions import ExecutionFailed as ExecutionFailed
from .executions import ExecutionHandle as ExecutionHandle
from .executions import ExecutionPaused as ExecutionPaused
from .executions import ExecutionResult as ExecutionResult
from .executions import ExecutionResumed as ExecutionResumed
from .executions import ExecutionStarted as ExecutionStarted
from .executions import ExecutionWaiting as ExecutionWaiting
from .executions import InvalidPlan as InvalidPlan
from .executions import PlannerContext as PlannerContext
from .executions import Runtime as Runtime
from .executions import StepFinished as StepFinished
from .executions import StepStarted as StepStarted
from .executions import StopResult as StopResult
from .executions import UnknownExecution as UnknownExecution
from .executions import open_runtime as open_runtime
from .storage import AgentTaskRecord as AgentTaskRecord
from .storage import BudgetInfo as BudgetInfo
from .storage import Checkpoint as Checkpoint
from .storage import CommitOutcome as CommitOutcome
from .storage import Control as Control
from .storage import Execution as Execution
from .storage import Failure as Failure
from .storage import FileStore as FileStore
from .storage import Finding as Finding
from .storage import Interruption as Interruption
from .storage import InvalidId as InvalidId
from .storage import Lease as Lease
from .storage import LeaseResult as LeaseResult
from .storage import Listing as Listing
from .storage import Observation as Observation
from .storage import Pending as Pending
from .storage import PersistenceFailed as PersistenceFailed
from .storage import Plan as Plan
from .storage import PlanStep as PlanStep
from .storage import Problem as Problem
from .storage import Reconciliation as Reconciliation
from .storage import RecordError as RecordError
from .storage import SqliteStore as SqliteStore
from .storage import StorageError as StorageError
from .storage import Store as Store
from .storage import TooLarge as TooLarge
from .storage import capture_checkpoint as capture_checkpoint
from .storage import default_home as default_home
from .storage import new_owner_id as new_owner_id
from .storage import parse_agent_tasks as parse_agent_tasks
from .storage import reconcile as reconcile
from .storage import redact as redact
from .storage import register_secret as register_secret
from .supervision import Backoff as Backoff
from .supervision import ChildFailed as ChildFailed
from .supervision import ChildInfo as ChildInfo
from .supervision import ChildRestarted as ChildRestarted
from .supervision import ChildSpec as ChildSpec
from .supervision import ChildStarted as ChildStarted
from .supervision import Escalated as Escalated
from .supervision import IntensityExceeded as IntensityExceeded
from .supervision import NoSuchChild as NoSuchChild
from .supervision import RestartIntensityExceeded as RestartIntensityExceeded
from .supervision import SupervisionEvent as SupervisionEvent
from .supervision import Supervisor as Supervisor
from .supervision import SupervisorRef as SupervisorRef

__version__ = "0.1.0.dev0"

__all__ = [
    "DEFAULT_MAILBOX_SIZE",
    "Actor",
    "ActorDeadError",
    "ActorFailed",
    "ActorRef",
    "ActorSystem",
    "AgentContext",
    "AgentTaskCompleted",
    "AgentTaskProgress",
    "AgentTaskRecord",
    "AgentTaskStarted",
    "AgentTaskStopped",
    "AgentTaskWaiting",
    "AskTimeout",
    "Backoff",
    "BudgetExhausted",
    "BudgetInfo",
    "Cancel",
    "CancelReason",
    "Checkpoint",
    "ChildFailed",
    "ChildInfo",
    "ChildRestarted",
    "ChildSpec",
    "ChildStarted",
    "ClarificationNeeded",
    "CommitOutcome",
    "Control",
    "Crash",
    "Escalated",
    "EventsDropped",
    "Execution",
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
    "Failure",
    "FileStore",
    "Finding",
    "IntensityExceeded",
    "Interruption",
    "InvalidId",
    "InvalidPlan",
    "Lease",
    "LeaseLost",
    "LeaseResult",
    "Listing",
    "MailboxFull",
    "MainspringError",
    "NameTaken",
    "NoSuchChild",
    "Observation",
    "ParentCancel",
    "Pause",
    "Pending",
    "PersistenceFailed",
    "Plan",
    "PlanStep",
    "PlannerContext",
    "Problem",
    "Reconciliation",
    "RecordError",
    "RestartIntensityExceeded",
    "Runtime",
    "Shutdown",
    "SqliteStore",
    "StepFinished",
    "StepStarted",
    "Stop",
    "StopResult",
    "StorageError",
    "Store",
    "SupervisionEvent",
    "Supervisor",
    "SupervisorRef",
    "Terminated",
    "Timeout",
    "Timer",
    "TooLarge",
    "UnknownExecution",
    "cancel_reason",
    "capture_checkpoint",
    "current_actor",
    "default_home",
    "new_owner_id",
    "open_runtime",
    "open_system",
    "parse_agent_tasks",
    "reconcile",
    "redact",
    "register_secret",
]
