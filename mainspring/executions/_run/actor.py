"""The ExecutionActor: one durable execution, run one event at a time.

It holds the execution's lease (heartbeating it), schedules plan steps as their dependencies
succeed, runs each step in a child, and commits every state change through the persistence
actor before acting on it. Because it handles one message at a time, every record it commits
is consistent: a step completion and the scheduling it unlocks are never seen half done.

The actor is a shell: :meth:`ExecutionActor.receive` is the one dispatch of its messages,
and the scheduling loop (``_advance``) and the run's ends are here. What it holds does the
rest, each one job: :class:`RunState` (the record in memory), :class:`Funnel` (every
write, E2), :class:`Children` (children, their deadlines and retries, B1),
:class:`TaskBook` (agent tasks: claims, saves, stops, answers) and the worker board.

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
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import attrs

from ...actors import (
    Actor,
    ActorDeadError,
    Cancel,
    CancelReason,
    Crash,
    LeaseLost,
    Pause,
    Stop,
    TaskEnded,
    Terminated,
    Timeout,
)
from ...storage import (
    BudgetInfo,
    Execution,
    Observation,
    Pending,
    PersistenceFailed,
    Plan,
    PlanStep,
    StepStatus,
    redact,
)
from ...storage._seam import carry_encoded, plain_record, reconcile
from .._rules.plan import InvalidPlan, check_plan, fence, findings_brief, observe
from .._rules.scheduler import pick
from .._rules.transitions import (
    cancel_execution,
    clamp_count,
    pause_execution,
    stop_askers,
    stop_task,
)
from .._rules.usage import allowance, budget_reason, needed_calls
from .._steps.children import (
    AgentTaskActor,
    LeaseCheck,
    Meter,
    Planned,
    PlannerActor,
    PlannerContext,
    StepDone,
    TaskSave,
    run_step,
)
from .._steps.failures import Caught, describe_off_loop, log_failure
from .._workers.board import BOARD_REQUESTS, WorkerBoard, WorkerCommit, WorkerJoin, answer
from . import events as ev
from . import log as _log
from .children import TIMER_MESSAGES, Children
from .funnel import Funnel
from .kept import KeptInputs
from .messages import (
    Begin,
    Heartbeat,
    RunConfig,
    Running,
    RunServices,
    RunWatcher,
    StopTask,
    Unstorable,
    for_children,
)
from .results import result_from, shortfall
from .state import RunState
from .tasks import TaskBook

__all__ = ["ExecutionActor"]


class ExecutionActor(Actor):
    """Runs one execution; see the module docstring. Created by the Runtime, not by users,
    with the runtime's options (``cfg``), its services and what it keeps of its runs' real
    inputs (``kept``, E10); the runtime reaches it only through its mailbox."""

    _mainspring_orders_children = True  # we cancel our children ourselves, with our reason
    #: O2: a crash of this actor is the run's end, logged once by :meth:`on_stop` (a failed
    #: write's cause is logged by the writer), not by the kernel too.
    _mainspring_crashes_reported = True

    def __init__(
        self,
        cfg: RunConfig,
        services: RunServices,
        kept: KeptInputs,
        record: Execution,
        watcher: RunWatcher,
        live_plan: Plan | None = None,
    ) -> None:
        self._cfg = cfg
        self._services = services
        self._kept = kept
        self._watcher = watcher
        self._st = RunState(cfg, record, live_plan)
        self._funnel = Funnel(self._st, services, self._halt, self.ref.path)
        self._tasks = TaskBook(self._st, self._funnel, kept, self._advance, self.ref.path)
        self._children = Children(
            self, self._st, self._funnel, self._tasks, self._advance, self._fail
        )
        #: What the last message's handling raised: a crash's exception, for on_stop (O2).
        self._escaped: BaseException | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        self.send_every(self._cfg.heartbeat_interval, Heartbeat())
        self._children.arm_deadline()  # B1

    async def receive(self, message: Any) -> Any:
        try:
            return await self._handle(message)
        except BaseException as exc:  # kept for on_stop to log a crash with (O2); re-raised
            self._escaped = exc
            raise

    async def _handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is TaskEnded:  # a tool or skill step ended, with its report (StepDone)
            if message.value is not None:
                await self._step_done(message.value)
            return await self._children.ended(message.task, message.reason)
        if kind is TaskSave:
            if await self._children.saved_late(message):  # B1: its timeout fired first
                return False
            return await self._tasks.saved(message)
        if kind is Heartbeat:
            return await self._heartbeat()
        if kind is Terminated:  # an agent task's or the planner's actor ended
            return await self._children.ended(message.ref, message.reason)
        if kind is Planned:
            return await self._planned(message)
        if kind is Begin:
            return await self._begin(message)
        if kind is StopTask:
            return await self._tasks.stop(message)
        if kind is LeaseCheck:  # L5: an agent's next side effect waits for it
            return await self._funnel.lease_fresh()
        if kind in TIMER_MESSAGES:  # B1: timeouts, retries, the run's deadline
            return await self._children.timer_message(message)
        if kind is WorkerJoin:  # a worker driver starts (#17)
            return self._board()
        if kind is WorkerCommit:  # a driver put a change on the board: commit it (E2)
            return await self._board_commit()
        if kind in BOARD_REQUESTS:  # the runtime asks about the board, or changes it (#17)
            board = self._st.board
            return await answer(message, board, self._board, self._board_commit, self)
        raise TypeError(f"an ExecutionActor does not take {type(message).__name__}")

    def _halt(self, reason: CancelReason) -> None:
        """E3: stop now: the children are interrupted at once, not after this message."""
        for running in self._st.running.values():
            running.ref.cancel(for_children(reason, self.ref.path))
        self.stop_self(reason)

    def _end(self, reason: CancelReason, error: str | None = None) -> None:
        st = self._st
        st.result = result_from(st.rec, outputs=st.outputs, stopped_by=reason, error=error)
        self.stop_self(reason)

    def _board(self) -> WorkerBoard:
        """The run's worker board, made when the first driver joins (or the runtime asks
        for it: ``BoardView``, ``SealProof``)."""
        st = self._st
        if st.board is None:
            cfg = self._cfg
            limit = min(cfg.max_parallel_steps, cfg.max_workers)
            st.board = WorkerBoard(st.rec, self._services.evidence, limit)
        return st.board

    async def _board_commit(self) -> bool:
        """A change put on the board, committed (E2): True once durable."""
        if self._st.ended:
            return False  # saves are refused while the run stops: the board carries it
        return await self._funnel.commit()

    # -- beginning ---------------------------------------------------------------------------

    async def _begin(self, begin: Begin) -> None:
        st = self._st
        if self._children.expired():  # B1: recovered after its deadline; nothing more runs
            return
        now = time.time()
        st.in_flight = set(begin.in_flight)
        self._trace(begin)
        if st.plan is None or begin.replan_goal:
            if not await self._funnel.commit():
                return
            await self._replan()
            return
        if begin.resumed:
            completed = sum(1 for s in st.sched.status.values() if s == "succeeded")
            drift = await self._drift() if begin.check_drift else ()
            self._funnel.publish(
                ev.ExecutionResumed(
                    execution_id=st.rec.id, at=now, completed=completed, drifted=bool(drift)
                )
            )
            if drift:
                if not await self._funnel.commit():
                    return
                await self._replan(drift=drift)
                return
            self._tasks.note_kept_under_new_definitions()  # R7: kept, and said so
        if not await self._funnel.commit(status="running"):
            return
        assert st.plan is not None
        self._funnel.publish(
            ev.ExecutionStarted(
                execution_id=st.rec.id,
                at=now,
                plan_version=st.plan.version,
                steps=len(st.plan.steps),
            )
        )
        await self._advance()

    def _trace(self, begin: Begin) -> None:
        """O1: the run's span begins (when telemetry is on); the execution keeps its first
        traced run's trace context, written with the commit that follows."""
        telemetry = self._services.telemetry
        if telemetry is None:
            return
        st = self._st
        spans = telemetry.run(st.rec, begin.caller, resumed=begin.resumed)
        self._funnel.spans = spans
        if st.rec.trace_context is None and spans.traceparent is not None:
            st.rec = attrs.evolve(st.rec, trace_context=spans.traceparent)

    async def _drift(self) -> tuple[str, ...]:
        """R6: the latest checkpoint against the workspace now."""
        st = self._st
        if not st.rec.checkpoints or st.plan is None:
            return ()
        checkpoint = st.rec.checkpoints[-1]
        cfg = self._cfg
        tools = st.plan_tool_hashes(st.plan)
        root = cfg.workspace
        if root is None:
            # No workspace to look at now: its files and git are not compared.
            absent = tuple(d for d in checkpoint.absent if d == "config")
            checkpoint = attrs.evolve(checkpoint, file_hashes=None, git_head=None, absent=absent)
            root = Path("/nonexistent-mainspring-workspace")
        plan = st.plan
        found = await anyio.to_thread.run_sync(
            lambda: reconcile(checkpoint, root, plan, cfg.skill_versions, tools, config=cfg.config)
        )
        return found.reasons

    async def _replan(self, *, failure: str | None = None, drift: tuple[str, ...] = ()) -> None:
        st = self._st
        # After a failure the workspace is as the plan left it, so steps the new plan keeps
        # unchanged stay done; after drift nothing is trusted but finished agent tasks (R8).
        st.keep_done = failure is not None
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
        findings = [f for task in st.tasks.values() for f in task.findings]
        context = PlannerContext(
            goal=st.rec.goal,
            execution_id=st.rec.id,
            previous_plan=plain_record(st.plan),  # E10: as a plan read back (tuples)
            failure=failure,
            findings=findings_brief(findings) if drift and findings else None,
            drift=drift,
        )
        if not await self._funnel.lease_fresh():
            return  # L5: no planner call on a lease not known to be live
        ref = await self.spawn(PlannerActor, self.ref, cfg.planner, context)
        self.watch(ref)
        st.by_ref[ref] = ""
        st.planning = True
        self._children.arm_planner(ref)  # B1
        ref.tell_nowait("plan")

    async def _pause_for(self, why: str) -> None:
        """Stop here, paused (not failed: nothing is lost), saying why; resuming decides."""
        st = self._st
        self._watcher.settling()
        now = time.time()
        record = pause_execution(st.snapshot(), self._cfg.owner, now, why)
        # L3: the lease is released in this same write.
        if not await self._funnel.commit(attrs.evolve(record, lease=st.released())):
            self.stop_self(LeaseLost(self._cfg.owner, detail="the pause was refused"))
            return
        st.ended = True
        pause = Pause(detail=redact(why), source=self.ref.path)
        self._funnel.publish(ev.ExecutionPaused(execution_id=st.rec.id, at=now, requeued=0), pause)
        self._end(pause, error=redact(why))

    async def _planned(self, planned: Planned) -> bool:
        st = self._st
        if self._children.planned_late():  # B1: its timeout fired first; its end fails the run
            return False
        st.planning = False
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
        previous = st.plan
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
        st.adopt(plan, self._kept.keep_plan)
        if not await self._funnel.commit(status="running"):
            return False
        self._funnel.publish(
            ev.ExecutionStarted(
                execution_id=st.rec.id,
                at=time.time(),
                plan_version=plan.version,
                steps=len(plan.steps),
            )
        )
        await self._advance()
        return True

    # -- scheduling (P2-P5) ----------------------------------------------------------------

    def _cascade(self) -> bool:
        """P2, recorded: each step the scheduler skipped or cancelled gets an observation
        saying which dependency ended how, and is announced."""
        st = self._st
        changes = st.sched.cascade()
        for change in changes:
            st.obs[change.step_id] = observe(
                st.sched.steps[change.step_id],
                ok=False,
                code="cancelled" if change.status == "cancelled" else None,
                error=change.why,
            )
            self._funnel.publish_step(change.step_id, change.status)
        return bool(changes)

    async def _advance(self) -> None:
        """Start every step that may start now; when nothing runs, settle the run. Not while
        the planner works: the plan in hand is being replaced (R6), and what was committed
        meanwhile (a stopped task) is carried into the new plan by ``adopt``."""
        st = self._st
        while True:
            if st.ended or st.plan is None or st.planning:
                return
            changed = self._cascade()
            starts, needs_approval, needs_budget = self._pick()
            if starts and not await self._funnel.lease_fresh():
                return  # L5: our lease is not known to be live; the run is stopping
            finished_at_once = False
            for step, cost in starts:
                started = await self._start(step, cost)
                if started is None:
                    return  # refused: the run is stopping
                finished_at_once = finished_at_once or not started
            if finished_at_once:
                continue  # a reused task completed its step: its dependents may start now
            if st.running or self._children.backoff:  # a step waiting to retry will run
                if changed and not starts:
                    await self._funnel.commit()
                return
            await self._settle(needs_approval, needs_budget)
            return

    def _pick(self) -> tuple[list[tuple[PlanStep, int]], Pending | None, BudgetInfo | None]:
        """The ready steps that may start now (P3, P4, P5), and why others wait."""
        st = self._st
        assert st.plan is not None
        pending = st.rec.pending
        steps = st.sched.steps
        asking: set[str] = set()
        answered: set[str] = set()
        for task in st.tasks.values():
            step = steps.get(task.step_id)
            if step is None or step.kind != "agent":
                continue
            if task.state == "waiting_for_clarification":
                asking.add(step.id)
            elif task.state == "queued" and task.id not in st.claimed:
                answered.add(step.id)
        spent = st.exhausted()  # B3: then no skill or agent step fits, tools still run
        picked = pick(
            st.sched,
            plan=st.plan,
            running_targets=[running.step.target for running in st.running.values()],
            max_parallel=self._cfg.max_parallel_steps,
            limits=self._cfg.limits,
            remaining=0 if spent is not None else st.remaining(),
            reservation=self._cfg.reservation,
            approvals=st.rec.approvals,
            question_open=pending is not None and pending.kind == "clarification",
            asking=asking,
            answered=answered,
            in_flight=st.in_flight,
        )
        needs_approval: Pending | None = None
        if picked.needs_approval:
            what = (
                f"plan v{st.plan.version}"
                if picked.approval is None
                else f"step {picked.approval.id}"
            )
            needs_approval = Pending(
                kind="approval", question=f"approve {what}", asked_at=time.time()
            )
        needs_budget: BudgetInfo | None = None
        if picked.short_of_budget:
            needs_budget = BudgetInfo(
                calls_used=st.rec.calls_used,
                max_calls=clamp_count(st.budget),
                needed=needed_calls(st.plan.steps, st.sched.status, self._cfg.reservation),
                budget=spent or "calls",
                usage=st.rec.usage,
                max_tokens=st.token_limit,
                max_cost=st.cost_limit,
            )
        st.takes_all = picked.takes_all
        return list(picked.starts), needs_approval, needs_budget

    async def _start(self, step: PlanStep, cost: int) -> bool | None:
        """Start ``step``: True if it runs now, False if a reused task finished it at once
        (R8), None if a commit was refused and the run is stopping."""
        st = self._st
        cfg = self._cfg
        now = time.time()
        st.sched.set(step.id, StepStatus.RUNNING)
        st.in_flight.discard(step.id)  # restarted once; from now on it is an ordinary step
        self._funnel.step_started(step, now)  # logged and announced, each only when heard
        spans = self._funnel.spans
        if spans is not None:  # O1: this attempt's span
            spans.step_started(step, self._children.attempt_of(step))
        if st.live_plan is None and step.id in st.rec.masked_inputs:
            return await self._tasks.masked_input(step)
        if step.kind != "agent":
            fn = cfg.tools[step.target] if step.kind == "tool" else cfg.skills[step.target]
            if spans is not None:  # O1: the attempt's span (its call's) is current while it runs
                fn = spans.traced_call(step, fn)
            meter = Meter()  # B3: a result too late for _step_done still has its usage
            # A task of ours, not an actor: its own cancel scope carries every reason
            # (pause, cancel, timeout, lease lost) to the tool's cancel_reason(), and its
            # report arrives with its end (one message, TaskEnded).
            try:
                child = self.start_task(run_step, step, fn, meter)
            except ActorDeadError:  # stopping meanwhile: what ends the run decides
                st.sched.set(step.id, StepStatus.PENDING)
                return None
            self._children.track(Running(step, child, cost, meter=meter))
            st.started.add(step.id)  # on disk as running at the next heartbeat, if it runs on
            return True
        task = self._tasks.claim(step)
        if task is not None and task.state == "completed":
            # R8: this exact step already ran to completion (e.g. before a replan).
            st.set_task(task)
            st.sched.set(step.id, StepStatus.SUCCEEDED)
            previous = next(
                (o for o in st.obs.values() if o.agent_task_id == task.id and o.ok), None
            )
            st.obs[step.id] = observe(
                step,
                agent_task_id=task.id,
                ok=True,
                output=previous.output if previous is not None else None,
                finding_ids=tuple(f.id for f in task.findings),
                calls_used=task.calls_used,
                redacted=previous.redacted if previous is not None else False,  # E10
            )
            self._funnel.publish_step(step.id, "succeeded")
            return False if await self._funnel.commit() else None
        # R8: a new task, or a claimed one whose agent or own checkpoint changed restarts.
        if task is None:
            task = self._tasks.new_task(step, now)
        else:
            task = await self._tasks.revalidated(task, step)
        task = attrs.evolve(
            task,
            state="running",
            started_at=task.started_at or now,
            updated_at=now,
            plan_version=st.plan.version if st.plan else 1,
            calls_reserved=clamp_count(task.calls_used + cost),
        )
        if task.inner_checkpoint is None:
            task = attrs.evolve(task, inner_checkpoint=await self._tasks.task_checkpoint(step))
        st.set_task(task)
        # The task is on disk before its agent runs: a crash now is reconciled from it (R3),
        # and operators can see and stop it (S1).
        if not await self._funnel.commit():
            return None
        agent = cfg.agents[step.target]
        meter = Meter(task.calls_used, task.usage)
        ref = await self._children.spawn(
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
            step.id in st.takes_all,
            cfg.workspace,
            self._kept.results,
            st.exhausted,  # B3: its model calls stop once the run's tokens or cost ran out
            allowance(
                task.usage,
                st.live_usage(),
                (st.token_limit, st.cost_limit),
                (cfg.token_reservation, cfg.cost_reservation),
            ),
            self._services.memory,
            self._funnel.lease_watch.fresh,  # L5: read by the agent before each side effect
            spans.for_task(step, task.id) if spans is not None else None,  # O1
        )
        if ref is None:
            return None
        self._children.track(Running(step, ref, cost, task.id, meter))
        self._funnel.publish(
            ev.AgentTaskStarted(
                execution_id=st.rec.id,
                at=now,
                task_id=task.id,
                step_id=step.id,
                calls_reserved=task.calls_reserved,
            )
        )
        ref.tell_nowait("run")
        return True

    async def _settle(self, approval: Pending | None, budget: BudgetInfo | None) -> None:
        """Nothing runs: the run is done, or waits for an answer, an approval or budget."""
        st = self._st
        assert st.plan is not None
        if st.sched.all_finished:
            failed = [s for s in st.plan.steps if st.sched.status[s.id] == "failed"]
            replans = st.rec.replans  # counted on the record: across resumes and processes
            if failed and replans < self._cfg.max_replans and self._cfg.planner:
                evidence = fence(
                    "\n".join(
                        f"- step {s.id} failed: {(st.obs[s.id].error or '')[:300]}"
                        for s in failed[:10]
                    ),
                    label="failures",
                )
                if await self._funnel.commit(replans=clamp_count(replans + 1)):
                    await self._replan(failure=redact(evidence))
                return
            # Completed only if what was asked for happened (S2): nothing cancelled, and not
            # everything stopped.
            short = None if failed else shortfall(st.plan.steps, st.sched.status)
            await self._finish("failed" if failed or short else "completed", error=short)
            return
        if st.rec.pending is not None and st.rec.pending.kind == "clarification":
            await self._wait("waiting_for_clarification", st.rec.pending)
        elif approval is not None:
            await self._wait("waiting_for_approval", approval)
        elif budget is not None:
            pending = Pending(kind="budget", budget=budget, asked_at=time.time())
            await self._wait("waiting_for_budget", pending)
        else:  # pragma: no cover - every pending step is blocked by one of the above
            await self._finish("failed", error="no step can start and none is running")

    async def _wait(self, status: str, pending: Pending) -> None:
        st = self._st
        self._watcher.settling()
        # L3: the lease is released in this same write, not in a second one.
        if not await self._funnel.commit(status=status, pending=pending, lease=st.released()):
            return
        st.ended = True
        self._funnel.publish(
            ev.ExecutionWaiting(
                execution_id=st.rec.id,
                at=time.time(),
                status=status,
                task_id=pending.agent_task_id,
            )
        )
        if pending.budget is not None:  # B3: the reason names the budget that ran out
            self._end(budget_reason(pending.budget, self.ref.path))
            return
        self._end(Stop(detail=f"the execution is {status}", source=self.ref.path))

    async def _fail(self, error: str) -> None:
        await self._finish("failed", error=error)

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
        st = self._st
        self._watcher.settling()
        if error is not None:
            # E5: the result says why as the record does, never with a secret the record masks.
            error = redact(error)
            st.obs["plan"] = Observation(
                step_id="plan",
                ok=False,
                error=error,
                error_type=caught.error_type if caught is not None else None,
                traceback=caught.traceback if caught is not None else None,
            )
        # L3: the lease is released in this same write: a crash right after it cannot
        # leave a finished run held by a dead owner.
        if not await self._funnel.commit(status=status, pending=None, lease=st.released()):
            return
        if status == "failed" and error is not None:
            # O2: the run's own failure (its planner, its plan, steps stopped short); a
            # step's failure was logged when the step failed, and is not logged again.
            log_failure(
                "the run failed",
                execution_id=st.rec.id,
                error=error,
                traceback=caught.traceback if caught is not None else None,
                level=logging.ERROR,
            )
        st.ended = True
        now = time.time()
        if status == "completed":
            self._funnel.publish(
                ev.ExecutionCompleted(
                    execution_id=st.rec.id,
                    at=now,
                    steps=len(st.sched.status),
                    calls_used=st.rec.calls_used,
                )
            )
        else:
            failed = sum(1 for state in st.sched.status.values() if state == "failed")
            self._funnel.publish(
                ev.ExecutionFailed(execution_id=st.rec.id, at=now, status=status, failed=failed)
            )
        self._end(Stop(detail=f"the execution {status}", source=self.ref.path), error=error)

    # -- events from children --------------------------------------------------------------

    async def _step_done(self, done: StepDone) -> bool:
        st = self._st
        running = st.running.get(done.step_id)
        if running is None or running.task_id is not None or st.ended:
            return False
        if self._children.late(running):  # B1: its timeout fired first; the execution decides
            return await self._children.step_done_late(running)
        del st.running[done.step_id]
        step = running.step
        changes: dict[str, Any] = {}
        if step.kind == "skill":  # a model call was made, whatever its outcome (P4)
            changes["calls_used"] = clamp_count(st.rec.calls_used + 1)
        if done.usage:  # B3: what it reported, charged in full even past a budget
            changes["usage"] = st.rec.usage + done.usage
        error = redact(done.error) if done.error else None
        # O2: when it ran, and the exception it raised, are kept with the attempt.
        caught, started_at = done.caught, done.started_at or running.started_at
        # B1: a failed attempt the step's policy retries is recorded, not failed.
        if not done.ok and await self._children.retry_later(
            step, error or "", done.error_types, changes=changes, caught=caught,
            started_at=started_at,
        ):  # fmt: skip
            return True
        state: StepStatus = StepStatus.SUCCEEDED if done.ok else StepStatus.FAILED
        st.sched.set(step.id, state)
        error, attempts = self._children.last_attempt(
            step, ok=done.ok, error=error, caught=caught, started_at=started_at
        )
        # E10: a result that redaction changed is marked, so a reader never takes it for
        # the original; the step stays completed (E1, R7).
        stored = done.stored
        st.obs[step.id] = carry_encoded(  # the output's bytes, written as they are (E10)
            observe(
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
            ),
            stored.encoded if stored is not None else None,
        )
        if not done.ok:
            log_failure(  # O2: failed for good (its retries, if any, are spent)
                f"step {step.id} ({step.kind} {step.target}) failed",
                execution_id=st.rec.id,
                step_id=step.id,
                error=error,
                traceback=caught.traceback if caught is not None else None,
                attempt=attempts.get("attempt"),
                level=logging.ERROR,
            )
        if done.ok:
            st.outputs[step.id] = done.output
        # E1: the completion is durable before any dependent starts.
        try:
            committed = await self._funnel.commit(**changes)
        except Unstorable as exc:
            committed = await self._tasks.unstorable(step, None, str(exc), changes)
            state = StepStatus.FAILED
        if not committed:
            return False
        self._funnel.publish_step(step.id, state)
        await self._advance()
        return True

    # -- requests written to the record (L2, V3) ---------------------------------------------

    async def _heartbeat(self) -> None:
        st = self._st
        if st.ended:
            return
        stored = await self._funnel.renew()
        if stored is None:
            return
        # Requests written elsewhere are durable already: no commit is needed to keep them.
        st.rec = attrs.evolve(
            st.rec,
            stop_requests=stored.stop_requests,
            answer_requests=stored.answer_requests,
        )
        if stored.answer_requests and not await self._tasks.take_answers(stored.answer_requests):
            return
        askers = stop_askers(stored)  # V3: the task is told who asked, as if asked here
        for request in stored.stop_requests:
            task_id = request.task_id
            task = st.tasks.get(task_id)
            if task is not None and not task.terminal and task_id not in st.stopping_tasks:
                by = askers.get(request.operation_id, "")
                await self._tasks.stop(StopTask(task_id, request.operation_id, request.cascade, by))
            if st.stopping():
                return
        if st.unsaved_starts():
            # A step that started since the last commit still runs: one commit says so (its
            # plan step running, and the history's entry for it), through the one funnel
            # (E2, fenced, a refusal stops the run: E3). Steps that start and end between
            # two heartbeats cost nothing more: their end's commit is the only one.
            await self._funnel.commit()

    # -- the end ---------------------------------------------------------------------------

    async def _mainspring_stop_children(self, reason: CancelReason) -> None:
        if self._st.board is not None:  # a repair line still being sent is not sent now
            for repair in list(self._st.board.repairs):
                repair.abandon(for_children(reason, self.ref.path))
        await self._children.stop_all(reason)

    async def on_stop(self, reason: CancelReason) -> None:
        st = self._st
        wound_down = False
        escaped, self._escaped = self._escaped, None
        try:
            if isinstance(reason, Crash):
                await self._crashed(reason, escaped)
            await self._wind_down(reason)
            if self._funnel.refusal is not None and st.board is not None:
                await self._funnel.keep_board(st.board)
            wound_down = True
        finally:
            result = st.result
            if result is None:
                result = result_from(st.rec, outputs=st.outputs, stopped_by=reason)
            spans = self._funnel.spans
            if spans is not None:  # O1: the run's span ends with what stopped it
                spans.end(reason, result.status, st.rec)
            # E2: a wind-down cut short (its last write still under way in the writer)
            # leaves where the run stands to the store, read once that write is done.
            self._watcher.ended(result, settled=wound_down)

    async def _crashed(self, reason: Crash, escaped: BaseException | None) -> None:
        """O2: the run's end by a crash of this actor, logged once (the kernel does not).
        A failed write: its cause was logged by the writer; this says the run stopped for
        it, left as last saved for a resume. Anything else: with its traceback, described
        off the loop."""
        st = self._st
        if isinstance(escaped, PersistenceFailed):
            _log.writes_failed(st.rec.id, st.rec.status, reason.error)
            return
        caught = await describe_off_loop(escaped) if escaped is not None else None
        log_failure(
            "the run's actor crashed; the run is left as last saved, for a resume",
            execution_id=st.rec.id,
            error=caught.message if caught is not None else reason.error,
            traceback=caught.traceback if caught is not None else None,
        )

    async def _wind_down(self, reason: CancelReason) -> None:
        st = self._st
        funnel = self._funnel
        if st.ended:
            if funnel.refusal is not None:
                await funnel.release()
                await funnel.after_refusal(reason, funnel.refused_record)
            return
        st.ended = True
        now = time.time()
        by = self._cfg.owner
        if isinstance(reason, LeaseLost):
            # E3: not ours to write any more; the disk says where the run stands.
            stored = await funnel.read_stored()
            record = stored if stored is not None else st.rec
            st.result = result_from(record, outputs=st.outputs, stopped_by=reason)
            return
        for running in st.running.values():
            st.charge_unsaved(running)  # calls made before the interruption (P4, E9)
        record = st.snapshot()
        for task_id, stop in st.stopping_tasks.items():
            # A stop under way is not undone by what ends the run (S1, R11).
            record, _ = stop_task(
                record, task_id, stop.operation_id, now, by=stop.by or by, cascade=stop.cascade
            )
        record = attrs.evolve(record, lease=st.released())  # L3: released in that write
        released = False
        if isinstance(reason, Pause | Timeout):
            # R1: tasks requeued with interruption pause, saved, lease released. B1: the
            # run's deadline stops it the same way (resumable), saying so on the controls.
            timeout = isinstance(reason, Timeout)
            detail = f"timeout: {reason.detail}" if timeout else reason.detail
            record = pause_execution(record, by, now, detail)
            requeued = sum(1 for r in st.running.values() if r.task_id is not None)
            if released := await funnel.commit(record):
                funnel.publish(
                    ev.ExecutionPaused(
                        execution_id=st.rec.id,
                        at=now,
                        requeued=requeued,
                        cause="timeout" if timeout else "pause",
                    ),
                    reason,
                )
        elif isinstance(reason, Cancel):
            cancelled = sum(1 for t in record.task_records if not t.terminal)
            record = cancel_execution(record, by, now, reason.detail)
            if released := await funnel.commit(record):
                funnel.publish(
                    ev.ExecutionCancelled(
                        execution_id=st.rec.id, at=now, cancelled_tasks=cancelled
                    ),
                    reason,
                )
        elif not isinstance(reason, Crash):
            # A shutdown: what was spent and stopped is saved; the tasks in flight stay as
            # they are, so the next resume requeues them as interrupted (R3).
            released = await funnel.commit(record)
            _log.stopped_for_later(st.rec.id, reason)
        if not released:
            await funnel.release()
        if isinstance(reason, Crash):
            # E5: why, as every error a result carries: a crash's text may quote a secret
            # (a store's error quoting what it was given).
            error = redact(reason.error) if reason.error is not None else None
            st.result = result_from(st.rec, outputs=st.outputs, stopped_by=reason, error=error)
