"""Supervision: supervisors with restart strategies, intensity, backoff and escalation.

Built on the public API of ``mainspring.actors`` and its overseer contract only. Importing it
makes :class:`RootSupervisor` the root of every actor system opened without ``root=``.
"""

from .._public import publish
from ._events import ChildFailed as ChildFailed
from ._events import ChildRestarted as ChildRestarted
from ._events import ChildStarted as ChildStarted
from ._events import Escalated as Escalated
from ._events import IntensityExceeded as IntensityExceeded
from ._events import SupervisionEvent as SupervisionEvent
from ._ref import ChildInfo as ChildInfo
from ._ref import SupervisorRef as SupervisorRef
from ._root import RootSupervisor as RootSupervisor
from ._spawn import spawn_supervisor as spawn_supervisor
from ._spec import Backoff as Backoff
from ._spec import ChildSpec as ChildSpec
from ._supervisor import NoSuchChild as NoSuchChild
from ._supervisor import RestartIntensityExceeded as RestartIntensityExceeded
from ._supervisor import Supervisor as Supervisor

__all__ = [
    "Backoff",
    "ChildFailed",
    "ChildInfo",
    "ChildRestarted",
    "ChildSpec",
    "ChildStarted",
    "Escalated",
    "IntensityExceeded",
    "NoSuchChild",
    "RestartIntensityExceeded",
    "RootSupervisor",
    "SupervisionEvent",
    "Supervisor",
    "SupervisorRef",
    "spawn_supervisor",
]

publish(__name__, globals(), __all__)
