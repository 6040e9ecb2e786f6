"""``mainspring workers [ID]``: the external agent workers of executions, read from the store.

Without an id: every execution that has workers, with how many workers are in each status
and how many worker tasks in each state. With an id: its workers (generation, status,
lease, process, last failure, repairs, usage), its worker tasks, its proof digest and the
last ``--trail N`` entries of its diagnostic trail.

A read: the store is opened read-only and nothing is written (E7). A record that does not
parse is dropped from the view and counted, never coerced (E8). Records hold ids, states,
classes and digests only (V1); what is printed is redacted all the same (E5).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from ..storage import Execution, Store, TrailEntry, WorkerRecord, WorkerTask
from ..storage._seam import parse_trail, parse_worker_tasks, parse_workers, unstructure
from ._codes import EXIT_OK
from ._output import Out, clamp, when
from ._store import get_execution

#: How much of a digest a line shows (the JSON form gives it whole).
_DIGEST = 16


def run_workers(store: Store, out: Out, args: argparse.Namespace) -> int:
    """Run ``workers [ID]`` against ``store``; returns the exit code."""
    if args.id:
        return _one(store, out, args)
    return _all(store, out)


def _has_workers(execution: Execution) -> bool:
    return bool(execution.workers or execution.worker_tasks or execution.worker_trail)


def _count(values: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in counts.items()) or "-"


def _report_dropped(out: Out, execution_id: str, workers: int, tasks: int, trail: int) -> None:
    """E7: what could not be read is said (on stderr, so --json stays parseable)."""
    for n, what in ((workers, "worker"), (tasks, "worker task"), (trail, "worker trail")):
        if n:
            records = "record" if n == 1 else "records"
            out.warn(f"{execution_id}: {n} {what} {records} could not be read (not shown)")


def _all(store: Store, out: Out) -> int:
    listing = store.list()
    rows: list[dict[str, Any]] = []
    for execution in sorted(listing.executions, key=lambda e: e.updated_at, reverse=True):
        if not _has_workers(execution):
            continue
        workers, bad_workers = parse_workers(execution.workers)
        tasks, bad_tasks = parse_worker_tasks(execution.worker_tasks)
        rows.append(
            {
                "id": execution.id,
                "status": execution.status,
                "workers": _count([w.status for w in workers]),
                "active": sum(1 for w in workers if w.active),
                "worker_tasks": _count([t.state for t in tasks]),
                "workers_dropped": bad_workers,
                "worker_tasks_dropped": bad_tasks,
                "proof_digest": execution.proof_digest,
                "updated_at": execution.updated_at,
            }
        )
        _report_dropped(out, execution.id, bad_workers, bad_tasks, 0)
    if out.as_json:
        out.data(rows)
    elif rows:
        out.table(
            ["execution", "status", "active", "workers", "tasks", "updated"],
            [
                [
                    row["id"],
                    row["status"],
                    str(row["active"]),
                    _counts_text(row["workers"]),
                    _counts_text(row["worker_tasks"]),
                    when(row["updated_at"]),
                ]
                for row in rows
            ],
            1,
        )
    else:
        out.line("no executions with workers")
    for problem in listing.problems:  # E7: said, not left out
        out.warn(f"unreadable execution {problem.id}: {problem.error}")
    return EXIT_OK


def _span(seconds: float) -> str:
    """A length of time, roughly: ``45s``, ``12m``, ``3h``, ``2d``."""
    seconds = abs(seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _expiry(at: float | None, now: float) -> str:
    if at is None:
        return "no lease expiry recorded"
    if at > now:
        return f"expires in {_span(at - now)} ({when(at)})"
    return f"expired {_span(now - at)} ago ({when(at)})"


def _usage_totals(worker: WorkerRecord) -> dict[str, Any]:
    return {
        "epochs": len(worker.usage),
        "input_tokens": sum(u.input_tokens for u in worker.usage),
        "output_tokens": sum(u.output_tokens for u in worker.usage),
        "total_tokens": sum(u.total_tokens for u in worker.usage),
        "cost": str(sum((u.cost for u in worker.usage), Decimal(0))),
    }


def _worker_data(worker: WorkerRecord, now: float) -> dict[str, Any]:
    data: dict[str, Any] = unstructure(worker)
    expires = worker.lease_expires_at
    data["active"] = worker.active
    data["lease_expires_in"] = None if expires is None else expires - now
    data["usage_totals"] = _usage_totals(worker)
    return data


def _short(digest: str | None) -> str:
    return digest[:_DIGEST] if digest else "-"


def _worker_lines(worker: WorkerRecord, now: float) -> list[str]:
    lines = [
        f"worker {worker.id}  generation {worker.generation}  {worker.status}",
        f"  task {worker.task_id}  step {worker.step_id}  agent {worker.agent_id}",
        f"  lease {worker.lease:g}s, {_expiry(worker.lease_expires_at, now)}",
    ]
    process = worker.process
    if process is not None:
        host = clamp(process.host, 256)  # free text a host reported: never obeyed
        lines.append(f"  process {host} pid {process.pid} (group {process.group})")
    failure = worker.failure
    if failure is not None:
        where = [f"phase {failure.phase}", f"round {failure.round}"]
        where += [f"check {failure.check_id}"] if failure.check_id else []
        where += [f"pin {failure.pin_id}"] if failure.pin_id else []
        useful = ", useful progress" if failure.useful_progress else ""
        lines.append(
            f"  last failure {failure.failure_class}, {worker.repeats} in a row "
            f"({', '.join(where)}{useful}) at {when(failure.at)}"
        )
    if worker.reason:
        lines.append(f"  reason {clamp(worker.reason, 200)}")
    if worker.repairs:
        lines.append(f"  repairs {worker.repairs} (last sha256 {_short(worker.repair_digest)})")
    if worker.intent is not None:
        lines.append(
            f"  handoff delivery sha256 {_short(worker.intent.delivery_digest)} "
            f"until {when(worker.intent.expires_at)}"
        )
    if worker.delivered_digest:
        lines.append(f"  delivered sha256 {_short(worker.delivered_digest)}")
    if worker.usage:
        totals = _usage_totals(worker)
        lines.append(
            f"  usage {totals['total_tokens']:,} tokens ({totals['input_tokens']:,} in, "
            f"{totals['output_tokens']:,} out), cost {Decimal(totals['cost']):f} "
            f"over {totals['epochs']} epoch(s)"
        )
    return lines


def _task_row(task: WorkerTask) -> list[str]:
    return [
        task.id,
        task.step_id,
        task.state,
        task.worker_id or "-",
        str(task.attempts),
        clamp(task.reason, 60) or "-",
        _short(task.delivery_digest),
    ]


def _trail_line(entry: TrailEntry) -> str:
    detail = f"  {clamp(entry.detail, 160)}" if entry.detail else ""
    return (
        f"  {when(entry.at)}  #{entry.seq}  {entry.worker_id} g{entry.generation}  "
        f"{entry.event}  {entry.status}{detail}"
    )


def _one(store: Store, out: Out, args: argparse.Namespace) -> int:
    execution = get_execution(store, args.id)
    now = store.now()  # the store's clock: a shared server's, not this host's
    workers, bad_workers = parse_workers(execution.workers)
    tasks, bad_tasks = parse_worker_tasks(execution.worker_tasks)
    trail, bad_trail = parse_trail(execution.worker_trail)
    shown = trail[-args.trail :] if args.trail else []
    if out.as_json:
        out.data(
            {
                "id": execution.id,
                "status": execution.status,
                "proof_digest": execution.proof_digest,
                "workers": [_worker_data(w, now) for w in workers],
                "workers_dropped": bad_workers,
                "worker_tasks": [unstructure(t) for t in tasks],
                "worker_tasks_dropped": bad_tasks,
                "trail": [unstructure(e) for e in shown],
                "trail_total": len(trail),
                "trail_dropped": bad_trail,
            }
        )
        _report_dropped(out, execution.id, bad_workers, bad_tasks, bad_trail)
        return EXIT_OK
    out.line(f"{execution.id}  {out.paint(execution.status, execution.status)}")
    active = sum(1 for w in workers if w.active)
    out.line(
        f"workers: {len(workers)} ({_counts_text(_count([w.status for w in workers]))}), "
        f"{active} active; tasks: {len(tasks)} "
        f"({_counts_text(_count([t.state for t in tasks]))})"
    )
    if execution.proof_digest:
        out.line(f"proof:   sha256 {execution.proof_digest}")
    for worker in workers:
        out.line("")
        for line in _worker_lines(worker, now):
            out.line(line)
    if tasks:
        out.line("")
        out.line("worker tasks")
        out.table(
            ["task", "step", "state", "worker", "attempts", "reason", "delivery"],
            [_task_row(t) for t in tasks],
            2,
        )
    if shown:
        out.line("")
        out.line(f"trail (last {len(shown)} of {len(trail)})")
        for entry in shown:
            out.line(_trail_line(entry))
    if not (workers or tasks or bad_workers or bad_tasks):
        out.line("no workers in this execution")
    _report_dropped(out, execution.id, bad_workers, bad_tasks, bad_trail)
    return EXIT_OK


def worker_of(execution: Execution | None, task_id: str) -> dict[str, Any] | None:
    """If ``task_id`` is a worker-backed task of ``execution``: its fleet state and the
    worker serving it (id, generation, status; None where no readable worker serves it),
    for ``stop-task`` to say. None for a task that no worker serves."""
    if execution is None or not execution.worker_tasks:
        return None
    tasks, _ = parse_worker_tasks(execution.worker_tasks)
    task = next((t for t in tasks if t.id == task_id), None)
    if task is None:
        return None
    workers, _ = parse_workers(execution.workers)
    worker = next((w for w in workers if w.id == task.worker_id), None)
    return {
        "task_state": task.state,
        "worker_id": task.worker_id,
        "generation": None if worker is None else worker.generation,
        "status": None if worker is None else worker.status,
    }


def worker_line(found: dict[str, Any]) -> str:
    """``stop-task``'s line about a worker-backed task (see :func:`worker_of`)."""
    if found["status"] is None:
        return f"  worker-backed (worker task {found['task_state']}, no live worker recorded)"
    return (
        f"  worker-backed: worker {found['worker_id']} generation {found['generation']} is "
        f"{found['status']} (worker task {found['task_state']}); the runtime serving the task "
        "stops its process and confirms it dead before recording the worker stopped"
    )
