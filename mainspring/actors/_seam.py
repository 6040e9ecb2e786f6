"""The one internal door into the kernel, for ``mainspring.supervision`` and the durable
layer (and the project's own tests).

Not public: nothing here is a promise to users, and any of it may change in any release.
``mainspring`` holds the kernel's public names and ``mainspring.actors`` the overseer
contract's types (what ``open_system(root=...)`` takes); this module re-exports those and
what an overseer and the runtime use besides: the functions an overseer may call on the
actors it oversees (``_overseer.py``), the generic hook that starts a supervisor
(``spawn_started``), the lifecycle states, the event bus. ``tests/test_layers.py`` holds
every package to it.
"""

from ._actor import DEFAULT_MAILBOX_SIZE as DEFAULT_MAILBOX_SIZE
from ._actor import Actor as Actor
from ._crash_log import log_error as log_error
from ._crash_log import scrub as scrub
from ._events import EventBus as EventBus
from ._lifecycle import ActorState as ActorState

# What the project's cost tests count: each message a mailbox takes, each control and ask.
from ._mailbox import Mailbox as Mailbox
from ._messaging import Messaging as Messaging
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
