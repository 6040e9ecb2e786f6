"""The actor lifecycle as an explicit transition table (STYLE.md, habit 11).

::

    STARTING -> RUNNING -> STOPPING -> STOPPED
    STARTING -------------> STOPPING               (stopped, cancelled or crashed in on_start)
                            STOPPING -> RESTARTING -> STARTING   (a new instance)
                                        RESTARTING -> STOPPED

RESTARTING is a supervised actor between two incarnations: its ref and mailbox live on while
its supervisor decides; it leaves to STARTING (restarted) or STOPPED (for good).

Anything not in the table is a bug in the runtime, and raises instead of corrupting state.
"""

from __future__ import annotations

import enum

__all__ = ["ActorState", "IllegalTransition", "check_transition"]


class ActorState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    STOPPED = "stopped"


class IllegalTransition(RuntimeError):
    """The runtime tried a lifecycle move the table forbids (a mainspring bug)."""


_ALLOWED: dict[ActorState, frozenset[ActorState]] = {
    ActorState.STARTING: frozenset({ActorState.RUNNING, ActorState.STOPPING}),
    ActorState.RUNNING: frozenset({ActorState.STOPPING}),
    ActorState.STOPPING: frozenset({ActorState.STOPPED, ActorState.RESTARTING}),
    ActorState.RESTARTING: frozenset({ActorState.STARTING, ActorState.STOPPED}),
    ActorState.STOPPED: frozenset(),
}


def check_transition(current: ActorState, new: ActorState) -> ActorState:
    """Return ``new`` if the table allows ``current -> new``; raise otherwise."""
    if new not in _ALLOWED[current]:
        raise IllegalTransition(f"actor lifecycle: {current.value} -> {new.value} is not allowed")
    return new
