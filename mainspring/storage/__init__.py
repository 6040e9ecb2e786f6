"""Storage: strict versioned records, the stores, their errors, migration and redaction.

``__all__`` lists what programs use (records they read, the stores, ``open_store``, the
errors, ``migrate_store``, ``redact`` / ``register_secret``, the memory types they pass, the
history entry, the state names). The rest (the codec, id checks, the journal, the
persistence actor ``open_committer``, bounds, parsers) is internal: the runtime and the
command line reach it through ``mainspring.storage._seam``, the one internal door, and it
may change in any release. Names below that ``__all__`` does not list are such internals.

Nothing here imports ``mainspring.supervision`` or ``mainspring.executions``. The persistence
actor is the only writer during a run.

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

*Layouts.* ``SCHEMA_VERSION`` is recorded in the store (SQLite ``meta``, files ``.format``);
an older layout is refused with :class:`StoreNeedsMigration` (run ``mainspring migrate``), a
newer one with a clear error.
"""

from .._public import publish
from . import _seam as _seam  # the internal door (not public): see its docstring
from ._backend import Store as Store
from ._errors import InvalidId as InvalidId
from ._errors import RecordError as RecordError
from ._errors import StorageError as StorageError
from ._errors import TooLarge as TooLarge
from ._file import FileStore as FileStore
from ._history import HistoryEvent as HistoryEvent
from ._home import open_store as open_store
from ._memory import Fact as Fact
from ._memory import Scope as Scope
from ._migrate import MigrationError as MigrationError
from ._migrate import MigrationReport as MigrationReport
from ._migrate import StoreInUse as StoreInUse
from ._migrate import migrate_store as migrate_store
from ._persistence import PersistenceFailed as PersistenceFailed
from ._pg_retry import StoreUnavailable as StoreUnavailable
from ._postgres import PostgresStore as PostgresStore
from ._records import EXECUTION_TERMINAL as EXECUTION_TERMINAL
from ._records import STEP_FINISHED as STEP_FINISHED
from ._records import TASK_TERMINAL as TASK_TERMINAL
from ._records import AgentTaskRecord as AgentTaskRecord
from ._records import BudgetInfo as BudgetInfo
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
from ._records import StepStatus as StepStatus
from ._records import TaskState as TaskState
from ._redact import redact as redact
from ._redact import register_secret as register_secret
from ._retry import RetryPolicy as RetryPolicy
from ._sqlite import SqliteStore as SqliteStore
from ._sqlite import StoreNeedsMigration as StoreNeedsMigration
from ._usage import Usage as Usage
from ._workers import TrailEntry as TrailEntry
from ._workers import WorkerRecord as WorkerRecord
from ._workers import WorkerStatus as WorkerStatus
from ._workers import WorkerTask as WorkerTask
from ._workers import WorkerTaskState as WorkerTaskState

__all__ = [
    "EXECUTION_TERMINAL",
    "STEP_FINISHED",
    "TASK_TERMINAL",
    "AgentTaskRecord",
    "BudgetInfo",
    "Evidence",
    "Execution",
    "ExecutionStatus",
    "Fact",
    "Failure",
    "FileStore",
    "Finding",
    "FindingStatus",
    "HistoryEvent",
    "Interruption",
    "InvalidId",
    "Lease",
    "MigrationError",
    "MigrationReport",
    "Observation",
    "ObservationCode",
    "Pending",
    "PersistenceFailed",
    "PostgresStore",
    "RecordError",
    "RetryPolicy",
    "Scope",
    "SqliteStore",
    "StepStatus",
    "Store",
    "StoreInUse",
    "StoreNeedsMigration",
    "StoreUnavailable",
    "TaskState",
    "TooLarge",
    "TrailEntry",
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
