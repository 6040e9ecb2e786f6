"""The core of an ExecutionActor: state, record mapping, the commit path, heartbeats."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any, Literal

import anyio.to_thread
import attrs

from ..actors import (
    Actor,
    ActorRef,
    Cancel,
    CancelReason,
    Crash,
    LeaseLost,
    Pause,
    Timeout,
)
from ..storage import (
    MAX_CHECKPOINTS,
    AgentTaskRecord,
    AnswerRequest,
    Checkpoint,
    CommitOutcome,
    Execution,
    Lease,
    Observation,
    Pending,
    PersistenceFailed,
    Plan,
    StepStatus,
    StorageError,
    Usage,
    capture_checkpoint,
    holder,
    parse_agent_task,
    parse_agent_tasks,
)
from ._rules.plan import step_input_hash
from ._rules.scheduler import SATISFIED, Schedule
from ._rules.status import execution_move, task_move
from ._rules.task_raw import task_raw
from ._rules.transitions import (
    answered,
    cancel_execution,
    clamp_count,
    parse_stop_requests,
    pause_execution,
    stop_askers,
    stop_task,
)
from ._run import events as ev
from ._run.lease_guard import LeaseWatch
from ._run.messages import (
    RunConfig,
    Running,
    RunWatcher,
    StopTask,
    Unstorable,
    for_children,
    keep_live_plan,
)
from ._run.refusals import add_calls, end_event, refusal_reason
from ._run.results import (
    ExecutionResult,
    StopResult,
    config_hash,
    masked_inputs,
    redact_plan,
    result_from,
)

#: L5: how many renewals in a row may be answered too late before the run stops with
#: LeaseLost (each one granted proves the lease was still ours when the store answered).
LATE_RENEWALS = 3

#: Refusals that mean our lease lapsed or another holds it (not an operator's control).
_LAPSED = (CommitOutcome.RELEASED, CommitOutcome.FOREIGN_LEASE)


class ExecutionCore(Actor):
    """One execution's state and its one commit path (E2): the record kept in memory and
    how it maps to what is stored, checkpoints (E1, E6), commits and refusals (E3),
    heartbeats (L2) and the wind-down when the actor stops. The scheduling loop and the
    events from children are the subclasses' (TaskEvents, ExecutionActor)."""

    _mainspring_orders_children = True  # we cancel our children ourselves, with our reason

    # The record as loaded, set by _load (from __init__, and again on every reload).
    _plan: Plan | None
    _sched: Schedule
    _obs: dict[str, Observation]
    _tasks: dict[str, AgentTaskRecord]
    _raw: dict[str, dict[str, Any]]  # each parsed task as it is written back
    _raw_of: dict[str, AgentTaskRecord]  # the task each of our raw records was made from
    _unparsed: list[dict[str, Any]]
    _charged: dict[str, int]  # calls charged to the execution, per task (P4, E9)
    _charged_usage: dict[str, Usage]  # tokens and cost likewise (B3)

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
        self._token_limit = record.max_tokens if record.max_tokens is not None else cfg.max_tokens
        self._cost_limit = record.max_cost if record.max_cost is not None else cfg.max_cost
        self._running: dict[str, Running] = {}
        self._by_ref: dict[ActorRef, str] = {}
        self._outputs: dict[str, Any] = {}
        self._stopping_tasks: dict[str, StopTask] = {}  # by task id
        self._keep_done = False
        self._planning = False  # a planner child works: the plan in hand is not run (R6)
        self._in_flight: set[str] = set()  # started before an interruption: not "new" (P5)
        self._ended = False  # the final state is committed (or refused): nothing more to write
        self._refusal: CommitOutcome | None = None
        self._refused_record: Execution | None = None  # the record that refused us
        self._result: ExecutionResult | None = None  # what the run ended with, once it has
        # The last checkpoint's completed steps and ours, once found to be the same set (E6).
        self._same_set: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        # L5: how old our last confirmed renewal is, on this host's clock.
        self._lease_watch = LeaseWatch(cfg.lease_ttl, cfg.lease_clock)
        self._load(record)

    def _load(self, record: Execution) -> None:
        self._rec = record
        self._durable_calls = record.calls_used  # as the store has it
        self._durable_usage = record.usage
        self._plan = record.plan
        self._sched = Schedule(
            self._live_plan or record.plan,
            {step.id: step.status for step in record.plan.steps} if record.plan else {},
            record.completed_steps,  # in the order they completed
        )
        self._obs = {obs.step_id: obs for obs in record.observations}
        self._tasks = {}
        self._raw = {}
        self._raw_of = {}  # none yet: a raw record read from disk is not reused as a base
        self._unparsed = []  # kept as they are, never dropped (E7)
        for raw in record.agent_tasks:
            task = parse_agent_task(raw)
            if task is None:
                self._unparsed.append(raw)
                continue
            self._tasks[task.id] = task
            self._raw[task.id] = raw
        self._charged = {task.id: task.calls_used for task in self._tasks.values()}
        self._charged_usage = {task.id: task.usage for task in self._tasks.values()}
        self._claim_finished()

    def _claim_finished(self) -> None:
        """A task whose step already succeeded in this plan is taken (R8: at most once)."""
        for step_id, state in self._sched.status.items():
            observation = self._obs.get(step_id)
            if state == "succeeded" and observation is not None and observation.agent_task_id:
                self._claimed.add(observation.agent_task_id)

    def _set_task(self, task: AgentTaskRecord, appended_to: AgentTaskRecord | None = None) -> None:
        """Keep ``task``; ``appended_to`` is the record its agent made it from by appending
        one inner step (TaskSave)."""
        old = self._tasks.get(task.id)
        if old is not None:
            task_move(task.id, old.state, task.state)  # R11: terminal is sticky
        self._tasks[task.id] = task
        # Only what changed since the last save is unstructured again: an agent's n-th
        # inner step costs what it added, not the n before it.
        base = self._raw_of.get(task.id)
        grown = base is not None and appended_to is base
        self._raw[task.id] = task_raw(task, base, self._raw.get(task.id), appended=grown)
        self._raw_of[task.id] = task

    def _current_plan(self) -> Plan | None:
        """The plan with the statuses the scheduler holds: only the steps whose status
        changed since the last snapshot are rebuilt."""
        plan = self._plan
        sched = self._sched
        if plan is not None and sched.dirty:
            steps = list(plan.steps)
            for step_id in sched.dirty:
                index = sched.order[step_id]
                if steps[index].status != sched.status[step_id]:
                    steps[index] = attrs.evolve(steps[index], status=sched.status[step_id])
            sched.dirty.clear()
            plan = self._plan = attrs.evolve(plan, steps=tuple(steps))
        return plan

    def _snapshot(self, **changes: Any) -> Execution:
        plan = self._current_plan()
        return attrs.evolve(
            self._rec,
            plan=plan,
            plan_version=plan.version if plan is not None else self._rec.plan_version,
            # Kept as steps complete, in the order they did: never rebuilt from the plan.
            completed_steps=self._sched.completed_steps() if plan is not None else (),
            observations=tuple(self._obs.values()),
            agent_tasks=(*self._raw.values(), *self._unparsed),
            updated_at=time.time(),
            **changes,
        )

    async def _checkpoints(self) -> tuple[Checkpoint, ...] | None:
        """The checkpoints with a new one when the completed set changed (E6: at most 5
        kept), or None when it did not; the first commit of a plan always has one (E1)."""
        plan = self._current_plan()
        completed = self._sched.completed_steps() if plan is not None else ()
        version = plan.version if plan is not None else self._rec.plan_version
        kept = self._rec.checkpoints
        last = kept[-1] if kept else None
        if last is not None and last.plan_version == version:
            before = last.completed_steps
            same = self._same_set
            if before is completed or (same[0] is before and same[1] is completed):
                return None
            # Compared once: after a load the two tuples are equal but not the same object.
            if len(before) == len(completed) and set(before) == set(completed):
                self._same_set = (before, completed)
                return None
        checkpoint = await self._capture(plan, completed)
        return (*kept, checkpoint)[-MAX_CHECKPOINTS:]

    async def _capture(self, plan: Plan | None, completed: tuple[str, ...]) -> Checkpoint:
        cfg = self._cfg
        tools = self._plan_tool_hashes(plan)
        if cfg.workspace is None:
            digest = config_hash(cfg.config)
            return Checkpoint(
                at=time.time(),
                plan_version=plan.version if plan is not None else 0,
                config_hash=digest,
                skill_versions=dict(cfg.skill_versions),
                completed_steps=completed,
                tool_hashes=tools,
                absent=("config",) if digest is None else (),  # its appearing is drift (R6)
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
        if plan is self._plan:  # the plan being run: its tools are known (not recounted)
            used: Iterable[str] = self._sched.tools
        else:
            used = {step.tool for step in plan.steps if step.tool is not None}
        known = self._cfg.tool_hashes
        # A tool the runtime no longer has is left out, which reconcile reports as vanished.
        return {name: known[name] for name in sorted(used) if name in known}

    def _adopt(self, plan: Plan) -> None:
        """Take ``plan`` as the plan to run. What reaches disk is redacted (E5); the live
        plan keeps its inputs so tools get what the planner meant."""
        previous = self._live_plan or self._plan
        kept: dict[str, StepStatus] = {}
        if previous is not None:
            # A step a user stopped stays stopped (or cancelled, with the cascade) while the
            # plan holds that exact step (S2), after drift too: the stop is the user's, not
            # derived from the workspace. After a failure, steps done stay done.
            done: dict[tuple[str, str, str, str], StepStatus] = {}
            for step in previous.steps:
                status = self._sched.status.get(step.id, "pending")
                if (self._keep_done and status in SATISFIED) or self._user_stopped(step.id):
                    done[(step.id, step.kind, step.target, step_input_hash(step))] = status
            kept = {
                step.id: done[key]
                for step in plan.steps
                if (key := (step.id, step.kind, step.target, step_input_hash(step))) in done
                and step.id in self._obs
            }
        self._live_plan = plan
        self._plan = redact_plan(plan)
        self._rec = attrs.evolve(self._rec, masked_inputs=masked_inputs(plan))
        if self._rec.masked_inputs:
            keep_live_plan(self._cfg.live_plans, self._rec.id, plan)
        self._sched = Schedule(
            plan,
            {step.id: kept.get(step.id, "pending") for step in plan.steps},
            self._sched.completed,  # steps kept done keep their place in completion order
        )
        self._claimed.clear()
        self._claim_finished()

    def _user_stopped(self, step_id: str) -> bool:
        """The step ended because a user stopped its agent task (S1, S2)."""
        observation = self._obs.get(step_id)
        if observation is None or observation.agent_task_id is None:
            return False
        if observation.code not in ("stopped", "cancelled"):
            return False
        task = self._tasks.get(observation.agent_task_id)
        return (
            task is not None
            and task.state == "cancelled"
            and task.interruption is not None
            and task.interruption.detail == "stopped"
        )

    def _charge_unsaved(self, running: Running) -> None:
        """Charge the calls an agent made that no save has recorded yet (P4, E9), and the
        usage a tool or skill step reported too late to be handled (B3)."""
        if running.meter is None:
            return
        if running.task_id is None:
            late, running.meter.usage = running.meter.usage, Usage()
            if late:
                self._rec = attrs.evolve(self._rec, usage=self._rec.usage + late)
            return
        task = self._tasks.get(running.task_id)
        used = running.meter.calls_used
        if task is None:
            return
        # B3: tokens and cost reported, saved or not; each part never below the record's.
        spent = task.usage + running.meter.usage.since(task.usage)
        if used <= task.calls_used and task.usage.covers(spent):
            return
        used = max(used, task.calls_used)
        delta = used - self._charged.get(task.id, 0)
        self._charged[task.id] = used
        usage = self._charge_usage(task.id, spent)
        self._set_task(attrs.evolve(task, calls_used=clamp_count(used), usage=spent))
        calls = clamp_count(self._rec.calls_used + max(delta, 0))
        self._rec = attrs.evolve(self._rec, calls_used=calls, usage=usage)

    def _charge_usage(self, task_id: str, total: Usage) -> Usage:
        """The run's usage once task ``task_id``'s reported ``total`` is charged: only what
        was not charged yet is added (B3, as for calls: E9)."""
        before = self._charged_usage.get(task_id)
        if before is None:
            self._charged_usage[task_id] = total
            return self._rec.usage + total
        added = total.since(before)
        self._charged_usage[task_id] = before + added  # each part only grows
        return self._rec.usage + added

    def _live_usage(self) -> Usage:
        """The run's usage with what running agents reported and no save charged yet."""
        usage = self._rec.usage
        for running in self._running.values():
            if running.meter is not None and running.task_id is not None:
                before = self._charged_usage.get(running.task_id)
                spent = running.meter.usage
                usage = usage + (spent.since(before) if before is not None else spent)
        return usage

    async def _commit(self, **changes: Any) -> bool:
        """Commit the current state (E2). A refusal stops the run at once (E3)."""
        if self._ended:
            return False
        if "status" in changes:  # E2: the lifecycle is checked in the one commit path
            execution_move(self._rec.id, self._rec.status, changes["status"])
        checkpoints = await self._checkpoints()
        if checkpoints is not None:
            changes["checkpoints"] = checkpoints
        record = self._snapshot(**changes)  # one record built per commit
        sent = self._lease_watch.sent()  # L5: when the answer comes is checked
        try:
            outcome = await self._cfg.committer.commit(record, self._cfg.owner)
        except PersistenceFailed:
            raise  # the disk failed: nothing more can be saved; the run crashes, resumable
        except (StorageError, ValueError) as exc:  # this record cannot be written (X2)
            raise Unstorable(str(exc)) from exc
        if outcome is CommitOutcome.OK:
            self._rec = record
            self._durable_calls = record.calls_used  # as the store has it
            self._durable_usage = record.usage
            settled = changes.get("status") not in (None, "running", "planned")
            if not self._lease_watch.in_time(sent) and not settled:
                # L5: durable, but nothing more may start until a renewal answered in time
                # shows the lease is still ours. (A run that just ended or began to wait
                # starts nothing more anyway: its late answer stands.)
                return await self._renew(late=sent) is not None
            return True
        await self._refused(outcome)
        return False

    async def _lease_fresh(self) -> bool:
        """L5: whether new work (a step, a tool or model call, a planner) may start now.
        When the last confirmed renewal is too old the lease is renewed first; False if
        the run is stopping instead (the renewal was refused or answered too late)."""
        if self._ended:
            return False
        if self._lease_watch.fresh():
            return True
        return await self._renew() is not None

    async def _renew(self, late: float | None = None) -> Execution | None:
        """Renew the lease (L2); the stored record, or None if the run is stopping (a
        refusal, E3, or answers too late to count, L5). ``late``: the stamp of a request
        whose answer came too late, which this renewal is to vouch for.

        L5: an answer that comes late is not taken for a lost lease at once: a renewal is
        fenced by the lease's epoch and a lapsed lease is never renewed, so a renewal the
        store grants proves nobody took the run over meanwhile, and one answered in time
        shows the lease runs on (a busy event loop, a loaded machine). The renewal is asked
        again, at most :data:`LATE_RENEWALS` times, while its answers keep coming late."""
        cfg = self._cfg
        for _ in range(LATE_RENEWALS):
            sent = self._lease_watch.sent()
            try:
                lease = self._rec.lease
                outcome, stored = await cfg.committer.renew(
                    self._rec.id, cfg.owner, cfg.lease_ttl, epoch=lease.epoch if lease else None
                )
            except Exception:  # the disk failed: we can no longer prove we hold the lease (E3)
                outcome, stored = CommitOutcome.RELEASED, None
            if outcome is not CommitOutcome.OK:
                if late is not None and outcome in _LAPSED:
                    await self._lapsed(late)  # the late answer was right to be doubted
                else:
                    await self._refused(outcome)
                return None
            if self._lease_watch.confirmed(sent):
                assert stored is not None
                return stored
            late = sent
        assert late is not None
        await self._lapsed(late)
        return None

    async def _lapsed(self, sent: float) -> None:
        """L5, E3: the store's answer came after our lease could have lapsed; another host
        may hold the run now. Nothing more is started or written by us: the run stops with
        ``LeaseLost``, and its result is the record as the store has it now."""
        age = self._lease_watch.age(sent) or 0.0
        self._ended = True
        stored = await self._read_stored()
        other = holder(stored.lease, time.time()) if stored is not None else None
        limit = self._lease_watch.limit
        detail = (
            f"the store's answer came {age:.1f} s after the request, past the {limit:g} s "
            "the lease is counted on: another host may hold the run now"
        )
        owner = other if other is not None and other != self._cfg.owner else ""
        reason = LeaseLost(owner, detail=detail, source=self.ref.path)
        record = stored if stored is not None else self._rec
        self._result = result_from(record, outputs=self._outputs, stopped_by=reason)
        for running in self._running.values():
            running.ref.cancel(for_children(reason, self.ref.path))
        self.stop_self(reason)

    async def _refused(self, outcome: CommitOutcome) -> None:
        self._refusal = outcome
        self._ended = True
        # V3: the record says why (an operator's cancel or pause, with its detail and who
        # issued it); the refusal alone would only say that we must stop.
        stored = await self._read_stored()
        self._refused_record = stored
        reason = refusal_reason(outcome, stored, self._cfg.owner, time.time())
        # E3: no further call by this owner. Children are interrupted now, not after the
        # current message, and nothing of ours is written again.
        for running in self._running.values():
            running.ref.cancel(for_children(reason, self.ref.path))
        self.stop_self(reason)

    def _publish(self, event: ev.RunEvent) -> None:
        self._cfg.publish(event)

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

    def _released(self) -> Lease | None:
        """Our lease given up, for a final write to carry: the store releases it in that
        same write (L3), so a crash right after it cannot leave the run held by us."""
        lease = self._rec.lease
        if lease is None or not lease.owner:
            return lease
        return Lease(owner="", expires_at=0.0, epoch=lease.epoch)

    async def _release(self) -> None:
        # Only where no final write released it (a crash, a refusal): L3.
        # A failed release is harmless: the lease lapses by itself after its ttl.
        with contextlib.suppress(Exception):
            await self._cfg.committer.release(self._rec.id, self._cfg.owner)

    def _end(self, reason: CancelReason, error: str | None = None) -> None:
        self._result = result_from(self._rec, outputs=self._outputs, stopped_by=reason, error=error)
        self.stop_self(reason)

    async def _commit_record(self, record: Execution) -> bool:
        execution_move(record.id, self._rec.status, record.status)
        try:
            outcome = await self._cfg.committer.commit(record, self._cfg.owner)
        except Exception as exc:  # not saved: the result says so; the lease lapses on its own
            self._result = result_from(self._rec, outputs=self._outputs, error=str(exc))
            return False
        if outcome is CommitOutcome.OK:
            self._rec = record
            self._durable_calls = record.calls_used  # as the store has it
            self._durable_usage = record.usage
            return True
        # Refused while winding down: another process's control landed first (E4). The
        # record, not our copy, says how the run ended and why (V3).
        self._refusal = outcome
        stored = await self._read_stored()
        reason = refusal_reason(outcome, stored, self._cfg.owner, time.time())
        await self._after_refusal(reason, stored)
        return False

    async def _read_stored(self) -> Execution | None:
        try:
            return await anyio.to_thread.run_sync(self._cfg.committer.store.get, self._rec.id)
        except Exception:  # unreadable now
            return None

    async def _after_refusal(self, reason: CancelReason, stored: Execution | None) -> None:
        """The run ended by a control written elsewhere: the calls it made that no commit
        recorded are added to the record (E9: accounting never goes backwards), the result
        is the record's, and the end is announced as if the control had been issued here."""
        if stored is not None and (stored.status == "cancelled" or stored.status == "paused"):
            stored = await self._keep_unsaved_calls() or stored
        record = stored if stored is not None else self._rec
        self._result = result_from(record, outputs=self._outputs, stopped_by=reason)
        if stored is not None:
            event = end_event(stored, time.time())
            if event is not None:
                self._publish(event)

    async def _keep_unsaved_calls(self) -> Execution | None:
        for running in self._running.values():
            self._charge_unsaved(running)  # calls made before the interruption (P4, E9)
        extra = self._rec.calls_used - self._durable_calls
        spent = self._rec.usage.since(self._durable_usage)  # B3: tokens and cost likewise
        if extra <= 0 and not spent:
            return None
        used = {task.id: task.calls_used for task in self._tasks.values()}
        usage = {task.id: task.usage for task in self._tasks.values()}
        try:
            edit = add_calls(max(extra, 0), used, spent, usage)
            return await self._cfg.committer.edit(self._rec.id, edit)
        except Exception:  # the disk failed: nothing more can be kept
            return None

    async def _heartbeat(self) -> None:
        if self._ended:
            return
        stored = await self._renew()
        if stored is None:
            return
        # Requests written elsewhere are durable already: no commit is needed to keep them.
        self._rec = attrs.evolve(
            self._rec,
            stop_requests=stored.stop_requests,
            answer_requests=stored.answer_requests,
        )
        if stored.answer_requests and not await self._take_answers(stored.answer_requests):
            return
        askers = stop_askers(stored)  # V3: the task is told who asked, as if asked here
        for operation, task_id, cascade in parse_stop_requests(stored.stop_requests):
            task = self._tasks.get(task_id)
            if task is not None and not task.terminal and task_id not in self._stopping_tasks:
                by = askers.get(operation, "")
                await self._stop_task(StopTask(task_id, operation, cascade, by))
            if self._stopped():
                return

    async def _take_answers(self, requests: tuple[AnswerRequest, ...]) -> bool:
        """R8 for a run live here: answers written to the record (from any host) go to the
        tasks of ours that wait for them; the pending slot passes on (R9) and the answered
        steps may start again. False if the run stopped (a refused commit)."""
        now = time.time()
        taken = False
        for task in list(self._tasks.values()):
            for given in requests:
                changed = answered(task, given, now)
                if changed is not None:
                    self._set_task(changed)
                    self._claimed.discard(task.id)  # its step may claim it again (R8)
                    taken = True
                    break
        if not taken:
            return True
        waiting = [t for t in self._tasks.values() if t.state == "waiting_for_clarification"]
        pending = None
        if waiting:
            first = min(waiting, key=lambda t: (t.created_at, t.id))
            pending = Pending(
                kind="clarification",
                question=first.pending_question or "",
                agent_task_id=first.id,
                asked_at=first.pending_question_at,
            )
        if not await self._commit(pending=pending):
            return False
        await self._advance()
        return not self._stopped()

    async def _wind_down(self, reason: CancelReason) -> None:
        if self._ended:
            if self._refusal is not None:
                await self._release()
                await self._after_refusal(reason, self._refused_record)
            return
        self._ended = True
        now = time.time()
        by = self._cfg.owner
        if isinstance(reason, LeaseLost):
            # E3: not ours to write any more; the disk says where the run stands.
            stored = await self._read_stored()
            record = stored if stored is not None else self._rec
            self._result = result_from(record, outputs=self._outputs, stopped_by=reason)
            return
        for running in self._running.values():
            self._charge_unsaved(running)  # calls made before the interruption (P4, E9)
        record = self._snapshot()
        for task_id, stop in self._stopping_tasks.items():
            # A stop under way is not undone by what ends the run (S1, R11).
            record, _ = stop_task(
                record, task_id, stop.operation_id, now, by=stop.by or by, cascade=stop.cascade
            )
        record = attrs.evolve(record, lease=self._released())  # L3: released in that write
        released = False
        if isinstance(reason, Pause | Timeout):
            # R1: tasks requeued with interruption pause, saved, lease released. B1: the
            # run's deadline stops it the same way (resumable), saying so on the controls.
            timeout = isinstance(reason, Timeout)
            detail = f"timeout: {reason.detail}" if timeout else reason.detail
            record = pause_execution(record, by, now, detail)
            requeued = sum(1 for r in self._running.values() if r.task_id is not None)
            if released := await self._commit_record(record):
                self._publish(
                    ev.ExecutionPaused(
                        execution_id=self._rec.id,
                        at=now,
                        requeued=requeued,
                        cause="timeout" if timeout else "pause",
                    )
                )
        elif isinstance(reason, Cancel):
            cancelled = sum(1 for t in parse_agent_tasks(record)[0] if not t.terminal)
            record = cancel_execution(record, by, now, reason.detail)
            if released := await self._commit_record(record):
                self._publish(
                    ev.ExecutionCancelled(
                        execution_id=self._rec.id, at=now, cancelled_tasks=cancelled
                    )
                )
        elif not isinstance(reason, Crash):
            # A shutdown: what was spent and stopped is saved; the tasks in flight stay as
            # they are, so the next resume requeues them as interrupted (R3).
            released = await self._commit_record(record)
        if not released:
            await self._release()
        if isinstance(reason, Crash):
            self._result = result_from(
                self._rec, outputs=self._outputs, stopped_by=reason, error=reason.error
            )

    def _stopped(self) -> bool:
        # Read through a call: after an await, ``self._ended`` may have changed, which mypy's
        # narrowing of the attribute (from the check at the top of a method) does not see.
        return self._ended

    # -- defined by the subclasses -----------------------------------------------------------

    async def _stop_task(self, request: StopTask) -> StopResult:  # TaskEvents
        raise NotImplementedError

    async def _advance(self) -> None:  # ExecutionActor
        raise NotImplementedError

    async def _finish(  # ExecutionActor
        self, status: Literal["completed", "failed"], *, error: str | None = None
    ) -> None:
        raise NotImplementedError
