"""What the holder of a lease knows of it: how old its last confirmed renewal is.

The store keeps a lease right (L1, L4: fencing), but fencing only refuses *writes*. A tool
call, a model call or any other side effect is not a write: a runner that starts one after
its lease lapsed does it while another host may already be doing the same work. So the
holder decides too, before it starts anything (invariant L5):

- A renewal (a heartbeat, a commit) is timed from when its request was **sent**, on the
  holder's monotonic clock: the store extends the lease on its own clock when it receives
  the request, which is after it was sent, so the lease runs at least until
  ``sent + ttl`` — whatever the network or the server did meanwhile.
- The lease is *fresh* while the last confirmed renewal is younger than
  ``ttl - margin`` (:func:`lease_margin`: a fifth of the lease, at least
  :data:`MIN_MARGIN`), which leaves the margin for the time between this check and the
  side effect actually starting, and for clocks that run at slightly different rates.
- An answer that arrives after that point (the answer to a COMMIT held by the network, a
  long GC pause, a frozen VM) is *late*: what it confirms is true of the past only; another
  host may have taken the run over since. The runner stops with ``LeaseLost`` before
  anything else runs (E3), and leaves the record to whoever holds the lease now.

The clock is the runtime's ``lease_clock`` (default :func:`time.monotonic`); tests pass a
fake one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["MIN_MARGIN", "LeaseWatch", "lease_margin"]

#: The least margin kept before a lease's end (seconds), whatever the lease's length.
MIN_MARGIN = 0.25


def lease_margin(ttl: float) -> float:
    """The part of a lease of ``ttl`` seconds the holder never counts on (L5): a fifth of
    it, at least :data:`MIN_MARGIN` (and never more than half of it)."""
    return min(max(ttl / 5, MIN_MARGIN), ttl / 2)


class LeaseWatch:
    """The age of one runner's lease as the holder knows it (L5), on ``clock``.

    ``sent()`` stamps a request that renews the lease (a heartbeat or a commit);
    ``confirmed(stamp)`` records its positive answer and says whether it came in time;
    ``fresh()`` says whether new work may start now. Before any confirmation the lease is
    not fresh: the first commit of a run confirms it.
    """

    __slots__ = ("_clock", "_confirmed", "limit", "ttl")

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        #: How old the last confirmed renewal may be when new work starts (seconds).
        self.limit = ttl - lease_margin(ttl)
        self._clock = clock
        self._confirmed: float | None = None

    def sent(self) -> float:
        """The stamp of a renewing request sent now."""
        return self._clock()

    def confirmed(self, stamp: float) -> bool:
        """The store confirmed the request stamped ``stamp``. False if the answer came too
        late to count (L5): the lease may have lapsed before it arrived, so nothing new may
        start on it; the caller stops the run."""
        if self._clock() - stamp >= self.limit:
            return False
        if self._confirmed is None or stamp > self._confirmed:
            self._confirmed = stamp
        return True

    def fresh(self) -> bool:
        """Whether the last confirmed renewal is young enough for new work to start (L5)."""
        return self._confirmed is not None and self._clock() - self._confirmed < self.limit

    def age(self, stamp: float | None = None) -> float | None:
        """Seconds since ``stamp`` (default: the last confirmed renewal), or None."""
        start = self._confirmed if stamp is None else stamp
        return None if start is None else self._clock() - start
