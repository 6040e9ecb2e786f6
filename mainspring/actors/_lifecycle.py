"""The actor lifecycle as an explicit transition table (STYLE.md, habit 11).

::

    STARTING -> RUNNING -> STOPPING -> STOPPED
    STARTING -------------> STOPPING               (stopped, cancelled or crashed in on_start)
                            STOPPING -> RESTARTING -> STARTING   (a new instance)
                                        RESTARTING -> STOPPED

RESTARTING is a supervised actor between two incarnations: its ref and mailbox live on while
its supervisor decides; it leaves to STARTING (restarted) or STOPPED (for good).

Anything not in the table is a bug in the runtime, and raises :class:`IllegalTransition` (the
one class every lifecycle of mainspring raises) instead of corrupting state. The execution
layer's tables live in ``mainspring/executions/_rules/lifecycle.py``; this one stays in the
kernel, which imports nothing else of mainspring.
"""

from __future__ import annotations

import enum

from ._errors import IllegalTransition

__all__ = ["ActorState", "check_transition"]


class ActorState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    STOPPED = "stopped"


_ALLOWED: dict[ActorState, frozenset[ActorState]] = {
    ActorState.STARTING: frozenset({ActorState.RUNNING, ActorState.STOPPING}),
    ActorState.RUNNING: frozenset({ActorState.STOPPING}),
    ActorState.STOPPING: frozenset({ActorState.STOPPED, ActorState.RESTARTING}),
    ActorState.RESTARTING: frozenset({ActorState.STARTING, ActorState.STOPPED}),
    ActorState.STOPPED: frozenset(),
}


def check_transition(current: ActorState, new: ActorState, name: str = "an actor") -> ActorState:
    """Return ``new`` if the table allows ``current -> new``; raise :class:`IllegalTransition`
    otherwise. ``name`` (the actor's path) names it in the error."""
    if new not in _ALLOWED[current]:
        raise IllegalTransition("actor", name, current.value, new.value)
    return new
