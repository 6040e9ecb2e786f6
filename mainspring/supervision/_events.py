"""Supervision events, published on ``system.events()``: names, paths, reasons and counts only."""

from __future__ import annotations

import time

import attrs

from ..actors import CancelReason

__all__ = [
    "ChildFailed",
    "ChildRestarted",
    "ChildStarted",
    "Escalated",
    "IntensityExceeded",
    "SupervisionEvent",
]


@attrs.frozen(kw_only=True)
class SupervisionEvent:
    """Base class. ``supervisor`` is the supervisor's path (``/`` for the system's root)."""

    supervisor: str
    at: float = attrs.field(factory=time.time, eq=False)


@attrs.frozen(kw_only=True)
class ChildStarted(SupervisionEvent):
    """A child's first instance finished ``on_start``."""

    child: str


@attrs.frozen(kw_only=True)
class ChildRestarted(SupervisionEvent):
    """A child got a fresh instance; ``restarts`` counts them, ``reason`` is why it ended."""

    child: str
    restarts: int
    reason: CancelReason


@attrs.frozen(kw_only=True)
class ChildFailed(SupervisionEvent):
    """A child crashed. ``restarting`` says whether a restart follows."""

    child: str
    reason: CancelReason
    restarting: bool


@attrs.frozen(kw_only=True)
class IntensityExceeded(SupervisionEvent):
    """More than ``max_restarts`` restarts within ``period`` seconds."""

    restarts: int
    period: float


@attrs.frozen(kw_only=True)
class Escalated(SupervisionEvent):
    """The supervisor gave up and failed; ``to`` is who handles it next (its parent's path)."""

    to: str
    reason: CancelReason
