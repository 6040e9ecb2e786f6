"""What the holder of a lease knows of it: how old its last confirmed renewal is.

The store keeps a lease right (L1, L4: fencing), but fencing only refuses *writes*. A tool
call, a model call or any other side effect is not a write: a runner that starts one after
its lease lapsed does it while another host may already be doing the same work. So the
holder decides too, before it starts anything (invariant L5):

- A renewal is timed from when its request was **sent**, on the holder's monotonic clock:
  the store extends the lease on its own clock when it receives the request, which is after
  it was sent, so the lease runs at least until ``sent + ttl`` — whatever the network or
  the server did meanwhile. Only a renewal (a heartbeat, or the renewal made before new
  work) counts: a commit keeps the lease on disk as it is (``with_disk_lease``), so its
  answer says the lease was live when it landed, never how long it runs on.
- The lease is *fresh* while the last confirmed renewal is younger than
  ``ttl - margin`` (:func:`lease_margin`: a fifth of the lease, at least
  :data:`MIN_MARGIN`), which leaves the margin for the time between this check and the
  side effect actually starting, and for clocks that run at slightly different rates.
- An answer that arrives after that point (the answer to a COMMIT held by the network, a
  long GC pause, a frozen VM) is *late*: what it confirms is true of the past only; another
  host may have taken the run over since. Nothing else runs until a renewal answered in
  time shows the store still holds the lease for this tenure (the renewal is fenced by the
  lease's epoch, and a lapsed lease is never renewed, so its success proves nobody took the
  run meanwhile: a busy event loop or a loaded machine is not a lost lease). If the store
  refuses it, or its answers keep coming late, the runner stops with ``LeaseLost`` (E3) and
  leaves the record to whoever holds the lease now.

The clock is the runtime's ``lease_clock``; tests pass a fake one. The default,
:func:`lease_clock`, counts time the machine spent suspended (``CLOCK_BOOTTIME`` where the
system has it): :func:`time.monotonic` stands still through a suspend, so a laptop or a VM
resumed after an hour would find its lease "fresh" and start work on a lease that lapsed
an hour ago, perhaps taken over by another host meanwhile.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

__all__ = ["MIN_MARGIN", "LeaseWatch", "check_lease_clock", "lease_clock", "lease_margin"]

#: The least margin kept before a lease's end (seconds), whatever the lease's length.
MIN_MARGIN = 0.25


def _boottime() -> Callable[[], float] | None:
    clock_id = getattr(time, "CLOCK_BOOTTIME", None)
    if clock_id is None:
        return None
    try:
        time.clock_gettime(clock_id)
    except OSError:  # pragma: no cover - a kernel without it
        return None
    return functools.partial(time.clock_gettime, clock_id)


#: The default lease clock (L5): monotonic seconds that go on while the machine sleeps.
lease_clock: Callable[[], float] = _boottime() or time.monotonic


def check_lease_clock(clock: object) -> None:
    """TypeError unless ``clock`` is a callable that answers seconds as a finite number
    (read once, at once): a clock that answers anything else (a datetime, None) would
    otherwise crash every run at its first renewal, long after the runtime opened."""
    if not callable(clock):
        raise TypeError(f"lease_clock must be callable, not {clock!r}")
    now = clock()
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise TypeError(f"lease_clock must return seconds as a finite number, not {now!r}")


def lease_margin(ttl: float) -> float:
    """The part of a lease of ``ttl`` seconds the holder never counts on (L5): a fifth of
    it, at least :data:`MIN_MARGIN` (and never more than half of it)."""
    return min(max(ttl / 5, MIN_MARGIN), ttl / 2)


class LeaseWatch:
    """The age of one runner's lease as the holder knows it (L5), on ``clock``.

    ``sent()`` stamps a request (a renewal, a commit);
    ``confirmed(stamp)`` records its positive answer and says whether it came in time;
    ``in_time(stamp)`` says whether a commit's answer came in time (it confirms nothing);
    ``fresh()`` says whether new work may start now. Before any confirmation the lease is
    not fresh: the first renewal confirms it.
    """

    __slots__ = ("_clock", "_confirmed", "limit", "ttl")

    def __init__(self, ttl: float, clock: Callable[[], float] = lease_clock) -> None:
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

    def in_time(self, stamp: float) -> bool:
        """Whether the answer to the request stamped ``stamp`` (a commit, which renews
        nothing) came while a lease confirmed at ``stamp`` would still be counted on."""
        return self._clock() - stamp < self.limit

    def fresh(self) -> bool:
        """Whether the last confirmed renewal is young enough for new work to start (L5)."""
        return self._confirmed is not None and self._clock() - self._confirmed < self.limit

    def age(self, stamp: float | None = None) -> float | None:
        """Seconds since ``stamp`` (default: the last confirmed renewal), or None."""
        start = self._confirmed if stamp is None else stamp
        return None if start is None else self._clock() - start
