"""Storage: strict versioned records, the codec, redaction, id checks, and the backends.

Nothing here imports ``mainspring.supervision`` or ``mainspring.executions``. The persistence
actor (:func:`open_committer`) is the only writer during a run.

Every backend (``FileStore``, ``SqliteStore``, ``PostgresStore``) keeps one written contract:
an execution stored as a head plus keyed parts, each commit one atomic compare-and-set that
writes only what changed with its history entries (E2, L1-L4), reads that never write (E7),
nothing acknowledged before it is durable, bounded reads that fail closed (X2), sealed
evidence, and a recorded layout. The contract in full is the docstring of :class:`Store`
(``help(mainspring.storage.Store)``); one contract suite checks every backend against it.

Inside: the journal every backend stores is ``_journal/``; the contract, the compare-and-set
template and one folder per backend (``file``, ``sqlite``, ``postgres``) are ``_backends/``.
"""

from .._public import publish
from . import _seam as _seam  # the internal door (not public): see its docstring
from ._backends.contract import CommitOutcome as CommitOutcome
from ._backends.contract import LeaseResult as LeaseResult
from ._backends.contract import Listing as Listing
from ._backends.contract import Problem as Problem
from ._backends.contract import Store as Store
from ._backends.file.store import FileStore as FileStore
from ._backends.postgres.retry import StoreUnavailable as StoreUnavailable
from ._backends.postgres.store import PostgresStore as PostgresStore
from ._backends.sqlite.schema import StoreNeedsMigration as StoreNeedsMigration
from ._backends.sqlite.store import SqliteStore as SqliteStore
from ._errors import InvalidId as InvalidId
from ._errors import RecordError as RecordError
from ._errors import StorageError as StorageError
from ._errors import TooLarge as TooLarge
from ._home import open_store as open_store
from ._journal.history import HistoryEvent as HistoryEvent
from ._memory import Fact as Fact
from ._memory import Scope as Scope
from ._migrate import MigrationError as MigrationError
from ._migrate import MigrationReport as MigrationReport
from ._migrate import StoreInUse as StoreInUse
from ._migrate import migrate_store as migrate_store
from ._persistence import PersistenceFailed as PersistenceFailed
from ._records import AgentTaskRecord as AgentTaskRecord
from ._records import BudgetInfo as BudgetInfo
from ._records import Checkpoint as Checkpoint
from ._records import Control as Control
from ._records import Evidence as Evidence
from ._records import Execution as Execution
from ._records import ExecutionStatus as ExecutionStatus
from ._records import Failure as Failure
from ._records import Finding as Finding
from ._records import Interruption as Interruption
from ._records import Lease as Lease
from ._records import Observation as Observation
from ._records import Pending as Pending
from ._records import Plan as Plan
from ._records import PlanStep as PlanStep
from ._records import Provenance as Provenance
from ._records import StepStatus as StepStatus
from ._records import TaskState as TaskState
from ._redact import redact as redact
from ._redact import register_secret as register_secret
from ._requests import Approval as Approval
from ._requests import QuestionId as QuestionId
from ._requests import StopRequest as StopRequest
from ._retry import RetryPolicy as RetryPolicy
from ._unreadable import Unreadable as Unreadable
from ._usage import Usage as Usage
from ._workers import TrailEntry as TrailEntry
from ._workers import WorkerRecord as WorkerRecord
from ._workers import WorkerStatus as WorkerStatus
from ._workers import WorkerTask as WorkerTask
from ._workers import WorkerTaskState as WorkerTaskState

__all__ = [
    "AgentTaskRecord",
    "Approval",
    "BudgetInfo",
    "Checkpoint",
    "CommitOutcome",
    "Control",
    "Evidence",
    "Execution",
    "ExecutionStatus",
    "Fact",
    "Failure",
    "FileStore",
    "Finding",
    "HistoryEvent",
    "Interruption",
    "InvalidId",
    "Lease",
    "LeaseResult",
    "Listing",
    "MigrationError",
    "MigrationReport",
    "Observation",
    "Pending",
    "PersistenceFailed",
    "PostgresStore",
    "Problem",
    "Provenance",
    "QuestionId",
    "RecordError",
    "RetryPolicy",
    "Scope",
    "SqliteStore",
    "StepStatus",
    "StopRequest",
    "Store",
    "StoreInUse",
    "StoreNeedsMigration",
    "StoreUnavailable",
    "TaskState",
    "TooLarge",
    "TrailEntry",
    "Unreadable",
    "Usage",
    "WorkerRecord",
    "WorkerStatus",
    "WorkerTask",
    "WorkerTaskState",
    "migrate_store",
    "open_store",
    "redact",
    "register_secret",
]

publish(__name__, globals(), __all__)
