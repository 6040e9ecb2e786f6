"""The actor kernel: actors, refs, mailboxes, the system, cancel reasons and timers.

This package imports nothing from ``mainspring.supervision`` or ``mainspring.storage``.
"""

from ._cell import DEFAULT_MAILBOX_SIZE as DEFAULT_MAILBOX_SIZE
from ._cell import Actor as Actor
from ._cell import Timer as Timer
from ._cell import cancel_reason as cancel_reason
from ._cell import current_actor as current_actor
from ._errors import ActorDeadError as ActorDeadError
from ._errors import ActorFailed as ActorFailed
from ._errors import AskTimeout as AskTimeout
from ._errors import MailboxFull as MailboxFull
from ._errors import MainspringError as MainspringError
from ._errors import NameTaken as NameTaken
from ._events import EventsDropped as EventsDropped
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

__all__ = [
    "DEFAULT_MAILBOX_SIZE",
    "Actor",
    "ActorDeadError",
    "ActorFailed",
    "ActorRef",
    "ActorSystem",
    "AskTimeout",
    "BudgetExhausted",
    "Cancel",
    "CancelReason",
    "Crash",
    "EventsDropped",
    "LeaseLost",
    "MailboxFull",
    "MainspringError",
    "NameTaken",
    "ParentCancel",
    "Pause",
    "Shutdown",
    "Stop",
    "Terminated",
    "Timeout",
    "Timer",
    "cancel_reason",
    "current_actor",
    "open_system",
]
