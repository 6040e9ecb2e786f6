"""Retention: deleting finished executions older than a given age (``Runtime.prune``).

Only terminal executions (completed, failed, cancelled) are ever deleted: asking for any
other status is refused, and the store's own ``delete`` decides "is it terminal" again,
atomically, under its write lock. Every delete goes through the persistence actor, in
order with the commits of the runs in this process. A record that does not read is never
deleted (E7): it is reported as skipped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection
from typing import final

import anyio.to_thread
import attrs

from ...storage._seam import EXECUTION_TERMINAL, Committer

__all__ = ["PRUNABLE", "PruneReport", "PruneSkip", "prune"]

#: The statuses ``prune`` selects by default: every finished one.
PRUNABLE: tuple[str, ...] = ("completed", "failed", "cancelled")


@final
@attrs.frozen(kw_only=True)
class PruneSkip:
    """An item of :attr:`PruneReport.skipped`, made by the runtime: an execution
    :meth:`Runtime.prune` selected, or could not read, and did not delete, with why
    (``reason``), so a caller sees what is left to look at instead of a shorter count."""

    id: str
    reason: str


@attrs.frozen(kw_only=True)
class PruneReport:
    """What :meth:`Runtime.prune` did: ``deleted`` ids (with ``dry_run``, those it would
    delete: nothing was), and those ``skipped``, each with why."""

    dry_run: bool
    deleted: tuple[str, ...] = ()
    skipped: tuple[PruneSkip, ...] = ()


def check_prune(older_than: float, statuses: Collection[str]) -> frozenset[str]:
    """The statuses asked for, checked; ValueError for a bad age or a status that is not
    terminal (prune never deletes an execution that may still run), TypeError for a string
    given as the collection."""
    if (
        not isinstance(older_than, int | float)
        or isinstance(older_than, bool)
        or not math.isfinite(older_than)
        or older_than < 0
    ):
        raise ValueError(f"older_than must be a number of seconds >= 0, not {older_than!r}")
    if isinstance(statuses, str):
        raise TypeError(f"statuses must be a collection of statuses, not the string {statuses!r}")
    chosen = frozenset(statuses)
    if not chosen:
        raise ValueError("statuses must name at least one of completed, failed, cancelled")
    for status in sorted(chosen, key=str):
        if status not in EXECUTION_TERMINAL:
            raise ValueError(
                f"prune deletes only finished executions: {status!r} is not one of "
                "completed, failed, cancelled"
            )
    return chosen


async def prune(
    committer: Committer,
    live: Collection[str],
    older_than: float,
    statuses: Collection[str],
    dry_run: bool,
) -> PruneReport:
    """Delete (or with ``dry_run`` only name) the executions whose status is one of
    ``statuses`` and whose ``updated_at`` is more than ``older_than`` seconds ago; those in
    ``live`` (running in this process, looked at as each is reached) are skipped."""
    chosen = check_prune(older_than, statuses)
    cutoff = time.time() - older_than
    listing = await anyio.to_thread.run_sync(committer.store.list)
    skipped = [
        PruneSkip(id=problem.id, reason=f"unreadable, never deleted: {problem.error}")
        for problem in listing.problems
    ]
    deleted: list[str] = []
    for execution in sorted(listing.executions, key=lambda e: e.id):
        if execution.status not in chosen or not execution.updated_at < cutoff:
            continue
        if execution.id in live:
            skipped.append(PruneSkip(id=execution.id, reason="still live in this runtime"))
        elif dry_run or await committer.delete(execution.id):
            deleted.append(execution.id)
        else:  # decided again by the store, atomically: gone, or not finished after all
            skipped.append(PruneSkip(id=execution.id, reason="no longer stored or not finished"))
    return PruneReport(dry_run=dry_run, deleted=tuple(deleted), skipped=tuple(skipped))
