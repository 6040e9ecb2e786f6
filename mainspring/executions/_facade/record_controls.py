"""Controls applied to the stored record, for a run that is not live in this runtime.

A run live here is steered through its actor; everything else goes through the store: the
pause and cancel edits a runner elsewhere meets at its next commit or heartbeat (E2, E3),
the record a resume prepares before its run starts (R3, R8-R10), and stopping one agent task
that no actor of ours runs (S1, S2). Each edit runs under the store's lock
(``Committer.edit``) on the record as it is then, never on a copy read earlier.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import anyio.to_thread
import attrs

from ...storage import (
    AgentTaskRecord,
    Execution,
    ExecutionStatus,
    PlanStep,
    RecordError,
    redact,
)
from ...storage._seam import (
    MAX_CONTROLS,
    AnswerRequest,
    Committer,
    Edit,
    holder,
    redact_flagged,
)
from .._rules.lifecycle import execution_move
from .._rules.scheduler import approval_key
from .._rules.transitions import (
    add_control,
    answer_digest,
    answer_task,
    apply_answers,
    cancel_execution,
    next_ask,
    pause_execution,
    requeue_interrupted,
    stop_askers,
    stop_request,
    stop_task,
)
from .._run.events import AgentTaskStopped, RunEvent, StepFinished
from .._run.messages import Begin, StopTask
from .._run.results import StopResult, summarize
from .._workers.orphans import stop_orphan
from .handle import UnknownExecution

__all__ = [
    "StoredTaskStop",
    "answer_request_edit",
    "answer_waiting",
    "cancel_edit",
    "outer_answer",
    "pause_edit",
    "prepare_resume",
    "question_answered",
    "unanswered",
    "unreadable_asker",
    "unreadable_asker_error",
    "waits_for_answer",
]


def pause_edit(by: str, detail: str) -> Edit:
    """R1 on the record, unless it is terminal or paused already (then nothing changes)."""

    def change(stored: Execution, now: float) -> Execution | None:
        if stored.terminal or stored.status == "paused":
            return None
        return pause_execution(stored, by, now, detail)

    return change


def cancel_edit(by: str, detail: str) -> Edit:
    """R2 and P6 on the record, unless it is terminal already (then nothing changes)."""

    def change(stored: Execution, now: float) -> Execution | None:
        if stored.terminal:
            return None
        return cancel_execution(stored, by, now, detail)

    return change


def unanswered(stored: Execution) -> list[AgentTaskRecord]:
    """The tasks waiting for an answer that no stored answer request answers yet, in the
    order the pending slot passes (R9: the earliest created first)."""
    given = {(r.task_id, r.ask) for r in stored.answer_requests}
    waiting = [
        task
        for task in stored.task_records
        if task.state == "waiting_for_clarification" and (task.id, next_ask(task)) not in given
    ]
    return sorted(waiting, key=lambda task: (task.created_at, task.id))


def waits_for_answer(stored: Execution) -> bool:
    """True if ``stored`` is waiting for an answer: not finished, with a clarification
    open (an agent's question, R8, or the run's own, R10), whatever its status (waiting,
    paused while waiting, or running with other steps live)."""
    pending = stored.pending
    return not stored.terminal and pending is not None and pending.kind == "clarification"


def outer_answer(stored: Execution) -> AnswerRequest | None:
    """The answer stored for the run's own open question (R10), if any: an
    :class:`AnswerRequest` whose ``task_id`` is the execution's own id (no agent task has
    that id: task ids are ``<execution id>:t<n>``)."""
    pending = stored.pending
    if pending is None or pending.kind != "clarification" or pending.agent_task_id is not None:
        return None
    return next((r for r in stored.answer_requests if r.task_id == stored.id), None)


def answer_waiting(stored: Execution) -> bool:
    """True if an answer written for a task of ``stored`` (or for its own question) waits
    to be given: a resume must run, to give it (R8, R10), even with no answer of its own."""
    if outer_answer(stored) is not None:
        return True
    given = {(r.task_id, r.ask) for r in stored.answer_requests}
    return any(
        task.state == "waiting_for_clarification" and (task.id, next_ask(task)) in given
        for task in stored.task_records
    )


def question_answered(stored: Execution) -> bool:
    """True if every open question of ``stored`` has an answer stored for it already (by
    :meth:`Runtime.answer`, waiting for the next resume): a further answer would be dropped,
    or kept to answer a later question it was never meant for, so it is refused."""
    pending = stored.pending
    if not waits_for_answer(stored) or pending is None:
        return False
    if pending.agent_task_id is None:  # R10: the run's own question
        return outer_answer(stored) is not None
    return not unanswered(stored)


def unreadable_asker(stored: Execution) -> str | None:
    """The id of the agent task whose open question holds the pending slot, if its stored
    record does not parse (E8: kept as an Unreadable): it can take no answer, ever. None
    otherwise (no agent's question open, or its record reads)."""
    pending = stored.pending
    if not waits_for_answer(stored) or pending is None or pending.agent_task_id is None:
        return None
    held = pending.agent_task_id
    return held if any(t.key == held for t in stored.unreadable_tasks) else None


def unreadable_asker_error(execution_id: str, task_id: str) -> RecordError:
    """What an answer to a question whose task's record does not parse is refused with: not
    ``ExecutionBusy`` (an answer waiting for its task: come back later), which waiting never
    cures (E8)."""
    return RecordError(
        "AgentTaskRecord",
        [
            f"agent task {task_id} of execution {execution_id}, whose question is open, has a "
            "stored record that does not parse: it cannot take an answer"
        ],
    )


def answer_request_edit(by: str, answer: str, asked: list[str], *, live_only: bool = True) -> Edit:
    """R8 for a run live somewhere (here or on another host): the answer is written to the
    record as an :class:`AnswerRequest` for the first task whose question no stored answer
    answers yet (R9), which that run applies at its next heartbeat (at once where the store
    sends notices). With ``live_only`` (a resume's: it gives the answer itself to a run
    not live), only while a lease on the run is live and an agent's question is open;
    without it (``Runtime.answer``), whenever the run waits for an answer (R5: the next
    resume applies it), the run's own question included (R10: stored for the execution's
    own id, see :func:`outer_answer`). Otherwise nothing is written. ``asked`` gets the
    task's id (the execution's for its own question), "" when every open question has an
    answer waiting already (a second answer is refused, not dropped silently), or "!" and
    the task's id when the task whose question is open has a record that does not parse."""

    def change(stored: Execution, now: float) -> Execution | None:
        pending = stored.pending
        if not waits_for_answer(stored) or pending is None:
            return None
        if live_only and (holder(stored.lease, now) is None or pending.agent_task_id is None):
            return None
        if pending.agent_task_id is None:  # R10: the run's own question
            if outer_answer(stored) is not None:
                asked.append("")
                return None
            task_id, ask = stored.id, None
        else:
            open_questions = unanswered(stored)
            if not open_questions:
                # E8: the task that holds the slot may have a record that does not parse: no
                # answer waits for it, and none ever can be taken ("!": not "busy").
                unreadable = unreadable_asker(stored)
                asked.append("" if unreadable is None else f"!{unreadable}")
                return None
            task_id, ask = open_questions[0].id, next_ask(open_questions[0])
        masked, redacted = redact_flagged(answer)  # E5: redacted before it reaches disk
        digest = answer_digest(answer)
        request = AnswerRequest(
            task_id=task_id,
            ask=ask,
            answer=masked,
            redacted=redacted,
            answer_sha256=digest,
            by=by,
            at=now,
        )
        asked.append(task_id)
        record = attrs.evolve(
            stored, answer_requests=(*stored.answer_requests, request)[-MAX_CONTROLS:]
        )
        return add_control(record, "answer", by, now, answer_sha256=digest)

    return change


def prepare_resume(
    stored: Execution,
    owner: str,
    answer: str | None,
    approve: bool,
    max_calls: int | None,
    *,
    limits: tuple[int | None, Decimal | None] = (None, None),
) -> tuple[Execution, Begin]:
    """The record a resume by ``owner`` commits before its run starts, and how that run
    begins: tasks left running are requeued (R3), stops asked for meanwhile applied (S1), the
    answer given to the task that asked (R8, R9) or appended to the goal (R10), approvals and
    the budget recorded."""
    now = time.time()
    in_flight = (
        tuple(s.id for s in stored.plan.steps if s.status == "running") if stored.plan else ()
    )
    record, _ = requeue_interrupted(stored, "crash", now)  # R3
    # R8: answers written for a run that ended before it could take them.
    record = apply_answers(record, record.answer_requests, now)
    askers = stop_askers(record)
    for request in record.stop_requests:
        # Asked for while it ran (S1).
        by = askers.get(request.operation_id, owner)
        record, _ = stop_task(
            record, request.task_id, request.operation_id, now, by=by, cascade=request.cascade
        )
    replan_goal = False
    pending = record.pending
    stored_outer = outer_answer(record)
    if answer is None and stored_outer is not None:
        # R10: the answer given with Runtime.answer (already redacted and audited then),
        # taken once: a later question of the planner is not answered by it.
        goal = f"{record.goal}\n\nClarification: {stored_outer.answer}"
        requests = tuple(r for r in record.answer_requests if r is not stored_outer)
        record = attrs.evolve(record, goal=goal, pending=None, answer_requests=requests)
        replan_goal = True
    elif answer is not None and pending is not None and pending.kind == "clarification":
        if pending.agent_task_id is not None:
            record = answer_task(record, pending.agent_task_id, answer, now)  # R8, R9
        else:  # R10: an outer clarification answers the goal itself
            goal = f"{record.goal}\n\nClarification: {redact(answer)}"
            record = attrs.evolve(record, goal=goal, pending=None)
            replan_goal = True
        record = add_control(record, "answer", owner, now, answer_sha256=answer_digest(answer))
    if approve and record.plan is not None:
        plan = record.plan
        keys = [approval_key(plan.version, None)] if plan.requires_approval else []
        keys += [approval_key(plan.version, s) for s in plan.steps if s.requires_approval]
        approvals = tuple(dict.fromkeys((*record.approvals, *keys)))[-MAX_CONTROLS:]
        record = attrs.evolve(record, approvals=approvals)
        record = add_control(record, "approve", owner, now)
        if record.pending is not None and record.pending.kind == "approval":
            record = attrs.evolve(record, pending=None)
    if record.pending is not None and record.pending.kind == "budget":
        record = attrs.evolve(record, pending=None)
    if max_calls is not None:
        record = attrs.evolve(record, max_calls=max_calls)
    if limits[0] is not None:  # B3: the token and cost budgets likewise
        record = attrs.evolve(record, max_tokens=limits[0])
    if limits[1] is not None:
        record = attrs.evolve(record, max_cost=limits[1])
    if record.status != "running":
        record = add_control(record, "resume", owner, now)
    # Never a terminal one (R4).
    status = execution_move(record.id, record.status, ExecutionStatus.RUNNING)
    record = attrs.evolve(record, status=status, updated_at=now)
    begin = Begin(
        resumed=True, check_drift=not replan_goal, replan_goal=replan_goal, in_flight=in_flight
    )
    return record, begin


@attrs.frozen(kw_only=True)
class StoredTaskStop:
    """Stopping one agent task that no actor of this runtime runs (S1, S2).

    ``operator`` is the lease owner the stop takes the lease under: never the runtime's own
    owner, so the stop never releases a lease one of its runs holds. ``owner`` signs the
    request written for a runner in another process.
    """

    committer: Committer
    owner: str
    operator: str
    lease_ttl: float
    publish: Callable[[RunEvent], None]
    #: The runtime's agents: a worker-backed task's orphaned process is stopped through
    #: its agent's host before the task is recorded cancelled (#17).
    agents: Mapping[str, Any] = attrs.field(factory=dict)

    async def __call__(
        self,
        execution_id: str,
        task_id: str,
        operation: str,
        unknown: StopResult,
        *,
        cascade: bool = False,
    ) -> StopResult:
        """Stop ``task_id`` on the record: a finished task is reported and left alone; an
        unfinished one is marked cancelled under a properly acquired lease (or, for a run
        that finished, as long as it stays finished), its step ``stopped`` (``cancelled``
        with ``cascade``); if another process holds the lease, a stop request carrying the
        cascade choice is written that its runner acts on within one heartbeat."""
        stored = await self._read(execution_id)
        if stored is None:
            return unknown
        task = next((t for t in stored.task_records if t.id == task_id), None)
        if task is None:
            return unknown
        base = {"task_id": task_id, "execution_id": execution_id, "operation_id": operation}
        if task.terminal:
            return StopResult(
                ok=False, state=task.state, reason=f"the task already {task.state}", **base
            )
        stop = StopTask(task_id, operation, cascade)
        if stored.terminal:
            # A finished run has no runner and no lease to take: a task it left unfinished
            # is marked cancelled directly, as long as the run stays finished.
            return await self._mark_stopped(execution_id, stop, base, None)
        committer, operator = self.committer, self.operator
        acquired = await committer.acquire(execution_id, operator, self.lease_ttl)
        if not acquired.acquired:
            return await self._request_stop(execution_id, stop, base)
        try:
            return await self._mark_stopped(execution_id, stop, base, operator)
        finally:
            await committer.release(execution_id, operator)

    async def _read(self, execution_id: str) -> Execution | None:
        return await anyio.to_thread.run_sync(self.committer.store.get, execution_id)

    async def _mark_stopped(
        self, execution_id: str, stop: StopTask, base: dict[str, Any], operator: str | None
    ) -> StopResult:
        stopped: list[AgentTaskRecord] = []
        marked: list[PlanStep] = []  # the task's step as the edit left it
        task_id, operation = stop.task_id, stop.operation_id
        # #17: a worker left active for the task (its runtime crashed) is stopped and
        # confirmed dead first; nothing is recorded stopped if it cannot be.
        read = await self._read(execution_id)
        orphan = await stop_orphan(read, task_id, self.agents) if read is not None else None
        if isinstance(orphan, str):
            assert read is not None
            tasks = read.task_records
            state = next((t.state for t in tasks if t.id == task_id), "unknown")
            return StopResult(ok=False, state=state, reason=orphan, **base)

        def change(stored: Execution, now: float) -> Execution | None:
            # S1: decided on the record as it is now, under our lease (or, for a finished
            # run, as long as it is still finished), whatever its status.
            if operator is None and not stored.terminal:
                return None
            if operator is not None and holder(stored.lease, now) != operator:
                return None
            record, task = stop_task(
                stored, task_id, operation, now, by=self.owner, cascade=stop.cascade
            )
            if task is None:
                return None
            if orphan is not None:
                cut = orphan(record, now)
                if cut is None:
                    return None  # its worker changed meanwhile: decided again
                record = cut
            stopped.append(task)
            steps = record.plan.steps if record.plan is not None else ()
            marked.extend(step for step in steps if step.id == task.step_id)
            return record

        edited = await self.committer.edit(execution_id, change)
        if not stopped:
            return await self._stop_refused(execution_id, task_id, base)
        now = time.time()
        event: RunEvent = AgentTaskStopped(
            execution_id=execution_id,
            at=now,
            task_id=task_id,
            operation_id=operation,
            state="cancelled",
        )
        self.publish(event)
        if marked and marked[-1].status.finished and edited is not None:
            # S2: the step was marked done (stopped, or cancelled with the cascade).
            _, done, total = summarize(edited)
            self.publish(
                StepFinished(
                    execution_id=execution_id,
                    at=now,
                    step_id=marked[-1].id,
                    state=marked[-1].status,
                    done=done,
                    total=total,
                    calls_used=edited.calls_used,
                )
            )
        return StopResult(ok=True, state="cancelled", reason="marked cancelled", **base)

    async def _stop_refused(
        self, execution_id: str, task_id: str, base: dict[str, Any]
    ) -> StopResult:
        stored = await self._read(execution_id)
        if stored is None:
            raise UnknownExecution(execution_id)
        task = next((t for t in stored.task_records if t.id == task_id), None)
        state = task.state if task is not None else "unknown"
        why = (
            f"the task already {state}"
            if task is not None and task.terminal
            else "the execution changed meanwhile; try again"
        )
        return StopResult(ok=False, state=state, reason=why, **base)

    async def _request_stop(
        self, execution_id: str, stop: StopTask, base: dict[str, Any]
    ) -> StopResult:
        task_id = stop.task_id
        request = stop_request(stop.operation_id, task_id, cascade=stop.cascade)
        runner: list[str] = []

        def change(stored: Execution, now: float) -> Execution | None:
            owner = holder(stored.lease, now)
            if stored.terminal or owner is None:
                return None  # nobody would act on a request: say so instead
            runner.append(owner)
            stored = add_control(stored, "stop-task", self.owner, now, stop=request)
            requests = (*stored.stop_requests, request)[-MAX_CONTROLS:]
            return attrs.evolve(stored, stop_requests=requests)

        if await self.committer.edit(execution_id, change) is None:
            return await self._stop_refused(execution_id, task_id, base)
        return StopResult(
            ok=True,
            state="stopping",
            reason=f"requested: {runner[0]} stops it within one heartbeat",
            **base,
        )
