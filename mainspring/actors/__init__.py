"""The actor kernel: actors, refs, mailboxes, the system, cancel reasons and timers.

This package imports nothing from ``mainspring.supervision`` or ``mainspring.storage``. Its
names are the top-level API's (``mainspring.Actor``, ...); ``__all__`` here lists the types of
the contract between the kernel and an overseer (a supervisor; ``_overseer.py``), which
``open_system(root=...)`` takes: :class:`Overseer`, :class:`RootOverseer`,
:class:`Supervised`. ``root`` is a callable that takes the :class:`ActorSystem` and returns
its :class:`RootOverseer`; a restart type is one of the strings ``"permanent"``,
``"transient"``, ``"temporary"``. What an overseer calls on the kernel besides is internal
(``_seam``).
"""

from . import _seam as _seam  # the internal door (not public): see its docstring
from ._actor import Actor as Actor
from ._context import cancel_reason as cancel_reason
from ._context import current_actor as current_actor
from ._errors import ActorDeadError as ActorDeadError
from ._errors import ActorFailed as ActorFailed
from ._errors import AskTimeout as AskTimeout
from ._errors import IllegalTransition as IllegalTransition
from ._errors import MailboxFull as MailboxFull
from ._errors import MainspringError as MainspringError
from ._errors import NameTaken as NameTaken
from ._events import EventsDropped as EventsDropped
from ._overseer import Overseer as Overseer
from ._overseer import RootOverseer as RootOverseer
from ._overseer import Supervised as Supervised
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
    "Overseer",
    "RootOverseer",
    "Supervised",
]
