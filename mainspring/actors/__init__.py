"""The actor kernel: actors, refs, mailboxes, the system, cancel reasons and timers.

This package imports nothing from ``mainspring.supervision`` or ``mainspring.storage``. Besides
the names of the top-level API it exports the contract an overseer (a supervisor) implements
and uses (``_overseer.py``): :class:`Overseer`, :class:`RootOverseer`, :class:`Supervised`,
and the functions an overseer may call.
"""

from ._actor import DEFAULT_MAILBOX_SIZE as DEFAULT_MAILBOX_SIZE
from ._actor import Actor as Actor
from ._context import cancel_reason as cancel_reason
from ._context import current_actor as current_actor
from ._errors import ActorDeadError as ActorDeadError
from ._errors import ActorFailed as ActorFailed
from ._errors import AskTimeout as AskTimeout
from ._errors import MailboxFull as MailboxFull
from ._errors import MainspringError as MainspringError
from ._errors import NameTaken as NameTaken
from ._events import EventBus as EventBus
from ._events import EventsDropped as EventsDropped
from ._lifecycle import ActorState as ActorState
from ._overseer import RESTART_TYPES as RESTART_TYPES
from ._overseer import Overseer as Overseer
from ._overseer import RestartType as RestartType
from ._overseer import RootOverseer as RootOverseer
from ._overseer import RootOverseerFactory as RootOverseerFactory
from ._overseer import Supervised as Supervised
from ._overseer import deliver_control as deliver_control
from ._overseer import find_child as find_child
from ._overseer import publish_event as publish_event
from ._overseer import spawn_started as spawn_started
from ._overseer import spawn_supervised as spawn_supervised
from ._reasons import BudgetExhausted as BudgetExhausted
from ._reasons import Cancel as Cancel
from ._reasons import CancelReason as CancelReason
from ._reasons import Crash as Crash
from ._reasons import LeaseLost as LeaseLost
from ._reasons import ParentCancel as ParentCancel
from ._reasons import Pause as Pause
from ._reasons import Shutdown as Shutdown
from ._reasons import Stop as Stop
from ._reasons import Timeout as Timeout
from ._ref import ActorRef as ActorRef
from ._ref import Terminated as Terminated
from ._system import ActorSystem as ActorSystem
from ._system import open_system as open_system
from ._task import ActorTask as ActorTask
from ._task import TaskEnded as TaskEnded
from ._timer import Timer as Timer

__all__ = [
    "RESTART_TYPES",
    "ActorState",
    "EventBus",
    "Overseer",
    "RestartType",
    "RootOverseer",
    "RootOverseerFactory",
    "Supervised",
    "deliver_control",
    "find_child",
    "publish_event",
    "spawn_started",
    "spawn_supervised",
]
