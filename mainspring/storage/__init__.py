"""Storage: strict versioned records, the codec, redaction and id checks.

Still to come (see the storage issue): the file and SQLite backends, leases, the persistence
actor, checkpoints and drift. Nothing here imports ``mainspring.supervision``.
"""

from ._errors import InvalidId as InvalidId
from ._errors import RecordError as RecordError
from ._errors import StorageError as StorageError
from ._errors import TooLarge as TooLarge
from ._records import AgentTaskRecord as AgentTaskRecord
from ._records import BudgetInfo as BudgetInfo
from ._records import Checkpoint as Checkpoint
from ._records import Control as Control
from ._records import Execution as Execution
from ._records import Failure as Failure
from ._records import Finding as Finding
from ._records import Interruption as Interruption
from ._records import Lease as Lease
from ._records import Observation as Observation
from ._records import Pending as Pending
from ._records import Plan as Plan
from ._records import PlanStep as PlanStep
from ._records import parse_agent_tasks as parse_agent_tasks
from ._redact import redact as redact
from ._redact import register_secret as register_secret

__all__ = [
    "AgentTaskRecord",
    "BudgetInfo",
    "Checkpoint",
    "Control",
    "Execution",
    "Failure",
    "Finding",
    "Interruption",
    "InvalidId",
    "Lease",
    "Observation",
    "Pending",
    "Plan",
    "PlanStep",
    "RecordError",
    "StorageError",
    "TooLarge",
    "parse_agent_tasks",
    "redact",
    "register_secret",
]
