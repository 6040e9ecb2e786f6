"""Events from an ExecutionActor's children: agent task saves, ends, stops."""

from __future__ import annotations

import time
import typing
from typing import Any

import attrs

from ..actors import BudgetExhausted, Cancel, CancelReason, Crash, Stop, Terminated
from ..storage import (
    MAX_CONTROLS,
    AgentTaskRecord,
    Failure,
    Observation,
    ObservationCode,
    Pending,
    PlanStep,
    redact,
)
from ._rules.plan import observe, step_input_hash
from ._rules.status import task_move
from ._rules.transitions import clamp_count, stop_request, stop_task
from ._run import events as ev
from ._run.messages import Running, StopTask, Unstorable
from ._run.results import StopResult
from ._run_claims import TaskClaims
from ._steps.children import TaskSave
from ._steps.failures import log_failure

_CODES = frozenset(typing.get_args(ObservationCode))
_PROGRAM_ENDING = frozenset({("builtins", "SystemExit"), ("builtins", "KeyboardInterrupt")})


class TaskEvents(TaskClaims):
    """What an ExecutionActor does when its children report: an agent task saved progress
    or asked, a child ended, one task is to be stopped (S1, S2), a result could not be
    stored (X2)."""

    async def _task_saved(self, save: TaskSave) -> bool:
        task = save.record
        if self._ended or task.id in self._stopping_tasks:
            return False  # R11: a stopped task's late write never reopens it
        running = self._running.get(task.step_id)
        if running is None or running.task_id != task.id:
            return False
        previous = self._tasks.get(task.id, task)
        # E9: the execution is charged what the task actually spent, as it spends it.
        delta = task.calls_used - self._charged.get(task.id, 0)
        self._charged[task.id] = task.calls_used
        calls = clamp_count(self._rec.calls_used + max(delta, 0))
        usage = self._charge_usage(task.id, task.usage)  # B3: tokens and cost likewise
        self._set_task(task, save.appended_to)
        step = running.step
        # queued: the run's budget ran out under the agent (P4), which waits to run again.
        ended = task.state in ("completed", "failed", "waiting_for_clarification", "queued")
        changes: dict[str, Any] = {"calls_used": calls, "usage": usage}
        if task.state == "completed":
            # R12: the step joins the completed set in the same commit as the task.
            self._sched.set(step.id, "succeeded")
            if save.live:  # E10: a masked copy read back is not handed on as the original
                self._outputs[step.id] = save.output
            stored = save.stored
            self._obs[step.id] = observe(
                step,
                agent_task_id=task.id,
                ok=True,
                output=stored.value if stored is not None else None,
                finding_ids=tuple(f.id for f in task.findings),
                calls_used=task.calls_used,
                # E10: marked, never taken for the original
                redacted=stored.redacted if stored is not None else False,
                started_at=task.started_at,
                ended_at=task.ended_at,
            )
        elif task.state == "failed":
            self._sched.set(step.id, "failed")
            failure = task.failure
            code = failure.code if failure is not None else "agent-failed"
            self._obs[step.id] = Observation(
                step_id=step.id,
                agent=step.target,
                agent_task_id=task.id,
                ok=False,
                error=failure.message if failure is not None else "the agent failed",
                code=code if code in _CODES else "agent-failed",  # type: ignore[arg-type]
                finding_ids=tuple(f.id for f in task.findings),
                calls_used=task.calls_used,
                # O2: the traceback is kept once, on the task's failure
                error_type=failure.error_type if failure is not None else None,
                started_at=task.started_at,
                ended_at=task.ended_at,
            )
            log_failure(  # O2
                f"step {step.id} (agent {step.target}) failed",
                execution_id=self._rec.id,
                step_id=step.id,
                agent_task_id=task.id,
                error=failure.message if failure is not None else None,
                traceback=failure.traceback if failure is not None else None,
            )
        elif task.state == "queued":
            # P4: the step waits for budget with the task's durable steps kept; the task may
            # be claimed again as soon as budget allows (in this run or on a resume).
            self._sched.set(step.id, "pending")
            self._claimed.discard(task.id)
        elif task.state == "waiting_for_clarification":
            # P5: the step stays pending (not failed); the first waiting task holds the slot.
            self._sched.set(step.id, "pending")
            if self._rec.pending is None:
                changes["pending"] = Pending(
                    kind="clarification",
                    question=task.pending_question or "",
                    agent_task_id=task.id,
                    asked_at=task.pending_question_at,
                )
        if ended:
            del self._running[step.id]
        try:
            committed = await self._commit(**changes)
        except Unstorable as exc:
            spent = attrs.evolve(previous, calls_used=task.calls_used, usage=task.usage)
            if await self._unstorable(step, spent, str(exc), changes):
                self._publish_step(step.id, "failed")
                await self._advance()
            return False  # the agent unwinds: its result cannot be kept
        if not committed:
            return False
        now = time.time()
        if task.state in ("waiting_for_clarification", "queued"):
            # P5 (P4): the question (the task, short of budget) is durable, so the agent is
            # done in this run. It waits in ctx.ask (ctx.call_skill) for this: a cancellation
            # with a reason it can read, not an exception of ours through its code. Its end
            # is ignored (it left _running above).
            if task.state == "queued":  # B3: the agent reads which budget ran out
                why = task.interruption.detail if task.interruption else "budget"
                reason: CancelReason = BudgetExhausted(detail=why, source=self.ref.path)
            else:
                reason = Stop(detail="the agent task waits for an answer", source=self.ref.path)
            running.ref.cancel(reason)
        if task.state == "waiting_for_clarification":
            self._publish(ev.AgentTaskWaiting(execution_id=self._rec.id, at=now, task_id=task.id))
        elif task.state in ("completed", "failed"):
            self._publish(
                ev.AgentTaskCompleted(
                    execution_id=self._rec.id,
                    at=now,
                    task_id=task.id,
                    state=task.state,
                    calls_used=task.calls_used,
                )
            )
            self._publish_step(step.id, self._sched.status[step.id])
        else:  # progress, or queued to wait for budget
            self._publish(
                ev.AgentTaskProgress(
                    execution_id=self._rec.id,
                    at=now,
                    task_id=task.id,
                    inner_done=task.inner_steps_done,
                    calls_used=task.calls_used,
                )
            )
        if ended:
            await self._advance()
        return True

    async def _unstorable(
        self,
        step: PlanStep,
        task: AgentTaskRecord | None,
        why: str,
        changes: dict[str, Any],
    ) -> bool:
        """A step's result made the record too large (or otherwise unwritable): the step
        fails with that reason, without the result, and the run goes on."""
        if self._sched.status[step.id] == "pending":
            # An agent's question that could not be stored: the wait it would have started
            # never reached disk, so the step was still running when it failed.
            self._sched.set(step.id, "running")
        self._sched.set(step.id, "failed")  # from succeeded too: its result is not storable
        self._running.pop(step.id, None)
        self._outputs.pop(step.id, None)
        message = f"its result could not be stored: {why}"
        self._obs[step.id] = observe(
            step,
            ok=False,
            error=redact(message),
            code="agent-failed" if step.kind == "agent" else None,
            agent_task_id=task.id if task is not None else None,
        )
        if task is not None:
            now = time.time()
            failure = Failure(code="agent-failed", message=redact(message))
            self._set_task(
                attrs.evolve(task, state="failed", failure=failure, ended_at=now, updated_at=now)
            )
        changes.pop("pending", None)
        return await self._commit(**changes)

    async def _child_ended(self, notice: Terminated) -> None:
        step_id = self._by_ref.pop(notice.ref, None)
        if step_id is None or self._ended:
            return
        reason = notice.reason
        if isinstance(reason, Crash) and (reason.module, reason.error_type) in _PROGRAM_ENDING:
            # SystemExit / KeyboardInterrupt in the child's code: the program is ending and
            # the system shuts down (this run with it). Nothing failed: the run is left as a
            # shutdown leaves it, for a resume (R3); its unsaved calls are charged then.
            return
        if step_id == "":  # the planner ended; it reported unless it crashed
            planning, self._planning = self._planning, False
            if (self._plan is None or planning) and isinstance(notice.reason, Crash):
                await self._finish("failed", error=f"the planner crashed: {notice.reason}")
            return
        running = self._running.get(step_id)
        if running is None or running.ref is not notice.ref:
            return
        del self._running[step_id]
        now = time.time()
        step = running.step
        self._charge_unsaved(running)
        if running.task_id is not None and running.task_id in self._stopping_tasks:
            await self._task_stopped(running, now)
            return
        # The child ended without reporting: it crashed.
        self._sched.set(step_id, "failed")
        self._obs[step_id] = observe(
            step,
            ok=False,
            error=redact(str(notice.reason)),
            code="agent-failed" if step.kind == "agent" else None,
            started_at=running.started_at,
            ended_at=now,
        )
        log_failure(  # O2
            f"step {step_id} ({step.kind} {step.target}) crashed",
            execution_id=self._rec.id,
            step_id=step_id,
            agent_task_id=running.task_id,
            error=str(notice.reason),
        )
        if running.task_id is not None:
            task = self._tasks[running.task_id]
            self._set_task(attrs.evolve(task, state="failed", ended_at=now, updated_at=now))
        if await self._commit():
            self._publish_step(step_id, "failed")
            await self._advance()

    async def _stop_task(self, request: StopTask) -> StopResult:
        task = self._tasks.get(request.task_id)
        base = {
            "task_id": request.task_id,
            "execution_id": self._rec.id,
            "operation_id": request.operation_id,
        }
        if task is None:
            return StopResult(ok=False, state="unknown", reason="no such agent task", **base)
        running = self._running.get(task.step_id)
        if running is not None and running.task_id == task.id:
            if task.id not in self._stopping_tasks:
                if not await self._stop_durably(request):
                    return StopResult(
                        ok=False, state=task.state, reason="the execution is stopping", **base
                    )
                self._stopping_tasks[task.id] = request
                by = request.by or self._cfg.owner  # who asked (V3)
                running.ref.cancel(
                    Cancel(detail=f"agent task stopped ({request.operation_id})", source=by)
                )
            return StopResult(ok=True, state="stopping", reason="cancelling the live task", **base)
        if task.terminal:
            return StopResult(
                ok=False, state=task.state, reason=f"the task already {task.state}", **base
            )
        # Unfinished but not running here (queued or waiting): mark it on the record.
        if not await self._record_stop(request, time.time()):
            return StopResult(
                ok=False, state=task.state, reason="the execution is stopping", **base
            )
        return StopResult(ok=True, state="cancelled", reason="marked cancelled", **base)

    async def _stop_durably(self, request: StopTask) -> bool:
        """S1, R11: a live stop is written as a stop request before the task is cancelled, so
        it stands whatever ends the run before the task has unwound (a pause or a refusal):
        a pause applies it and so does the next resume. Once the task is recorded cancelled
        the request is moot (requests for finished tasks are ignored). False if the run is
        stopping (the commit was refused): then nothing was stopped."""
        entry = stop_request(request.operation_id, request.task_id, cascade=request.cascade)
        if entry in self._rec.stop_requests:
            return True  # it came through the record (a heartbeat): durable already
        requests = (*self._rec.stop_requests, entry)[-MAX_CONTROLS:]
        try:
            return await self._commit(stop_requests=requests)
        except Unstorable:  # the record cannot take it: the stop is live only
            return not self._stopped()

    async def _task_stopped(self, running: Running, now: float) -> None:
        """A live task we cancelled has unwound: record it stopped; the run goes on."""
        assert running.task_id is not None
        await self._record_stop(self._stopping_tasks.pop(running.task_id), now)

    async def _record_stop(self, request: StopTask, now: float) -> bool:
        """S2 on the run's own record: the task cancelled, its step ``stopped`` (or
        ``cancelled`` with the cascade), its question withdrawn; committed, announced, and
        the run goes on (a stopped step's dependents may start now)."""
        task = self._tasks[request.task_id]
        before = self._sched.status.get(task.step_id)
        record, _ = stop_task(
            self._snapshot(),
            task.id,
            request.operation_id,
            now,
            by=request.by or self._cfg.owner,
            cascade=request.cascade,
        )
        self._load(record)  # the live plan (same steps, inputs unredacted) stays
        if not await self._commit():
            return False
        self._publish(
            ev.AgentTaskStopped(
                execution_id=self._rec.id,
                at=now,
                task_id=task.id,
                operation_id=request.operation_id,
                state="cancelled",
            )
        )
        after = self._sched.status.get(task.step_id)
        if after is not None and after != before:
            self._publish_step(task.step_id, after)
        await self._advance()
        return True

    async def _masked_input(self, step: PlanStep) -> bool | None:
        """E10: after a resume, a step whose input had to be masked on disk is not run with
        the masked input as if it were the one planned: it fails, saying why (a planner
        with ``max_replans`` may plan it again with the real value)."""
        why = (
            f"step {step.id} was not run: its input held a secret, which is masked on "
            "disk, so after a resume it cannot be run with the input it was planned "
            "with; pass secrets by reference (an environment variable's name, a "
            "secret store key) instead of in the plan"
        )
        self._sched.set(step.id, "failed")
        self._obs[step.id] = observe(step, ok=False, error=why)
        if step.kind == "agent":
            # Its stored tasks end with it: a failed run holds no live task (R11 sticky).
            digest = step_input_hash(step)
            now = time.time()
            for task in list(self._tasks.values()):
                if task.terminal or task.agent_id != step.agent or task.input_hash != digest:
                    continue
                self._set_task(
                    attrs.evolve(
                        task,
                        state=task_move(task.id, task.state, "failed"),
                        pending_question=None,
                        ended_at=now,
                        updated_at=now,
                        failure=Failure(code="input-masked", message=why),
                    )
                )
        if not await self._commit():
            return None
        self._publish_step(step.id, "failed")
        return False
