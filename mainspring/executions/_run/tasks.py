"""An execution's task book: which agent task runs an agent step (a stored one claimed
again, R8, or a new one), what the run does when a task saves progress, asks or ends, and
how one task is stopped (S1, S2) or given an answer (R8, R9)."""

from __future__ import annotations

import time
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
import attrs

from ...actors import BudgetExhausted, Cancel, CancelReason, Stop
from ...storage import (
    AgentTaskRecord,
    Failure,
    Observation,
    Pending,
    Plan,
    PlanStep,
    QuestionId,
    StepStatus,
    TaskState,
    redact,
)
from ...storage._seam import (
    MAX_CONTROLS,
    MAX_DIAGNOSTICS,
    AnswerRequest,
    Checkpoint,
    ObservationCode,
    reconcile,
)
from .._rules.lifecycle import task_move
from .._rules.plan import observe, step_input_hash
from .._rules.transitions import answered, clamp_count, stop_request, stop_task
from .._steps.children import TaskSave
from .._steps.failures import log_failure
from . import events as ev
from .funnel import Funnel
from .kept import KeptInputs, real_input_hash
from .messages import Running, StopTask, Unstorable
from .results import StopResult
from .state import RunState

__all__ = ["TaskBook"]

_CODES = frozenset(typing.get_args(ObservationCode))


class TaskBook:
    """The agent tasks of one execution (see the module docstring). ``advance`` is the
    run's scheduling loop, called once a task's end lets other steps start; ``kept`` what
    the runtime knows of the real inputs its tasks ran with (E10)."""

    def __init__(
        self,
        state: RunState,
        funnel: Funnel,
        kept: KeptInputs,
        advance: Callable[[], Awaitable[None]],
        source: str,
    ) -> None:
        self._state = state
        self._cfg = state.cfg
        self._kept = kept
        self._funnel = funnel
        self._advance = advance
        self._source = source

    # -- claims (R8) ----------------------------------------------------------------------

    def claim(self, step: PlanStep) -> AgentTaskRecord | None:
        """R8: a stored task matches a step by (agent id, input hash), never by step id; each
        record is claimed at most once per resume. Completed ones first, then unfinished."""
        st = self._state
        known: str | None = None
        if step.id in st.rec.masked_inputs:
            # The input hash is of the masked input: a task of another secret would match.
            # Only a task this runtime ran with this very input (known in memory, never on
            # disk) is reused; what ran with which secret elsewhere cannot be told (E10).
            if st.live_plan is None:
                return None
            known = real_input_hash(step)
        digest = step_input_hash(step)
        candidates = [
            task
            for task in st.tasks.values()
            if task.agent_id == step.agent
            and task.input_hash == digest
            and task.id not in st.claimed
            and task.state not in ("failed", "cancelled", "waiting_for_clarification")
            # R8: a changed agent's finished task is not its result; an unfinished one is
            # claimed and restarts its inner work (see revalidated).
            and not (task.state == "completed" and self._redefined(task))
            and (known is None or self._kept.input_digest(task.id) == known)
        ]
        if not candidates:
            return None
        candidates.sort(key=lambda t: (t.state != "completed", t.created_at))
        task = candidates[0]
        st.claimed.add(task.id)
        if task.step_id != step.id:
            task = attrs.evolve(task, step_id=step.id)
        return task

    def _redefined(self, task: AgentTaskRecord) -> bool:
        """R8: the agent's definition changed since ``task`` was created. A task stored
        before definitions were recorded (empty hash) is unknown and taken as unchanged."""
        current = self._cfg.agent_hashes.get(task.agent_id, "")
        return bool(task.definition_hash) and task.definition_hash != current

    def note_kept_under_new_definitions(self) -> None:
        """R7 on a resume without drift: a completed agent step stays completed and is not
        run again, even when its agent's definition changed since it ran (R8's hashes).
        That is said, never silent: its task gets ``kept_under_definition`` (the hash in
        force now, durable with the next commit) and a diagnostic naming both hashes, which
        ``mainspring show`` prints and ``ExecutionResult.stale_steps`` derives from. Once
        per new definition: resuming again under the same one adds nothing."""
        st = self._state
        for step_id, state in st.sched.status.items():
            observation = st.obs.get(step_id)
            if state != "succeeded" or observation is None or not observation.agent_task_id:
                continue
            task = st.tasks.get(observation.agent_task_id)
            if task is None or task.state != "completed" or not self._redefined(task):
                continue
            current = self._cfg.agent_hashes.get(task.agent_id, "")
            if not current or task.kept_under_definition == current:
                continue  # an agent this runtime lacks is not a new definition of it
            note = (
                f"step {step_id} kept (R7), not run again, though agent {task.agent_id} "
                f"changed since: ran under definition {task.definition_hash[:12]}, "
                f"kept under {current[:12]}"
            )
            st.set_task(
                attrs.evolve(
                    task,
                    kept_under_definition=current,
                    diagnostics=(*task.diagnostics, note)[-MAX_DIAGNOSTICS:],
                )
            )

    def new_task(self, step: PlanStep, now: float) -> AgentTaskRecord:
        st = self._state
        cfg = self._cfg
        number = len(st.tasks) + len(st.unreadable) + 1
        digest = step_input_hash(step)
        replaced = [
            t.id
            for t in st.tasks.values()
            if t.state == "completed"
            and t.agent_id == step.target
            and t.input_hash == digest
            and self._redefined(t)
        ]
        task = AgentTaskRecord(
            id=f"{st.rec.id}:t{number}",
            agent_id=step.target,
            step_id=step.id,
            state="created",
            created_at=now,
            updated_at=now,
            execution_id=st.rec.id,
            plan_version=st.plan.version if st.plan else 1,
            definition_hash=cfg.agent_hashes.get(step.target, ""),
            envelope_hash=cfg.agent_envelope,
            input_hash=digest,
            diagnostics=tuple(
                f"agent {step.target} changed since task {old} completed: not reused (R8)"
                for old in replaced[-MAX_DIAGNOSTICS:]
            ),
        )
        st.claimed.add(task.id)
        st.charged[task.id] = 0
        if step.id in st.rec.masked_inputs and st.live_plan is not None:
            # E10: which secret this task ran with is known here only, never on disk.
            self._kept.keep_input(task.id, real_input_hash(step))
        return task

    async def task_checkpoint(self, step: PlanStep) -> Checkpoint | None:
        if self._cfg.workspace is None:
            return None
        plan = Plan(id="task", goal="", steps=(step,))
        return await self._funnel.capture(plan, ())

    async def _inner_drift(self, task: AgentTaskRecord, step: PlanStep) -> tuple[str, ...]:
        """What changed in the task's own checkpoint: the files its step names and those its
        inner steps declared, the configuration, git (R8)."""
        if task.inner_checkpoint is None or self._cfg.workspace is None:
            return ()
        plan = Plan(id="task", goal="", steps=(step,))
        checkpoint = attrs.evolve(task.inner_checkpoint, tool_hashes=None, skill_versions=None)
        root = self._cfg.workspace
        paths = task.touched_paths
        config = self._cfg.config  # compared with the config the checkpoint was taken with
        found = await anyio.to_thread.run_sync(
            lambda: reconcile(checkpoint, root, plan, config=config, paths=paths)
        )
        return found.reasons

    async def revalidated(self, task: AgentTaskRecord, step: PlanStep) -> AgentTaskRecord:
        """An unfinished task claimed for ``step`` (R8): its inner work restarts (a new
        attempt, with a diagnostic saying why) if its agent's definition changed or its own
        checkpoint drifted. Answers it was given stay: they are the human's, not derived
        from the code or the workspace."""
        current = self._cfg.agent_hashes.get(step.target, "")
        why = ""
        if self._redefined(task):
            why = f"agent {step.target}'s definition changed"
        else:
            drift = await self._inner_drift(task, step)
            if drift:
                why = f"its checkpoint drifted ({'; '.join(drift)})"
        envelope = self._cfg.agent_envelope
        if not why:  # an unknown (old) hash is known from now on
            return attrs.evolve(task, definition_hash=current, envelope_hash=envelope)
        answers = tuple(o for o in task.inner_observations if QuestionId.is_question(o.step_id))
        attempt = clamp_count(task.attempt + 1)
        note = redact(f"attempt {attempt}: the inner work restarts: {why} (R8)")
        return attrs.evolve(
            task,
            inner_completed=tuple(o.step_id for o in answers),
            inner_observations=answers,
            inner_steps_done=0,
            inner_checkpoint=None,  # taken again before the new attempt runs
            touched_paths=(),
            attempt=attempt,
            diagnostics=(*task.diagnostics, note)[-MAX_DIAGNOSTICS:],
            definition_hash=current,
            envelope_hash=envelope,
        )

    # -- saves ------------------------------------------------------------------------------

    async def saved(self, save: TaskSave) -> bool:
        """An agent task's record changed: kept, committed, announced (True once durable;
        False tells the agent it was not kept, R11)."""
        st = self._state
        task = save.record
        if st.ended or task.id in st.stopping_tasks:
            return False  # R11: a stopped task's late write never reopens it
        running = st.running.get(task.step_id)
        if running is None or running.task_id != task.id:
            return False
        previous = st.tasks.get(task.id, task)
        # E9: the execution is charged what the task actually spent, as it spends it.
        delta = task.calls_used - st.charged.get(task.id, 0)
        st.charged[task.id] = task.calls_used
        calls = clamp_count(st.rec.calls_used + max(delta, 0))
        usage = st.charge_usage(task.id, task.usage)  # B3: tokens and cost likewise
        st.set_task(task)
        step = running.step
        # queued: the run's budget ran out under the agent (P4), which waits to run again.
        ended = task.state in ("completed", "failed", "waiting_for_clarification", "queued")
        changes: dict[str, Any] = {"calls_used": calls, "usage": usage}
        if task.state == "completed":
            # R12: the step joins the completed set in the same commit as the task.
            st.sched.set(step.id, StepStatus.SUCCEEDED)
            if save.live:  # E10: a masked copy read back is not handed on as the original
                st.outputs[step.id] = save.output
            stored = save.stored
            st.obs[step.id] = observe(
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
            st.sched.set(step.id, StepStatus.FAILED)
            failure = task.failure
            code = failure.code if failure is not None else "agent-failed"
            st.obs[step.id] = Observation(
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
                execution_id=st.rec.id,
                step_id=step.id,
                agent_task_id=task.id,
                error=failure.message if failure is not None else None,
                traceback=failure.traceback if failure is not None else None,
            )
        elif task.state == "queued":
            # P4: the step waits for budget with the task's durable steps kept; the task may
            # be claimed again as soon as budget allows (in this run or on a resume).
            st.sched.set(step.id, StepStatus.PENDING)
            st.claimed.discard(task.id)
        elif task.state == "waiting_for_clarification":
            # P5: the step stays pending (not failed); the first waiting task holds the slot.
            st.sched.set(step.id, StepStatus.PENDING)
            if st.rec.pending is None:
                changes["pending"] = Pending(
                    kind="clarification",
                    question=task.pending_question or "",
                    agent_task_id=task.id,
                    asked_at=task.pending_question_at,
                )
        if ended:
            del st.running[step.id]
        try:
            committed = await self._funnel.commit(**changes)
        except Unstorable as exc:
            spent = attrs.evolve(previous, calls_used=task.calls_used, usage=task.usage)
            if await self.unstorable(step, spent, str(exc), changes):
                self._funnel.publish_step(step.id, "failed")
                await self._advance()
            return False  # the agent unwinds: its result cannot be kept
        if not committed:
            return False
        now = time.time()
        if task.state in ("waiting_for_clarification", "queued"):
            # P5 (P4): the question (the task, short of budget) is durable, so the agent is
            # done in this run. It waits in ctx.ask (ctx.call_skill) for this: a cancellation
            # with a reason it can read, not an exception of ours through its code. Its end
            # is ignored (it left running above).
            if task.state == "queued":  # B3: the agent reads which budget ran out
                why = task.interruption.detail if task.interruption else "budget"
                reason: CancelReason = BudgetExhausted(detail=why, source=self._source)
            else:
                reason = Stop(detail="the agent task waits for an answer", source=self._source)
            running.ref.cancel(reason)
        publish = self._funnel.publish
        if task.state == "waiting_for_clarification":
            publish(ev.AgentTaskWaiting(execution_id=st.rec.id, at=now, task_id=task.id))
        elif task.state in ("completed", "failed"):
            publish(
                ev.AgentTaskCompleted(
                    execution_id=st.rec.id,
                    at=now,
                    task_id=task.id,
                    state=task.state,
                    calls_used=task.calls_used,
                )
            )
            self._funnel.publish_step(step.id, st.sched.status[step.id])
        else:  # progress, or queued to wait for budget
            publish(
                ev.AgentTaskProgress(
                    execution_id=st.rec.id,
                    at=now,
                    task_id=task.id,
                    inner_done=task.inner_steps_done,
                    calls_used=task.calls_used,
                )
            )
        if ended:
            await self._advance()
        return True

    async def unstorable(
        self,
        step: PlanStep,
        task: AgentTaskRecord | None,
        why: str,
        changes: dict[str, Any],
    ) -> bool:
        """A step's result made the record too large (or otherwise unwritable): the step
        fails with that reason, without the result, and the run goes on."""
        st = self._state
        if st.sched.status[step.id] == "pending":
            # An agent's question that could not be stored: the wait it would have started
            # never reached disk, so the step was still running when it failed.
            st.sched.set(step.id, StepStatus.RUNNING)
        st.sched.set(step.id, StepStatus.FAILED)  # from succeeded too: its result is not storable
        st.running.pop(step.id, None)
        st.outputs.pop(step.id, None)
        message = f"its result could not be stored: {why}"
        st.obs[step.id] = observe(
            step,
            ok=False,
            error=redact(message),
            code="agent-failed" if step.kind == "agent" else None,
            agent_task_id=task.id if task is not None else None,
        )
        if task is not None:
            now = time.time()
            failure = Failure(code="agent-failed", message=redact(message))
            st.set_task(
                attrs.evolve(task, state="failed", failure=failure, ended_at=now, updated_at=now)
            )
        changes.pop("pending", None)
        log_failure(  # O2
            f"step {step.id} ({step.kind} {step.target}) failed",
            execution_id=st.rec.id,
            step_id=step.id,
            agent_task_id=task.id if task is not None else None,
            error=message,
        )
        return await self._funnel.commit(**changes)

    # -- stops (S1, S2) ----------------------------------------------------------------------

    async def stop(self, request: StopTask) -> StopResult:
        st = self._state
        task = st.tasks.get(request.task_id)
        base = {
            "task_id": request.task_id,
            "execution_id": st.rec.id,
            "operation_id": request.operation_id,
        }
        if task is None:
            return StopResult(ok=False, state="unknown", reason="no such agent task", **base)
        running = st.running.get(task.step_id)
        if running is not None and running.task_id == task.id:
            if task.id not in st.stopping_tasks:
                if not await self._stop_durably(request):
                    return StopResult(
                        ok=False, state=task.state, reason="the execution is stopping", **base
                    )
                st.stopping_tasks[task.id] = request
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
        st = self._state
        entry = stop_request(request.operation_id, request.task_id, cascade=request.cascade)
        if entry in st.rec.stop_requests:
            return True  # it came through the record (a heartbeat): durable already
        requests = (*st.rec.stop_requests, entry)[-MAX_CONTROLS:]
        try:
            return await self._funnel.commit(stop_requests=requests)
        except Unstorable:  # the record cannot take it: the stop is live only
            return not st.stopping()

    async def stopped(self, running: Running, now: float) -> None:
        """A live task we cancelled has unwound: record it stopped; the run goes on."""
        assert running.task_id is not None
        await self._record_stop(self._state.stopping_tasks.pop(running.task_id), now)

    async def _record_stop(self, request: StopTask, now: float) -> bool:
        """S2 on the run's own record: the task cancelled, its step ``stopped`` (or
        ``cancelled`` with the cascade), its question withdrawn; committed, announced, and
        the run goes on (a stopped step's dependents may start now)."""
        st = self._state
        task = st.tasks[request.task_id]
        before = st.sched.status.get(task.step_id)
        record, _ = stop_task(
            st.snapshot(),
            task.id,
            request.operation_id,
            now,
            by=request.by or self._cfg.owner,
            cascade=request.cascade,
        )
        st.load(record)  # the live plan (same steps, inputs unredacted) stays
        if not await self._funnel.commit():
            return False
        self._funnel.publish(
            ev.AgentTaskStopped(
                execution_id=st.rec.id,
                at=now,
                task_id=task.id,
                operation_id=request.operation_id,
                state="cancelled",
            )
        )
        after = st.sched.status.get(task.step_id)
        if after is not None and after != before:
            self._funnel.publish_step(task.step_id, after)
        await self._advance()
        return True

    # -- answers (R8, R9) ---------------------------------------------------------------------

    async def take_answers(self, requests: tuple[AnswerRequest, ...]) -> bool:
        """R8 for a run live here: answers written to the record (from any host) go to the
        tasks of ours that wait for them; the pending slot passes on (R9) and the answered
        steps may start again. False if the run stopped (a refused commit)."""
        st = self._state
        now = time.time()
        taken = False
        for task in list(st.tasks.values()):
            for given in requests:
                changed = answered(task, given, now)
                if changed is not None:
                    st.set_task(changed)
                    st.claimed.discard(task.id)  # its step may claim it again (R8)
                    taken = True
                    break
        if not taken:
            return True
        waiting = [t for t in st.tasks.values() if t.state == "waiting_for_clarification"]
        pending = None
        if waiting:
            first = min(waiting, key=lambda t: (t.created_at, t.id))
            pending = Pending(
                kind="clarification",
                question=first.pending_question or "",
                agent_task_id=first.id,
                asked_at=first.pending_question_at,
            )
        if not await self._funnel.commit(pending=pending):
            return False
        await self._advance()
        return not st.stopping()

    # -- a masked input after a resume (E10) -------------------------------------------------

    async def masked_input(self, step: PlanStep) -> bool | None:
        """E10: after a resume, a step whose input had to be masked on disk is not run with
        the masked input as if it were the one planned: it fails, saying why (a planner
        with ``max_replans`` may plan it again with the real value)."""
        st = self._state
        why = (
            f"step {step.id} was not run: its input held a secret, which is masked on "
            "disk, so after a resume it cannot be run with the input it was planned "
            "with; pass secrets by reference (an environment variable's name, a "
            "secret store key) instead of in the plan"
        )
        st.sched.set(step.id, StepStatus.FAILED)
        st.obs[step.id] = observe(step, ok=False, error=why)
        log_failure(  # O2
            f"step {step.id} ({step.kind} {step.target}) failed",
            execution_id=st.rec.id,
            step_id=step.id,
            error=why,
        )
        if step.kind == "agent":
            # Its stored tasks end with it: a failed run holds no live task (R11 sticky).
            digest = step_input_hash(step)
            now = time.time()
            for task in list(st.tasks.values()):
                if task.terminal or task.agent_id != step.agent or task.input_hash != digest:
                    continue
                st.set_task(
                    attrs.evolve(
                        task,
                        state=task_move(task.id, task.state, TaskState.FAILED),
                        pending_question=None,
                        ended_at=now,
                        updated_at=now,
                        failure=Failure(code="input-masked", message=why),
                    )
                )
        if not await self._funnel.commit():
            return None
        self._funnel.publish_step(step.id, "failed")
        return False
