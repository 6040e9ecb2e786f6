"""The read model: what the pages show, as JSON-ready dicts, read from the store's records.

Lenient like every read (E7): what a record lacks is left out, never fatal, and what does not
parse is counted, not shown. Everything returned goes through ``redact`` (E5) on the way out
(:func:`runs_view`, :func:`run_view`); the page renders it as text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from ..executions._seam import question_answered, unanswered
from ..storage import (
    AgentTaskRecord,
    Execution,
    ExecutionStatus,
    HistoryEvent,
    Observation,
    Scope,
    Store,
    redact,
)
from ..storage._seam import (
    MAX_SEARCH_LIMIT,
    STEP_FINISHED,
    FactFilter,
    MemoryBackend,
    holding,
    no_owner_since,
    owner_dead,
    parse_trail,
    parse_worker_tasks,
    parse_workers,
    unstructure,
)
from ._layout import layout

#: The statuses a list filter may name.
STATUSES = tuple(status.value for status in ExecutionStatus)
#: The most runs one listing returns (the newest).
MAX_RUNS = 1_000
#: The most of a goal the list shows.
GOAL_MOST = 300
#: How much of one kept traceback is sent (its end: the exception's own line says most).
TRACEBACK_MOST = 20_000
#: The most facts a run view lists.
FACTS_MOST = 100
#: The last trail entries of the workers a run view lists.
TRAIL_MOST = 50


def _clip(text: str | None, most: int) -> str | None:
    if text is None or len(text) <= most:
        return text
    return text[: most - 1] + "\u2026"


def _tail(text: str | None, most: int) -> str | None:
    if text is None or len(text) <= most:
        return text
    return "[cut: its start is left out]\n" + text[-most:]


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _seconds(start: Any, end: Any) -> float | None:
    first, last = _finite(start), _finite(end)
    return None if first is None or last is None else max(0.0, last - first)


def _step_counts(execution: Execution) -> dict[str, int]:
    counts: dict[str, int] = {}
    for step in execution.plan.steps if execution.plan is not None else ():
        status = str(step.status.value)
        counts[status] = counts.get(status, 0) + 1
    return counts


def run_summary(execution: Execution, now: float) -> dict[str, Any]:
    """One row of the runs list."""
    counts = _step_counts(execution)
    total = sum(counts.values())
    return {
        "id": execution.id,
        "status": execution.status.value,
        "goal": _clip(execution.goal, GOAL_MOST),
        "steps_total": total,
        "steps": counts,
        "steps_done": sum(n for status, n in counts.items() if status in STEP_FINISHED),
        "calls_used": execution.calls_used,
        "tokens": execution.usage.tokens,
        "cost": f"{execution.usage.cost:f}",
        "lease_owner": holding(execution, now),
        # Nobody runs it, as ``ls`` says (L7): since when, or its owner's process ended.
        "no_owner_since": no_owner_since(execution, now),
        "owner_gone": owner_dead(execution, now),
        "pending": None if execution.pending is None else execution.pending.kind,
        "created_at": execution.created_at,
        "updated_at": execution.updated_at,
    }


def runs_view(
    store: Store, *, statuses: Sequence[str] = (), text: str = "", limit: int = MAX_RUNS
) -> dict[str, Any]:
    """The runs list, newest first: only ``statuses`` (all if empty) whose id or goal holds
    ``text`` (case-insensitive), at most ``limit``; with the records that cannot be read,
    counted and named (E7). Blocking: call it in a worker thread."""
    listing = store.list()
    now = store.now()  # the store's clock: a shared server's, not this host's
    wanted = set(statuses)
    needle = text.casefold()
    rows = [
        run_summary(e, now)
        for e in sorted(listing.executions, key=lambda e: e.updated_at, reverse=True)
        if (not wanted or e.status.value in wanted)
        and (not needle or needle in e.id.casefold() or needle in e.goal.casefold())
    ]
    view = {
        "runs": rows[:limit],
        "more": max(0, len(rows) - limit),
        "unreadable": [{"id": p.id, "error": p.error} for p in listing.problems],
        "now": now,
    }
    return dict(redact(view))


def _attempts(observation: Observation) -> list[dict[str, Any]]:
    raw = observation.data.get("attempts")
    if type(raw) is not list:
        return []
    kept = []
    for item in raw[:100]:
        if type(item) is not dict:
            continue
        kept.append(
            {
                "attempt": item.get("attempt") if type(item.get("attempt")) is int else None,
                "error": _clip(item.get("error"), 2_000)
                if type(item.get("error")) is str
                else None,
                "traceback": _tail(item.get("traceback"), TRACEBACK_MOST)
                if type(item.get("traceback")) is str
                else None,
            }
        )
    return kept


def _plan(execution: Execution, tasks: Sequence[AgentTaskRecord]) -> dict[str, Any] | None:
    plan = execution.plan
    if plan is None:
        return None
    ran = {obs.step_id: obs for obs in execution.observations}
    failures = {task.id: task.failure for task in tasks if task.failure is not None}
    by_step = {task.step_id: task.id for task in tasks}
    drawn = layout(plan)
    steps = []
    for step in plan.steps:
        obs = ran.get(step.id)
        task_id = obs.agent_task_id if obs is not None else None
        failure = failures.get(task_id or "")
        traceback = obs.traceback if obs is not None else None
        if traceback is None and failure is not None:
            traceback = failure.traceback
        steps.append(
            {
                "id": step.id,
                "kind": step.kind,
                "target": step.target,
                "description": _clip(step.description, 500),
                "status": step.status.value,
                "depends_on": list(step.depends_on),
                "depth": drawn.depth[step.id],
                "row": drawn.row[step.id],
                "seconds": None if obs is None else _seconds(obs.started_at, obs.ended_at),
                "started_at": None if obs is None else _finite(obs.started_at),
                "error": None if obs is None else _clip(obs.error, 2_000),
                "error_type": None if obs is None else obs.error_type,
                "traceback": _tail(traceback, TRACEBACK_MOST),
                "attempts": [] if obs is None else _attempts(obs),
                "agent_task_id": task_id or by_step.get(step.id),
            }
        )
    return {
        "id": plan.id,
        "version": plan.version,
        "steps": steps,
        "edges": drawn.edges,
        "columns": drawn.columns,
        "rows": drawn.rows,
    }


def _inner_steps(task: AgentTaskRecord) -> list[dict[str, Any]]:
    ran = {obs.step_id: obs for obs in task.inner_observations}
    done = set(task.inner_completed)
    listed = [s.id for s in task.inner_plan.steps] if task.inner_plan is not None else []
    ids = listed + [step_id for step_id in ran if step_id not in listed]
    steps = []
    for step_id in ids:
        obs = ran.get(step_id)
        if obs is None:
            state = "succeeded" if step_id in done else "pending"
        else:
            state = "succeeded" if obs.ok else "failed"
        steps.append(
            {
                "id": step_id,
                "status": state,
                "seconds": None if obs is None else _seconds(obs.started_at, obs.ended_at),
                "error": None if obs is None else _clip(obs.error, 2_000),
            }
        )
    return steps


def _task(task: AgentTaskRecord) -> dict[str, Any]:
    interruption = task.interruption
    failure = task.failure
    return {
        "id": task.id,
        "state": task.state.value,
        "agent_id": task.agent_id,
        "step_id": task.step_id,
        "attempt": task.attempt,
        "seconds": _seconds(task.started_at, task.ended_at),
        "inner_steps": _inner_steps(task),
        "inner_steps_done": task.inner_steps_done,
        "inner_steps_total": task.inner_steps_total,
        "inner_omitted": task.inner_observations_omitted,
        "calls": f"{task.calls_used}/{task.calls_reserved}",
        "tokens": task.usage.tokens,
        "cost": f"{task.usage.cost:f}",
        "interruption": None
        if interruption is None
        else {"kind": interruption.kind, "at": interruption.at, "detail": interruption.detail},
        "question": _clip(task.pending_question, 4_000),
        "asked_at": task.pending_question_at,
        "answered_at": task.answered_at,
        "failure": None
        if failure is None
        else {
            "code": failure.code,
            "message": _clip(failure.message, 2_000),
            "error_type": failure.error_type,
            "traceback": _tail(failure.traceback, TRACEBACK_MOST),
        },
        "findings": [
            {"id": f.id, "status": str(f.status), "claim": _clip(f.claim, 1_000)}
            for f in task.findings
        ],
        "diagnostics": [_clip(line, 500) for line in task.diagnostics],
    }


def _run_failure(execution: Execution) -> dict[str, Any] | None:
    """The run's own failed observation (the planner's, or the run's): kept under the id
    ``plan``, naming no tool, skill or agent."""
    for obs in execution.observations:
        if obs.step_id == "plan" and not obs.ok and obs.tool is obs.skill is obs.agent is None:
            return {
                "error": _clip(obs.error, 2_000),
                "error_type": obs.error_type,
                "traceback": _tail(obs.traceback, TRACEBACK_MOST),
            }
    return None


def _workers(execution: Execution) -> dict[str, Any]:
    workers, bad_workers = parse_workers(execution.workers)
    tasks, bad_tasks = parse_worker_tasks(execution.worker_tasks)
    trail, bad_trail = parse_trail(execution.worker_trail)
    return {
        "workers": [unstructure(w) for w in workers],
        "tasks": [unstructure(t) for t in tasks],
        "trail": [unstructure(e) for e in trail[-TRAIL_MOST:]],
        "trail_total": len(trail),
        "unreadable": bad_workers + bad_tasks + bad_trail,
    }


def _memory(
    store: Store, execution_id: str, organization: str | None, now: float
) -> dict[str, Any] | None:
    """The facts of the scopes this run used: those it remembered first (hidden ones too,
    flagged), then the other visible facts of the scopes it remembered in, at most
    :data:`FACTS_MOST` in all. Which scopes a run reads is not recorded, so a run that
    remembered nothing shows none. An organization's facts only to a view of that
    organization (K2, ``organization``: the view's runtime's); None for a store that keeps
    no memory."""
    if not isinstance(store, MemoryBackend):
        return None
    mine = FactFilter(organization=organization, execution_id=execution_id, include_hidden=True)
    own = store.memory_list(mine, limit=FACTS_MOST + 1)
    seeable = [s for s in Scope if s is not Scope.ORGANIZATION or organization is not None]
    used = [
        scope
        for scope in seeable
        if store.memory_list(attrs.evolve(mine, scopes=frozenset({scope})), limit=1)
    ]
    others: list[Any] = []
    if used and len(own) <= FACTS_MOST:
        theirs = FactFilter(scopes=frozenset(used), organization=organization)
        seen = {f.id for f in own}
        listed = store.memory_list(theirs, limit=min(MAX_SEARCH_LIMIT, FACTS_MOST + 1 + len(own)))
        others = [f for f in listed if f.id not in seen]
    shown = (own + others)[: FACTS_MOST + 1]
    return {
        "facts": [
            {
                "id": f.id,
                "text": _clip(f.text, 1_000),
                "scope": f.scope.value,
                "domain": f.domain,
                "confidence": f.confidence,
                "expired": f.expired(now),
                "superseded": f.superseded_by is not None,
                "this_run": f.execution_id == execution_id,
                "step_id": f.step_id,
                "created_at": f.created_at,
            }
            for f in shown[:FACTS_MOST]
        ],
        "this_run": min(len(own), FACTS_MOST),
        "scopes": [scope.value for scope in used],
        "more": len(shown) > FACTS_MOST,
    }


def run_view(
    store: Store, execution: Execution, *, can_resume: bool, organization: str | None = None
) -> dict[str, Any]:
    """Everything the run page shows of ``execution``, to a view of ``organization`` (its
    runtime's: whose organization facts it may show, K2). Blocking: call it in a worker
    thread."""
    now = store.now()
    tasks = execution.task_records
    pending = execution.pending
    lease = execution.lease
    held_by = holding(execution, now)
    # The questions no stored answer answers yet (R9: the one holding the slot first).
    questions = [
        {
            "task_id": t.id,
            "question": _clip(t.pending_question, 4_000),
            "asked_at": t.pending_question_at,
        }
        for t in unanswered(execution)
        if t.pending_question is not None
    ]
    view = {
        "summary": run_summary(execution, now),
        "goal": _clip(execution.goal, 10_000),
        "max_calls": execution.max_calls,
        "usage": unstructure(execution.usage),
        "deadline_at": execution.deadline_at,
        "lease": None
        if held_by is None or lease is None
        else {"owner": held_by, "expires_at": lease.expires_at, "epoch": lease.epoch},
        "pending": None
        if pending is None
        else {
            "kind": pending.kind,
            "question": _clip(pending.question, 4_000),
            "agent_task_id": pending.agent_task_id,
            "asked_at": pending.asked_at,
            "budget": None if pending.budget is None else unstructure(pending.budget),
            # An answer is stored for every open question: it waits for a runtime to take
            # it (the run's, at its next heartbeat, or the next resume); another would be
            # refused as busy, so the page offers none.
            "answered": question_answered(execution),
        },
        "questions": questions,
        "plan": _plan(execution, tasks),
        "failure": _run_failure(execution),
        "tasks": [_task(t) for t in tasks],
        "tasks_unreadable": len(execution.unreadable_tasks),
        "workers": _workers(execution),
        "memory": _memory(store, execution.id, organization, now),
        "controls": [
            {"action": c.action, "by": _clip(c.by, 200), "at": c.at, "reason": _clip(c.reason, 500)}
            for c in execution.controls
        ],
        "checkpoints": [
            {"at": c.at, "plan_version": c.plan_version, "steps_done": len(c.completed_steps)}
            for c in execution.checkpoints
        ],
        "can_resume": can_resume,
        "terminal": execution.terminal,
        "now": now,
    }
    return dict(redact(view))


def history_entry(event: HistoryEvent) -> dict[str, Any]:
    """One history entry as the timeline gets it: its set fields only (V1: ids, states,
    counts), redacted all the same (E5)."""
    return dict(redact({k: v for k, v in attrs.asdict(event).items() if v is not None}))
