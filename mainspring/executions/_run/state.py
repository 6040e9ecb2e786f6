"""One execution's state in memory: the record as loaded, the schedule, observations, agent
tasks, what runs now and what the run has charged. Pure: no I/O, no event loop; the commit
funnel (``_funnel``) makes it durable and the actor (``_actor``) acts on it.

A snapshot is the record as it is now, built once per commit at the cost of what changed
since the last one, not of the run's length: the plan's steps, the observations and the
completed steps are persistent sequences (``storage.Vector``) whose next version is the
last one with the steps whose status changed replaced, the new observations appended (or
replaced, a retry) and the newly completed steps appended; the agent tasks likewise (the
store makes the stored form of those that changed, from the version it stored before:
``storage._stored_form``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, Literal, NoReturn, TypeVar, cast

import attrs

from ...storage import (
    AgentTaskRecord,
    Execution,
    Lease,
    Observation,
    Plan,
    PlanStep,
    StepStatus,
    Unreadable,
    Usage,
    WorkerRecord,
)
from ...storage._seam import Vector
from .._rules.lifecycle import task_move
from .._rules.plan import step_input_hash
from .._rules.scheduler import SATISFIED, Schedule
from .._rules.transitions import clamp_count
from .._rules.usage import exhausted
from .._workers.board import WorkerBoard
from .messages import RunConfig, Running, StopTask
from .results import ExecutionResult, masked_inputs, redact_plan

__all__ = ["Recorded", "RunState"]

V = TypeVar("V")


class Recorded(dict[str, V]):
    """A dict of what the record holds as a sequence in the order keys were first set (the
    observations by step id, the agent tasks by task id), and that sequence as the
    record stores it (:meth:`as_stored`: a :class:`Vector`): setting a key replaces its item
    in place or appends it, so a snapshot costs what was set since the last one. Items are
    only ever set (never removed), as a run records its steps and tasks."""

    def __init__(self, items: Iterable[tuple[str, V]] = ()) -> None:
        super().__init__(items)
        self._stored: Vector[V] = Vector(self.values())
        self._position = {key: index for index, key in enumerate(self)}
        self._replaced: dict[int, V] = {}  # set since the last version
        self._appended: list[V] = []

    def __setitem__(self, key: str, item: V) -> None:
        super().__setitem__(key, item)
        position = self._position.get(key)
        if position is None:
            self._position[key] = len(self._position)
            self._appended.append(item)
        elif position < len(self._stored):
            self._replaced[position] = item
        else:
            self._appended[position - len(self._stored)] = item

    def as_stored(self) -> tuple[V, ...]:
        """The items as the record holds them: the last version with what was set since
        (typed as the tuple it stands for)."""
        if self._replaced:
            self._stored = self._stored.updated(self._replaced, self._appended)
            self._replaced = {}
            self._appended = []
        elif self._appended:
            appended = self._appended
            stored = self._stored
            self._stored = (
                stored.appended(appended[0])
                if len(appended) == 1
                else stored.updated(None, appended)
            )
            self._appended = []
        held: Any = self._stored
        return held  # type: ignore[no-any-return]

    def _only_set(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("a recorded item is only set, one by one")

    __delitem__ = pop = popitem = clear = update = setdefault = _only_set


class RunState:
    """The record in memory and what the run holds while it runs (see the module
    docstring). Every collaborator of the ExecutionActor reads and changes this one
    object; the actor handles one message at a time, so none of it needs a lock."""

    # The record as loaded, set by load (from __init__, and again on every reload).
    plan: Plan | None
    sched: Schedule
    obs: Recorded[Observation]
    tasks: Recorded[AgentTaskRecord]
    unreadable: list[Unreadable]  # kept as they were read, written back after ours (E7)
    charged: dict[str, int]  # calls charged to the execution, per task (P4, E9)
    charged_usage: dict[str, Usage]  # tokens and cost likewise (B3)

    def __init__(self, cfg: RunConfig, record: Execution, live_plan: Plan | None) -> None:
        self.cfg = cfg
        self.live_plan = live_plan  # the plan with inputs unredacted, when we have it
        self.claimed: set[str] = set()
        self.rec = record
        self.budget = record.max_calls if record.max_calls is not None else cfg.max_calls
        self.token_limit = record.max_tokens if record.max_tokens is not None else cfg.max_tokens
        self.cost_limit: Decimal | None = (
            record.max_cost if record.max_cost is not None else cfg.max_cost
        )
        self.running: dict[str, Running] = {}
        self.by_ref: dict[Any, str] = {}  # a child (actor or step task) -> its step id
        self.outputs: dict[str, Any] = {}
        self.stopping_tasks: dict[str, StopTask] = {}  # by task id
        self.keep_done = False
        self.planning = False  # a planner child works: the plan in hand is not run (R6)
        self.in_flight: set[str] = set()  # started before an interruption: not "new" (P5)
        #: Tool and skill steps started since the last commit: the next heartbeat commits
        #: those still running, so a long step is on disk as running (``unsaved_starts``).
        self.started: set[str] = set()
        self.ended = False  # the final state is committed (or refused): nothing more to write
        self.result: ExecutionResult | None = None  # what the run ended with, once it has
        #: Agent steps the last pick gave all the budget that remained (P4).
        self.takes_all: frozenset[str] = frozenset()
        #: The worker board, once a driver joined (or a commit of it was asked for).
        self.board: WorkerBoard | None = None
        #: The last snapshots' workers (the tuple each holds) and the moved workers each
        #: carries: the one committed is found by identity (a snapshot may follow it).
        self.moves: tuple[tuple[Any, list[WorkerRecord]], ...] = ()
        self.load(record)

    # -- loading -------------------------------------------------------------------------

    def load(self, record: Execution) -> None:
        self.rec = record
        self.durable_calls = record.calls_used  # as the store has it
        self.durable_usage = record.usage
        self.plan = record.plan
        self.sched = Schedule(
            self.live_plan or record.plan,
            {step.id: step.status for step in record.plan.steps} if record.plan else {},
            record.completed_steps,  # in the order they completed
        )
        self.obs = Recorded((obs.step_id, obs) for obs in record.observations)
        self.tasks = Recorded(
            (task.id, task) for task in record.agent_tasks if type(task) is AgentTaskRecord
        )
        self.unreadable = [task for task in record.agent_tasks if type(task) is Unreadable]
        self.charged = {task.id: task.calls_used for task in self.tasks.values()}
        self.charged_usage = {task.id: task.usage for task in self.tasks.values()}
        self.claim_finished()

    def claim_finished(self) -> None:
        """A task whose step already succeeded in this plan is taken (R8: at most once)."""
        for step_id, state in self.sched.status.items():
            observation = self.obs.get(step_id)
            if state == "succeeded" and observation is not None and observation.agent_task_id:
                self.claimed.add(observation.agent_task_id)

    def unsaved_starts(self) -> bool:
        """Whether a step started since the last commit still runs: on disk it is still
        pending (a step that started and ended between two commits is not: its end was
        committed)."""
        status = self.sched.status
        return any(status.get(step_id) == StepStatus.RUNNING for step_id in self.started)

    def stopping(self) -> bool:
        """Whether the run's end is written (or refused): nothing more is ours to write.
        Read through a call after an await: the flag may have changed meanwhile."""
        return self.ended

    def committed(self, record: Execution) -> None:
        """``record`` is durable: it is the record from now on."""
        self.rec = record
        self.started.clear()  # every step it started is in it, with the status it has now
        self.durable_calls = record.calls_used  # as the store has it
        self.durable_usage = record.usage

    # -- tasks ---------------------------------------------------------------------------

    def set_task(self, task: AgentTaskRecord) -> None:
        """Keep ``task`` (the store makes its stored form from the one it stored before:
        an agent's n-th inner step costs what it added, not the n before it)."""
        old = self.tasks.get(task.id)
        if old is not None:
            task_move(task.id, old.state, task.state)  # R11: terminal is sticky
        self.tasks[task.id] = task

    def user_stopped(self, step_id: str) -> bool:
        """The step ended because a user stopped its agent task (S1, S2)."""
        observation = self.obs.get(step_id)
        if observation is None or observation.agent_task_id is None:
            return False
        if observation.code not in ("stopped", "cancelled"):
            return False
        task = self.tasks.get(observation.agent_task_id)
        return (
            task is not None
            and task.state == "cancelled"
            and task.interruption is not None
            and task.interruption.detail == "stopped"
        )

    # -- the plan ------------------------------------------------------------------------

    def current_plan(self) -> Plan | None:
        """The plan with the statuses the scheduler holds: only the steps whose status
        changed since the last snapshot are rebuilt, and the plan's steps are the last
        version with those replaced (a :class:`Vector`: nothing else is copied, and the
        plan's validator checks only those)."""
        plan = self.plan
        sched = self.sched
        if plan is not None and sched.dirty:
            held: Any = plan.steps
            steps: Vector[PlanStep] = held if type(held) is Vector else Vector(held)
            moved: dict[int, PlanStep] = {}
            for step_id in sched.dirty:
                index = sched.order[step_id]
                step = steps[index]
                if step.status != sched.status[step_id]:
                    moved[index] = attrs.evolve(step, status=sched.status[step_id])
            sched.dirty.clear()
            if moved or steps is not held:
                steps = steps.updated(moved) if moved else steps
                plan = self.plan = attrs.evolve(plan, steps=cast(Any, steps))
        return plan

    def adopt(self, plan: Plan, keep: Callable[[str, Plan], None]) -> None:
        """Take ``plan`` as the plan to run. What reaches disk is redacted (E5); the live
        plan keeps its inputs so tools get what the planner meant (``keep``: told the plan
        when its stored inputs are masked, E10)."""
        previous = self.live_plan or self.plan
        kept: dict[str, StepStatus] = {}
        if previous is not None:
            # A step a user stopped stays stopped (or cancelled, with the cascade) while the
            # plan holds that exact step (S2), after drift too: the stop is the user's, not
            # derived from the workspace. After a failure, steps done stay done.
            done: dict[tuple[str, str, str, str], StepStatus] = {}
            for step in previous.steps:
                status = self.sched.status.get(step.id, StepStatus.PENDING)
                if (self.keep_done and status in SATISFIED) or self.user_stopped(step.id):
                    done[(step.id, step.kind, step.target, step_input_hash(step))] = status
            kept = {
                step.id: done[key]
                for step in plan.steps
                if (key := (step.id, step.kind, step.target, step_input_hash(step))) in done
                and step.id in self.obs
            }
        self.live_plan = plan
        self.plan = redact_plan(plan)
        self.rec = attrs.evolve(self.rec, masked_inputs=masked_inputs(plan))
        if self.rec.masked_inputs:
            keep(self.rec.id, plan)
        self.sched = Schedule(
            plan,
            {step.id: kept.get(step.id, StepStatus.PENDING) for step in plan.steps},
            self.sched.completed,  # steps kept done keep their place in completion order
        )
        self.claimed.clear()
        self.claim_finished()

    def plan_tool_hashes(self, plan: Plan | None) -> dict[str, str]:
        if plan is None:
            return {}
        if plan is self.plan:  # the plan being run: its tools are known (not recounted)
            used: Iterable[str] = self.sched.tools
        else:
            used = {step.tool for step in plan.steps if step.tool is not None}
        known = self.cfg.tool_hashes
        # A tool the runtime no longer has is left out, which reconcile reports as vanished.
        return {name: known[name] for name in sorted(used) if name in known}

    # -- the snapshot ----------------------------------------------------------------------

    def snapshot(self, **changes: Any) -> Execution:
        """The record as it is now, with ``changes``; the worker board's parts included."""
        board = self.board
        if board is not None:
            for key, value in board.fields().items():
                changes.setdefault(key, value)
        plan = self.current_plan()
        record = attrs.evolve(
            self.rec,
            plan=plan,
            plan_version=plan.version if plan is not None else self.rec.plan_version,
            # Kept as steps complete, in the order they did: never rebuilt from the plan.
            completed_steps=self.sched.completed_steps() if plan is not None else (),
            observations=self.obs.as_stored(),
            # Kept as they are, after ours (E7): then a tuple, once in a while.
            agent_tasks=(*self.tasks.values(), *self.unreadable)
            if self.unreadable
            else self.tasks.as_stored(),
            updated_at=time.time(),
            **changes,
        )
        if board is not None and board.moved:
            moves = [board.workers[i] for i in board.moved]
            self.moves = (*self.moves[-3:], (record.workers, moves))
        return record

    def released(self) -> Lease | None:
        """Our lease given up, for a final write to carry: the store releases it in that
        same write (L3), so a crash right after it cannot leave the run held by us."""
        lease = self.rec.lease
        if lease is None or not lease.owner:
            return lease
        return Lease(owner="", expires_at=0.0, epoch=lease.epoch)

    # -- budgets and charges (P4, E9, B3) ---------------------------------------------------

    def held(self) -> int:
        return sum(running.cost for running in self.running.values())

    def remaining(self) -> int:
        return max(0, self.budget - self.rec.calls_used - self.held())

    def exhausted(self) -> Literal["tokens", "cost"] | None:
        """B3: the token or cost budget the run has reached (counting what running agents
        reported and no save charged yet), or None. Once reached, no model call starts."""
        return exhausted(self.live_usage(), self.token_limit, self.cost_limit)

    def charge_unsaved(self, running: Running) -> None:
        """Charge the calls an agent made that no save has recorded yet (P4, E9), and the
        usage a tool or skill step reported too late to be handled (B3)."""
        if running.meter is None:
            return
        if running.task_id is None:
            late, running.meter.usage = running.meter.usage, Usage()
            if late:
                self.rec = attrs.evolve(self.rec, usage=self.rec.usage + late)
            return
        task = self.tasks.get(running.task_id)
        used = running.meter.calls_used
        if task is None:
            return
        # B3: tokens and cost reported, saved or not; each part never below the record's.
        spent = task.usage + running.meter.usage.since(task.usage)
        if used <= task.calls_used and task.usage.covers(spent):
            return
        used = max(used, task.calls_used)
        delta = used - self.charged.get(task.id, 0)
        self.charged[task.id] = used
        usage = self.charge_usage(task.id, spent)
        self.set_task(attrs.evolve(task, calls_used=clamp_count(used), usage=spent))
        calls = clamp_count(self.rec.calls_used + max(delta, 0))
        self.rec = attrs.evolve(self.rec, calls_used=calls, usage=usage)

    def charge_usage(self, task_id: str, total: Usage) -> Usage:
        """The run's usage once task ``task_id``'s reported ``total`` is charged: only what
        was not charged yet is added (B3, as for calls: E9)."""
        before = self.charged_usage.get(task_id)
        if before is None:
            self.charged_usage[task_id] = total
            return self.rec.usage + total
        added = total.since(before)
        self.charged_usage[task_id] = before + added  # each part only grows
        return self.rec.usage + added

    def live_usage(self) -> Usage:
        """The run's usage with what running agents reported and no save charged yet."""
        usage = self.rec.usage
        for running in self.running.values():
            if running.meter is not None and running.task_id is not None:
                before = self.charged_usage.get(running.task_id)
                spent = running.meter.usage
                usage = usage + (spent.since(before) if before is not None else spent)
        return usage

    def track(self, running: Running) -> None:
        """A child now runs ``running.step``: known by step and by ref."""
        self.running[running.step.id] = running
        self.by_ref[running.ref] = running.step.id
