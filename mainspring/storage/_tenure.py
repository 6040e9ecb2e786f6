"""Who runs a stored run now, as every reader tells it (the command's ``ls`` and ``show``,
the web view): its lease's holder, since when a run that should be running has had none
(its lease lapsed, or its runtime let it go), and whether a live-looking lease belongs to a
process of this host that ended (L7). Blocking (``owner_dead`` reads ``/proc``): call them
off the event loop."""

from __future__ import annotations

from ._backends.contract import holder
from ._owners import owner_gone
from ._records import Execution

__all__ = ["holding", "no_owner_since", "owner_dead"]

#: The statuses in which someone is meant to be running a run.
_MEANT_TO_RUN = ("planned", "running")


def holding(execution: Execution, now: float) -> str | None:
    """Who holds the run's lease at ``now`` (the store's clock); nobody holds a finished
    run's: a terminal record's lease is void (L3; records written before the final write
    released it may still name one)."""
    return None if execution.terminal else holder(execution.lease, now)


def no_owner_since(execution: Execution, now: float) -> float | None:
    """When a run that should be running (planned or running) was last held, if nobody
    holds it now: its lease lapsed (when it expired) or was released (its last write, the
    one that let it go, e.g. a runtime closing). None while an owner holds it, and for a
    run in any other status (paused, waiting, finished: nobody is meant to run it)."""
    if execution.status not in _MEANT_TO_RUN or holding(execution, now) is not None:
        return None
    lease = execution.lease
    if lease is not None and lease.expires_at > 0:
        return lease.expires_at  # lapsed (and maybe let go since: it keeps its expiry)
    return execution.updated_at


def owner_dead(execution: Execution, now: float) -> bool:
    """L7: a run that should be running whose lease still looks live but whose owner, a
    process of this host, is gone (``kill -9``): nobody runs it until the lease lapses or
    a runtime recovers it."""
    if execution.status not in _MEANT_TO_RUN:
        return False
    held_by = holding(execution, now)
    return held_by is not None and owner_gone(held_by)
