"""Stopping the worker of an agent task that no driver of this runtime holds (#17, S1).

``Runtime.stop_agent_task`` on a run that is not live here (its runtime crashed, or it
ended with a task unfinished) marks the task cancelled on the record. If a worker of that
task was left active, its process may still be running (an orphan of the crashed runtime):
it is stopped through the agent's host and confirmed dead *before* anything is recorded
stopped; the worker is then recorded stopped (``stop-task``, its task blocked) in the same
edit that cancels the agent task. A process that cannot be confirmed dead (another host,
it outlived the KILL rounds, a start whose process was never recorded and cannot be looked
for) keeps the stop from being recorded at all: the caller is told why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ...storage import Execution, WorkerRecord
from ...storage._seam import ACTIVE_WORKER, parse_worker_tasks, parse_workers
from . import fleet as fleet
from .board import trail_entry
from .find import find_start, host_of

__all__ = ["stop_orphan"]

#: A change to the record (the worker recorded stopped), applied in the stop's own edit.
OrphanEdit = Callable[[Execution, float], Execution | None]


def _worker_of(stored: Execution, task_id: str) -> WorkerRecord | None:
    tasks = {t.id: t for t in parse_worker_tasks(stored.worker_tasks)[0]}
    task = tasks.get(task_id)
    if task is None or task.worker_id is None:
        return None
    worker = {w.id: w for w in parse_workers(stored.workers)[0]}.get(task.worker_id)
    return worker if worker is not None and worker.status in ACTIVE_WORKER else None


async def _confirm_dead(host: Any, worker: WorkerRecord, grace: float) -> str | None:
    """Stop ``worker``'s process (or the processes of its unrecorded start); None once it
    is confirmed dead, else why it is not."""
    if worker.process is not None:
        seen = await host.inspect(worker.process)
        if seen.state == "unknown":
            return "its worker process cannot be inspected from here (another host)"
        if not seen.dead:
            seen = await host.stop(worker.process, grace=grace)
        return None if seen.dead else "its worker process could not be stopped"
    if worker.status == "assigned":
        return None  # no process was started for this generation
    # Starting, its process never recorded: looked for by its session, on this machine.
    if worker.session is None or host_of(host) is None:
        return "its worker was starting and its process cannot be looked for here"
    found = await find_start(host, worker.session)
    for process in found or ():
        if not (await host.stop(process, grace=grace)).dead:
            return "its worker process could not be stopped"
    if await find_start(host, worker.session):
        return "its worker process could not be stopped"
    return None


async def stop_orphan(
    stored: Execution, task_id: str, agents: Mapping[str, Any]
) -> OrphanEdit | str | None:
    """The worker left active for ``task_id`` in ``stored``, stopped and confirmed dead:
    the edit that records it stopped (``stop-task``, task blocked), None when there is no
    such worker, or why its process could not be confirmed dead (nothing is recorded)."""
    worker = _worker_of(stored, task_id)
    if worker is None:
        return None
    agent = agents.get(worker.agent_id)
    host = getattr(agent, "host", None)
    if host is None:
        return f"its worker's agent {worker.agent_id!r} is not registered here"
    why = await _confirm_dead(host, worker, float(getattr(agent, "grace", 5.0)))
    if why is not None:
        return why
    belief = fleet.expect(worker)

    def change(record: Execution, now: float) -> Execution | None:
        current = _worker_of(record, task_id)
        if current is None or fleet.expect(current) != belief:
            return None  # changed meanwhile: the stop is decided again by the caller
        task = {t.id: t for t in parse_worker_tasks(record.worker_tasks)[0]}[task_id]
        stopped, task = fleet.mark_stopped(
            current,
            task,
            belief,
            confirmed_dead=True,
            reason="stop-task",
            task_state="blocked",
            now=now,
        )
        seq = fleet.next_trail_seq(record.worker_trail)
        entry = trail_entry(seq, stopped, "stopped", "stop-task", time.time())
        return attrs.evolve(
            record,
            workers=_replace(record.workers, stopped.id, stopped),
            worker_tasks=_replace(record.worker_tasks, task.id, task),
            worker_trail=fleet.trail_append(record.worker_trail, entry),
        )

    return change


def _replace(entries: tuple[Any, ...], record_id: str, new: Any) -> tuple[Any, ...]:
    """``entries`` with the record of ``record_id`` replaced (the others, and those that
    did not parse, kept as they were, E7)."""
    return tuple(
        new if type(entry) is type(new) and entry.id == record_id else entry for entry in entries
    )
