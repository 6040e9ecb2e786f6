"""Pure changes to a stored execution: pause, cancel, crash reconciliation, answers, stopping
one agent task. Each takes an :class:`Execution` and returns a new one.

The same functions serve a run live in this process (its ExecutionActor commits the result)
and an operator in another process (through the store's atomic ``edit``, which the live
runner then meets as a refused commit or heartbeat). Agent task records that do not parse
are carried through untouched (E7): nothing here drops a record it cannot read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any, Literal

import attrs

from ...storage import (
    AgentTaskRecord,
    Execution,
    ExecutionStatus,
    Interruption,
    Observation,
    Pending,
    QuestionId,
    StepStatus,
    StopRequest,
    Unreadable,
    redact,
)
from ...storage._seam import (
    MAX_CONTROLS,
    MAX_COUNTER,
    AnswerRequest,
    Control,
    redact_flagged,
)
from .lifecycle import execution_move, step_move, task_move
from .plan import observe, step_input_hash

__all__ = [
    "add_control",
    "answer_digest",
    "answer_task",
    "answered",
    "apply_answers",
    "bounded_reason",
    "cancel_execution",
    "clamp_count",
    "map_tasks",
    "next_ask",
    "next_waiting",
    "pause_execution",
    "requeue_interrupted",
    "stop_askers",
    "stop_request",
    "stop_task",
]

ControlAction = Literal["pause", "resume", "cancel", "answer", "approve", "stop-task"]


def clamp_count(value: int) -> int:
    """``value`` as a record's counter may hold it: at most ``MAX_COUNTER`` (E8). Counts that
    only grow (calls, attempts, replans) saturate there instead of making the record
    unwritable."""
    return min(value, MAX_COUNTER)


def map_tasks(
    execution: Execution, change: Callable[[AgentTaskRecord], AgentTaskRecord | None]
) -> tuple[Execution, list[AgentTaskRecord]]:
    """Apply ``change`` to every task record that parsed; returns the new execution and the
    records that changed. Records that did not parse stay exactly as they were (E7)."""
    entries: list[AgentTaskRecord | Unreadable] = []
    changed: list[AgentTaskRecord] = []
    for entry in execution.agent_tasks:
        if type(entry) is not AgentTaskRecord:
            entries.append(entry)
            continue
        updated = change(entry)
        if updated is None or updated == entry:
            entries.append(entry)
        else:
            task_move(entry.id, entry.state, updated.state)  # R11: terminal is sticky
            entries.append(updated)
            changed.append(updated)
    return attrs.evolve(execution, agent_tasks=tuple(entries)), changed


def stop_request(operation_id: str, task_id: str, *, cascade: bool = False) -> StopRequest:
    """The stop request operation ``operation_id`` writes for ``task_id``; ``cascade``: the
    task's dependents are cancelled too (S2)."""
    return StopRequest(operation_id=operation_id, task_id=task_id, cascade=cascade)


def stop_askers(execution: Execution) -> dict[str, str]:
    """The owner that asked for each stop request on the record, by operation id (V3): the
    audit line written with the request names it."""
    return {
        control.stop.operation_id: control.by
        for control in execution.controls
        if control.action == "stop-task" and control.stop is not None
    }


#: How much of a free-text reason (a pause's, a cancel's) is kept: it is an explanation, and
#: one control must never make its execution's record unwritable (X2).
MAX_REASON = 1_000
_REASON_WINDOW = 8 * MAX_REASON  # redacted before the final cut, so no cut secret leaks


def bounded_reason(reason: str) -> str:
    """``reason`` redacted (E5) and cut to :data:`MAX_REASON` characters. Redaction sees a
    window well past the cut first, so a secret that straddles the cut is masked whole."""
    text: str = redact(str(reason)[:_REASON_WINDOW])
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 15] + " [...truncated]"


def add_control(
    execution: Execution,
    action: ControlAction,
    by: str,
    now: float,
    reason: str = "",
    *,
    answer_sha256: str | None = None,
    stop: StopRequest | None = None,
) -> Execution:
    """Append an audit line (bounded: the oldest go first); a ``stop-task`` line names the
    stop request it wrote (``stop``)."""
    line = Control(
        action=action,
        by=by,
        at=now,
        reason=bounded_reason(reason),
        answer_sha256=answer_sha256,
        stop=stop,
    )
    return attrs.evolve(execution, controls=(*execution.controls, line)[-MAX_CONTROLS:])


def _live(record: AgentTaskRecord) -> bool:
    return record.state in ("running", "created")


def requeue_interrupted(
    execution: Execution, kind: Literal["crash", "pause"], now: float, detail: str = ""
) -> tuple[Execution, int]:
    """Running or created tasks go back to queued with an interruption saying why (R1, R3).

    An interruption is an explanation, not a lifecycle state. Steps marked running go back to
    pending: they will run again.
    """

    def requeue(record: AgentTaskRecord) -> AgentTaskRecord | None:
        if not _live(record):
            return None
        return attrs.evolve(
            record,
            state="queued",
            interruption=Interruption(kind=kind, at=now, detail=bounded_reason(detail)),
            updated_at=now,
        )

    execution, changed = map_tasks(execution, requeue)
    plan = execution.plan
    if plan is not None and any(step.status == "running" for step in plan.steps):
        steps = tuple(
            attrs.evolve(step, status=step_move(step.id, step.status, StepStatus.PENDING))
            if step.status == "running"
            else step
            for step in plan.steps
        )
        execution = attrs.evolve(execution, plan=attrs.evolve(plan, steps=steps))
    return execution, len(changed)


def pause_execution(execution: Execution, by: str, now: float, reason: str = "") -> Execution:
    """R1 on the record: tasks requeued with interruption ``pause``, status ``paused``. A
    stop asked for and not yet recorded (a stop request) is applied first: a stop under way
    is not undone by the pause (S1, R11)."""
    askers = stop_askers(execution)
    for request in execution.stop_requests:
        asker = askers.get(request.operation_id, by)
        execution, _ = stop_task(
            execution,
            request.task_id,
            request.operation_id,
            now,
            by=asker,
            cascade=request.cascade,
        )
    execution, _ = requeue_interrupted(execution, "pause", now, reason)
    execution = add_control(execution, "pause", by, now, reason)
    status = execution_move(execution.id, execution.status, ExecutionStatus.PAUSED)
    return attrs.evolve(execution, status=status, updated_at=now)


def _waiting_retries(observations: Iterable[Observation]) -> dict[str, list[Observation]]:
    """The observations that say a step waits to be tried again, by step id: found in one
    pass, so a cancel of n steps stays O(n) (R2: a cancel of 8,200 steps)."""
    waiting: dict[str, list[Observation]] = {}
    for o in observations:
        if o.data.get("retrying") is True:
            waiting.setdefault(o.step_id, []).append(o)
    return waiting


def _ended_attempts(
    observations: list[Observation], waiting: list[Observation]
) -> tuple[list[Observation], dict[str, Any]]:
    """B1: a step cancelled while it waited to be tried again: its waiting observation goes,
    and the cancel's keeps the failed attempts without saying it waits any more."""
    if not waiting:
        return observations, {}
    data = {key: value for key, value in waiting[-1].data.items() if key != "retrying"}
    return [o for o in observations if not any(o is w for w in waiting)], data


def cancel_execution(execution: Execution, by: str, now: float, reason: str = "") -> Execution:
    """R2 and P6 on the record: terminal ``cancelled``; every unfinished task is cancelled
    with interruption ``parent-cancel``; steps not yet started are skipped, agent steps say
    "cancelled" (never vanish); the pending question is withdrawn."""

    def stamp(record: AgentTaskRecord) -> AgentTaskRecord | None:
        if record.terminal:
            return None
        return attrs.evolve(
            record,
            state="cancelled",
            interruption=Interruption(kind="parent-cancel", at=now, detail=bounded_reason(reason)),
            pending_question=None,
            ended_at=now,
            updated_at=now,
        )

    execution, _ = map_tasks(execution, stamp)
    # Who cancelled and why, the same whichever process issued it (V3).
    why = f"cancelled by {by}"
    if reason and reason != why:
        why = f"{why}: {bounded_reason(reason)}"
    observations = list(execution.observations)
    waiting = _waiting_retries(observations)
    plan = execution.plan
    if plan is not None:
        steps = []
        for step in plan.steps:
            if step.status.finished:
                steps.append(step)
                continue
            started = step.status == "running" or step.kind == "agent"
            status = StepStatus.CANCELLED if started else StepStatus.SKIPPED
            steps.append(attrs.evolve(step, status=step_move(step.id, step.status, status)))
            observations, attempts = _ended_attempts(observations, waiting.get(step.id, []))  # B1
            observations.append(
                observe(
                    step,
                    ok=False,
                    code="cancelled" if started else None,
                    error=f"{status}: the execution was {why}",
                    data=attempts,
                )
            )
        execution = attrs.evolve(execution, plan=attrs.evolve(plan, steps=tuple(steps)))
    execution = add_control(execution, "cancel", by, now, reason)
    return attrs.evolve(
        execution,
        status=execution_move(execution.id, execution.status, ExecutionStatus.CANCELLED),
        pending=None,
        observations=tuple(observations),
        updated_at=now,
    )


def next_waiting(execution: Execution, *, excluding: str | None = None) -> Pending | None:
    """The pending slot found again from the records (R9): the earliest-created task still
    waiting for an answer holds it; None if none waits."""
    waiting = [
        record
        for record in execution.task_records
        if record.state == "waiting_for_clarification" and record.id != excluding
    ]
    if not waiting:
        return None
    first = min(waiting, key=lambda record: (record.created_at, record.id))
    return Pending(
        kind="clarification",
        question=first.pending_question or "",
        agent_task_id=first.id,
        asked_at=first.pending_question_at,
    )


def answer_digest(answer: str) -> str:
    """The sha256 (hex) of an answer's text as given, before redaction: what the audit keeps
    to tell answers apart without keeping them."""
    return hashlib.sha256(answer.encode("utf-8", "surrogatepass")).hexdigest()


def answer_task(execution: Execution, task_id: str, answer: str, now: float) -> Execution:
    """Give ``answer`` to the task that asked (R8): it is recorded as that task's ask step
    (redacted), with when it was answered and the digest of the answer as given; the task
    goes back to queued, and the pending slot passes on (R9). Never touches the goal (R10)."""
    masked, redacted = redact_flagged(answer)
    given = AnswerRequest(
        task_id=task_id,
        answer=masked,
        redacted=redacted,
        answer_sha256=answer_digest(answer),
        by="",
        at=now,
    )
    execution = apply_answers(execution, (given,), now)
    return attrs.evolve(execution, pending=next_waiting(execution), updated_at=now)


def next_ask(record: AgentTaskRecord) -> QuestionId:
    """The question a waiting task's open question will be recorded as (its ask step)."""
    return QuestionId(sum(QuestionId.is_question(n) for n in record.inner_completed))


def answered(record: AgentTaskRecord, given: AnswerRequest, now: float) -> AgentTaskRecord | None:
    """``record`` with the answer recorded as its next ask step, back to queued; None if it
    is not the task that waits for it."""
    if record.id != given.task_id or record.state != "waiting_for_clarification":
        return None
    key = next_ask(record)
    if given.ask is not None and given.ask != key:
        return None  # it answered an earlier question of this task
    observation = Observation(
        step_id=key.step_id, ok=True, output=given.answer, redacted=given.redacted
    )
    return attrs.evolve(
        record,
        state="queued",
        pending_question=None,
        pending_question_at=None,
        answered_at=now,
        answer_sha256=given.answer_sha256,
        inner_completed=(*record.inner_completed, key.step_id),
        inner_observations=(*record.inner_observations, observation),
        updated_at=now,
    )


def apply_answers(
    execution: Execution, answers: tuple[AnswerRequest, ...], now: float
) -> Execution:
    """Each answer given to the task that waits for it (one that no longer waits is left
    alone: answered already, or stopped); the pending slot found again (R9)."""

    def give(record: AgentTaskRecord) -> AgentTaskRecord | None:
        for given in answers:
            changed = answered(record, given, now)
            if changed is not None:
                return changed
        return None

    execution, changed = map_tasks(execution, give)
    if not changed:
        return execution
    return attrs.evolve(execution, pending=next_waiting(execution), updated_at=now)


def stop_task(
    execution: Execution,
    task_id: str,
    operation: str,
    now: float,
    *,
    by: str,
    cascade: bool = False,
) -> tuple[Execution, AgentTaskRecord | None]:
    """S1/S2 on the record, for a task no longer running: the unfinished task is cancelled
    with interruption ``parent-cancel``; its step is marked done only if the plan still holds
    that exact step (same id and input hash) — ``stopped`` (done without a result: its
    dependents run) or, with ``cascade``, ``cancelled`` (its dependents are cancelled when the
    run next schedules); its question is withdrawn and the pending slot passes on; the
    execution's status is untouched. The audit line names ``by``, the owner that asked, and
    the request (operation and task ids)."""
    stopped: list[AgentTaskRecord] = []

    def cancel(record: AgentTaskRecord) -> AgentTaskRecord | None:
        if record.id != task_id or record.terminal:
            return None
        updated = attrs.evolve(
            record,
            state="cancelled",
            interruption=Interruption(kind="parent-cancel", at=now, detail="stopped"),
            pending_question=None,
            ended_at=now,
            updated_at=now,
        )
        stopped.append(updated)
        return updated

    execution, _ = map_tasks(execution, cancel)
    if not stopped:
        return execution, None
    record = stopped[0]
    plan = execution.plan
    observations = execution.observations
    if plan is not None:
        steps = []
        for step in plan.steps:
            same = (
                step.id == record.step_id
                and step.agent == record.agent_id
                and step_input_hash(step) == record.input_hash
                and not step.status.finished
            )
            if same:
                status = StepStatus.CANCELLED if cascade else StepStatus.STOPPED
                step = attrs.evolve(step, status=step_move(step.id, step.status, status))
            steps.append(step)
            if same:
                why = "its dependents are cancelled" if cascade else "done without a result"
                observations = (
                    *observations,
                    Observation(
                        step_id=step.id,
                        agent=step.agent,
                        agent_task_id=record.id,
                        ok=False,
                        code="cancelled" if cascade else "stopped",
                        error=f"{status}: the agent task was stopped; {why}",
                    ),
                )
        execution = attrs.evolve(execution, plan=attrs.evolve(plan, steps=tuple(steps)))
    pending = execution.pending
    if pending is not None and pending.agent_task_id == task_id:
        pending = next_waiting(execution)
    request = stop_request(operation, task_id, cascade=cascade)
    execution = add_control(execution, "stop-task", by or operation, now, stop=request)
    return attrs.evolve(
        execution, pending=pending, observations=observations, updated_at=now
    ), record
