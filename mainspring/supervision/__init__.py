"""Supervision: supervisors with restart strategies, intensity, backoff and escalation.

Built on ``mainspring.actors``; it plugs the system's root supervisor into it at import time.
"""

from ._events import ChildFailed as ChildFailed
from ._events import ChildRestarted as ChildRestarted
from ._events import ChildStarted as ChildStarted
from ._events import Escalated as Escalated
from ._events import IntensityExceeded as IntensityExceeded
from ._events import SupervisionEvent as SupervisionEvent
from ._spec import Backoff as Backoff
from ._spec import ChildSpec as ChildSpec
from ._supervisor import ChildInfo as ChildInfo
from ._supervisor import NoSuchChild as NoSuchChild
from ._supervisor import RestartIntensityExceeded as RestartIntensityExceeded
from ._supervisor import Supervisor as Supervisor
from ._supervisor import SupervisorRef as SupervisorRef

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
    "SupervisionEvent",
    "Supervisor",
    "SupervisorRef",
]
