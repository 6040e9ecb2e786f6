"""The read commands (``ls``, ``show``, ``tasks``, ``events``, ``doctor``) and what they say
when nothing has run yet. Reads never write (E7): what cannot be read is reported, on
stderr, never removed or silently left out."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from ..storage import AgentTaskRecord, Execution, HistoryEvent, PlanStep, Store
from ..storage._seam import (
    ChangeFeed,
    Notifying,
    holding,
    no_owner_since,
    owner_dead,
    parse_trail,
    parse_worker_tasks,
    parse_workers,
    store_kind,
    unstructure,
)
from ._attempts import attempt_lines, deadline_line
from ._codes import EXIT_FAILED, EXIT_NO_STORE, EXIT_OK, EXIT_UNKNOWN, CliError
from ._failures import duration, failure_lines, run_observation, step_counts
from ._integrity import integrity_findings
from ._memory import nothing_remembered
from ._output import Out, clamp, printable, when
from ._store import get_execution, open_store, shown
from ._workers import run_workers

#: How long a new file at the default store's path may take to become a store (seconds).
_STORE_BIRTH = 10.0
#: The most of a goal ``ls`` shows, however wide the terminal.
_GOAL_MOST = 200


def _steps(execution: Execution) -> tuple[int, int]:
    plan = execution.plan
    if plan is None:
        return 0, 0
    done = sum(1 for s in plan.steps if s.status.finished)
    return done, len(plan.steps)


def _count(execution: Execution, status: str) -> int:
    plan = execution.plan
    return 0 if plan is None else sum(1 for s in plan.steps if s.status == status)


def _outcomes(execution: Execution) -> str:
    """``ls``'s steps cell: succeeded of all, then the failed, skipped and stopped ones (a
    failed step is never counted as done)."""
    plan = execution.plan
    if plan is None:
        return "0/0"
    counts: dict[str, int] = {}
    for step in plan.steps:
        counts[step.status] = counts.get(step.status, 0) + 1
    cell = f"{counts.get('succeeded', 0)}/{len(plan.steps)}"
    extra = [f"{counts[s]} {s}" for s in ("failed", "skipped", "stopped") if counts.get(s)]
    return f"{cell} ({', '.join(extra)})" if extra else cell


def _after(step: PlanStep) -> str:
    return ", ".join(step.depends_on) or "-"


def _stopped(execution: Execution) -> list[str]:
    """Steps whose agent task a user stopped: done without a result (S2)."""
    return [s.id for s in execution.plan.steps if s.status == "stopped"] if execution.plan else []


def _owner(execution: Execution, now: float) -> str:
    return printable(holding(execution, now) or "-")  # an owner id on disk is anyone's


def _owner_note(execution: Execution, now: float) -> str:
    """What to add to a run's status when nobody runs it ("" when its owner does)."""
    since = no_owner_since(execution, now)
    if since is not None:
        return f" (no owner since {when(since)})"
    if owner_dead(execution, now):
        return " (owner gone: its process ended)"
    return ""


def _status_cell(execution: Execution, now: float) -> str:
    return f"{execution.status}{_owner_note(execution, now)}"


def _usage_line(execution: Execution) -> str:
    """B3: tokens and cost used, and their limits where the record has them (set for this
    run, or, for a run waiting for budget, the runtime's as the wait recorded them)."""
    usage = execution.usage
    info = execution.pending.budget if execution.pending is not None else None
    max_tokens = execution.max_tokens if info is None else info.max_tokens
    max_cost = execution.max_cost if info is None else info.max_cost
    tokens = f"{usage.tokens:,} tokens ({usage.input_tokens:,} in, {usage.output_tokens:,} out)"
    if max_tokens is not None:
        tokens += f" of {max_tokens:,}"
    cost = f"cost {usage.cost:f}"
    if max_cost is not None:
        cost += f" of {max_cost:f}"
    return f"{tokens}, {cost}"


def _chosen(
    executions: Sequence[Execution], args: argparse.Namespace, now: float
) -> list[Execution]:
    """``ls``'s executions, newest first: only ``--status`` ones updated ``--since``, at
    most ``--limit`` of them."""
    statuses = {s for group in getattr(args, "statuses", None) or () for s in group}
    since = getattr(args, "since", None)
    cutoff = None if since is None else (now - since[1] if since[0] == "ago" else since[1])
    chosen = [
        e
        for e in sorted(executions, key=lambda e: e.updated_at, reverse=True)
        if (not statuses or e.status in statuses) and (cutoff is None or e.updated_at >= cutoff)
    ]
    limit = getattr(args, "limit", None)
    return chosen[:limit] if limit else chosen


def _ls(store: Store, out: Out, args: argparse.Namespace) -> int:
    listing = store.list()
    now = store.now()  # the store's clock: a shared server's, not this host's
    executions = _chosen(listing.executions, args, now)
    if out.as_json:
        out.data(
            [
                {
                    "id": e.id,
                    "status": e.status,
                    "goal": e.goal,
                    "steps_done": _steps(e)[0],
                    "steps_total": _steps(e)[1],
                    "steps_succeeded": _count(e, "succeeded"),
                    "steps_failed": _count(e, "failed"),
                    "stopped_steps": _stopped(e),
                    "calls_used": e.calls_used,
                    "usage": unstructure(e.usage),  # B3: cost as exact decimal text
                    "lease_owner": holding(e, now),
                    "no_owner_since": no_owner_since(e, now),
                    "owner_gone": owner_dead(e, now),
                    "updated_at": e.updated_at,
                }
                for e in executions
            ]
        )
    else:
        rows = [
            [
                e.id,
                _status_cell(e, now),
                clamp(e.goal, _GOAL_MOST, out.ellipsis),  # cut again to fit the terminal
                _outcomes(e),
                str(e.calls_used),
                f"{e.usage.tokens:,}",
                f"{e.usage.cost:f}",
                _owner(e, now),
                when(e.updated_at),
            ]
            for e in executions
        ]
        headers = ["id", "status", "goal", "steps", "calls", "tokens", "cost", "lease", "updated"]
        out.table(headers, rows, 1, fit=2)
    _report_unreadable(out, 0, listing.problems)
    return EXIT_OK


def _task_rows(tasks: Sequence[AgentTaskRecord]) -> list[list[str]]:
    rows = []
    for t in tasks:
        why = f"{t.interruption.kind} at {when(t.interruption.at)}" if t.interruption else "-"
        rows.append(
            [
                t.id,
                t.state,
                t.agent_id,
                t.step_id,
                f"{t.inner_steps_done}",
                f"{t.calls_used}/{t.calls_reserved}",
                f"{t.usage.tokens:,}",  # B3: each task's share, as ls gives the run's
                f"{t.usage.cost:f}",
                why,
            ]
        )
    return rows


def _show(store: Store, out: Out, args: argparse.Namespace) -> int:
    execution = get_execution(store, args.id)
    if getattr(args, "watch", False):
        # The history's position before the record is read: nothing after it is missed (V2).
        last = _last_seq(store, execution.id)
        execution = get_execution(store, args.id)
        _render(store, out, args, execution)
        return _watch(store, out, args, execution, last)
    return _render(store, out, args, execution)


def _render(store: Store, out: Out, args: argparse.Namespace, execution: Execution) -> int:
    """``show``: one execution in detail (``--json``: the record as stored)."""
    tasks, dropped = execution.task_records, len(execution.unreadable_tasks)
    if out.as_json:
        out.data(unstructure(execution))
        return EXIT_OK
    now = store.now()  # the store's clock: a shared server's, not this host's
    status = out.paint(execution.status, execution.status)
    status += _owner_note(execution, now)
    free_since = no_owner_since(execution, now)
    out.line(f"{execution.id}  {status}")
    out.line(f"goal:    {clamp(execution.goal, 200)}")
    out.line(
        f"steps:   {step_counts(execution)}, {execution.calls_used} calls used"  # O2
        + (f" of {execution.max_calls}" if execution.max_calls is not None else "")
    )
    out.line(f"usage:   {_usage_line(execution)}")
    if _stopped(execution):
        out.line(f"stopped: {', '.join(_stopped(execution))} (done without a result)")
    why = run_observation(execution)
    if execution.status == "failed" and why is not None and why.error:
        out.line(f"why:     {clamp(why.error, 300)}")
    lease = execution.lease
    if lease is not None and holding(execution, now):
        until = f"until {when(lease.expires_at)} (epoch {lease.epoch})"
        out.line(f"lease:   {printable(lease.owner)} {until}")
    elif free_since is not None:
        out.line(
            f"lease:   free since {when(free_since)}: nobody runs it (an open runtime takes it "
            "over; or mainspring resume)"
        )
    else:
        out.line("lease:   free")
    deadline = deadline_line(execution, now)  # B1
    if deadline is not None:
        out.line(deadline)
    if execution.pending is not None:
        pending = execution.pending
        asked = f" (agent task {pending.agent_task_id})" if pending.agent_task_id else ""
        since = f" since {when(pending.asked_at)}" if pending.asked_at is not None else ""
        text = f": {clamp(pending.question, 200)}" if pending.question else ""
        out.line(f"pending: {pending.kind}{asked}{since}{text}")
        if pending.budget is not None:  # P4, B3: which budget ran out, what the rest needs
            info = pending.budget
            out.line(
                f"budget:  {info.budget} exhausted; the rest of the plan needs "
                f"{info.needed} more calls ({info.calls_used} of {info.max_calls} used)"
            )
    plan = execution.plan
    if plan is not None:
        out.line("")
        out.line(f"plan {plan.id} v{plan.version}")
        ran = {obs.step_id: obs for obs in execution.observations}
        out.table(
            ["step", "kind", "target", "status", "time", "after"],
            [
                [s.id, s.kind, s.target, s.status, duration(ran.get(s.id)), _after(s)]
                for s in plan.steps
            ],
            3,
        )
    failures = failure_lines(execution, tasks, tracebacks=args.traceback)  # O2
    if failures:
        out.line("")
        out.line("failures" + ("" if args.traceback else " (--traceback shows where)"))
        for line in failures:
            out.line(line)
    if tasks or dropped:
        out.line("")
        out.line("agent tasks" + (f" ({dropped} unreadable, not shown)" if dropped else ""))
        out.table(
            ["task", "state", "agent", "step", "inner", "calls", "tokens", "cost", "interrupted"],
            _task_rows(tasks),
            1,
        )
    findings = [finding for task in tasks for finding in task.findings]
    if findings:
        out.line("")
        out.line("findings")
        for f in findings:
            evidence = f", {len(f.evidence)} evidence" if f.evidence else ""
            by = f" by {f.agent_id}" if f.agent_id else ""
            out.line(f"  {f.id}  {f.status}{by}{evidence}: {clamp(f.claim, 160)}")
    answered = [task for task in tasks if task.answered_at is not None]
    if answered:
        out.line("")
        out.line("answers")
        for task in answered:
            assert task.answered_at is not None
            digest = (task.answer_sha256 or "")[:16]
            out.line(f"  {task.id}  answered {when(task.answered_at)}  sha256 {digest}")
    # E10: what was stored masked, and what ran again because of it, is said, not hidden.
    notes = [
        f"step {obs.step_id}: its stored output is redacted, not what it returned"
        for obs in execution.observations
        if obs.ok and obs.redacted
    ]
    finished = {s.id for s in plan.steps if s.status.finished} if plan else set()
    notes += [
        f"step {step_id}: its input is masked on disk (it held a secret); if the run is "
        "resumed elsewhere before it runs, it fails instead of running with the mask"
        for step_id in execution.masked_inputs
        if step_id not in finished
    ]
    notes += [f"task {t.id}: {line}" for t in tasks for line in t.diagnostics]
    if notes:
        out.line("")
        out.line("notes")
        for note in notes:
            out.line(f"  {clamp(note, 200)}")
    attempts = attempt_lines(execution)  # B1: every attempt of a retried step, and limits
    if attempts:
        out.line("")
        out.line("attempts and limits")
        for line in attempts:
            out.line(line)
    if execution.checkpoints:
        out.line("")
        out.line("checkpoints")
        for c in execution.checkpoints:
            out.line(f"  {when(c.at)}  plan v{c.plan_version}  {len(c.completed_steps)} steps done")
    if execution.controls:
        out.line("")
        out.line("controls")
        for control in execution.controls:
            # Stored text is anyone's: never raw to the terminal (escapes, bidi, bells).
            reason = f": {clamp(control.reason, 300)}" if control.reason else ""
            digest = f" (sha256 {control.answer_sha256[:16]})" if control.answer_sha256 else ""
            by = clamp(control.by, 200)
            out.line(f"  {when(control.at)}  {control.action} by {by}{digest}{reason}")
    return EXIT_OK


def _tasks(store: Store, out: Out, args: argparse.Namespace) -> int:
    if args.id:
        executions, problems = [get_execution(store, args.id)], []
    else:
        listing = store.list()
        executions, problems = list(listing.executions), list(listing.problems)
    tasks: list[AgentTaskRecord] = []
    dropped = 0
    for execution in executions:
        parsed, bad = execution.task_records, len(execution.unreadable_tasks)
        tasks += parsed
        dropped += bad
    if out.as_json:
        out.data([unstructure(t) for t in tasks])
    else:
        out.table(
            ["task", "state", "agent", "step", "inner", "calls", "tokens", "cost", "interrupted"],
            _task_rows(tasks),
            1,
        )
    _report_unreadable(out, dropped, problems)
    return EXIT_OK


def _report_unreadable(out: Out, dropped: int, problems: Sequence[Any]) -> None:
    """What could not be read is said (on stderr, so --json output stays parseable), never
    silently left out (E7)."""
    if dropped:
        out.warn(f"{dropped} unreadable agent task records not shown (mainspring doctor)")
    for problem in problems:
        out.warn(f"unreadable execution {problem.id}: {problem.error}")


#: History entries read per ``store.history`` call.
_PAGE = 1_000


#: The kinds whose ``owner`` is who the entry is about (it died, lapsed, let go), not who
#: holds the lease after it: nobody does.
_LET_GO = ("crash", "lapse", "shutdown")


class Owners:
    """Who held each execution's lease as the history printed so far says: the owner of
    its ``created`` or last ``takeover`` entry, nobody after a crash, lapse or shutdown.
    Unknown (None) until such an entry was printed (``--after``, or entries written before
    owners were kept)."""

    def __init__(self) -> None:
        self._held: dict[str, str | None] = {}

    def who(self, event: HistoryEvent, issuer: str | None = None) -> str | None:
        """Who the entry is by or about, where known; and note what it changes.
        ``issuer``: who issued a control written in the same commit (E13): that commit
        is theirs (a pause from elsewhere), whoever held the lease."""
        if event.kind in ("created", "takeover"):
            self._held[event.execution_id] = event.owner
            return event.owner
        if event.kind in _LET_GO:
            self._held[event.execution_id] = None
            return event.owner
        if event.kind == "control" and event.owner is not None:
            return event.owner  # who issued it, whoever held the lease
        by = issuer if issuer is not None else self._held.get(event.execution_id)
        if event.kind == "status" and event.status not in ("planned", "running"):
            self._held[event.execution_id] = None  # L3: a pause, a wait or an end lets go
        return by


def _issuers(page: Sequence[HistoryEvent]) -> dict[tuple[str, int], str]:
    """Who issued a control, by the commit (execution, its sequence) that wrote it."""
    found: dict[tuple[str, int], str] = {}
    for event in page:
        if event.kind == "control" and event.owner is not None:
            found.setdefault((event.execution_id, event.execution_seq), event.owner)
    return found


def _event_line(event: HistoryEvent, who: str | None = None) -> str:
    """One history entry as a line: seq, time, execution, kind, then what the kind has (V1:
    ids, states and counts), then who (the owner) where known."""
    parts = [str(event.seq), when(event.at), event.execution_id, f"{event.kind:<7}"]
    if event.kind == "takeover":
        parts.append(f"from {printable(event.previous_owner or '-')}")
    if event.attempt is not None:
        most = f" of {event.max_attempts}" if event.max_attempts is not None else ""
        parts.append(f"attempt {event.attempt}{most} failed")
    if event.delay is not None:
        parts.append(f"next in {event.delay:.3g} s")
    if event.last_seen is not None:
        parts.append(f"last seen {when(event.last_seen)}")
    if event.lapsed_at is not None:
        parts.append(f"lease lapsed {when(event.lapsed_at)}")
    if event.status is not None:
        parts.append(f"{event.was} -> {event.status}" if event.was else event.status)
    if event.plan_version is not None:
        parts.append(f"plan v{event.plan_version}")
    for label, value in (
        ("worker", event.worker_id),
        ("step", event.step_id),
        ("task", event.task_id),
    ):
        if value is not None:
            parts.append(f"{label} {value}")
    if event.generation is not None:
        parts.append(f"generation {event.generation}")
    if event.reason is not None:
        parts.append(f"reason {clamp(event.reason, 200)}")
    if event.agent_id is not None:
        parts.append(f"agent {event.agent_id}")
    for value in (event.state, event.action):
        if value is not None:
            parts.append(value)
    if event.kind == "pending":
        parts.append(f"pending {event.pending or '-'}")
    if event.done is not None:
        parts.append(f"{event.done}/{event.total} steps done")
    elif event.total is not None:
        parts.append(f"{event.total} steps")
    if event.inner_done is not None:
        parts.append(f"{event.inner_done} inner steps")
    if event.calls_used is not None:
        parts.append(f"{event.calls_used} calls")
    if event.input_tokens is not None and event.output_tokens is not None:
        tokens = event.input_tokens + event.output_tokens
        # As ls and show print it: the history keeps the exact text, checked when read.
        cost = f"{Decimal(event.cost):f}" if event.cost is not None else "-"
        parts.append(f"{tokens} tokens, cost {cost}")
    if who is not None:
        parts.append(f"by {clamp(who, 200)}")
    return "  ".join(parts)


def _events(store: Store, out: Out, args: argparse.Namespace) -> int:
    """The durable history (V2): every entry after ``--after`` (of one execution, or of
    all), in sequence order; with --follow, polled from the last entry printed, so no
    transition is missed or printed twice."""
    if args.id is not None:
        if not args.follow:
            get_execution(store, args.id)  # unknown: exit 3 (while following, it may come)
    else:
        _report_unreadable(out, 0, store.list().problems)  # E7: said, not left out
    # A store that notifies (PostgreSQL) wakes the follower as soon as any host commits;
    # the interval stays the backstop.
    feed = store.listen() if args.follow and isinstance(store, Notifying) else None
    try:
        return _print_history(store, out, args, feed)
    finally:
        if feed is not None:
            feed.close()


def _print_history(
    store: Store, out: Out, args: argparse.Namespace, feed: ChangeFeed | None
) -> int:
    last: int = args.after
    polls = 0
    owners = Owners()
    while True:
        last = _print_page(store, out, args.id, last, owners)
        polls += 1
        if not args.follow or (args.max_polls and polls >= args.max_polls):
            return EXIT_OK
        if feed is not None:
            feed.wait(args.interval)
        else:
            time.sleep(args.interval)  # a synchronous command: no event loop is running


def _print_page(
    store: Store,
    out: Out,
    execution_id: str | None,
    last: int,
    owners: Owners,
    seen: Callable[[HistoryEvent], None] | None = None,
) -> int:
    """Print every entry after ``last`` (of ``execution_id``, or all); the last printed."""
    while True:
        page = store.history(execution_id, after=last, limit=_PAGE)
        issuers = _issuers(page)
        for event in page:
            who = owners.who(event, issuers.get((event.execution_id, event.execution_seq)))
            if out.as_json:
                out.data({k: v for k, v in attrs.asdict(event).items() if v is not None})
            else:
                out.line(_event_line(event, who))
            last = event.seq  # Invariant V2: the next read starts after what was printed
            if seen is not None:
                seen(event)
        if len(page) < _PAGE:
            return last


def _last_seq(store: Store, execution_id: str) -> int:
    """The global sequence of ``execution_id``'s newest history entry (0: none)."""
    last = 0
    while True:
        page = store.history(execution_id, after=last, limit=10_000)
        if page:
            last = page[-1].seq
        if len(page) < 10_000:
            return last


def _watch(
    store: Store, out: Out, args: argparse.Namespace, execution: Execution, last: int
) -> int:
    """``show --watch``: after the run as it stands, each new history entry of it as it
    is committed, read with ``after=`` the last one printed (V2: none missed, none twice),
    until the run is finished (completed, failed or cancelled). Ctrl-C stops it (exit 130,
    U2). A store that notifies (PostgreSQL) wakes it at once; else it polls."""
    if execution.terminal:
        return EXIT_OK
    if not out.as_json:
        out.line("")
        out.line("watching (Ctrl-C to stop)")
    owners = Owners()
    ended: list[bool] = []

    def seen(event: HistoryEvent) -> None:
        if event.kind in ("status", "created") and event.status in _FINISHED:
            ended.append(True)

    feed = store.listen() if isinstance(store, Notifying) else None
    polls = 0
    try:
        while True:
            last = _print_page(store, out, execution.id, last, owners, seen)
            if ended:
                return EXIT_OK
            polls += 1
            if args.max_polls and polls >= args.max_polls:
                return EXIT_OK
            if feed is not None:
                feed.wait(args.interval)
            else:
                time.sleep(args.interval)
    finally:
        if feed is not None:
            feed.close()


_FINISHED = ("completed", "failed", "cancelled")


def _doctor(store: Store, out: Out, args: argparse.Namespace) -> int:
    """Validate every record, read-only; the exit code says whether all is well."""
    findings = integrity_findings(args.store_path, out)  # U3: damage below the records
    listing = store.list()
    for problem in listing.problems:
        findings.append({"id": problem.id, "problem": "unreadable", "detail": problem.error})
    now = store.now()  # the store's clock: a shared server's, not this host's
    for e in listing.executions:
        dropped = len(e.unreadable_tasks)
        if dropped:
            findings.append(
                {
                    "id": e.id,
                    "problem": "agent-tasks-dropped",
                    "detail": f"{dropped} agent task records do not parse",
                }
            )
        bad_workers = parse_workers(e.workers)[1] + parse_worker_tasks(e.worker_tasks)[1]
        if bad_workers:  # E8: dropped from every view, so said here
            findings.append(
                {
                    "id": e.id,
                    "problem": "workers-dropped",
                    "detail": f"{bad_workers} worker or worker task records do not parse",
                }
            )
        bad_trail = parse_trail(e.worker_trail)[1]
        if bad_trail:  # E8: ``mainspring workers`` counts them too
            findings.append(
                {
                    "id": e.id,
                    "problem": "trail-dropped",
                    "detail": f"{bad_trail} worker trail entries do not parse",
                }
            )
        if no_owner_since(e, now) is not None:
            findings.append(
                {
                    "id": e.id,
                    "problem": "orphaned",
                    "detail": "running with no live lease: its owner is gone; "
                    "resume it (mainspring resume, or Runtime.recover)",
                }
            )
        elif owner_dead(e, now):
            # L7: its lease looks live, but the process holding it (on this host) is gone.
            findings.append(
                {
                    "id": e.id,
                    "problem": "dead-owner",
                    "detail": f"held by {holding(e, now)}, a process of this host that is "
                    "gone; an open runtime takes it over at once (or Runtime.recover)",
                }
            )
        # L3: a terminal run's lease is void (nobody can write or resume it), whoever it
        # still names: not a problem, and nothing to repair.
    if store_kind(args.store_path) == "files":
        for stray in sorted(Path(args.store_path).glob(".tmp-*")):
            findings.append(
                {
                    "id": stray.name,
                    "problem": "stray-temp-file",
                    "detail": "left by an interrupted write; safe to delete",
                }
            )
    if out.as_json:
        out.data(
            {
                "ok": not findings,
                "executions": len(listing.executions),
                "findings": findings,
                "store": shown(args.store_path),
            }
        )
    else:
        out.line(f"{len(listing.executions)} executions read, {len(findings)} findings")
        for finding in findings:
            detail = clamp(finding["detail"], 500)
            out.line(f"  {finding['problem']:<20} {clamp(finding['id'], 200)}: {detail}")
        if not findings:
            out.line("all well")
    return EXIT_OK if not findings else EXIT_FAILED


#: The read commands by name; every other command (but the demos) is a control.
READS: dict[str, Callable[[Store, Out, argparse.Namespace], int]] = {
    "ls": _ls,
    "show": _show,
    "tasks": _tasks,
    "events": _events,
    "doctor": _doctor,
    "workers": run_workers,
}


def nothing_here_yet(path: Path, out: Out, args: argparse.Namespace) -> int:
    """The default store does not exist: nothing has run here yet. That is a state, not an
    error: listings are empty, ids are unknown. (A ``--store`` that does not exist is an
    error: it was named on purpose.) Nothing is created."""
    why = f"no store at {path}: nothing has run here"
    command = args.command
    if command == "events" and args.follow:
        return _follow_when_created(path, out, args)
    if command == "memory":
        return nothing_remembered(out, args, why)
    if command == "ls" or (command in ("tasks", "events", "workers") and not args.id):
        what = {"tasks": "agent tasks", "workers": "executions with workers"}.get(
            command, "executions"
        )
        if out.as_json:
            if command != "events":  # events prints one object per entry: none
                out.data([])
        else:
            out.line(f"no {what} yet ({why})")
        return EXIT_OK
    if command == "doctor":
        if out.as_json:
            out.data({"ok": True, "executions": 0, "findings": [], "store": None})
        else:
            out.line(f"nothing to check yet ({why})")
        return EXIT_OK
    if command == "prune":  # nothing stored, nothing to delete
        if out.as_json:
            out.data({"dry_run": bool(args.dry_run), "deleted": [], "skipped": []})
        else:
            out.line(f"nothing to prune ({why})")
        return EXIT_OK
    if command == "ui":  # a view of nothing: said, not served
        raise CliError(f"nothing to show yet ({why})", EXIT_NO_STORE)
    target = "agent task" if command == "stop-task" else "execution"
    raise CliError(f"no {target} {args.id} ({why})", EXIT_UNKNOWN)


def _follow_when_created(path: Path, out: Out, args: argparse.Namespace) -> int:
    """``events --follow`` on an empty home waits for the first run to create the store,
    then follows it. The file appears a moment before its tables do: what is not a store
    yet gets a few seconds to become one before it is reported."""
    if not out.as_json:
        out.line(f"no executions yet; waiting for the first run to create {path}")
    first_seen: float | None = None
    while True:
        if path.exists():
            try:
                store, close = open_store(path, write=False)
                break
            except CliError:
                first_seen = first_seen or time.monotonic()
                if time.monotonic() - first_seen > _STORE_BIRTH:
                    raise
        time.sleep(args.interval)  # a synchronous command: no event loop is running
    try:
        return _events(store, out, args)
    finally:
        close()
