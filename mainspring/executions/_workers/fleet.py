"""The worker lifecycle as pure functions: every rule of the fleet, without an event loop.

Each function takes the records as they are, what the caller believes about the worker
(:class:`Expect`: its id, generation and status), and returns the new records; it changes
nothing it is given. A caller whose belief is out of date gets :class:`StaleWorker`, never a
silent overwrite: the check on (worker id, generation, status) is what makes two writers
about one worker safe. A move a rule does not allow now is :class:`WorkerRefused`, with a
code that says which rule refused it; the lifecycle tables are checked after the rules, and
catch only a rule's own bug.

The lifecycle (``WORKER_MOVES`` in ``_rules/lifecycle.py``, with every other table)::

    assigned -> starting -> running <-> idle -> handing_off -> fenced -> delivered
    any active -> stopped (process confirmed dead) | blocked (a failed start, no progress)
    stopped or active -> assigned, generation + 1 (takeover, process confirmed dead)

and the task a worker serves (``WorkerTask.state``, ``WORKER_TASK_MOVES``): ready -> running
-> awaiting_delivery -> delivered, back to ready when its process ended unexpectedly or
failed to start, blocked when it made no progress or was stopped for good. Every change of
either goes through its table (an illegal one raises ``IllegalTransition``: a bug here).

Two rules need a fact only the host can give: a process is *confirmed dead* (inspected, not
assumed). The functions that need it (:func:`takeover`, :func:`fence`, :func:`mark_stopped`,
:func:`block`) take ``confirmed_dead`` and refuse without it.

Every function checks in one order, so a caller learns the most basic thing wrong first: the
belief (:class:`StaleWorker`), that the task is the worker's (``wrong-task``), that the worker's
status allows the move (``illegal-move`` / ``not-live``), the task's state and the run's
capacity, and last the host's fact (``not-dead``). Only the function's own rule decides which
statuses a move leaves from: a belief that names a status the move does not leave from is
refused, never obeyed. The handoff's steps repeated (same id and generation) are answered
before the status is checked: the same digests change nothing, others are ``digest-mismatch``.

A run finalizes (:func:`finalize`) with no active worker and a :class:`Proof` that holds; the
diagnostic trail is kept bounded by :func:`trail_append`.
"""

from __future__ import annotations

import hashlib
import types
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

import attrs

from ...actors import MainspringError
from ...storage import TrailEntry, Unreadable, WorkerRecord, WorkerStatus, WorkerTask
from ...storage._seam import (
    ACTIVE_WORKER,
    LEASE_DEFAULT,
    MAX_COUNTER,
    MAX_TRAIL,
    MAX_USAGE_EPOCHS,
    ProcessIdentity,
    StopIntent,
    UsageEpoch,
    WorkerFailure,
    WorkerTaskState,
    check_cost,
    check_digest,
    check_lease,
    check_tokens,
    sha256_hex,
)
from .._rules.lifecycle import worker_move, worker_task_move

__all__ = [
    "MAX_REPAIR",
    "NOT_FAILED",
    "Expect",
    "Observed",
    "Proof",
    "StaleWorker",
    "WorkerRefused",
    "add_usage",
    "assign",
    "begin_handoff",
    "block",
    "capacity",
    "deliver",
    "expect",
    "fence",
    "finalize",
    "heartbeat",
    "mark_started",
    "mark_starting",
    "mark_stopped",
    "next_trail_seq",
    "observe",
    "progress",
    "repair",
    "report_failure",
    "start_failed",
    "takeover",
    "trail_append",
]


# -- the vocabulary: moves, what a host observes, beliefs, refusals -----------------------


#: A repair instruction is 1..MAX_REPAIR characters once trimmed.
MAX_REPAIR = 16_384

#: Why a worker may be stopped without having failed: the run was paused, met its deadline,
#: ran out of budget (B3: it waits for more), lost its lease or shut down. A start that
#: ended so does not count against the task's start limit (its takeover gives the attempt
#: back): a paused run resumed any number of times keeps its starts for real failures.
NOT_FAILED = frozenset({"pause", "timeout", "budget", "lease-lost", "shutdown", "stopping"})

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
    ``bad-repair``, ``illegal-move``, ``wrong-task``, ``stale-usage``, ``proof``,
    ``active-writer``). Nothing was changed."""

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
    """Refuse (:class:`StaleWorker`) a write made from an out-of-date belief about ``worker``."""
    if worker.id != belief.worker_id or worker.generation != belief.generation:
        raise StaleWorker(
            worker.id,
            f"{belief.worker_id} generation {belief.generation}",
            f"{worker.id} generation {worker.generation}",
        )
    if worker.status not in belief.statuses:
        raise StaleWorker(worker.id, " or ".join(sorted(belief.statuses)), worker.status)


# -- the checks every move makes, in one order --------------------------------------------


def _own(worker: WorkerRecord, task: WorkerTask) -> None:
    """A write never changes another task than the one its worker serves now."""
    if task.id != worker.task_id or task.worker_id != worker.id:
        raise WorkerRefused("wrong-task", f"task {task.id} is not served by worker {worker.id}")


def _from(
    worker: WorkerRecord, statuses: Iterable[WorkerStatus], code: str = "illegal-move"
) -> None:
    if worker.status not in statuses:
        raise WorkerRefused(code, f"worker {worker.id} is {worker.status}")


def _dead(worker: WorkerRecord, confirmed_dead: bool) -> None:
    if confirmed_dead is not True:
        raise WorkerRefused("not-dead", f"worker {worker.id}'s process is not confirmed dead")


def _same(worker: WorkerRecord, belief: Expect) -> bool:  # the idempotent repeats' check
    return worker.id == belief.worker_id and worker.generation == belief.generation


def _move(worker: WorkerRecord, new: WorkerStatus, now: float, **changes: object) -> WorkerRecord:
    # The rule's own checks (_from) refused first what a caller can get wrong: the table
    # catches a rule that forgot one (IllegalTransition, a bug).
    status = worker_move(worker.id, worker.status, new)
    return attrs.evolve(worker, status=status, updated_at=now, **changes)  # type: ignore[arg-type]


def _task(
    task: WorkerTask, now: float, state: WorkerTaskState | None = None, **changes: object
) -> WorkerTask:
    new = task.state if state is None else worker_task_move(task.id, task.state, state)
    return attrs.evolve(task, state=new, updated_at=now, **changes)  # type: ignore[arg-type]


def _active(workers: Iterable[WorkerRecord], task_id: str, *, limit: int, but: str = "") -> None:
    active = [w for w in workers if w.active and w.id != but]
    if any(w.task_id == task_id for w in active):
        raise WorkerRefused("task-busy", f"task {task_id} already has an active worker")
    if len(active) >= _limit(limit):
        raise WorkerRefused("capacity", f"the run has {limit} active workers already")


def _limit(value: Any, what: str = "limit") -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{what} must be a whole number of at least 1, not {value!r}")
    return value


# -- assignment and start -----------------------------------------------------------------


def capacity(jobs: int, maximum: int) -> int:
    """How many workers of a run may be active at once: min(its jobs, the global maximum)."""
    return min(_limit(jobs, "jobs"), _limit(maximum, "maximum"))


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
    (``capacity``: the limit is :func:`capacity`, min(jobs, the global maximum))."""
    workers = list(workers)
    if task.state != "ready":
        raise WorkerRefused("task-busy", f"task {task.id} is {task.state}, not ready")
    if any(w.id == worker_id for w in workers):
        raise WorkerRefused("illegal-move", f"worker {worker_id} exists already")
    _active(workers, task.id, limit=limit)
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
    before the process is started, so a crash now is seen as a start in progress. Only an
    ``assigned`` worker starts: a worker found ``starting`` may have a process nobody
    recorded, and only a :func:`takeover` (once it is confirmed dead) starts it again."""
    _check(worker, belief)
    _from(worker, (WorkerStatus.ASSIGNED,))
    return _move(
        worker,
        WorkerStatus.STARTING,
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
    does its task (one more attempt). A worker no longer ``starting`` (the run was stopped
    meanwhile) raises :class:`StaleWorker`: the caller stops the new process and keeps the
    error."""
    _check(worker, belief)
    _own(worker, task)
    _from(worker, (WorkerStatus.STARTING,))
    worker = _move(
        worker,
        WorkerStatus.RUNNING,
        now,
        process=process,
        lease_expires_at=now + worker.lease,
        reason="",
    )
    attempts = min(task.attempts + 1, 1_000_000)
    return worker, _task(task, now, state=WorkerTaskState.RUNNING, reason="", attempts=attempts)


def start_failed(
    worker: WorkerRecord, task: WorkerTask, belief: Expect, *, now: float, digest: str | None
) -> tuple[WorkerRecord, WorkerTask]:
    """The process could not be started: the ``starting`` worker is ``blocked`` with
    failure class ``native-start`` (``digest``: of the error text, which is not stored) and
    the task is ready again."""
    _check(worker, belief)
    _own(worker, task)
    _from(worker, (WorkerStatus.STARTING,))
    failure = WorkerFailure(
        failure_class="native-start",
        fingerprint=digest or hashlib.sha256(b"native-start").hexdigest(),
        diagnostic_digest=digest,
        phase="start",
        at=now,
    )
    worker = _move(
        worker,
        WorkerStatus.BLOCKED,
        now,
        failure=failure,
        lease_expires_at=None,
        reason="native-start",
    )
    return worker, _task(task, now, state=WorkerTaskState.READY, reason="native-start")


# -- while it runs ------------------------------------------------------------------------


def heartbeat(
    worker: WorkerRecord, belief: Expect, *, now: float, lease: float | None = None
) -> WorkerRecord:
    """Renew the worker's lease (``lease`` seconds from now, 1 s .. 10 min; its own length
    when not given, 30 s unless set)."""
    _check(worker, belief)
    _from(worker, ACTIVE_WORKER, "not-live")
    length = worker.lease if lease is None else check_lease(lease)
    return attrs.evolve(worker, lease=length, lease_expires_at=now + length, updated_at=now)


_SEEN = frozenset({"running", "idle", "exited", "unknown"})


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
    if seen not in _SEEN:
        raise ValueError(f"a process is seen {', '.join(sorted(_SEEN))}, not {seen!r}")
    _check(worker, belief)
    _own(worker, task)
    _from(worker, (WorkerStatus.RUNNING, WorkerStatus.IDLE), "not-live")
    if seen == worker.status:
        return attrs.evolve(worker, updated_at=now), task
    if seen in ("running", "idle"):
        return _move(worker, WorkerStatus(seen), now), task
    if seen == "exited":
        reason = "native-process-exited"
        worker = _move(worker, WorkerStatus.STOPPED, now, lease_expires_at=None, reason=reason)
        return worker, _task(task, now, state=WorkerTaskState.READY, reason=reason)
    return worker, task


def takeover(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    *,
    workers: Iterable[WorkerRecord],
    limit: int,
    confirmed_dead: bool,
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """A new generation of the worker, ``assigned``, for its task (still ready or running):
    only once the old process is confirmed dead (``not-dead``: a live one blocks takeover).
    An active worker (its owner crashed) or a stopped one may be taken over; a stopped one
    becomes active again, so the run's ``workers`` count against ``limit`` as in assign;
    one stopped without failing (``NOT_FAILED``) gives its task's attempt back."""
    _check(worker, belief)
    _own(worker, task)
    _from(worker, (WorkerStatus.STOPPED, *ACTIVE_WORKER))
    if task.state not in ("ready", "running"):
        raise WorkerRefused("illegal-move", f"task {task.id} is {task.state}: no takeover")
    if not worker.active:
        _active(workers, task.id, limit=limit, but=worker.id)
    _dead(worker, confirmed_dead)
    # A start stopped without failing (pause, deadline, lease loss) is given back.
    back = worker.status == "stopped" and worker.reason in NOT_FAILED and task.attempts > 0
    worker = attrs.evolve(
        worker,
        generation=worker.generation + 1,
        status=worker_move(worker.id, worker.status, WorkerStatus.ASSIGNED),
        process=None,
        session=None,
        job=None,
        lease_expires_at=None,
        intent=None,
        reason="takeover",
        updated_at=now,
    )
    attempts = task.attempts - 1 if back else task.attempts
    return worker, _task(
        task, now, state=WorkerTaskState.READY, reason="takeover", attempts=attempts
    )


def report_failure(
    worker: WorkerRecord, belief: Expect, failure: WorkerFailure, *, now: float
) -> tuple[WorkerRecord, bool]:
    """Record a failure the worker reported; True when the no-progress rule says to stop
    it: the same failure twice in a row without useful progress. The caller then stops the
    process and, once it is confirmed dead, :func:`block`\\ s the worker with
    ``no-progress:<class>``."""
    _check(worker, belief)
    _from(worker, (WorkerStatus.RUNNING, WorkerStatus.IDLE), "not-live")
    if not isinstance(failure, WorkerFailure):
        raise TypeError(f"a failure is a WorkerFailure, not {type(failure).__name__}")
    previous = worker.failure
    if failure.useful_progress:
        repeats = 0
    elif previous is not None and failure.same_as(previous) and not previous.useful_progress:
        repeats = worker.repeats + 1
    else:
        repeats = 1
    worker = attrs.evolve(worker, failure=failure, repeats=min(repeats, 1_000_000), updated_at=now)
    return worker, repeats >= 2


def progress(worker: WorkerRecord, belief: Expect, *, now: float) -> WorkerRecord:
    """The worker reported useful progress: the no-progress rule starts over (the next
    failure is the first in a row, even if it is the same as the last)."""
    _check(worker, belief)
    _from(worker, (WorkerStatus.RUNNING, WorkerStatus.IDLE), "not-live")
    return attrs.evolve(worker, repeats=0, updated_at=now) if worker.repeats else worker


def repair(
    worker: WorkerRecord, belief: Expect, text: str, *, now: float
) -> tuple[WorkerRecord, str, str]:
    """A repair instruction for a live worker: trimmed, 1..16,384 characters, no NUL, UTF-8.
    Returns the worker (only the sha256 of the text is kept, V1), the trimmed text (to
    send), and its digest."""
    _check(worker, belief)
    _from(worker, (WorkerStatus.RUNNING, WorkerStatus.IDLE), "not-live")
    trimmed = text.strip() if isinstance(text, str) else ""
    try:
        encoded = trimmed.encode("utf-8")
    except UnicodeEncodeError:
        encoded = b""
    if not 1 <= len(trimmed) <= MAX_REPAIR or "\x00" in trimmed or not encoded:
        raise WorkerRefused(
            "bad-repair",
            f"a repair instruction must be UTF-8 text of 1..{MAX_REPAIR:,} characters once "
            "trimmed, without NUL",
        )
    digest = hashlib.sha256(encoded).hexdigest()
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
    (``stale-usage``) unless all three still match the worker's. Counts are whole and not
    negative, the cost a non-negative Decimal (ValueError / TypeError otherwise)."""
    check_tokens(input_tokens, "input_tokens")
    check_tokens(output_tokens, "output_tokens")
    if check_cost(cost) != cost:
        raise ValueError("cost has more decimal places than a cost keeps")
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
        cost=epoch.cost + check_cost(cost),
    )
    return attrs.evolve(worker, usage=tuple(epochs[-MAX_USAGE_EPOCHS:]), updated_at=now)


# -- handoff, stop, block -----------------------------------------------------------------


def begin_handoff(worker: WorkerRecord, belief: Expect, intent: StopIntent) -> WorkerRecord:
    """Begin delivering: record the stop intent (``handing_off``). Beginning again with the
    same digests changes nothing; with other digests it is refused (``digest-mismatch``)."""
    if _same(worker, belief) and worker.status in (WorkerStatus.HANDING_OFF, "fenced", "delivered"):
        if worker.intent is not None and worker.intent.same_digests(intent):
            return worker  # idempotent
        raise WorkerRefused(
            "digest-mismatch", f"worker {worker.id} is handing off another delivery"
        )
    _check(worker, belief)
    _from(worker, (WorkerStatus.RUNNING, WorkerStatus.IDLE), "not-live")
    return _move(worker, WorkerStatus.HANDING_OFF, intent.at, intent=intent, reason="handoff")


def fence(
    worker: WorkerRecord,
    task: WorkerTask,
    belief: Expect,
    *,
    confirmed_dead: bool,
    now: float,
) -> tuple[WorkerRecord, WorkerTask]:
    """The handing_off worker's process is confirmed dead: ``fenced``, its task
    ``awaiting_delivery``. Fencing a worker already fenced (or delivered) changes nothing."""
    if _same(worker, belief) and worker.status in ("fenced", "delivered"):
        return worker, task
    _check(worker, belief)
    _own(worker, task)
    _from(worker, (WorkerStatus.HANDING_OFF,))
    _dead(worker, confirmed_dead)
    worker = _move(worker, WorkerStatus.FENCED, now, lease_expires_at=None, reason="fenced")
    return worker, _task(task, now, state=WorkerTaskState.AWAITING_DELIVERY, reason="")


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
    the same digest changes nothing; another digest is refused (``digest-mismatch``)."""
    check_digest(delivery_digest, "delivery_digest")
    if _same(worker, belief) and worker.status == "delivered":
        if worker.delivered_digest == delivery_digest:
            return worker, task  # idempotent
        raise WorkerRefused("digest-mismatch", f"worker {worker.id} delivered something else")
    _check(worker, belief)
    _own(worker, task)
    _from(worker, (WorkerStatus.FENCED,))
    if worker.intent is None or worker.intent.delivery_digest != delivery_digest:
        raise WorkerRefused("digest-mismatch", f"worker {worker.id} did not intend to deliver that")
    worker = _move(worker, WorkerStatus.DELIVERED, now, delivered_digest=delivery_digest, reason="")
    task = _task(
        task, now, state=WorkerTaskState.DELIVERED, reason="", delivery_digest=delivery_digest
    )
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
    if task_state not in ("ready", "blocked"):
        raise ValueError(f"a stopped worker's task is ready or blocked, not {task_state!r}")
    _check(worker, belief)
    _own(worker, task)
    _from(worker, ACTIVE_WORKER)
    _dead(worker, confirmed_dead)
    worker = _move(worker, WorkerStatus.STOPPED, now, lease_expires_at=None, reason=reason)
    return worker, _task(task, now, state=WorkerTaskState(task_state), reason=reason)


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
    _own(worker, task)
    _from(worker, ACTIVE_WORKER)
    _dead(worker, confirmed_dead)
    worker = _move(worker, WorkerStatus.BLOCKED, now, lease_expires_at=None, reason=reason)
    return worker, _task(task, now, state=WorkerTaskState.BLOCKED, reason=reason)


# -- finalizing a run (its proof) and the bounded diagnostic trail ------------------------
#
# The rules that look at a run's workers together rather than at one worker.


Verdict = Literal["passed", "failed"]


def _verdict(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in ("passed", "failed"):
        raise ValueError(f"{attribute.name} is passed or failed, not {value!r}")


def _receipt(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"a receipt is a mapping, not {type(value).__name__}")
    return types.MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class Proof:
    """What finalizing a run needs: verification and review passed, and a receipt (a JSON
    mapping of ids and digests) with the sha256 of its canonical JSON."""

    verification: Verdict = attrs.field(validator=_verdict)
    review: Verdict = attrs.field(validator=_verdict)
    receipt: Mapping[str, Any] = attrs.field(converter=_receipt, hash=False)
    receipt_digest: str = attrs.field(validator=lambda _, a, v: check_digest(v, a.name))

    def plain(self) -> dict[str, Any]:
        """The proof as plain JSON data (what its digest is of)."""
        return {
            "receipt": dict(self.receipt),
            "receipt_digest": self.receipt_digest,
            "review": self.review,
            "verification": self.verification,
        }


def finalize(tasks: Iterable[WorkerTask], workers: Iterable[WorkerRecord], proof: Proof) -> str:
    """The digest of the proof (sha256 of its canonical JSON) that lets the run finalize:
    refused while a worker is active (``active-writer``), or when the proof does not hold
    (``proof``: verification or review not passed, no worker task, a task not delivered, a
    receipt whose digest is not its own)."""
    live = sorted(w.id for w in workers if w.active)
    if live:
        raise WorkerRefused("active-writer", f"workers still active: {', '.join(live[:8])}")
    if proof.verification != "passed" or proof.review != "passed":
        raise WorkerRefused(
            "proof", f"verification {proof.verification}, review {proof.review}: not passed"
        )
    if not (tasks := list(tasks)):  # "the task complete" never holds vacuously
        raise WorkerRefused("proof", "the run has no worker task: nothing was delivered")
    open_tasks = sorted(t.id for t in tasks if t.state != "delivered")
    if open_tasks:
        raise WorkerRefused("proof", f"tasks not delivered: {', '.join(open_tasks[:8])}")
    if sha256_hex(dict(proof.receipt)) != proof.receipt_digest:
        raise WorkerRefused("proof", "the receipt's digest is not the receipt's")
    return sha256_hex(proof.plain())


def next_trail_seq(trail: Sequence[TrailEntry | Unreadable]) -> int:
    """The seq the next trail entry takes: one past the highest in ``trail`` (1 at first;
    an entry that does not parse counts by the seq it was stored with, if that is a seq a
    trail entry can hold: one out of range fails closed on its own, E8, and does not push
    every later seq out of range with it)."""
    seqs = [e.seq if type(e) is TrailEntry else e.raw.get("seq") for e in trail]  # type: ignore[union-attr]
    return max((s for s in seqs if type(s) is int and 1 <= s <= MAX_COUNTER), default=0) + 1


def trail_append(
    trail: Sequence[TrailEntry | Unreadable], entry: TrailEntry, *, next_seq: int | None = None
) -> tuple[TrailEntry | Unreadable, ...]:
    """``trail`` with ``entry`` appended, keeping the last :data:`MAX_TRAIL`
    entries; ``entry.seq`` must come after every seq in the trail (ValueError).

    ``next_seq`` is ``next_trail_seq(trail)`` when the caller keeps it as the trail grows
    (a run's board does): the trail is then not scanned again on every append."""
    if not isinstance(entry, TrailEntry):
        raise TypeError(f"a trail entry is a TrailEntry, not {type(entry).__name__}")
    if entry.seq < (next_trail_seq(trail) if next_seq is None else next_seq):
        raise ValueError(f"trail seq {entry.seq} does not come after the trail's")
    return (*trail[-(MAX_TRAIL - 1) :], entry)
