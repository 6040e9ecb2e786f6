"""The one internal door into storage, for ``mainspring.executions`` and ``mainspring.cli``
(and the project's own tests).

Not public: nothing here is a promise to users, and any of it may change in any release.
``mainspring.storage`` holds the names users use (records, stores, errors); this module
re-exports those and every internal seam the upper layers need (id checks, the codec, the
journal's helpers, the persistence actor, the worker and memory records' parsers, bounds),
so that no module of another package imports a private module of storage but this one
(trio's ``_core`` idea). ``tests/test_layers.py`` holds every package to it.
"""

from ._append_only import AppendOnly as AppendOnly
from ._append_only import AppendOnlyList as AppendOnlyList
from ._append_only import appended as appended

# What mainspring.testing's in-memory store builds on: the decisions every backend shares,
# the journal's diff (what a commit changes) and the history entries derived from it.
from ._backends.compare_and_set import CompareAndSetStore as CompareAndSetStore

# The decisions themselves, for a store that keeps records as they are, without encoding
# them (what the runtime's own benchmark measures on).
from ._backends.compare_and_set import decide_acquire as decide_acquire
from ._backends.compare_and_set import decide_commit as decide_commit
from ._backends.compare_and_set import decide_edit as decide_edit
from ._backends.compare_and_set import decide_heartbeat as decide_heartbeat
from ._backends.compare_and_set import decide_release as decide_release
from ._backends.compare_and_set import decide_renew as decide_renew
from ._backends.compare_and_set import with_disk_lease as with_disk_lease
from ._backends.contract import ChangeFeed as ChangeFeed
from ._backends.contract import CommitOutcome as CommitOutcome
from ._backends.contract import Edit as Edit
from ._backends.contract import LeaseResult as LeaseResult
from ._backends.contract import Listing as Listing
from ._backends.contract import Notifying as Notifying
from ._backends.contract import Problem as Problem
from ._backends.contract import Store as Store
from ._backends.contract import Unfinished as Unfinished
from ._backends.contract import holder as holder
from ._backends.contract import store_blocks as store_blocks

# A FileStore's layout: the name of its memory database (``doctor`` checks that file) and
# the framing of its journals (for the project's tests that plant raw bytes).
from ._backends.file.frames import encode_frame as encode_frame
from ._backends.file.memory import MEMORY_FILE as MEMORY_FILE
from ._backends.file.store import FileStore as FileStore
from ._backends.postgres.retry import StoreUnavailable as StoreUnavailable
from ._backends.postgres.schema import is_postgres_url as is_postgres_url
from ._backends.postgres.schema import redact_url as redact_url
from ._backends.postgres.store import CommitUnknown as CommitUnknown
from ._backends.postgres.store import PostgresStore as PostgresStore
from ._backends.sqlite.read_only import connect_read_only as connect_read_only
from ._backends.sqlite.schema import StoreNeedsMigration as StoreNeedsMigration
from ._backends.sqlite.store import SqliteStore as SqliteStore
from ._carried import carry_encoded as carry_encoded
from ._checkpoints import Reconciliation as Reconciliation
from ._checkpoints import capture_checkpoint as capture_checkpoint
from ._checkpoints import hash_files as hash_files
from ._checkpoints import reconcile as reconcile
from ._codec import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from ._codec import dumps_checked as dumps_checked
from ._codec import encode as encode
from ._codec import sha256_hex as sha256_hex
from ._codec import structure as structure
from ._codec import unstructure as unstructure
from ._errors import InvalidId as InvalidId
from ._errors import RecordError as RecordError
from ._errors import StorageError as StorageError
from ._errors import TooLarge as TooLarge
from ._evidence import MAX_EVIDENCE_BYTES as MAX_EVIDENCE_BYTES
from ._evidence import EvidenceError as EvidenceError
from ._evidence import EvidenceStore as EvidenceStore
from ._evidence import canonical_json as canonical_json
from ._evidence import load_evidence as load_evidence
from ._home import default_home as default_home
from ._home import default_store as default_store
from ._home import open_store as open_store
from ._home import store_kind as store_kind
from ._ids import check_id as check_id
from ._ids import check_relative_path as check_relative_path
from ._journal.commit_events import events_for as events_for
from ._journal.fold import Folded as Folded
from ._journal.fold import fold as fold
from ._journal.history import HistoryEvent as HistoryEvent
from ._journal.history import check_after as _check_history_after
from ._journal.history import parse_event as parse_event
from ._journal.model import Base as Base
from ._journal.model import diff as diff
from ._journal.model import snapshot_changes as snapshot_changes
from ._memory import MAX_FACT_TEXT as MAX_FACT_TEXT
from ._memory import MAX_SEARCH_LIMIT as MAX_SEARCH_LIMIT
from ._memory import Fact as Fact
from ._memory import FactFilter as FactFilter
from ._memory import ForgetFact as ForgetFact
from ._memory import MemoryBackend as MemoryBackend
from ._memory import RememberFact as RememberFact
from ._memory import Scope as Scope
from ._memory import TextHit as TextHit
from ._memory import new_fact_id as new_fact_id
from ._memory import query_terms as query_terms
from ._migrate import MigrationError as MigrationError
from ._migrate import MigrationReport as MigrationReport
from ._migrate import StoreInUse as StoreInUse
from ._migrate import migrate_store as migrate_store
from ._owners import new_owner_id as new_owner_id
from ._owners import owner_gone as owner_gone
from ._owners import owner_here as owner_here
from ._persistence import Committer as Committer
from ._persistence import Durable as Durable
from ._persistence import PersistenceFailed as PersistenceFailed
from ._persistence import open_committer as open_committer
from ._plain import plain_record as plain_record
from ._records import EXECUTION_TERMINAL as EXECUTION_TERMINAL
from ._records import MAX_CHECKPOINTS as MAX_CHECKPOINTS
from ._records import MAX_CONTROLS as MAX_CONTROLS
from ._records import MAX_COUNTER as MAX_COUNTER
from ._records import MAX_DIAGNOSTICS as MAX_DIAGNOSTICS
from ._records import MAX_EVIDENCE as MAX_EVIDENCE
from ._records import MAX_FINDINGS as MAX_FINDINGS
from ._records import MAX_TOUCHED_PATHS as MAX_TOUCHED_PATHS
from ._records import STEP_FINISHED as STEP_FINISHED
from ._records import TASK_TERMINAL as TASK_TERMINAL
from ._records import AbsentDimension as AbsentDimension
from ._records import AgentTaskRecord as AgentTaskRecord
from ._records import AnswerRequest as AnswerRequest
from ._records import BudgetInfo as BudgetInfo
from ._records import Checkpoint as Checkpoint
from ._records import Control as Control
from ._records import Evidence as Evidence
from ._records import Execution as Execution
from ._records import ExecutionStatus as ExecutionStatus
from ._records import Failure as Failure
from ._records import Finding as Finding
from ._records import FindingStatus as FindingStatus
from ._records import Interruption as Interruption
from ._records import Lease as Lease
from ._records import Observation as Observation
from ._records import ObservationCode as ObservationCode
from ._records import Pending as Pending
from ._records import Plan as Plan
from ._records import PlanStep as PlanStep
from ._records import Provenance as Provenance
from ._records import StepStatus as StepStatus
from ._records import TaskState as TaskState
from ._records import parse_agent_task as parse_agent_task
from ._records import parse_agent_tasks as parse_agent_tasks
from ._redact import redact as redact
from ._redact import redact_flagged as redact_flagged
from ._redact import register_secret as register_secret
from ._requests import Approval as Approval
from ._requests import BadEncoding as BadEncoding
from ._requests import QuestionId as QuestionId
from ._requests import StopRequest as StopRequest
from ._retry import MAX_ATTEMPTS as MAX_ATTEMPTS
from ._retry import RetryPolicy as RetryPolicy
from ._retry import check_timeout as check_timeout
from ._tenure import holding as holding
from ._tenure import no_owner_since as no_owner_since
from ._tenure import owner_dead as owner_dead
from ._unreadable import Unreadable as Unreadable
from ._usage import MAX_COST as MAX_COST
from ._usage import MAX_TOKENS as MAX_TOKENS
from ._usage import Usage as Usage
from ._usage import check_cost as check_cost
from ._usage import check_tokens as check_tokens
from ._v1 import read_v1 as read_v1
from ._values import Encoded as Encoded
from ._values import decode_value as decode_value
from ._values import encode_value as encode_value
from ._vector import Vector as Vector
from ._workers import ACTIVE_WORKER as ACTIVE_WORKER
from ._workers import LEASE_DEFAULT as LEASE_DEFAULT
from ._workers import LEASE_MAX as LEASE_MAX
from ._workers import LEASE_MIN as LEASE_MIN
from ._workers import MAX_TRAIL as MAX_TRAIL
from ._workers import MAX_USAGE_EPOCHS as MAX_USAGE_EPOCHS
from ._workers import ProcessIdentity as ProcessIdentity
from ._workers import StopIntent as StopIntent
from ._workers import TrailEntry as TrailEntry
from ._workers import UsageEpoch as UsageEpoch
from ._workers import WorkerFailure as WorkerFailure
from ._workers import WorkerRecord as WorkerRecord
from ._workers import WorkerStatus as WorkerStatus
from ._workers import WorkerTask as WorkerTask
from ._workers import WorkerTaskState as WorkerTaskState
from ._workers import check_digest as check_digest
from ._workers import check_lease as check_lease
from ._workers import parse_trail as parse_trail
from ._workers import parse_worker_tasks as parse_worker_tasks
from ._workers import parse_workers as parse_workers

#: ``history(after=...)`` checked (``_memory`` has a ``check_after`` of its own).
check_history_after = _check_history_after
