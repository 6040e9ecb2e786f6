"""Restart intensity: the one sliding window both a Supervisor and the root supervisor use."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import anyio

__all__ = ["RestartWindow"]


class RestartWindow:
    """Counts restarts; more than ``max_restarts`` within ``period`` seconds is too many.

    Times come from ``clock`` (default: the event loop's clock, ``anyio.current_time``), so a
    test can inject a fake one and move time by hand. A restart counted at ``t`` stops counting
    once the clock reaches ``t + period``.
    """

    __slots__ = ("_clock", "_times", "max_restarts", "period")

    def __init__(
        self, max_restarts: int, period: float, clock: Callable[[], float] | None = None
    ) -> None:
        self.max_restarts = max_restarts
        self.period = period
        self._clock = clock or anyio.current_time
        # Only the latest max_restarts + 1 restarts can matter to the check.
        self._times: deque[float] = deque(maxlen=max_restarts + 1)

    def add(self) -> bool:
        """Count one restart now; False if that makes more than ``max_restarts`` in the window."""
        now = self._clock()
        times = self._times
        times.append(now)
        while times and times[0] <= now - self.period:
            times.popleft()
        return len(times) <= self.max_restarts

    def __len__(self) -> int:
        """The restarts counted in the window as of the latest :meth:`add`."""
        return len(self._times)
