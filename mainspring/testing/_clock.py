"""A clock a test moves by hand."""

from __future__ import annotations

import math
from typing import final

__all__ = ["ManualClock"]


@final
class ManualClock:
    """A clock that stands still until the test moves it: ``clock()`` returns :attr:`now`.

    Pass it wherever mainspring takes a ``clock`` (a callable returning seconds as a float):
    a store's lease clock (``SqliteStore(path, clock=clock)``, :class:`MemoryStore`), a
    supervisor's restart-intensity and backoff clock
    (``spawn_supervisor(..., clock=clock)``, ``RootSupervisor(system, clock=clock)``), a
    runtime's ``lease_clock``. Then ``clock.advance(30)`` lets a lease lapse or a restart
    window close at once, with no sleep. It never moves backwards.
    """

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = _seconds(start, "start")

    @property
    def now(self) -> float:
        """The time it reads now, in seconds."""
        return self._now

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` (finite, not negative) forward; returns the new time."""
        step = _seconds(seconds, "seconds")
        if step < 0:
            raise ValueError(f"a clock does not go backwards: advance({seconds!r})")
        self._now += step
        return self._now

    def set(self, now: float) -> None:
        """Set the time to ``now``, which must not be before the time it reads."""
        value = _seconds(now, "now")
        if value < self._now:
            raise ValueError(f"a clock does not go backwards: {value} < {self._now}")
        self._now = value

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now!r})"


def _seconds(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, not {value!r}")
    return float(value)
