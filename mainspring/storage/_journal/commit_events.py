"""The history entries a commit adds (V2), derived from what it changed (``_journal``): ids,
states and counts only (V1), written by the backends in the same atomic write as the commit."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._codec import raw_form
from .._records import Execution
from .._stored_form import stored_raws
from .._workers import WorkerStatus
from .model import Base, Change

__all__ = ["events_for", "usage_counts"]


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


def events_for(stored: Base | None, new: Execution, changes: Sequence[Change]) -> list[Any]:
    """The history entries a commit over ``stored`` (None: the first) adds: ids, states and
    counts only (V1), derived from what changed, so the history is exactly as durable as
    the commit that made it (V2)."""
    old = stored.execution if stored is not None else None
    at = new.updated_at
    total = len(new.plan.steps) if new.plan is not None else 0
    done = len(new.completed_steps)
    base = {"execution_id": new.id, "at": at}
    run_usage = usage_counts(raw_form(new.usage)) if new.usage else {}
    events: list[dict[str, Any]] = []
    if old is None:
        events.append({**base, "kind": "created", "status": new.status})
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
                events.append({**base, "kind": "control", "action": control.action})
    return events
