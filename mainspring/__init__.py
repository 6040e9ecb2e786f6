"""mainspring: an embedded actor runtime for durable AI-agent executions, on asyncio and trio.

The names most programs need are here. The rest live in one namespace each:
``mainspring.supervision`` (supervisors), ``mainspring.storage`` (records and stores),
``mainspring.executions`` (the rest of the durable layer), ``mainspring.events`` (the run
events ``Runtime.events()`` yields), ``mainspring.testing`` (test doubles: a store in
memory, a manual clock, a scripted worker host) and ``mainspring.actors`` (the types of the
contract a supervisor implements).
``import mainspring`` loads the kernel only; supervision, the durable layer and the stores
load on first use.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from . import actors
from ._public import KERNEL, LAZY, TOP_LEVEL, publish
from ._public import open_system as open_system
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
from .actors import IllegalTransition as IllegalTransition
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

# O1: the library is silent unless the application configures logging. Its loggers
# ("mainspring", "mainspring.executions", ...) reach the application's handlers; without
# any, this handler keeps stdlib's last resort from printing warnings to stderr.
logging.getLogger("mainspring").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from . import events as events
    from . import executions as executions
    from . import storage as storage
    from . import supervision as supervision
    from . import testing as testing
    from .executions import AgentContext as AgentContext
    from .executions import ClarificationNeeded as ClarificationNeeded
    from .executions import ExecutionBusy as ExecutionBusy
    from .executions import ExecutionHandle as ExecutionHandle
    from .executions import ExecutionResult as ExecutionResult
    from .executions import InvalidPlan as InvalidPlan
    from .executions import PlannerContext as PlannerContext
    from .executions import Runtime as Runtime
    from .executions import UnknownExecution as UnknownExecution
    from .executions import WithUsage as WithUsage
    from .executions import open_runtime as open_runtime
    from .storage import Plan as Plan
    from .storage import PlanStep as PlanStep
    from .storage import StorageError as StorageError

__version__ = "0.1.0.dev0"

publish(__name__, globals(), KERNEL)
publish(actors.__name__, vars(actors), actors.__all__)  # the overseer contract

_LAZY = LAZY
_NAMESPACES = ("executions", "events", "storage", "supervision", "testing", "cli")


def __getattr__(name: str) -> Any:
    # PEP 562: the execution layer and the stores (cattrs, orjson, sqlite3) load when a
    # program first uses them, not when it imports mainspring.
    if name in _NAMESPACES:
        return importlib.import_module(f"{__name__}.{name}")
    namespace = _LAZY.get(name)
    if namespace is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{namespace}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_NAMESPACES})


__all__ = sorted(TOP_LEVEL)
