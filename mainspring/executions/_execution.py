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

import contextlib
import hashlib
import inspect
import time
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio.to_thread
import attrs

from ..actors import (
    Actor,
    ActorDeadError,
    ActorRef,
    Cancel,
    CancelReason,
    Crash,
    LeaseLost,
    ParentCancel,
    Pause,
    Stop,
    Terminated,
)
from ..storage import (
    MAX_COUNTER,
    STEP_FINISHED,
    AgentTaskRecord,
    BudgetInfo,
    Checkpoint,
    CommitOutcome,
    Execution,
    Failure,
    Finding,
    Observation,
    Pending,
    Plan,
    PlanStep,
    capture_checkpoint,
    reconcile,
)
from ..storage._codec import structure, unstructure
from ..storage._errors import RecordError, StorageError
from ..storage._persistence import Committer, PersistenceFailed
from ..storage._records import MAX_CHECKPOINTS, ObservationCode, StepStatus
from ..storage._redact import redact
from . import _run_events as ev
from ._agent import (
    AgentTaskActor,
    Meter,
    Planned,
    PlannerActor,
    PlannerContext,
    StepActor,
    StepDone,
    TaskSave,
)
from ._plan import InvalidPlan, check_plan, fence, findings_brief, observe, step_input_hash
from ._scheduler import Schedule, pick
from ._status import execution_move, task_move
from ._transitions import (
    cancel_execution,
    parse_stop_requests,
    pause_execution,
    stop_task,
    task_records,
)

__all__ = ["ExecutionActor", "ExecutionResult", "RunConfig", "StopResult"]


@attrs.frozen(kw_only=True)
class RunConfig:
    """Everything an ExecutionActor needs from its runtime (shared by all executions)."""

    committer: Committer
    owner: str
    tools: Mapping[str, Callable[..., Any]]
    skills: Mapping[str, Callable[..., Any]]
    agents: Mapping[str, Callable[..., Any]]
    planner: Callable[..., Any] | None
    workspace: Path | None
    max_parallel_steps: int
    limits: Mapping[str, int]
    max_calls: int
    reservation: Callable[[int], int]
    lease_ttl: float
    heartbeat_interval: float
    require_plan_approval: bool
    max_replans: int
    max_tool_calls: int
    config: Any
    publish: Callable[[object], None]
    skill_versions: Mapping[str, str]
    tool_hashes: Mapping[str, str]


class RunWatcher(Protocol):
    """Who hears about a run's end: told when it starts settling (its last writes are under
    way, so controls must wait for it) and when it has ended, with the result."""

    def settling(self) -> None: ...

    def ended(self, result: ExecutionResult) -> None: ...


@attrs.frozen(kw_only=True)
class ExecutionResult:
    """Where a run stands when :meth:`ExecutionHandle.wait` returns.

    ``status`` is the execution's status as last committed (``completed``, ``paused``,
    ``waiting_for_clarification``...). ``outputs`` and ``observations`` hold what steps
    returned, unredacted for steps that ran in this process (E5: only disk is slimmed);
    ``findings`` are the agents' findings. ``pending`` is the open question, if any.
    ``stopped_by`` is the reason the run stopped in this process (None if it did not run
    here); ``error`` says what went wrong when the runtime itself failed.
    """

    execution_id: str
    status: str
    summary: str
    outputs: Mapping[str, Any] = attrs.field(factory=dict)
    observations: tuple[Observation, ...] = ()
    findings: tuple[Finding, ...] = ()
    pending: Pending | None = None
    calls_used: int = 0
    steps_done: int = 0
    steps_total: int = 0
    stopped_by: CancelReason | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class StopResult:
    """The answer to ``stop_agent_task`` (S1): never a silent no-op.

    ``state`` is ``stopping`` (a live task is being cancelled), ``cancelled`` (a stored task
    was marked cancelled), the task's final state if it had already finished (then ``ok`` is
    False), or ``unknown``. ``operation_id`` names this request in events and the audit.
    """

    ok: bool
    state: str
    reason: str
    task_id: str
    execution_id: str | None = None
    operation_id: str = ""


@attrs.frozen
class Begin:
    """The first message: commit the record the runtime prepared, then plan or go on."""

    resumed: bool
    check_drift: bool = False
    replan_goal: bool = False
    in_flight: tuple[str, ...] = ()  # steps running when the run was interrupted


@attrs.frozen
class StopTask:
    task_id: str
    operation_id: str


@attrs.frozen
class _Heartbeat:
    pass


class _Unstorable(Exception):
    """The record as changed cannot be written (too large, or not a valid record)."""


@attrs.frozen
class _Drifted:
    reasons: tuple[str, ...]


def summarize(execution: Execution) -> tuple[str, int, int]:
    """A one-line summary of ids and counts (V1), steps done and steps total."""
    plan = execution.plan
    total = len(plan.steps) if plan is not None else 0
    counts: dict[str, int] = {}
    if plan is not None:
        for step in plan.steps:
            counts[step.status] = counts.get(step.status, 0) + 1
    done = sum(counts.get(state, 0) for state in STEP_FINISHED)
    parts = [
        f"{counts[s]} {s}" for s in ("succeeded", "failed", "skipped", "cancelled") if s in counts
    ]
    detail = ", ".join(parts) if parts else "no steps finished"
    return f"{execution.status}: {detail} of {total} steps", done, total


def result_from(
    execution: Execution,
    *,
    outputs: Mapping[str, Any] | None = None,
    stopped_by: CancelReason | None = None,
    error: str | None = None,
) -> ExecutionResult:
    """An :class:`ExecutionResult` built from a stored execution (and live outputs)."""
    summary, done, total = summarize(execution)
    findings: list[Finding] = []
    for raw in execution.agent_tasks:
        try:
            findings.extend(structure(raw, AgentTaskRecord).findings)
        except RecordError:
            continue
    stored = {obs.step_id: obs.output for obs in execution.observations if obs.ok}
    live = dict(outputs or {})
    merged = {**stored, **live}
    observations = tuple(
        attrs.evolve(obs, output=live[obs.step_id]) if obs.ok and obs.step_id in live else obs
        for obs in execution.observations
    )
    return ExecutionResult(
        execution_id=execution.id,
        status=execution.status,
        summary=summary,
        outputs=merged,
        observations=observations,
        findings=tuple(findings),
        pending=execution.pending,
        calls_used=execution.calls_used,
        steps_done=done,
        steps_total=total,
        stopped_by=stopped_by,
        error=error,
    )


@attrs.define
class _Running:
    step: PlanStep
    ref: ActorRef
    cost: int  # calls held for this step while it runs (P4)
    task_id: str | None = None
    meter: Meter | None = None  # the agent's calls as it makes them, saved or not


def tool_hash(fn: Callable[..., Any]) -> str:
    """A declaration hash for a tool: its qualified name and signature (R6)."""
    try:
        signature = str(inspect.signature(fn))
    except (TypeError, ValueError):
        signature = "(?)"
    # Not the module: a script's tools live in __main__ when it runs them and under the
    # script's name when `mainspring resume --app` imports them; they are the same tools.
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    return hashlib.sha256(f"{name}{signature}".encode()).hexdigest()


class ExecutionActor(Actor):
    """Runs one execution; see the module docstring. Created by the Runtime, not by users."""

    _mainspring_orders_children = True  # we cancel our children ourselves, with our reason

    def __init__(
        self,
        cfg: RunConfig,
        record: Execution,
        watcher: RunWatcher,
        live_plan: Plan | None = None,
    ) -> None:
        self._cfg = cfg
        self._live_plan = live_plan  # the plan with inputs unredacted, when we have it
        self._claimed: set[str] = set()
        self._watcher = watcher
        self._rec = record
        self._budget = record.max_calls if record.max_calls is not None else cfg.max_calls
        self._running: dict[str, _Running] = {}
        self._by_ref: dict[ActorRef, str] = {}
        self._outputs: dict[str, Any] = {}
        self._stopping_tasks: dict[str, str] = {}  # task id -> operation id
        self._keep_done = False
        self._in_flight: set[str] = set()  # started before an interruption: not "new" (P5)
        self._ended = False  # the final state is committed (or refused): nothing more to write
        self._refusal: CommitOutcome | None = None
        self._load(record)

    # -- state <-> record ------------------------------------------------------------------

    def _load(self, record: Execution) -> None:
        self._rec = record
        self._plan = record.plan
        self._sched = Schedule(
            self._live_plan or record.plan,
            {step.id: step.status for step in record.plan.steps} if record.plan else {},
        )
        self._obs: dict[str, Observation] = {obs.step_id: obs for obs in record.observations}
        self._tasks: dict[str, AgentTaskRecord] = {}
        self._raw: dict[str, dict[str, Any]] = {}
        self._unparsed: list[dict[str, Any]] = []  # kept as they are, never dropped (E7)
        for raw in record.agent_tasks:
            try:
                task = structure(raw, AgentTaskRecord)
            except RecordError:
                self._unparsed.append(raw)
                continue
            self._tasks[task.id] = task
            self._raw[task.id] = raw
        self._charged = {task.id: task.calls_used for task in self._tasks.values()}
        self._claim_finished()

    def _claim_finished(self) -> None:
        """A task whose step already succeeded in this plan is taken (R8: at most once)."""
        for step_id, state in self._sched.status.items():
            observation = self._obs.get(step_id)
            if state == "succeeded" and observation is not None and observation.agent_task_id:
                self._claimed.add(observation.agent_task_id)

    def _set_task(self, task: AgentTaskRecord) -> None:
        old = self._tasks.get(task.id)
        if old is not None:
            task_move(task.id, old.state, task.state)  # R11: terminal is sticky
        self._tasks[task.id] = task
        self._raw[task.id] = unstructure(task)

    def _snapshot(self, **changes: Any) -> Execution:
        plan = self._plan
        sched = self._sched
        if plan is not None and sched.dirty:
            # Only the steps whose status changed since the last snapshot are rebuilt.
            steps = list(plan.steps)
            for step_id in sched.dirty:
                index = sched.order[step_id]
                if steps[index].status != sched.status[step_id]:
                    steps[index] = attrs.evolve(steps[index], status=sched.status[step_id])
            sched.dirty.clear()
            plan = self._plan = attrs.evolve(plan, steps=tuple(steps))
        completed = (
            tuple(step.id for step in plan.steps if self._sched.status[step.id] == "succeeded")
            if plan
            else ()
        )
        return attrs.evolve(
            self._rec,
            plan=plan,
            plan_version=plan.version if plan is not None else self._rec.plan_version,
            completed_steps=completed,
            observations=tuple(self._obs.values()),
            agent_tasks=(*self._raw.values(), *self._unparsed),
            updated_at=time.time(),
            **changes,
        )

    async def _checkpointed(self, record: Execution) -> Execution:
        """Add a checkpoint when the completed set changed (E6: at most 5 kept); the first
        commit of a plan always has one (E1)."""
        last = record.checkpoints[-1] if record.checkpoints else None
        if (
            last is not None
            and last.completed_steps == record.completed_steps
            and last.plan_version == record.plan_version
        ):
            return record
        checkpoint = await self._capture(record.plan, record.completed_steps)
        return attrs.evolve(
            record, checkpoints=(*record.checkpoints, checkpoint)[-MAX_CHECKPOINTS:]
        )

    async def _capture(self, plan: Plan | None, completed: tuple[str, ...]) -> Checkpoint:
        cfg = self._cfg
        tools = self._plan_tool_hashes(plan)
        if cfg.workspace is None:
            return Checkpoint(
                at=time.time(),
                plan_version=plan.version if plan is not None else 0,
                config_hash=_config_hash(cfg.config),
                skill_versions=dict(cfg.skill_versions),
                completed_steps=completed,
                tool_hashes=tools,
            )
        return await anyio.to_thread.run_sync(
            lambda: capture_checkpoint(
                cfg.workspace,  # type: ignore[arg-type]
                plan,
                cfg.skill_versions,
                completed,
                tools,
                config=cfg.config,
            )
        )

    def _plan_tool_hashes(self, plan: Plan | None) -> dict[str, str]:
        if plan is None:
            return {}
        used = {step.tool for step in plan.steps if step.tool is not None}
        known = self._cfg.tool_hashes
        # A tool the runtime no longer has is left out, which reconcile reports as vanished.
        return {name: known[name] for name in sorted(used) if name in known}

    async def _commit(self, **changes: Any) -> bool:
        """Commit the current state (E2). A refusal stops the run at once (E3)."""
        if self._ended:
            return False
        if "status" in changes:  # E2: the lifecycle is checked in the one commit path
            execution_move(self._rec.id, self._rec.status, changes["status"])
        record = await self._checkpointed(self._snapshot(**changes))
        try:
            outcome = await self._cfg.committer.commit(record, self._cfg.owner)
        except PersistenceFailed:
            raise  # the disk failed: nothing more can be saved; the run crashes, resumable
        except (StorageError, ValueError) as exc:  # this record cannot be written (X2)
            raise _Unstorable(str(exc)) from exc
        if outcome is CommitOutcome.OK:
            self._rec = record
            return True
        self._refused(outcome)
        return False

    def _refused(self, outcome: CommitOutcome) -> None:
        self._refusal = outcome
        self._ended = True
        if outcome is CommitOutcome.PAUSED:
            reason: CancelReason = Pause(
                detail="paused on disk by someone else", source=self.ref.path
            )
        else:
            reason = LeaseLost(
                self._cfg.owner, detail=f"commit refused: {outcome.value}", source=self.ref.path
            )
        # E3: no further call by this owner. Children are interrupted now, not after the
        # current message, and nothing of ours is written again.
        for running in self._running.values():
            running.ref.cancel(_for_children(reason, self.ref.path))
        self._cell.request_stop(reason)

    def _publish(self, event: object) -> None:
        self._cfg.publish(event)

    # -- lifecycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        self.send_every(self._cfg.heartbeat_interval, _Heartbeat())

    async def receive(self, message: Any) -> Any:
        if type(message) is StepDone:
            return await self._step_done(message)
        if type(message) is TaskSave:
            return await self._task_saved(message)
        if type(message) is _Heartbeat:
            return await self._heartbeat()
        if type(message) is Terminated:
            return await self._child_ended(message)
        if type(message) is Planned:
            return await self._planned(message)
        if type(message) is Begin:
            return await self._begin(message)
        if type(message) is _Drifted:
            return await self._replan(drift=message.reasons)
        if type(message) is StopTask:
            return await self._stop_task(message)
        raise TypeError(f"an ExecutionActor does not take {type(message).__name__}")

    async def _begin(self, begin: Begin) -> None:
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
            checkpoint = attrs.evolve(checkpoint, file_hashes=None, git_head=None)
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
        ref = await self.spawn(PlannerActor, self.ref, cfg.planner, context)
        self.watch(ref)
        self._by_ref[ref] = ""
        ref.tell_nowait("plan")

    async def _pause_for(self, why: str) -> None:
        """Stop here, paused (not failed: nothing is lost), saying why; resuming decides."""
        self._watcher.settling()
        now = time.time()
        record = pause_execution(self._snapshot(), self._cfg.owner, now, why)
        if not await self._commit_record(record):
            self._cell.request_stop(LeaseLost(self._cfg.owner, detail="the pause was refused"))
            return
        self._ended = True
        await self._release()
        self._publish(ev.ExecutionPaused(execution_id=self._rec.id, at=now, requeued=0))
        self._end(Pause(detail=redact(why), source=self.ref.path), error=redact(why))

    async def _planned(self, planned: Planned) -> bool:
        if planned.question is not None:
            # An outer question: its answer is appended to the goal on resume (R10).
            pending = Pending(kind="clarification", question=redact(planned.question))
            await self._wait("waiting_for_clarification", pending)
            return True
        if planned.plan is None:
            await self._finish("failed", error=f"the planner failed: {planned.error}")
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

    def _adopt(self, plan: Plan) -> None:
        """Take ``plan`` as the plan to run. What reaches disk is redacted (E5); the live
        plan keeps its inputs so tools get what the planner meant."""
        previous = self._live_plan or self._plan
        kept: dict[str, Observation] = {}
        if getattr(self, "_keep_done", False) and previous is not None:
            done = {
                (step.id, step.kind, step.target, step_input_hash(step))
                for step in previous.steps
                if self._sched.status.get(step.id) == "succeeded"
            }
            kept = {
                step.id: self._obs[step.id]
                for step in plan.steps
                if (step.id, step.kind, step.target, step_input_hash(step)) in done
                and step.id in self._obs
            }
        self._live_plan = plan
        self._plan = redact_plan(plan)
        self._sched = Schedule(
            plan, {step.id: "succeeded" if step.id in kept else "pending" for step in plan.steps}
        )
        self._claimed.clear()
        self._claim_finished()

    # -- scheduling (P2-P5) ----------------------------------------------------------------

    def _held(self) -> int:
        return sum(running.cost for running in self._running.values())

    def _remaining(self) -> int:
        return max(0, self._budget - self._rec.calls_used - self._held())

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
        """Start every step that may start now; when nothing runs, settle the run."""
        while True:
            if self._ended or self._plan is None:
                return
            changed = self._cascade()
            starts, needs_approval, needs_budget = self._pick()
            finished_at_once = False
            for step, cost in starts:
                started = await self._start(step, cost)
                if started is None:
                    return  # refused: the run is stopping
                finished_at_once = finished_at_once or not started
            if finished_at_once:
                continue  # a reused task completed its step: its dependents may start now
            if self._running:
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
        picked = pick(
            self._sched,
            plan=self._plan,
            running_targets=[running.step.target for running in self._running.values()],
            max_parallel=self._cfg.max_parallel_steps,
            limits=self._cfg.limits,
            remaining=self._remaining(),
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
            needs_approval = Pending(kind="approval", question=f"approve {what}")
        needs_budget: BudgetInfo | None = None
        if picked.short_of_budget:
            needs_budget = BudgetInfo(
                calls_used=self._rec.calls_used,
                max_calls=min(self._budget, MAX_COUNTER),
                needed=1,
            )
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
        if step.kind != "agent":
            fn = cfg.tools[step.target] if step.kind == "tool" else cfg.skills[step.target]
            ref = await self._spawn_step(step, StepActor, self.ref, step, fn)
            if ref is None:
                return None
            self._running[step.id] = _Running(step, ref, cost)
            self._by_ref[ref] = step.id
            self.watch(ref)
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
            )
            self._publish_step(step.id, "succeeded")
            return False if await self._commit() else None
        if task is None:
            task = self._new_task(step, now)
        elif (
            cfg.workspace is not None
            and task.inner_checkpoint is not None
            and await self._inner_drifted(task, step)
        ):
            # R8: the task's own checkpoint drifted, so its inner work starts over.
            # Answers it was given stay: they are the human's, not derived from the workspace.
            answers = tuple(o for o in task.inner_observations if o.step_id.startswith("ask."))
            task = attrs.evolve(
                task,
                inner_completed=tuple(o.step_id for o in answers),
                inner_observations=answers,
                inner_steps_done=0,
                attempt=min(task.attempt + 1, 1_000_000),
            )
        task = attrs.evolve(
            task,
            state="running",
            started_at=task.started_at or now,
            updated_at=now,
            plan_version=self._plan.version if self._plan else 1,
            calls_reserved=min(task.calls_used + cost, 1_000_000),
        )
        if task.inner_checkpoint is None:
            task = attrs.evolve(task, inner_checkpoint=await self._task_checkpoint(step))
        self._set_task(task)
        # The task is on disk before its agent runs: a crash now is reconciled from it (R3),
        # and operators can see and stop it (S1).
        if not await self._commit():
            return None
        agent = cfg.agents[step.target]
        meter = Meter(task.calls_used)
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
        )
        if ref is None:
            return None
        self._running[step.id] = _Running(step, ref, cost, task.id, meter)
        self._by_ref[ref] = step.id
        self.watch(ref)
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

    def _claim(self, step: PlanStep) -> AgentTaskRecord | None:
        """R8: a stored task matches a step by (agent id, input hash), never by step id; each
        record is claimed at most once per resume. Completed ones first, then unfinished."""
        digest = step_input_hash(step)
        candidates = [
            task
            for task in self._tasks.values()
            if task.agent_id == step.agent
            and task.input_hash == digest
            and task.id not in self._claimed
            and task.state not in ("failed", "cancelled", "waiting_for_clarification")
        ]
        if not candidates:
            return None
        candidates.sort(key=lambda t: (t.state != "completed", t.created_at))
        task = candidates[0]
        self._claimed.add(task.id)
        if task.step_id != step.id:
            task = attrs.evolve(task, step_id=step.id)
        return task

    def _new_task(self, step: PlanStep, now: float) -> AgentTaskRecord:
        number = len(self._tasks) + len(self._unparsed) + 1
        task = AgentTaskRecord(
            id=f"{self._rec.id}:t{number}",
            agent_id=step.target,
            step_id=step.id,
            state="created",
            created_at=now,
            updated_at=now,
            execution_id=self._rec.id,
            plan_version=self._plan.version if self._plan else 1,
            input_hash=step_input_hash(step),
        )
        self._claimed.add(task.id)
        self._charged[task.id] = 0
        return task

    async def _task_checkpoint(self, step: PlanStep) -> Checkpoint | None:
        if self._cfg.workspace is None:
            return None
        plan = Plan(id="task", goal="", steps=(step,))
        return await self._capture(plan, ())

    async def _inner_drifted(self, task: AgentTaskRecord, step: PlanStep) -> bool:
        assert task.inner_checkpoint is not None
        assert self._cfg.workspace is not None
        plan = Plan(id="task", goal="", steps=(step,))
        checkpoint = attrs.evolve(task.inner_checkpoint, tool_hashes=None, skill_versions=None)
        root = self._cfg.workspace
        found = await anyio.to_thread.run_sync(lambda: reconcile(checkpoint, root, plan))
        return found.drifted

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
                if await self._commit(replans=min(replans + 1, 1_000_000)):
                    await self._replan(failure=redact(evidence))
                return
            await self._finish("failed" if failed else "completed")
            return
        if self._rec.pending is not None and self._rec.pending.kind == "clarification":
            await self._wait("waiting_for_clarification", self._rec.pending)
        elif approval is not None:
            await self._wait("waiting_for_approval", approval)
        elif budget is not None:
            await self._wait("waiting_for_budget", Pending(kind="budget", budget=budget))
        else:  # pragma: no cover - every pending step is blocked by one of the above
            await self._finish("failed", error="no step can start and none is running")

    async def _wait(self, status: str, pending: Pending) -> None:
        self._watcher.settling()
        if not await self._commit(status=status, pending=pending):
            return
        self._ended = True
        await self._release()
        self._publish(
            ev.ExecutionWaiting(
                execution_id=self._rec.id,
                at=time.time(),
                status=status,
                task_id=pending.agent_task_id,
            )
        )
        self._end(Stop(detail=f"the execution is {status}", source=self.ref.path))

    async def _finish(
        self, status: Literal["completed", "failed"], *, error: str | None = None
    ) -> None:
        """The final write, through the same funnel as every other (E4)."""
        self._watcher.settling()
        if error is not None:
            self._obs["plan"] = Observation(step_id="plan", ok=False, error=redact(error))
        if not await self._commit(status=status, pending=None):
            return
        self._ended = True
        await self._release()
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

    def _end(self, reason: CancelReason, error: str | None = None) -> None:
        self._result = result_from(self._rec, outputs=self._outputs, stopped_by=reason, error=error)
        self._cell.request_stop(reason)

    async def _release(self) -> None:
        # A failed release is harmless: the lease lapses by itself after its ttl.
        with contextlib.suppress(Exception):
            await self._cfg.committer.release(self._rec.id, self._cfg.owner)

    # -- events from children --------------------------------------------------------------

    def _publish_step(self, step_id: str, state: str) -> None:
        done = self._sched.finished
        self._publish(
            ev.StepFinished(
                execution_id=self._rec.id,
                at=time.time(),
                step_id=step_id,
                state=state,
                done=done,
                total=len(self._sched.status),
                calls_used=self._rec.calls_used,
            )
        )

    async def _step_done(self, done: StepDone) -> bool:
        running = self._running.get(done.step_id)
        if running is None or running.task_id is not None or self._ended:
            return False
        del self._running[done.step_id]
        step = running.step
        state: StepStatus = "succeeded" if done.ok else "failed"
        self._sched.set(step.id, state)
        self._obs[step.id] = observe(
            step,
            ok=done.ok,
            output=redact(done.output) if done.ok else None,
            error=redact(done.error) if done.error else None,
            calls_used=1 if step.kind == "skill" else 0,
        )
        if done.ok:
            self._outputs[step.id] = done.output
        changes: dict[str, Any] = {}
        if step.kind == "skill":  # a model call was made, whatever its outcome (P4)
            changes["calls_used"] = min(self._rec.calls_used + 1, 1_000_000)
        # E1: the completion is durable before any dependent starts.
        try:
            committed = await self._commit(**changes)
        except _Unstorable as exc:
            committed = await self._unstorable(step, None, str(exc), changes)
            state = "failed"
        if not committed:
            return False
        self._publish_step(step.id, state)
        await self._advance()
        return True

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
        calls = min(self._rec.calls_used + max(delta, 0), 1_000_000)
        self._set_task(task)
        step = running.step
        ended = task.state in ("completed", "failed", "waiting_for_clarification")
        changes: dict[str, Any] = {"calls_used": calls}
        if task.state == "completed":
            # R12: the step joins the completed set in the same commit as the task.
            self._sched.set(step.id, "succeeded")
            self._outputs[step.id] = save.output
            self._obs[step.id] = observe(
                step,
                agent_task_id=task.id,
                ok=True,
                output=redact(save.output),
                finding_ids=tuple(f.id for f in task.findings),
                calls_used=task.calls_used,
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
            )
        elif task.state == "waiting_for_clarification":
            # P5: the step stays pending (not failed); the first waiting task holds the slot.
            self._sched.set(step.id, "pending")
            if self._rec.pending is None:
                changes["pending"] = Pending(
                    kind="clarification",
                    question=task.pending_question or "",
                    agent_task_id=task.id,
                )
        if ended:
            del self._running[step.id]
        try:
            committed = await self._commit(**changes)
        except _Unstorable as exc:
            spent = attrs.evolve(previous, calls_used=task.calls_used)
            if await self._unstorable(step, spent, str(exc), changes):
                self._publish_step(step.id, "failed")
                await self._advance()
            return False  # the agent unwinds: its result cannot be kept
        if not committed:
            return False
        now = time.time()
        if task.state == "waiting_for_clarification":
            self._publish(ev.AgentTaskWaiting(execution_id=self._rec.id, at=now, task_id=task.id))
        elif ended:
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
        else:
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
        if self._sched.status[step.id] == "succeeded":
            self._sched.set(step.id, "failed")  # succeeded -> failed: not storable
        else:
            self._sched.set(step.id, "failed")
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
        if step_id == "":  # the planner ended; it reported unless it crashed
            if self._plan is None and isinstance(notice.reason, Crash):
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
        )
        if running.task_id is not None:
            task = self._tasks[running.task_id]
            self._set_task(attrs.evolve(task, state="failed", ended_at=now, updated_at=now))
        if await self._commit():
            self._publish_step(step_id, "failed")
            await self._advance()

    # -- stopping one agent task (S1, S2) --------------------------------------------------

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
                self._stopping_tasks[task.id] = request.operation_id
                running.ref.cancel(
                    Cancel(
                        detail=f"agent task stopped ({request.operation_id})", source=self.ref.path
                    )
                )
            return StopResult(ok=True, state="stopping", reason="cancelling the live task", **base)
        if task.terminal:
            return StopResult(
                ok=False, state=task.state, reason=f"the task already {task.state}", **base
            )
        # Unfinished but not running here (queued or waiting): mark it on the record.
        record, stopped = stop_task(self._snapshot(), task.id, request.operation_id, time.time())
        if stopped is None:  # pragma: no cover - checked above
            return StopResult(ok=False, state=task.state, reason="not stoppable", **base)
        self._load_keep_live(record)
        if not await self._commit():
            return StopResult(
                ok=False, state=task.state, reason="the execution is stopping", **base
            )
        self._publish(
            ev.AgentTaskStopped(
                execution_id=self._rec.id,
                at=time.time(),
                task_id=task.id,
                operation_id=request.operation_id,
                state="cancelled",
            )
        )
        await self._advance()
        return StopResult(ok=True, state="cancelled", reason="marked cancelled", **base)

    def _load_keep_live(self, record: Execution) -> None:
        self._load(record)  # the live plan (same steps, inputs unredacted) stays

    async def _task_stopped(self, running: _Running, now: float) -> None:
        """A live task we cancelled has unwound: record it cancelled; the run goes on."""
        assert running.task_id is not None
        operation = self._stopping_tasks.pop(running.task_id)
        record, _ = stop_task(self._snapshot(), running.task_id, operation, now)
        self._load_keep_live(record)
        if not await self._commit():
            return
        self._publish(
            ev.AgentTaskStopped(
                execution_id=self._rec.id,
                at=now,
                task_id=running.task_id,
                operation_id=operation,
                state="cancelled",
            )
        )
        self._publish_step(running.step.id, self._sched.status[running.step.id])
        await self._advance()

    # -- heartbeats and cross-process controls ---------------------------------------------

    async def _heartbeat(self) -> None:
        if self._ended:
            return
        cfg = self._cfg
        try:
            outcome, stored = await cfg.committer.renew(self._rec.id, cfg.owner, cfg.lease_ttl)
        except Exception:  # the disk failed: we can no longer prove we hold the lease (E3)
            outcome, stored = CommitOutcome.RELEASED, None
        if outcome is not CommitOutcome.OK:
            self._refused(outcome)
            return
        assert stored is not None
        for operation, task_id in parse_stop_requests(stored.stop_requests):
            task = self._tasks.get(task_id)
            if task is not None and not task.terminal and task_id not in self._stopping_tasks:
                await self._stop_task(StopTask(task_id, operation))
            if self._stopped():
                return

    def _stopped(self) -> bool:
        return self._ended

    # -- the end ---------------------------------------------------------------------------

    async def _mainspring_stop_children(self, reason: CancelReason) -> None:
        refs = [running.ref for running in self._running.values()]
        refs += [ref for ref, step_id in self._by_ref.items() if step_id == ""]
        for ref in refs:
            ref.cancel(_for_children(reason, self.ref.path))
        for ref in refs:
            await ref.wait_stopped()

    async def on_stop(self, reason: CancelReason) -> None:
        try:
            await self._wind_down(reason)
        finally:
            result = getattr(self, "_result", None)
            if result is None:
                result = result_from(self._rec, outputs=self._outputs, stopped_by=reason)
            self._watcher.ended(result)

    async def _wind_down(self, reason: CancelReason) -> None:
        if self._ended:
            if self._refusal is not None:
                await self._release()
                await self._result_from_disk(reason)
            return
        self._ended = True
        now = time.time()
        by = self._cfg.owner
        if isinstance(reason, LeaseLost):
            await self._result_from_disk(reason)  # E3: not ours to write any more
            return
        for running in self._running.values():
            self._charge_unsaved(running)  # calls made before the interruption (P4, E9)
        record = self._snapshot()
        for task_id, operation in self._stopping_tasks.items():
            # A stop under way is not undone by what ends the run (S1, R11).
            record, _ = stop_task(record, task_id, operation, now)
        if isinstance(reason, Pause):
            # R1: tasks requeued with interruption pause, saved, lease released.
            record = pause_execution(record, by, now, reason.detail)
            requeued = sum(1 for r in self._running.values() if r.task_id is not None)
            if await self._commit_record(record):
                self._publish(
                    ev.ExecutionPaused(execution_id=self._rec.id, at=now, requeued=requeued)
                )
        elif isinstance(reason, Cancel):
            cancelled = sum(1 for t in task_records(record) if not t.terminal)
            record = cancel_execution(record, by, now, reason.detail)
            if await self._commit_record(record):
                self._publish(
                    ev.ExecutionCancelled(
                        execution_id=self._rec.id, at=now, cancelled_tasks=cancelled
                    )
                )
        elif not isinstance(reason, Crash):
            # A shutdown: what was spent and stopped is saved; the tasks in flight stay as
            # they are, so the next resume requeues them as interrupted (R3).
            await self._commit_record(record)
        await self._release()
        if isinstance(reason, Crash):
            self._result = result_from(
                self._rec, outputs=self._outputs, stopped_by=reason, error=reason.error
            )

    def _charge_unsaved(self, running: _Running) -> None:
        """Charge the calls an agent made that no save has recorded yet (P4, E9)."""
        if running.meter is None or running.task_id is None:
            return
        task = self._tasks.get(running.task_id)
        used = running.meter.calls_used
        if task is None or used <= task.calls_used:
            return
        delta = used - self._charged.get(task.id, 0)
        self._charged[task.id] = used
        self._set_task(attrs.evolve(task, calls_used=min(used, 1_000_000)))
        calls = min(self._rec.calls_used + max(delta, 0), 1_000_000)
        self._rec = attrs.evolve(self._rec, calls_used=calls)

    async def _result_from_disk(self, reason: CancelReason) -> None:
        """After a refusal the disk, not our copy, says where the run stands."""
        store = self._cfg.committer.store
        try:
            stored = await anyio.to_thread.run_sync(store.get, self._rec.id)
        except Exception:  # unreadable now: our last copy is the best we can report
            stored = None
        record = stored if stored is not None else self._rec
        self._result = result_from(record, outputs=self._outputs, stopped_by=reason)

    async def _commit_record(self, record: Execution) -> bool:
        execution_move(record.id, self._rec.status, record.status)
        try:
            outcome = await self._cfg.committer.commit(record, self._cfg.owner)
        except Exception as exc:  # not saved: the result says so; the lease lapses on its own
            self._result = result_from(self._rec, outputs=self._outputs, error=str(exc))
            return False
        if outcome is CommitOutcome.OK:
            self._rec = record
            return True
        self._refusal = outcome
        return False


_CODES = frozenset(typing.get_args(ObservationCode))


def _for_children(reason: CancelReason, source: str) -> CancelReason:
    """What a step in flight sees: a pause or a lost lease as itself (R1, E3), anything else
    as a ParentCancel leading to it (R2)."""
    if isinstance(reason, Pause | LeaseLost):
        return reason
    return ParentCancel(reason, source=source)


def _config_hash(config: Any) -> str | None:
    if config is None:
        return None
    from ..storage._codec import sha256_hex

    return sha256_hex(config)


def redact_plan(plan: Plan) -> Plan:
    """The plan as it may reach disk: free text and inputs redacted, ids untouched (E5)."""
    return attrs.evolve(
        plan,
        goal=redact(plan.goal),
        reason=redact(plan.reason),
        steps=tuple(
            attrs.evolve(step, description=redact(step.description), input=redact(step.input))
            for step in plan.steps
        ),
    )
