"""The worker lifecycle as pure functions: every rule of the fleet, without an event loop.

Each function takes the records as they are, what the caller believes about the worker
(:class:`Expect`: its id, generation and status), and returns the new records; it changes
nothing it is given. A caller whose belief is out of date gets :class:`StaleWorker`, never a
silent overwrite: the check on (worker id, generation, status) is what makes two writers
about one worker safe. A move the lifecycle does not allow is :class:`WorkerRefused`, with a
code that says which rule refused it.

The lifecycle (``WORKER_MOVES``)::

    assigned -> starting -> running <-> idle -> handing-off -> fenced -> delivered
    any active -> stopped (process confirmed dead) | blocked (a failed start, no progress)

and the task a worker serves (``WorkerTask.state``): ready -> running -> awaiting-delivery ->
delivered, back to ready when its process ended unexpectedly or failed to start, blocked when
it made no progress or was stopped for good.

Two rules need a fact only the host can give: a process is *confirmed dead* (inspected, not
assumed). The functions that need it (:func:`takeover`, :func:`fence`, :func:`mark_stopped`,
:func:`block`) take ``confirmed_dead`` and refuse without it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Literal

import attrs

from ..actors import MainspringError
from ..storage import (
    ACTIVE_WORKER,
    LEASE_DEFAULT,
    MAX_USAGE_EPOCHS,
    ProcessIdentity,
    StopIntent,
    UsageEpoch,
    WorkerFailure,
    WorkerRecord,
    WorkerStatus,
    WorkerTask,
    check_lease,
)

__all__ = [
    "MAX_REPAIR",
    "WORKER_MOVES",
    "Expect",
    "Observed",
    "StaleWorker",
    "WorkerRefused",
    "add_usage",
    "assign",
    "begin_handoff",
    "block",
    "deliver",
    "expect",
    "fence",
    "heartbeat",
    "mark_started",
    "mark_starting",
    "mark_stopped",
    "observe",
    "repair",
    "report_failure",
    "start_failed",
    "takeover",
]

#: A repair instruction is 1..MAX_REPAIR characters once trimmed.
MAX_REPAIR = 16_384

WORKER_MOVES: Mapping[WorkerStatus, frozenset[WorkerStatus]] = {
    "assigned": frozenset({"starting", "stopped", "blocked"}),
    "starting": frozenset({"running", "idle", "stopped", "blocked"}),
    "running": frozenset({"idle", "handing-off", "stopped", "blocked"}),
    "idle": frozenset({"running", "handing-off", "stopped", "blocked"}),
    "handing-off": frozenset({"fenced", "stopped", "blocked"}),
    "fenced": frozenset({"delivered"}),
    "delivered": frozenset(),
    # A stopped worker (its process confirmed dead) may be taken over: generation + 1.
    "stopped": frozenset({"assigned"}),
    "blocked": frozenset(),
}

#: What a host can say about a process: alive and working, alive and waiting for input,
#: gone (with its exit status when known), or not knowable from here (another host).
Observed = Literal["running", "idle", "exited", "unknown"]


class StaleWorker(MainspringError):
    """A write about a worker was made from an out-of-date view of it: the worker's id,
    generation or status is not what the caller expected. Nothing was changed."""

    def __init__(self, worker_id: str, expected: str, found: str) -> None:
        super().__init__(f"worker {worker_id} is {found}, not {expected}: the caller is stale")
        self.worker_id = worker_id
        self.expected = expected
        self.found = found


class WorkerRefused(MainspringError):
    """A worker move that the fleet's rules do not allow now; ``code`` says which rule
    (``capacity``, ``task-busy``, ``not-dead``, ``digest-mismatch``, ``not-live``,
    ``bad-repair``, ``illegal-move``, ``stale-usage``, ``proof``...). Nothing was changed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@attrs.frozen
class Expect:
    """What a caller believes about a worker: its id, generation, and status (one of
    ``statuses``)."""

    worker_id: str
    generation: int
    statuses: frozenset[WorkerStatus]


def expect(worker: WorkerRecord, *statuses: WorkerStatus) -> Expect:
    """The belief matching ``worker`` now (in ``statuses``, or exactly its status)."""
    return Expect(worker.id, worker.generation, frozenset(statuses or (worker.status,)))


def _check(worker: WorkerRecord, belief: Expect) -> None:
    if worker.id != belief.worker_id or worker.generation != belief.generation:
        raise StaleWorker(
            worker.id,
            f"{belief.worker_id} generation {belief.generation}",
            f"{worker.id} generation {worker.generation}",
        )
    if worker.status not in belief.statuses:
        raise StaleWorker(worker.id, " or ".join(sorted(belief.statuses)), worker.status)


def _move(worker: WorkerRecord, new: WorkerStatus, now: float, **changes: object) -> WorkerRecord:
    if new != worker.status and new not in WORKER_MOVES[worker.status]:
        raise WorkerRefused("illegal-move", f"worker {worker.id}: {worker.status} -> {new}")
    return attrs.evolve(worker, status=new, updated_at=now, **changes)  # type: ignore[arg-type]


def _task(task: WorkerTask, now: float, **changes: object) -> WorkerTask:
    return attrs.evolve(task, updated_at=now, **changes)  # type: ignore[arg-type]


# -- assignment and start ------------------------------------------------------------------


def assign(
    task: WorkerTask,
    workers: Iterable[WorkerRecord],
    worker_id: str,
    *,
    agent_id: str,
    limit: int,
    now: float,
    lease: float = LEASE_DEFAULT,
) -> tuple[WorkerTask, WorkerRecord]:
    """A new worker (generation 1, ``assigned``) for a ``ready`` task: refused while the
    task has an active worker (``task-busy``) or the run has ``limit`` active workers
    (``capacity``: the limit is min(jobs, the global maximum))."""
    workers = list(workers)
    if task.state != "ready":
        raise WorkerRefused("task-busy", f"task {task.id} is {task.state}, not ready")
    if any(w.active and w.task_id == task.id for w in workers):
        raise WorkerRefused("task-busy", f"task {task.id} already has an active worker")
    if any(w.id == worker_id for w in workers):
        raise WorkerRefused("illegal-move", f"worker {worker_id} exists already")
    if sum(1 for w in workers if w.active) >= limit:
        raise WorkerRefused("capacity", f"the run has {limit} active workers already")
    worker = WorkerRecord(
        id=worker_id,
        task_id=task.id,
        step_id=task.step_id,
        agent_id=agent_id,
        lease=check_lease(lease),
        reason="assigned",
        created_at=now,
        updated_at=now,
    )
    return _task(task, now, worker_id=worker_id, reason="assigned"), worker


def mark_starting(
    worker: WorkerRecord, belief: Expect, *, session: str, job: str, now: float
) -> WorkerRecord:
    """Phase one of a start: ``starting`` with a lease, a new session, the job; recorded
    before the process is started, so a crash now is seen as a start in progress."""
    _check(worker, belief)
    return _move(
        worker,
        "starting",
        now,
        session=session,
        job=job,
        lease_expires_at=now + worker.lease,
        process=None,
        reason="starting",
    )


def mark_started(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    process: ProcessIdentity,
    *,
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """Phase two: the process exists; its identity is recorded, the worker runs and so
    does its task. A worker no longer ``starting`` (the run was stopped meanwhile) raises
    :class:`StaleWorker`: the caller stops the new process and keeps the error."""
    _check(worker, belief)
    worker = _move(
        worker, "running", now, process=process, lease_expires_at=now + worker.lease, reason=""
    )
    return worker, _task(task, now, state="running", reason="")


def start_failed(
    worker: WorkerRecord, task: WorkerTask, belief: Expect, *, now: float, digest: str | None
) -> tuple[WorkerRecord, WorkerTask]:
    """The process could not be started: the worker is ``blocked`` with failure class
    ``native-start`` (``digest``: of the error text, which is not stored) and the task is
    ready again."""
    _check(worker, belief)
    failure = WorkerFailure(
        failure_class="native-start",
        fingerprint=digest or _sha("native-start"),
        diagnostic_digest=digest,
        phase="start",
        at=now,
    )
    worker = _move(
        worker, "blocked", now, failure=failure, lease_expires_at=None, reason="native-start"
    )
    return worker, _task(task, now, state="ready", reason="native-start")


# -- while it runs ----------------------------------------------------------------------


def heartbeat(
    worker: WorkerRecord, belief: Expect, *, now: float, lease: float | None = None
) -> WorkerRecord:
    """Renew the worker's lease (``lease`` seconds from now, 1 s .. 10 min)."""
    _check(worker, belief)
    if not worker.active:
        raise WorkerRefused("not-live", f"worker {worker.id} is {worker.status}")
    length = worker.lease if lease is None else check_lease(lease)
    return attrs.evolve(worker, lease=length, lease_expires_at=now + length, updated_at=now)


def observe(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    seen: Observed,
    *,
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """Map what the host sees of a running or idle worker's process to its status: running
    or idle as seen; ``exited`` (unexpectedly: a delivery goes through the handoff) stops
    the worker and puts its task back to ready, reason ``native-process-exited`` (an
    exited process is dead: it was inspected). ``unknown`` changes nothing."""
    _check(worker, belief)
    if worker.status not in ("running", "idle"):
        raise WorkerRefused("not-live", f"worker {worker.id} is {worker.status}")
    if seen in ("running", "idle"):
        return _move(worker, seen, now), task
    if seen == "exited":
        reason = "native-process-exited"
        worker = _move(worker, "stopped", now, lease_expires_at=None, reason=reason)
        return worker, _task(task, now, state="ready", reason=reason)
    return worker, task


def takeover(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    *,
    confirmed_dead: bool,
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """A new generation of the worker, ``assigned``, for its task: only once the old
    process is confirmed dead (``not-dead`` otherwise: a live old process blocks takeover).
    A worker that is active (its previous owner crashed) or stopped may be taken over."""
    _check(worker, belief)
    if not confirmed_dead:
        raise WorkerRefused(
            "not-dead", f"worker {worker.id}'s process is not confirmed dead: no takeover"
        )
    if worker.status not in ("stopped", *ACTIVE_WORKER):
        raise WorkerRefused("illegal-move", f"worker {worker.id} is {worker.status}")
    worker = attrs.evolve(
        worker,
        generation=worker.generation + 1,
        status="assigned",
        process=None,
        session=None,
        job=None,
        lease_expires_at=None,
        intent=None,
        reason="takeover",
        updated_at=now,
    )
    return worker, _task(task, now, state="ready", worker_id=worker.id, reason="takeover")


def report_failure(
    worker: WorkerRecord, belief: Expect, failure: WorkerFailure, *, now: float
) -> tuple[WorkerRecord, bool]:
    """Record a failure the worker reported; True when the no-progress rule says to stop
    it: the same failure twice in a row without useful progress. The caller then stops the
    process and, once it is confirmed dead, :func:`block`\\ s the worker with
    ``no-progress:<class>``."""
    _check(worker, belief)
    if worker.status not in ("running", "idle"):
        raise WorkerRefused("not-live", f"worker {worker.id} is {worker.status}")
    if failure.useful_progress:
        repeats = 0
    elif failure.same_as(worker.failure) and worker.failure is not None:
        repeats = worker.repeats + 1 if not worker.failure.useful_progress else 1
    else:
        repeats = 1
    worker = attrs.evolve(worker, failure=failure, repeats=min(repeats, 1_000_000), updated_at=now)
    return worker, repeats >= 2


def repair(
    worker: WorkerRecord, belief: Expect, text: str, *, now: float
) -> tuple[WorkerRecord, str, str]:
    """A repair instruction for a live worker: trimmed, 1..16,384 characters, no NUL.
    Returns the worker (only the sha256 of the text is kept), the trimmed text (to send),
    and its digest."""
    _check(worker, belief)
    if worker.status not in ("running", "idle"):
        raise WorkerRefused("not-live", f"worker {worker.id} is {worker.status}, not live")
    if not isinstance(text, str):
        raise WorkerRefused("bad-repair", "a repair instruction must be text")
    trimmed = text.strip()
    if not 1 <= len(trimmed) <= MAX_REPAIR or "\x00" in trimmed:
        raise WorkerRefused(
            "bad-repair",
            f"a repair instruction must be 1..{MAX_REPAIR:,} characters once trimmed, no NUL",
        )
    digest = _sha(trimmed)
    worker = attrs.evolve(
        worker,
        repair_digest=digest,
        repairs=min(worker.repairs + 1, 1_000_000),
        updated_at=now,
    )
    return worker, trimmed, digest


def add_usage(
    worker: WorkerRecord,
    *,
    generation: int,
    session: str,
    job: str,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cost: Decimal = Decimal(0),
    now: float,
) -> WorkerRecord:
    """Add usage to the worker's (generation, session, job) epoch: refused
    (``stale-usage``) unless all three still match the worker's."""
    if (generation, session, job) != (worker.generation, worker.session, worker.job):
        raise WorkerRefused("stale-usage", f"usage for an epoch worker {worker.id} is no longer in")
    epochs = list(worker.usage)
    key = (generation, session, job)
    index = next(
        (i for i, e in enumerate(epochs) if (e.generation, e.session, e.job) == key), len(epochs)
    )
    if index == len(epochs):
        epochs.append(UsageEpoch(generation=generation, session=session, job=job))
    epoch = epochs[index]
    epochs[index] = attrs.evolve(
        epoch,
        input_tokens=epoch.input_tokens + input_tokens,
        output_tokens=epoch.output_tokens + output_tokens,
        total_tokens=epoch.total_tokens + input_tokens + output_tokens,
        cost=epoch.cost + cost,
    )
    return attrs.evolve(worker, usage=tuple(epochs[-MAX_USAGE_EPOCHS:]), updated_at=now)


# -- handoff, stop, block -------------------------------------------------------------------


def begin_handoff(worker: WorkerRecord, belief: Expect, intent: StopIntent) -> WorkerRecord:
    """Begin delivering: record the stop intent (``handing-off``). Beginning again with the
    same digests changes nothing; with other digests it is refused (``digest-mismatch``)."""
    same = worker.id == belief.worker_id and worker.generation == belief.generation
    handing = worker.status in ("handing-off", "fenced", "delivered")
    if worker.intent is not None and handing and same:
        if worker.intent.same_digests(intent):
            return worker  # idempotent
        raise WorkerRefused(
            "digest-mismatch", f"worker {worker.id} is handing off another delivery"
        )
    _check(worker, belief)
    if worker.status not in ("running", "idle"):
        raise WorkerRefused("not-live", f"worker {worker.id} is {worker.status}")
    return _move(worker, "handing-off", intent.at, intent=intent, reason="handoff")


def fence(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    *,
    confirmed_dead: bool,
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """The handing-off worker's process is confirmed dead: ``fenced``, its task
    ``awaiting-delivery``. Fencing a fenced worker again changes nothing."""
    if worker.status == "fenced" and worker.generation == belief.generation:
        return worker, task
    _check(worker, belief)
    if not confirmed_dead:
        raise WorkerRefused("not-dead", f"worker {worker.id}'s process is not confirmed dead")
    worker = _move(worker, "fenced", now, lease_expires_at=None, reason="fenced")
    return worker, _task(task, now, state="awaiting-delivery", reason="")


def deliver(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    *,
    delivery_digest: str,
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """Publish the fenced worker's delivery (sealed as evidence named ``delivery_digest``,
    which must be the intent's): ``delivered``, and so is its task. Delivering again with
    the same digest changes nothing; another digest is refused."""
    intent = worker.intent
    if intent is None or intent.delivery_digest != delivery_digest:
        raise WorkerRefused("digest-mismatch", f"worker {worker.id} did not intend to deliver that")
    if worker.status == "delivered" and worker.generation == belief.generation:
        return worker, task
    _check(worker, belief)
    worker = _move(worker, "delivered", now, delivered_digest=delivery_digest, reason="")
    task = _task(task, now, state="delivered", reason="", delivery_digest=delivery_digest)
    return worker, task


def mark_stopped(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    *,
    confirmed_dead: bool,
    reason: str,
    task_state: Literal["ready", "blocked"] = "ready",
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """Stopped (pause, cancel, stop-task, lease loss: ``reason``), recorded only once its
    process is confirmed dead; the task goes to ``task_state`` (ready: it may run again)."""
    _check(worker, belief)
    if not confirmed_dead:
        raise WorkerRefused("not-dead", f"worker {worker.id}'s process is not confirmed dead")
    worker = _move(worker, "stopped", now, lease_expires_at=None, reason=reason)
    if task.worker_id == worker.id and task.state in ("ready", "running"):
        task = _task(task, now, state=task_state, reason=reason)
    return worker, task


def block(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    *,
    confirmed_dead: bool,
    reason: str,
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """The worker is ``blocked`` and so is its task, with ``reason`` (for the no-progress
    rule ``no-progress:<class>``): only once its process is confirmed dead."""
    _check(worker, belief)
    if not confirmed_dead:
        raise WorkerRefused("not-dead", f"worker {worker.id}'s process is not confirmed dead")
    worker = _move(worker, "blocked", now, lease_expires_at=None, reason=reason)
    return worker, _task(task, now, state="blocked", reason=reason)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
