"""Why a refused commit or heartbeat stops a run, read from the record that refused it (V3),
and what a runner stopped that way still owes the record and its watchers.

A control issued in another process reaches a runner as a refusal: its next commit or
heartbeat meets a record that is cancelled, paused, finished or leased elsewhere. The
refusal alone says only *that* the runner must stop (E3); the record says *why*, and the code
being stopped is told that: the operator's ``Cancel`` or ``Pause`` with its detail and who
issued it, and ``LeaseLost`` only when another owner really holds (or took) the lease.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ...actors import Cancel, CancelReason, LeaseLost, Pause
from ...storage import AgentTaskRecord, Execution, Usage
from ...storage._seam import CommitOutcome, Control, Edit, holder
from .._rules.transitions import clamp_count, map_tasks
from . import events as ev

__all__ = ["add_calls", "end_event", "refusal_reason"]


def _last(record: Execution, action: str) -> Control | None:
    return next((c for c in reversed(record.controls) if c.action == action), None)


def refusal_reason(
    outcome: CommitOutcome, stored: Execution | None, owner: str, now: float
) -> CancelReason:
    """The reason a runner owned by ``owner`` stops when ``outcome`` refused its write and
    ``stored`` is the record as it is now (None if it could not be read)."""
    if outcome is CommitOutcome.MISSING:
        return Cancel(detail="the execution is no longer stored", source="store")
    if stored is not None and stored.status == "cancelled":
        control = _last(stored, "cancel")
        if control is not None:
            return Cancel(detail=control.reason, source=control.by, at=control.at)
        return Cancel(detail="cancelled on disk", source="store")
    if stored is not None and stored.status == "paused":
        control = _last(stored, "pause")
        if control is not None:
            return Pause(detail=control.reason, source=control.by, at=control.at)
        return Pause(detail="paused on disk", source="store")
    if outcome is CommitOutcome.PAUSED:  # the record could not be read again
        return Pause(detail="paused on disk by someone else", source="store")
    if outcome is CommitOutcome.TERMINAL and stored is None:
        return Cancel(detail="the execution ended on disk", source="store")
    # Finished by another runner, leased elsewhere, or our lease lapsed or was released:
    # this owner can no longer prove it may write (E3).
    other = holder(stored.lease, now) if stored is not None else None
    if stored is not None and stored.terminal:
        detail = f"another runner ended the execution {stored.status}"
        other = other or (stored.lease.owner if stored.lease is not None else "")
    elif other is not None and other != owner:
        detail = f"commit refused: {other} holds the lease"
    else:
        detail = f"commit refused: {outcome.value} (the lease lapsed or was released)"
        other = ""
    return LeaseLost(other or "", detail=detail, source="store")


def add_calls(
    extra: int,
    used: Mapping[str, int],
    spent: Usage | None = None,
    usage: Mapping[str, Usage] | None = None,
) -> Edit:
    """The edit that adds ``extra`` calls (and ``spent`` tokens and cost) to a paused or
    cancelled record, and raises each task's counts to what its runner counted (``used``,
    ``usage``): what was spent before a control from elsewhere stopped the run is charged,
    never lost (E9, B3); counts only grow. A record someone runs again is theirs to
    account."""
    reported = usage or {}

    def raise_count(task: AgentTaskRecord) -> AgentTaskRecord | None:
        count = used.get(task.id, 0)
        total = reported.get(task.id, task.usage)
        if count <= task.calls_used and task.usage.covers(total):
            return None
        # Each part at least what either side counted: never backwards (B3).
        grown = task.usage + total.since(task.usage)
        calls = clamp_count(max(count, task.calls_used))
        return attrs.evolve(task, calls_used=calls, usage=grown)

    def change(stored: Execution, now: float) -> Execution | None:
        if stored.status not in ("cancelled", "paused"):
            return None
        record, _ = map_tasks(stored, raise_count)
        return attrs.evolve(
            record,
            calls_used=clamp_count(stored.calls_used + extra),
            usage=stored.usage + spent if spent is not None else stored.usage,
        )

    return change


def end_event(stored: Execution, now: float) -> ev.RunEvent | None:
    """The event that announces how ``stored`` ended when a control written elsewhere ended
    it: its watchers here learn it as if it had been issued here."""
    tasks = stored.task_records
    if stored.status == "cancelled":
        stamped = sum(
            1
            for t in tasks
            if t.state == "cancelled"
            and t.interruption is not None
            and t.interruption.kind == "parent-cancel"
        )
        return ev.ExecutionCancelled(execution_id=stored.id, at=now, cancelled_tasks=stamped)
    if stored.status == "paused":
        requeued = sum(
            1
            for t in tasks
            if t.state == "queued" and t.interruption is not None and t.interruption.kind == "pause"
        )
        return ev.ExecutionPaused(execution_id=stored.id, at=now, requeued=requeued)
    return None
