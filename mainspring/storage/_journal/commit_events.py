"""The history entries a commit adds (V2), derived from what it changed (``_journal``): ids,
states and counts only (V1), written by the backends in the same atomic write as the commit.

What a record's diff cannot say -- why a lease was free when it was taken, whether the owner
that held it is known dead -- is said by the write that decided it (``acquire``,
``release``: :func:`takeover_entries`, :func:`release_entries`), passed as ``notes``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._codec import raw_form
from .._records import Execution, Lease
from .._stored_form import stored_raws
from .._workers import WorkerStatus
from .model import Base, Change

__all__ = ["events_for", "release_entries", "takeover_entries", "usage_counts"]

#: The statuses of a run that someone should be running (a lease released or lapsed on one
#: of them leaves it to be taken over).
_LIVE = ("planned", "running")
#: The most of an owner id the history keeps (ids are short; one given by hand may not be).
_OWNER_MOST = 256
#: A failure's kind: an exception's class name (qualified or not), or ``timeout``.
_FAILURE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}\Z")


def usage_counts(raw: Any) -> dict[str, Any]:
    """The tokens and cost of a stored usage (B3) as history fields, numbers only (V1); none
    for a usage absent, empty or not as written (a record that does not parse, E7)."""
    if type(raw) is not dict:
        return {}
    inputs, outputs, cost = (raw.get(k) for k in ("input_tokens", "output_tokens", "cost"))
    if type(inputs) is not int or type(outputs) is not int or type(cost) is not str:
        return {}
    if not (inputs or outputs or cost not in ("0", "0E-12")):
        return {}
    return {"input_tokens": inputs, "output_tokens": outputs, "cost": cost}


#: A worker's ``reason`` kept in the history: a short code (``native-start``,
#: ``no-progress:lint``); anything else is left out, never text a worker wrote (V1).
_REASON = re.compile(r"[a-z0-9._:-]{1,64}\Z")
_ID = re.compile(r"[A-Za-z0-9._:-]{1,256}\Z")
_STATUSES = frozenset(member.value for member in WorkerStatus)


def _an_id(value: Any) -> str | None:
    return value if type(value) is str and _ID.match(value) else None


def _worker_event(raw: Any, before: Any, base: dict[str, Any]) -> dict[str, Any] | None:
    """A worker's transition, if its (status, generation) moved from ``before``'s: ids,
    states and counts only (V1). None for no move, or a record that does not parse (E7)."""
    if type(raw) is not dict:
        return None
    worker_id, status, generation = _an_id(raw.get("id")), raw.get("status"), raw.get("generation")
    # Only what a record that parses could say: a record that does not (E7) may hold any
    # text where an id or a status belongs, and that never reaches the history (V1).
    if worker_id is None or type(status) is not str or status not in _STATUSES:
        return None
    if type(generation) is not int:
        return None
    if type(before) is dict and (before.get("status"), before.get("generation")) == (
        status,
        generation,
    ):
        return None
    task, step, reason = (raw.get(name) for name in ("task_id", "step_id", "reason"))
    return {
        **base,
        "kind": "worker",
        "worker_id": worker_id,
        "task_id": _an_id(task),
        "step_id": _an_id(step),
        "generation": generation,
        "status": status,
        "reason": reason if type(reason) is str and _REASON.match(reason) else None,
    }


def _worker_events(
    old: Execution | None,
    new: Execution,
    changes: Sequence[Change],
    stored: Mapping[str, Any],
    base: dict[str, Any],
) -> list[Any]:
    """Worker transitions: one per worker put whose status or generation moved, found from
    the records the commit replaced (``stored``, by key), so this costs what changed; when
    the workers were rewritten whole (a record that does not parse is among them, E7),
    every one is compared by id, so the history misses none (V2)."""
    events: list[Any] = []
    for change in changes:
        if change[0] == "put" and change[1] == "workers":
            event = _worker_event(change[4], stored.get(change[2]), base)
            if event is not None:
                events.append(event)
        elif change[0] == "reset" and change[1] == "workers":
            before = {
                raw.get("id"): raw
                for raw in stored_raws(old.workers if old is not None else ())
                if type(raw) is dict and type(raw.get("id")) is str
            }
            for raw in stored_raws(new.workers):
                key = raw.get("id") if type(raw) is dict else None
                event = _worker_event(raw, before.get(key) if type(key) is str else None, base)
                if event is not None:
                    events.append(event)
    return events


def _task_events(old: Execution | None, new: Execution, base: dict[str, Any]) -> list[Any]:
    """Task transitions when the tasks were rewritten whole (a record that does not parse is
    among them, E7): found by comparing states, so the history misses none (V2)."""
    before = {
        raw.get("id"): raw.get("state")
        for raw in stored_raws(old.agent_tasks if old is not None else ())
        if type(raw.get("id")) is str  # a record that does not parse may hold anything (E7)
    }
    events: list[Any] = []
    for raw in stored_raws(new.agent_tasks):
        task_id, state = raw.get("id"), raw.get("state")
        if type(task_id) is not str or type(state) is not str or before.get(task_id) == state:
            continue
        agent, step, inner, calls = (
            raw.get(name) for name in ("agent_id", "step_id", "inner_steps_done", "calls_used")
        )
        usage = usage_counts(raw.get("usage"))
        events.append(
            {
                **base,
                "kind": "task",
                "task_id": task_id,
                "agent_id": agent if type(agent) is str else None,
                "step_id": step if type(step) is str else None,
                "state": state,
                "inner_done": inner if type(inner) is int else None,
                "calls_used": calls if type(calls) is int else None,
                **usage,
            }
        )
    return events


def _owner(owner: str) -> str:
    return owner[:_OWNER_MOST]


def takeover_entries(
    stored: Execution,
    lease: Lease,
    ttl: float,
    now: float,
    *,
    gone: bool,
    dead: Callable[[str], bool],
) -> list[dict[str, Any]]:
    """What taking ``stored``'s lease as ``lease`` (a new tenure, at ``now`` on the store's
    clock, for ``ttl`` s) adds to the history: a ``takeover`` naming both owners and why the
    lease was free; before it, when the run was live under an owner that never let it go, a
    ``crash`` (that owner is gone: ``gone``, the caller found it so (L7), or ``dead``, asked
    only then, says so) or a ``lapse`` (nobody knows it dead). Owner ids only (V1)."""
    base: dict[str, Any] = {"execution_id": stored.id, "at": now}
    before = stored.lease
    entries: list[dict[str, Any]] = []
    previous = before.owner if before is not None and before.owner else None
    if previous is not None and before is not None:
        why = "owner-gone" if gone else "lease-expired"
        if stored.status in _LIVE:
            # Its last commit, or its last heartbeat (the expiry less a lease's length).
            seen = min(max(stored.updated_at, before.expires_at - ttl), now)
            found = gone or dead(previous)
            entries.append(
                {
                    **base,
                    "kind": "crash" if found else "lapse",
                    "owner": _owner(previous),
                    "last_seen": seen,
                    "lapsed_at": before.expires_at,
                    "reason": "owner-gone" if found else "lease-expired",
                }
            )
    elif stored.status == "paused":
        why = "after-pause"
    elif stored.status in _LIVE:
        # A lease its owner let go only after it lapsed keeps its expiry (``release``).
        lapsed = before is not None and before.expires_at > 0
        why = "lease-expired" if lapsed else "after-shutdown"
    else:
        why = "released"
    entries.append(
        {
            **base,
            "kind": "takeover",
            "owner": _owner(lease.owner),
            "previous_owner": _owner(previous) if previous is not None else None,
            "reason": why,
        }
    )
    return entries


def release_entries(stored: Execution, now: float) -> list[dict[str, Any]]:
    """What its owner letting ``stored``'s lease go at ``now`` adds to the history: a
    ``lapse`` if the lease had run out already while the run was live (the owner lost it;
    nobody took it since), else nothing (a run's own final write says the rest)."""
    lease = stored.lease
    if lease is None or not lease.owner or stored.status not in _LIVE:
        return []
    if lease.expires_at > now:
        return []
    return [
        {
            "execution_id": stored.id,
            "at": now,
            "kind": "lapse",
            "owner": _owner(lease.owner),
            "lapsed_at": lease.expires_at,
            "reason": "lease-expired",
        }
    ]


def _retry_event(raw: Any, step_id: str, base: dict[str, Any]) -> dict[str, Any] | None:
    """A failed attempt that will be tried again, from the observation that keeps it
    (``executions._rules.deadlines.attempts_data``): counts, a class name, a delay (V1)."""
    data = raw.get("data") if type(raw) is dict else None
    if type(data) is not dict or data.get("retrying") is not True:
        return None
    attempts = data.get("attempts")
    last = attempts[-1] if type(attempts) is list and attempts else None
    if type(last) is not dict or type(last.get("attempt")) is not int:
        return None
    kind = "timeout" if last.get("timed_out") is True else last.get("error_type")
    at, delay, most = last.get("at"), data.get("delay"), data.get("max_attempts")
    return {
        **base,
        "at": float(at) if isinstance(at, int | float) else base["at"],
        "kind": "retry",
        "step_id": step_id,
        "attempt": last["attempt"],
        "max_attempts": most if type(most) is int else None,
        "reason": kind if type(kind) is str and _FAILURE.match(kind) else None,
        "delay": float(delay) if isinstance(delay, int | float) else None,
    }


def _shutdown_event(old: Execution | None, new: Execution, base: dict[str, Any]) -> Any:
    """A run's write that lets its lease go while leaving the run live: its runtime closed
    (a pause, a wait or an end changes the status in that write)."""
    before, after = old.lease if old is not None else None, new.lease
    if before is None or not before.owner or after is None or after.owner:
        return None
    if new.status not in _LIVE:
        return None
    return {**base, "kind": "shutdown", "owner": _owner(before.owner), "status": new.status}


def events_for(
    stored: Base | None,
    new: Execution,
    changes: Sequence[Change],
    notes: Sequence[dict[str, Any]] | None = None,
) -> list[Any]:
    """The history entries a commit over ``stored`` (None: the first) adds: ids, states and
    counts only (V1), derived from what changed, so the history is exactly as durable as
    the commit that made it (V2). ``notes``: the entries the write that decided it says
    (a lease taken or given up, see :func:`takeover_entries`); without them, a run's
    write that gives its lease up leaving the run live adds a ``shutdown``."""
    old = stored.execution if stored is not None else None
    at = new.updated_at
    total = len(new.plan.steps) if new.plan is not None else 0
    done = len(new.completed_steps)
    base = {"execution_id": new.id, "at": at}
    run_usage = usage_counts(raw_form(new.usage)) if new.usage else {}
    events: list[dict[str, Any]] = []
    if notes:
        events.extend(notes)
    if old is None:
        created: dict[str, Any] = {**base, "kind": "created", "status": new.status}
        if new.lease is not None and new.lease.owner:
            created["owner"] = _owner(new.lease.owner)
        events.append(created)
    elif old.status != new.status:
        events.append({**base, "kind": "status", "status": new.status, "was": old.status})
    if new.plan_version != (old.plan_version if old is not None else 0):
        events.append({**base, "kind": "plan", "plan_version": new.plan_version, "total": total})
    for change in changes:
        op = change[0]
        if op == "put" and change[1] == "steps":
            step = change[4]
            events.append(
                {
                    **base,
                    "kind": "step",
                    "step_id": change[2],
                    "status": step.get("status"),
                    "done": done,
                    "total": total,
                    "calls_used": new.calls_used,
                    **run_usage,
                }
            )
        elif op == "put" and change[1] == "obs":
            retry = _retry_event(change[4], change[2], base)
            if retry is not None:
                events.append(retry)
        elif op == "put" and change[1] == "tasks":
            head = change[4].get("split", {})
            events.append(
                {
                    **base,
                    "kind": "task",
                    "task_id": change[2],
                    "agent_id": head.get("agent_id"),
                    "step_id": head.get("step_id"),
                    "state": head.get("state"),
                    "inner_done": head.get("inner_steps_done"),
                    "calls_used": head.get("calls_used"),
                    **usage_counts(head.get("usage")),
                }
            )
    if any(change[0] == "reset" and change[1] == "tasks" for change in changes):
        events.extend(_task_events(old, new, base))
    if new.workers or (old is not None and old.workers):
        workers = stored.workers if stored is not None else {}
        events.extend(_worker_events(old, new, changes, workers, base))
    old_pending = old.pending if old is not None else None
    if new.pending != old_pending:
        pending = new.pending
        events.append(
            {
                **base,
                "kind": "pending",
                "pending": pending.kind if pending is not None else None,
                "task_id": pending.agent_task_id if pending is not None else None,
            }
        )
    old_controls = old.controls if old is not None else ()
    if new.controls != old_controls:
        seen = set(old_controls)
        for control in new.controls:
            if control not in seen:
                entry = {**base, "kind": "control", "action": control.action}
                if control.by:
                    entry["owner"] = _owner(control.by)  # who issued it
                events.append(entry)
    if notes is None:
        shutdown = _shutdown_event(old, new, base)
        if shutdown is not None:
            events.append(shutdown)
    return events
