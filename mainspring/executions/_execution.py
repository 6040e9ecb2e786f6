"""The ExecutionActor: one durable execution, run one event at a time.

It holds the execution's lease (heartbeating it), schedules plan steps as their dependencies
succeed, runs each step in a child actor, and commits every state change through the
persistence actor before acting on it. Because it handles one message at a time, every record
it commits is consistent: a step completion and the scheduling it unlocks are never seen half
done.

How a run ends, by the reason the actor stops with:
- ``Stop`` — it finished or is waiting (for an answer, an approval, budget); already committed.
- ``Pause`` — children are cancelled with ``Pause``; tasks are requeued; ``paused`` is committed
  and the lease released (R1).
- ``Cancel`` — children see ``ParentCancel(Cancel)``; ``cancelled`` is committed (R2, P6).
- ``LeaseLost`` / a refused commit — nothing more is written by this owner (E3).
- anything else (a shutdown) — the lease is released and the record left as it is: the next
  resume treats the tasks in flight as interrupted by a crash (R3).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import attrs

from ..actors import (
    Actor,
    ActorDeadError,
    ActorRef,
    CancelReason,
    LeaseLost,
    Pause,
    Stop,
    Terminated,
)
from ..storage import (
    BudgetInfo,
    Observation,
    Pending,
    PlanStep,
    StepStatus,
    reconcile,
    redact,
)
from ._rules.plan import InvalidPlan, check_plan, fence, findings_brief, observe
from ._rules.scheduler import pick
from ._rules.transitions import clamp_count, pause_execution
from ._rules.usage import allowance, budget_reason, exhausted, needed_calls
from ._run import events as ev
from ._run.messages import Begin, Heartbeat, Running, StopTask, Unstorable, for_children
from ._run.results import failed_steps_error, result_from, shortfall
from ._run_bounds import BOUNDS_MESSAGES, BoundedRun
from ._steps.children import (
    AgentTaskActor,
    LeaseCheck,
    Meter,
    Planned,
    PlannerActor,
    PlannerContext,
    StepActor,
    StepDone,
    TaskSave,
)
from ._steps.failures import Caught, log_failure

__all__ = ["ExecutionActor"]


class ExecutionActor(BoundedRun):
    """Runs one execution; see the module docstring. Created by the Runtime, not by users."""

    #: Agent steps the last pick gave all the budget that remained (P4, see _start).
    _takes_all: frozenset[str] = frozenset()

    # -- lifecycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        self.send_every(self._cfg.heartbeat_interval, Heartbeat())
        self._arm_deadline()  # B1

    async def receive(self, message: Any) -> Any:
        if type(message) is StepDone:
            return await self._step_done(message)
        if type(message) is TaskSave:
            return await self._task_saved(message)
        if type(message) is Heartbeat:
            return await self._heartbeat()
        if type(message) is Terminated:
            return await self._child_ended(message)
        if type(message) is Planned:
            return await self._planned(message)
        if type(message) is Begin:
            return await self._begin(message)
        if type(message) is StopTask:
            return await self._stop_task(message)
        if type(message) is LeaseCheck:  # L5: an agent's next side effect waits for it
            return await self._lease_fresh()
        if type(message) in BOUNDS_MESSAGES:  # B1: timeouts, retries, the run's deadline
            return await self._bounds_message(message)
        raise TypeError(f"an ExecutionActor does not take {type(message).__name__}")

    async def _begin(self, begin: Begin) -> None:
        if self._expired():  # B1: recovered after its deadline; nothing more runs
            return
        now = time.time()
        self._in_flight = set(begin.in_flight)
        if self._plan is None or begin.replan_goal:
            if not await self._commit():
                return
            await self._replan()
            return
        if begin.resumed:
            completed = sum(1 for s in self._sched.status.values() if s == "succeeded")
            drift = await self._drift() if begin.check_drift else ()
            self._publish(
                ev.ExecutionResumed(
                    execution_id=self._rec.id, at=now, completed=completed, drifted=bool(drift)
                )
            )
            if drift:
                if not await self._commit():
                    return
                await self._replan(drift=drift)
                return
            self._note_kept_under_new_definitions()  # R7: kept, and said so
        if not await self._commit(status="running"):
            return
        self._publish(
            ev.ExecutionStarted(
                execution_id=self._rec.id,
                at=now,
                plan_version=self._plan.version,
                steps=len(self._plan.steps),
            )
        )
        await self._advance()

    async def _drift(self) -> tuple[str, ...]:
        """R6: the latest checkpoint against the workspace now."""
        if not self._rec.checkpoints or self._plan is None:
            return ()
        checkpoint = self._rec.checkpoints[-1]
        cfg = self._cfg
        tools = self._plan_tool_hashes(self._plan)
        root = cfg.workspace
        if root is None:
            # No workspace to look at now: its files and git are not compared.
            absent = tuple(d for d in checkpoint.absent if d == "config")
            checkpoint = attrs.evolve(checkpoint, file_hashes=None, git_head=None, absent=absent)
            root = Path("/nonexistent-mainspring-workspace")
        found = await anyio.to_thread.run_sync(
            lambda: reconcile(
                checkpoint, root, self._plan, cfg.skill_versions, tools, config=cfg.config
            )
        )
        return found.reasons

    async def _replan(self, *, failure: str | None = None, drift: tuple[str, ...] = ()) -> None:
        # After a failure the workspace is as the plan left it, so steps the new plan keeps
        # unchanged stay done; after drift nothing is trusted but finished agent tasks (R8).
        self._keep_done = failure is not None
        cfg = self._cfg
        if cfg.planner is None:
            if drift:
                await self._pause_for(
                    f"the workspace drifted ({'; '.join(drift)}) and this runtime has no "
                    "planner to replan: resume it with one"
                )
                return
            await self._finish("failed", error="no plan was given and the runtime has no planner")
            return
        findings = [f for task in self._tasks.values() for f in task.findings]
        context = PlannerContext(
            goal=self._rec.goal,
            execution_id=self._rec.id,
            previous_plan=self._plan,
            failure=failure,
            findings=findings_brief(findings) if drift and findings else None,
            drift=drift,
        )
        if not await self._lease_fresh():
            return  # L5: no planner call on a lease not known to be live
        ref = await self.spawn(PlannerActor, self.ref, cfg.planner, context)
        self.watch(ref)
        self._by_ref[ref] = ""
        self._planning = True
        self._arm_planner(ref)  # B1
        ref.tell_nowait("plan")

    async def _pause_for(self, why: str) -> None:
        """Stop here, paused (not failed: nothing is lost), saying why; resuming decides."""
        self._watcher.settling()
        now = time.time()
        record = pause_execution(self._snapshot(), self._cfg.owner, now, why)
        # L3: the lease is released in this same write.
        if not await self._commit_record(attrs.evolve(record, lease=self._released())):
            self.stop_self(LeaseLost(self._cfg.owner, detail="the pause was refused"))
            return
        self._ended = True
        self._publish(ev.ExecutionPaused(execution_id=self._rec.id, at=now, requeued=0))
        self._end(Pause(detail=redact(why), source=self.ref.path), error=redact(why))

    async def _planned(self, planned: Planned) -> bool:
        if self._planned_late():  # B1: its timeout fired first; its end fails the run
            return False
        self._planning = False
        if planned.question is not None:
            # An outer question: its answer is appended to the goal on resume (R10).
            pending = Pending(
                kind="clarification", question=redact(planned.question), asked_at=time.time()
            )
            await self._wait("waiting_for_clarification", pending)
            return True
        if planned.plan is None:
            why = f"the planner failed: {planned.error}"
            await self._finish("failed", error=why, caught=planned.caught)
            return True
        plan = planned.plan
        previous = self._plan
        version = previous.version + 1 if previous is not None else max(plan.version, 1)
        plan = attrs.evolve(
            plan,
            version=version,
            steps=tuple(attrs.evolve(step, status="pending") for step in plan.steps),
        )
        cfg = self._cfg
        try:
            check_plan(plan, tools=cfg.tools, skills=cfg.skills, agents=cfg.agents)
        except InvalidPlan as exc:
            await self._finish("failed", error=str(exc))
            return True
        if cfg.require_plan_approval and not plan.requires_approval:
            plan = attrs.evolve(plan, requires_approval=True)
        self._adopt(plan)
        if not await self._commit(status="running"):
            return False
        self._publish(
            ev.ExecutionStarted(
                execution_id=self._rec.id,
                at=time.time(),
                plan_version=plan.version,
                steps=len(plan.steps),
            )
        )
        await self._advance()
        return True

    # -- scheduling (P2-P5) ----------------------------------------------------------------

    def _held(self) -> int:
        return sum(running.cost for running in self._running.values())

    def _remaining(self) -> int:
        return max(0, self._budget - self._rec.calls_used - self._held())

    def _exhausted(self) -> Literal["tokens", "cost"] | None:
        """B3: the token or cost budget the run has reached (counting what running agents
        reported and no save charged yet), or None. Once reached, no model call starts."""
        return exhausted(self._live_usage(), self._token_limit, self._cost_limit)

    def _cascade(self) -> bool:
        """P2, recorded: each step the scheduler skipped or cancelled gets an observation
        saying which dependency ended how, and is announced."""
        changes = self._sched.cascade()
        for change in changes:
            self._obs[change.step_id] = observe(
                self._sched.steps[change.step_id],
                ok=False,
                code="cancelled" if change.status == "cancelled" else None,
                error=change.why,
            )
            self._publish_step(change.step_id, change.status)
        return bool(changes)

    async def _advance(self) -> None:
        """Start every step that may start now; when nothing runs, settle the run. Not while
        the planner works: the plan in hand is being replaced (R6), and what was committed
        meanwhile (a stopped task) is carried into the new plan by ``_adopt``."""
        while True:
            if self._ended or self._plan is None or self._planning:
                return
            changed = self._cascade()
            starts, needs_approval, needs_budget = self._pick()
            if starts and not await self._lease_fresh():
                return  # L5: our lease is not known to be live; the run is stopping
            finished_at_once = False
            for step, cost in starts:
                started = await self._start(step, cost)
                if started is None:
                    return  # refused: the run is stopping
                finished_at_once = finished_at_once or not started
            if finished_at_once:
                continue  # a reused task completed its step: its dependents may start now
            if self._running or self._backoff:  # a step waiting to retry will run again
                if changed and not starts:
                    await self._commit()
                return
            await self._settle(needs_approval, needs_budget)
            return

    def _pick(self) -> tuple[list[tuple[PlanStep, int]], Pending | None, BudgetInfo | None]:
        """The ready steps that may start now (P3, P4, P5), and why others wait."""
        assert self._plan is not None
        pending = self._rec.pending
        steps = self._sched.steps
        asking: set[str] = set()
        answered: set[str] = set()
        for task in self._tasks.values():
            step = steps.get(task.step_id)
            if step is None or step.kind != "agent":
                continue
            if task.state == "waiting_for_clarification":
                asking.add(step.id)
            elif task.state == "queued" and task.id not in self._claimed:
                answered.add(step.id)
        spent = self._exhausted()  # B3: then no skill or agent step fits, tools still run
        picked = pick(
            self._sched,
            plan=self._plan,
            running_targets=[running.step.target for running in self._running.values()],
            max_parallel=self._cfg.max_parallel_steps,
            limits=self._cfg.limits,
            remaining=0 if spent is not None else self._remaining(),
            reservation=self._cfg.reservation,
            approvals=self._rec.approvals,
            question_open=pending is not None and pending.kind == "clarification",
            asking=asking,
            answered=answered,
            in_flight=self._in_flight,
        )
        needs_approval: Pending | None = None
        if picked.needs_approval:
            what = (
                f"plan v{self._plan.version}"
                if picked.approval is None
                else f"step {picked.approval.id}"
            )
            needs_approval = Pending(
                kind="approval", question=f"approve {what}", asked_at=time.time()
            )
        needs_budget: BudgetInfo | None = None
        if picked.short_of_budget:
            needs_budget = BudgetInfo(
                calls_used=self._rec.calls_used,
                max_calls=clamp_count(self._budget),
                needed=needed_calls(self._plan.steps, self._sched.status, self._cfg.reservation),
                budget=spent or "calls",
                usage=self._rec.usage,
                max_tokens=self._token_limit,
                max_cost=self._cost_limit,
            )
        self._takes_all = picked.takes_all
        return list(picked.starts), needs_approval, needs_budget

    async def _start(self, step: PlanStep, cost: int) -> bool | None:
        """Start ``step``: True if it runs now, False if a reused task finished it at once
        (R8), None if a commit was refused and the run is stopping."""
        cfg = self._cfg
        now = time.time()
        self._sched.set(step.id, "running")
        self._in_flight.discard(step.id)  # restarted once; from now on it is an ordinary step
        self._publish(
            ev.StepStarted(execution_id=self._rec.id, at=now, step_id=step.id, kind=step.kind)
        )
        if self._live_plan is None and step.id in self._rec.masked_inputs:
            return await self._masked_input(step)
        if step.kind != "agent":
            fn = cfg.tools[step.target] if step.kind == "tool" else cfg.skills[step.target]
            meter = Meter()  # B3: a result too late for _step_done still has its usage
            ref = await self._spawn_step(step, StepActor, self.ref, step, fn, meter)
            if ref is None:
                return None
            self._track(Running(step, ref, cost, meter=meter))
            ref.tell_nowait("run")
            return True
        task = self._claim(step)
        if task is not None and task.state == "completed":
            # R8: this exact step already ran to completion (e.g. before a replan).
            self._set_task(task)
            self._sched.set(step.id, "succeeded")
            previous = next(
                (o for o in self._obs.values() if o.agent_task_id == task.id and o.ok), None
            )
            self._obs[step.id] = observe(
                step,
                agent_task_id=task.id,
                ok=True,
                output=previous.output if previous is not None else None,
                finding_ids=tuple(f.id for f in task.findings),
                calls_used=task.calls_used,
                redacted=previous.redacted if previous is not None else False,  # E10
            )
            self._publish_step(step.id, "succeeded")
            return False if await self._commit() else None
        # R8: a new task, or a claimed one whose agent or own checkpoint changed restarts.
        task = self._new_task(step, now) if task is None else await self._revalidated(task, step)
        task = attrs.evolve(
            task,
            state="running",
            started_at=task.started_at or now,
            updated_at=now,
            plan_version=self._plan.version if self._plan else 1,
            calls_reserved=clamp_count(task.calls_used + cost),
        )
        if task.inner_checkpoint is None:
            task = attrs.evolve(task, inner_checkpoint=await self._task_checkpoint(step))
        self._set_task(task)
        # The task is on disk before its agent runs: a crash now is reconciled from it (R3),
        # and operators can see and stop it (S1).
        if not await self._commit():
            return None
        agent = cfg.agents[step.target]
        meter = Meter(task.calls_used, task.usage)
        ref = await self._spawn_step(
            step,
            AgentTaskActor,
            self.ref,
            task,
            step,
            agent,
            cfg.tools,
            cfg.skills,
            cfg.max_tool_calls,
            meter,
            # P4: an agent given all the budget that remained waits for budget when it
            # needs more (the run's budget is short); any other fails (its reservation is
            # the most it may spend).
            step.id in self._takes_all,
            cfg.workspace,
            cfg.kept_results,
            self._exhausted,  # B3: its model calls stop once the run's tokens or cost ran out
            allowance(
                task.usage,
                self._live_usage(),
                (self._token_limit, self._cost_limit),
                (cfg.token_reservation, cfg.cost_reservation),
            ),
            cfg.memory,
            self._lease_watch.fresh,  # L5: read by the agent before each side effect
        )
        if ref is None:
            return None
        self._track(Running(step, ref, cost, task.id, meter))
        self._publish(
            ev.AgentTaskStarted(
                execution_id=self._rec.id,
                at=now,
                task_id=task.id,
                step_id=step.id,
                calls_reserved=task.calls_reserved,
            )
        )
        ref.tell_nowait("run")
        return True

    def _track(self, running: Running) -> None:
        """A child now runs ``running.step``: known by step and by ref, and watched."""
        self._running[running.step.id] = running
        self._by_ref[running.ref] = running.step.id
        self.watch(running.ref)
        self._arm_step(running)  # B1

    async def _spawn_step(
        self, step: PlanStep, factory: Callable[..., Actor], *args: Any
    ) -> ActorRef | None:
        """A child for ``step``, or None if this actor started stopping meanwhile (the step
        goes back to pending; what ends the run decides what becomes of it)."""
        try:
            return await self.spawn(factory, *args)
        except ActorDeadError:
            self._sched.set(step.id, "pending")
            return None

    async def _settle(self, approval: Pending | None, budget: BudgetInfo | None) -> None:
        """Nothing runs: the run is done, or waits for an answer, an approval or budget."""
        assert self._plan is not None
        if self._sched.all_finished:
            failed = [s for s in self._plan.steps if self._sched.status[s.id] == "failed"]
            replans = self._rec.replans  # counted on the record: across resumes and processes
            if failed and replans < self._cfg.max_replans and self._cfg.planner:
                evidence = fence(
                    "\n".join(
                        f"- step {s.id} failed: {(self._obs[s.id].error or '')[:300]}"
                        for s in failed[:10]
                    ),
                    label="failures",
                )
                if await self._commit(replans=clamp_count(replans + 1)):
                    await self._replan(failure=redact(evidence))
                return
            # Completed only if what was asked for happened (S2): nothing cancelled, and not
            # everything stopped.
            short = None if failed else shortfall(self._plan.steps, self._sched.status)
            await self._finish("failed" if failed or short else "completed", error=short)
            return
        if self._rec.pending is not None and self._rec.pending.kind == "clarification":
            await self._wait("waiting_for_clarification", self._rec.pending)
        elif approval is not None:
            await self._wait("waiting_for_approval", approval)
        elif budget is not None:
            pending = Pending(kind="budget", budget=budget, asked_at=time.time())
            await self._wait("waiting_for_budget", pending)
        else:  # pragma: no cover - every pending step is blocked by one of the above
            await self._finish("failed", error="no step can start and none is running")

    async def _wait(self, status: str, pending: Pending) -> None:
        self._watcher.settling()
        # L3: the lease is released in this same write, not in a second one.
        if not await self._commit(status=status, pending=pending, lease=self._released()):
            return
        self._ended = True
        self._publish(
            ev.ExecutionWaiting(
                execution_id=self._rec.id,
                at=time.time(),
                status=status,
                task_id=pending.agent_task_id,
            )
        )
        if pending.budget is not None:  # B3: the reason names the budget that ran out
            self._end(budget_reason(pending.budget, self.ref.path))
            return
        self._end(Stop(detail=f"the execution is {status}", source=self.ref.path))

    async def _finish(
        self,
        status: Literal["completed", "failed"],
        *,
        error: str | None = None,
        caught: Caught | None = None,
    ) -> None:
        """The final write, through the same funnel as every other (E4). ``caught``: the
        planner's exception when it is why the run failed (O2: kept on the "plan"
        observation)."""
        self._watcher.settling()
        if error is not None:
            # E5: the result says why as the record does, never with a secret the record masks.
            error = redact(error)
            self._obs["plan"] = Observation(
                step_id="plan",
                ok=False,
                error=error,
                error_type=caught.error_type if caught is not None else None,
                traceback=caught.traceback if caught is not None else None,
            )
        # L3: the lease is released in this same write: a crash right after it cannot
        # leave a finished run held by a dead owner.
        if not await self._commit(status=status, pending=None, lease=self._released()):
            return
        if status == "failed":
            ids = [step_id for step_id, s in self._sched.status.items() if s == "failed"]
            log_failure(  # O2
                "the run failed",
                execution_id=self._rec.id,
                error=error or failed_steps_error(self._obs.values(), ids),
                traceback=caught.traceback if caught is not None else None,
                level=logging.ERROR,
            )
        self._ended = True
        now = time.time()
        if status == "completed":
            self._publish(
                ev.ExecutionCompleted(
                    execution_id=self._rec.id,
                    at=now,
                    steps=len(self._sched.status),
                    calls_used=self._rec.calls_used,
                )
            )
        else:
            failed = sum(1 for state in self._sched.status.values() if state == "failed")
            self._publish(
                ev.ExecutionFailed(execution_id=self._rec.id, at=now, status=status, failed=failed)
            )
        self._end(Stop(detail=f"the execution {status}", source=self.ref.path), error=error)

    # -- events from children --------------------------------------------------------------

    async def _step_done(self, done: StepDone) -> bool:
        running = self._running.get(done.step_id)
        if running is None or running.task_id is not None or self._ended:
            return False
        if self._late(running):  # B1: its timeout fired first; the execution decides
            return await self._step_done_late(running)
        del self._running[done.step_id]
        step = running.step
        changes: dict[str, Any] = {}
        if step.kind == "skill":  # a model call was made, whatever its outcome (P4)
            changes["calls_used"] = clamp_count(self._rec.calls_used + 1)
        if done.usage:  # B3: what it reported, charged in full even past a budget
            changes["usage"] = self._rec.usage + done.usage
        error = redact(done.error) if done.error else None
        # O2: when it ran, and the exception it raised, are kept with the attempt.
        caught, started_at = done.caught, done.started_at or running.started_at
        # B1: a failed attempt the step's policy retries is recorded, not failed.
        if not done.ok and await self._retry_later(
            step, error or "", done.error_types, changes=changes, caught=caught,
            started_at=started_at,
        ):  # fmt: skip
            return True
        state: StepStatus = "succeeded" if done.ok else "failed"
        self._sched.set(step.id, state)
        error, attempts = self._last_attempt(
            step, ok=done.ok, error=error, caught=caught, started_at=started_at
        )
        # E10: a result that redaction changed is marked, so a reader never takes it for
        # the original; the step stays completed (E1, R7).
        stored = done.stored
        self._obs[step.id] = observe(
            step,
            ok=done.ok,
            output=stored.value if stored is not None else None,
            error=error,
            calls_used=1 if step.kind == "skill" else 0,
            redacted=stored.redacted if stored is not None else False,
            data=attempts,
            error_type=caught.error_type if caught is not None else None,
            traceback=caught.traceback if caught is not None else None,
            started_at=started_at,
            ended_at=done.ended_at or time.time(),
        )
        if not done.ok:
            log_failure(  # O2
                f"step {step.id} ({step.kind} {step.target}) failed",
                execution_id=self._rec.id,
                step_id=step.id,
                error=error,
                traceback=caught.traceback if caught is not None else None,
            )
        if done.ok:
            self._outputs[step.id] = done.output
        # E1: the completion is durable before any dependent starts.
        try:
            committed = await self._commit(**changes)
        except Unstorable as exc:
            committed = await self._unstorable(step, None, str(exc), changes)
            state = "failed"
        if not committed:
            return False
        self._publish_step(step.id, state)
        await self._advance()
        return True

    # -- the end ---------------------------------------------------------------------------

    async def _mainspring_stop_children(self, reason: CancelReason) -> None:
        # Every child not yet ended: the steps running, the planner (step id ""), and an
        # agent that asked, which was told to stop once its question was saved (P5).
        refs = list(self._by_ref)
        for ref in refs:
            ref.cancel(for_children(reason, self.ref.path))
        for ref in refs:
            await ref.wait_stopped()

    async def on_stop(self, reason: CancelReason) -> None:
        try:
            await self._wind_down(reason)
        finally:
            result = self._result
            if result is None:
                result = result_from(self._rec, outputs=self._outputs, stopped_by=reason)
            self._watcher.ended(result)
