"""Storage: strict versioned records, the codec, redaction, id checks, and the backends.

Nothing here imports ``mainspring.supervision`` or ``mainspring.executions``. The persistence
actor (:func:`open_committer`) is the only writer during a run.

The backend contract (storage v2)
---------------------------------
What every backend (``FileStore``, ``SqliteStore``, ``PostgresStore``) must do; one
contract suite (``tests/storage/test_backends.py``, parametrised by backend) checks it.

*Shape.* An execution is stored as its head (every small field: status, lease, budget,
pending question, controls, the plan without its steps) plus keyed, ordered parts (plan
steps, observations, completed steps, agent tasks, each task's inner observations and
completed inner steps, external workers by id, the tasks they serve by id, and the workers'
diagnostic trail by ``str(seq)``, at most ``MAX_TRAIL``) and a window of at most five
checkpoints. ``_journal.diff(base, new)`` turns a commit into changes (``head``, ``put``,
``reset``, ``drop``, ``group``, ``ckpt``, ``ckpts``) that touch only what differs from the
version the backend stored last (``drop``: the oldest trail entries leave, one row each, so
a bounded trail costs the same at entry 10 and entry 10,000); ``_fold.fold`` rebuilds
the execution. A backend stores changes its own way (rows, frames) but must read back exactly
the execution that was committed: same items, same order (a put of a new key appends, of a
known key replaces in place). Each commit also gets the next per-execution sequence number
and the history entries ``_commit_events.events_for`` derives from it.

*Operations and what each makes atomic* (one compare-and-set against the stored copy,
exclusive across processes and hosts):

- ``create``: store a new execution, or refuse (False) if the id exists.
- ``acquire`` / ``heartbeat`` / ``release`` (L1-L3): take the lease unless another owner's is
  live (a lapsed one is taken over and the epoch grows), extend the holder's live lease,
  give it up keeping the epoch. The lease's clock is the backend's (``clock``; for a shared
  server, the server's). ``acquire(..., gone=lease)`` also takes over a live lease whose
  owner process the caller found gone (``owner_gone``, L7), if it is still that lease.
- ``commit_progress`` / ``commit_many`` (E2, L4): decide in order missing, terminal, paused,
  released, foreign lease (another owner, or this owner's lease of another epoch than the
  commit's), then write the changes and the history entries together; the lease on disk is
  kept, except that a commit whose record carries a released lease (no owner) releases it in
  that same write (L3: a run's final write, so no crash can leave it held). ``commit_many`` makes
  a batch durable together: one transaction (SQLite, PostgreSQL: a disk error fails the whole
  batch) or one fsynced append per execution (files: the commits before a failure stay). A
  bad record (too large, unstorable) fails only its own commit and writes nothing of it.
- ``renew`` / ``renew_many``: a heartbeat that answers like a commit (L2, E2).
- ``edit`` / ``commit``: out-of-run changes (controls); the stored lease is kept.
- ``delete``: a terminal execution with everything stored about it, history included.
- ``get`` / ``list`` / ``history``: reads; they never write (E7). ``list`` reports what does
  not read as a ``Problem`` (never skipped, never deleted); ``get`` raises ``RecordError`` for
  the same record (a journal with bytes but no whole entry included), and ``create`` refuses
  such an id with that error, writing nothing (X2: what is stored and unreadable is never
  taken for absent). A terminal execution's lease is void: nobody holds a finished run (L3).
  ``history(execution_id, after=, limit=)`` returns committed entries with a global
  sequence above ``after``, in that order: an entry is visible only once the commit that
  made it is durable, and a reader never sees a later sequence before an earlier one is
  visible (SQLite: transactions are serial; files: readers take the lock shared; a server
  backend must not expose a sequence until every lower one has committed, e.g. by
  allocating them under the commit's lock).

*Durability and failure.* Nothing is acknowledged before it is durable (fsync, or a
``synchronous=FULL`` commit); after a failed write the writer forgets what it cached, and
the persistence actor acknowledges nothing more. Reads are bounded (``max_bytes`` per entry
or row, ``max_record_bytes`` per execution, X2), parse strictly and fail closed per entry
(E8); a torn tail of an append is ignored and cut off by the next writer. Ids are checked
before any path or query (X1); SQL is parameterised; files are 0600 in a 0700 directory.

*Sealed evidence* (``storage._evidence``, :class:`EvidenceStore`): ``put_evidence(digest,
body)`` stores canonical JSON (``canonical_json``) of at most ``MAX_EVIDENCE_BYTES`` under
its sha256 once (a digest stored already is checked and left as it is);
``get_evidence(digest)`` reads it back bounded, hashes it again and raises
:class:`EvidenceError` if it is missing or not what was sealed (fail closed). Both are
synchronous and check the digest before any path or query (X1); files are
``evidence/<digest>.json`` (0600, in a 0700 directory), rows an ``evidence`` table.
``Committer.seal_evidence`` / ``read_evidence`` call them off the event loop;
``load_evidence(store, digest)`` reads a document synchronously (the CLI).

*Layouts.* ``SCHEMA_VERSION`` (3) is recorded in the store (SQLite ``meta``, files
``.format``); an older layout (0.1's, storage v2) is refused with :class:`StoreNeedsMigration`
(run ``mainspring migrate``: ``storage._migrate``), a newer one with a clear error. A
PostgreSQL schema is upgraded when a writable store opens it (``storage._pg_schema``); a
read-only store of an older schema reads it as v3 spells it, changing nothing. v3 spells every
state one way (snake_case :class:`enum.StrEnum` members) and keeps stop requests, approvals
and question ids as typed values (:class:`StopRequest`, :class:`Approval`,
:class:`QuestionId`; ``storage._requests``).
"""

from .._public import publish
from ._append_only import AppendOnly as AppendOnly
from ._append_only import AppendOnlyList as AppendOnlyList
from ._append_only import appended as appended
from ._backend import ChangeFeed as ChangeFeed
from ._backend import CommitOutcome as CommitOutcome
from ._backend import Edit as Edit
from ._backend import LeaseResult as LeaseResult
from ._backend import Listing as Listing
from ._backend import Notifying as Notifying
from ._backend import Problem as Problem
from ._backend import Store as Store
from ._backend import Unfinished as Unfinished
from ._backend import holder as holder

# For the runtime (mainspring.executions), not public (not in __all__): a step's output,
# encoded once where it was made (Encoded), carried beside its observation to the store.
from ._carried import carry_encoded as carry_encoded
from ._checkpoints import Reconciliation as Reconciliation
from ._checkpoints import capture_checkpoint as capture_checkpoint
from ._checkpoints import hash_files as hash_files
from ._checkpoints import reconcile as reconcile
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
from ._file import FileStore as FileStore
from ._history import HistoryEvent as HistoryEvent
from ._home import default_home as default_home
from ._home import default_store as default_store
from ._home import open_store as open_store
from ._home import store_kind as store_kind
from ._ids import check_id as check_id
from ._ids import check_relative_path as check_relative_path
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
from ._pg_retry import StoreUnavailable as StoreUnavailable
from ._pg_schema import is_postgres_url as is_postgres_url
from ._pg_schema import redact_url as redact_url
from ._plain import plain_record as plain_record  # for the runtime, not public
from ._postgres import CommitUnknown as CommitUnknown
from ._postgres import PostgresStore as PostgresStore
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
from ._sqlite import SqliteStore as SqliteStore
from ._sqlite import StoreNeedsMigration as StoreNeedsMigration
from ._usage import MAX_COST as MAX_COST
from ._usage import MAX_TOKENS as MAX_TOKENS
from ._usage import Usage as Usage
from ._usage import check_cost as check_cost
from ._usage import check_tokens as check_tokens
from ._v1 import read_v1 as read_v1
from ._values import Encoded as Encoded  # for the runtime, not public (see carry_encoded)
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
from ._workers import parse_worker_tasks as parse_worker_tasks
from ._workers import parse_workers as parse_workers

__all__ = [
    "ACTIVE_WORKER",
    "EXECUTION_TERMINAL",
    "LEASE_DEFAULT",
    "LEASE_MAX",
    "LEASE_MIN",
    "MAX_ATTEMPTS",
    "MAX_CHECKPOINTS",
    "MAX_CONTROLS",
    "MAX_COST",
    "MAX_COUNTER",
    "MAX_DIAGNOSTICS",
    "MAX_EVIDENCE",
    "MAX_EVIDENCE_BYTES",
    "MAX_FACT_TEXT",
    "MAX_FINDINGS",
    "MAX_SEARCH_LIMIT",
    "MAX_TOKENS",
    "MAX_TOUCHED_PATHS",
    "MAX_TRAIL",
    "MAX_USAGE_EPOCHS",
    "STEP_FINISHED",
    "TASK_TERMINAL",
    "AbsentDimension",
    "AgentTaskRecord",
    "AnswerRequest",
    "AppendOnly",
    "AppendOnlyList",
    "Approval",
    "BadEncoding",
    "BudgetInfo",
    "ChangeFeed",
    "Checkpoint",
    "CommitOutcome",
    "CommitUnknown",
    "Committer",
    "Control",
    "Durable",
    "Edit",
    "Evidence",
    "EvidenceError",
    "EvidenceStore",
    "Execution",
    "ExecutionStatus",
    "Fact",
    "FactFilter",
    "Failure",
    "FileStore",
    "Finding",
    "FindingStatus",
    "ForgetFact",
    "HistoryEvent",
    "Interruption",
    "InvalidId",
    "Lease",
    "LeaseResult",
    "Listing",
    "MemoryBackend",
    "MigrationError",
    "MigrationReport",
    "Notifying",
    "Observation",
    "ObservationCode",
    "Pending",
    "PersistenceFailed",
    "PostgresStore",
    "Problem",
    "ProcessIdentity",
    "Provenance",
    "QuestionId",
    "Reconciliation",
    "RecordError",
    "RememberFact",
    "RetryPolicy",
    "Scope",
    "SqliteStore",
    "StepStatus",
    "StopIntent",
    "StopRequest",
    "Store",
    "StoreInUse",
    "StoreNeedsMigration",
    "StoreUnavailable",
    "TaskState",
    "TextHit",
    "TooLarge",
    "TrailEntry",
    "Unfinished",
    "Usage",
    "UsageEpoch",
    "Vector",
    "WorkerFailure",
    "WorkerRecord",
    "WorkerStatus",
    "WorkerTask",
    "WorkerTaskState",
    "appended",
    "canonical_json",
    "capture_checkpoint",
    "check_cost",
    "check_digest",
    "check_id",
    "check_lease",
    "check_relative_path",
    "check_timeout",
    "check_tokens",
    "decode_value",
    "default_home",
    "default_store",
    "encode",
    "encode_value",
    "hash_files",
    "holder",
    "is_postgres_url",
    "load_evidence",
    "migrate_store",
    "new_fact_id",
    "new_owner_id",
    "open_committer",
    "open_store",
    "owner_gone",
    "owner_here",
    "parse_agent_task",
    "parse_agent_tasks",
    "parse_worker_tasks",
    "parse_workers",
    "query_terms",
    "read_v1",
    "reconcile",
    "redact",
    "redact_flagged",
    "redact_url",
    "register_secret",
    "sha256_hex",
    "store_kind",
    "structure",
    "unstructure",
]

publish(__name__, globals(), __all__)
