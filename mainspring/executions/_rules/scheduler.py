"""The scheduler: which steps of a plan may start now, and what a finished one implies.

Pure: no I/O, no actors, no event loop — the ExecutionActor feeds it events and acts on its
answers, and the tests drive it with plain tables. :class:`Schedule` keeps the dependency
bookkeeping so each event costs what it touches, not the whole plan: how many dependencies
each pending step still waits for, who depends on whom, which pending steps are ready, and
which ended badly and must cascade (P2). :func:`pick` applies capacity, per-key limits,
approvals, open questions and the budget (P3, P4, P5) to the ready set.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

import attrs

from ...storage import Approval, Plan, PlanStep, StepStatus
from ...storage._seam import STEP_FINISHED, Vector
from .lifecycle import step_move

__all__ = ["SATISFIED", "Cascaded", "Picked", "Schedule", "approval_key", "cost", "pick"]

#: What lets a dependent run (P2): its dependency succeeded, or was stopped by a user and
#: counts as done without a result (S2).
SATISFIED: frozenset[StepStatus] = frozenset({StepStatus.SUCCEEDED, StepStatus.STOPPED})


@attrs.frozen
class Cascaded:
    """``step_id`` became ``status`` because its dependency ``cause`` ended ``cause_status``."""

    step_id: str
    status: StepStatus
    cause: str
    cause_status: StepStatus

    @property
    def why(self) -> str:
        return f"{self.status}: dependency {self.cause} {self.cause_status}"


class Schedule:
    """Step statuses of one plan and the ready set they imply (P2, S2: a stopped step lets
    its dependents run). Every change goes through :meth:`set`, which refuses a move the
    step lifecycle does not allow.

    What the run asks of it on every step is kept as it changes, never recounted from the
    whole plan: the succeeded steps in the order they succeeded (``completed``, seeded from
    ``completed`` as stored, then plan order for any others), how many steps finished, and
    the ready steps in plan order.
    """

    def __init__(
        self,
        plan: Plan | None,
        status: Mapping[str, StepStatus],
        completed: Iterable[str] = (),
    ) -> None:
        self.status: dict[str, StepStatus] = dict(status)
        self.order: dict[str, int] = {}
        self.steps: dict[str, PlanStep] = {}
        self.ready: set[str] = set()
        #: Succeeded steps in the order they succeeded: one that succeeds is appended, one
        #: that stops being succeeded is removed (E6 compares these sets).
        self.completed: dict[str, None] = {}
        #: ``completed`` as a persistent sequence: a step that succeeds makes the next
        #: version (one appended), so the record's completed steps cost what changed.
        self._completed_steps: Vector[str] | None = None
        #: Steps whose status differs from the plan last written, for cheap snapshots.
        self.dirty: set[str] = set(self.status)
        #: The tools the plan's steps name (what a checkpoint hashes, R6).
        self.tools: frozenset[str] = frozenset()
        self._ready_order: list[int] = []  # plan indices of the ready steps, sorted
        self._ids: list[str] = []  # step ids by plan index
        self._finished = sum(1 for state in self.status.values() if state in STEP_FINISHED)
        self._dependents: dict[str, list[str]] = {}
        self._deps_left: dict[str, int] = {}
        self._to_cascade: list[str] = []
        if plan is None:
            return
        for step_id in completed:
            if self.status.get(step_id) == "succeeded":
                self.completed[step_id] = None
        for index, step in enumerate(plan.steps):
            self.order[step.id] = index
            self.steps[step.id] = step
            self._ids.append(step.id)
            for dependency in step.depends_on:
                self._dependents.setdefault(dependency, []).append(step.id)
            if self.status[step.id] in ("failed", "skipped", "cancelled"):
                self._to_cascade.append(step.id)
            elif self.status[step.id] == "succeeded" and step.id not in self.completed:
                self.completed[step.id] = None
        self.tools = frozenset(step.tool for step in plan.steps if step.tool is not None)
        for step in plan.steps:
            left = sum(1 for d in step.depends_on if self.status[d] not in SATISFIED)
            self._deps_left[step.id] = left
            if left == 0 and self.status[step.id] == "pending":
                self._make_ready(step.id)

    def _make_ready(self, step_id: str) -> None:
        if step_id not in self.ready:
            self.ready.add(step_id)
            bisect.insort(self._ready_order, self.order[step_id])

    def _unready(self, step_id: str) -> None:
        if step_id in self.ready:
            self.ready.discard(step_id)
            order = self._ready_order
            del order[bisect.bisect_left(order, self.order[step_id])]

    def set(self, step_id: str, new: StepStatus) -> None:
        """Move one step; dependents become ready, or are queued to cascade."""
        old = self.status[step_id]
        if old == new:
            return
        self.status[step_id] = step_move(step_id, old, new)
        self.dirty.add(step_id)
        self._finished += (new in STEP_FINISHED) - (old in STEP_FINISHED)
        if new == "succeeded":
            self.completed[step_id] = None
            if self._completed_steps is not None:
                self._completed_steps = self._completed_steps.appended(step_id)
        if old == "succeeded":  # its result could not be stored: dependents wait again
            self.completed.pop(step_id, None)
            self._completed_steps = None
            for dependent in self._dependents.get(step_id, ()):
                self._deps_left[dependent] += 1
                self._unready(dependent)
        if new == "pending":
            if self._deps_left[step_id] == 0:
                self._make_ready(step_id)
            return
        self._unready(step_id)
        if new in SATISFIED:
            for dependent in self._dependents.get(step_id, ()):
                self._deps_left[dependent] -= 1
                if self._deps_left[dependent] == 0 and self.status[dependent] == "pending":
                    self._make_ready(dependent)
        elif new in ("failed", "skipped", "cancelled"):
            self._to_cascade.append(step_id)

    def cascade(self) -> list[Cascaded]:
        """P2: a step whose dependency failed or was skipped is skipped; one whose
        dependency was cancelled is cancelled, never silently skipped. Returns each change,
        in order, for the caller to record and announce."""
        changes: list[Cascaded] = []
        queue = self._to_cascade
        while queue:
            dependency = queue.pop()
            state = self.status[dependency]
            for dependent in self._dependents.get(dependency, ()):
                if self.status[dependent] != "pending":
                    continue
                new: StepStatus = (
                    StepStatus.CANCELLED if state == StepStatus.CANCELLED else StepStatus.SKIPPED
                )
                self.set(dependent, new)
                changes.append(Cascaded(dependent, new, dependency, state))
        return changes

    def ready_in_plan_order(self) -> Iterator[PlanStep]:
        """The ready steps in plan order, lazily: a caller that stops early (capacity) pays
        for what it looked at, not for the whole ready set."""
        steps, ids = self.steps, self._ids
        for index in tuple(self._ready_order):
            yield steps[ids[index]]

    def completed_steps(self) -> tuple[str, ...]:
        """``completed`` as a :class:`Vector` (a tuple for every reader, so typed as one):
        an unchanged set is the very same object (E6 compares it with the last
        checkpoint's); one more completed step is the last version with it appended, not a
        copy. Built whole only at first and after a step stopped being succeeded."""
        held: Any = self._completed_steps
        if held is None:
            held = self._completed_steps = Vector(self.completed)
        return held  # type: ignore[no-any-return]

    def count(self, *states: StepStatus) -> int:
        return sum(1 for state in self.status.values() if state in states)

    @property
    def finished(self) -> int:
        """How many steps reached a finished state."""
        return self._finished

    @property
    def all_finished(self) -> bool:
        return self._finished == len(self.status)


def approval_key(plan_version: int, step: PlanStep | None) -> Approval:
    """The approval of version ``plan_version`` of the plan (``step`` None) or of one step."""
    return Approval(plan_version=plan_version, step_id=step.id if step is not None else None)


def cost(step: PlanStep, remaining: int, reservation: Callable[[int], int]) -> int | None:
    """P4: what starting ``step`` holds from the budget, or None if it does not fit: a tool
    0, a skill 1 call, an agent its reservation (at least 1, at most what remains)."""
    if step.kind == "tool":
        return 0
    if step.kind == "skill":
        return 1 if remaining >= 1 else None
    if remaining < 1:
        return None
    return min(max(int(reservation(remaining)), 1), remaining)


@attrs.frozen(kw_only=True)
class Picked:
    """What :func:`pick` decided: steps to start with their cost, and why others wait."""

    starts: tuple[tuple[PlanStep, int], ...] = ()
    #: The first approval something waits for: ``None`` for the plan, else the step.
    approval: PlanStep | None = None
    needs_approval: bool = False
    short_of_budget: bool = False
    #: Agent steps among ``starts`` whose reservation is all the budget that remained: if
    #: the agent needs more, the run's budget is what is short, so it waits for budget (P4).
    takes_all: frozenset[str] = frozenset()


def pick(
    schedule: Schedule,
    *,
    plan: Plan,
    running_targets: Iterable[str],
    max_parallel: int,
    limits: Mapping[str, int],
    remaining: int,
    reservation: Callable[[int], int],
    approvals: Collection[Approval],
    question_open: bool,
    asking: Collection[str] = (),
    answered: Collection[str] = (),
    in_flight: Collection[str] = (),
) -> Picked:
    """The ready steps that may start now, in plan order (P3, P4, P5).

    ``running_targets`` has one entry per running step (its tool, skill or agent name);
    ``asking`` are steps whose agent waits for an answer, ``answered`` steps with an answered
    task ready to go on, ``in_flight`` steps that were running when the run was interrupted.
    """
    if plan.requires_approval and approval_key(plan.version, None) not in approvals:
        return Picked(needs_approval=True)
    per_key: dict[str, int] = {}
    running = 0
    for target in running_targets:
        per_key[target] = per_key.get(target, 0) + 1
        running += 1
    starts: list[tuple[PlanStep, int]] = []
    takes_all: set[str] = set()
    approval: PlanStep | None = None
    needs_approval = short = False
    for step in schedule.ready_in_plan_order():
        if running + len(starts) >= max_parallel:
            break
        if step.id in asking:
            continue  # P5: its agent waits for an answer; the step stays pending
        if question_open and step.id not in in_flight and step.id not in answered:
            continue  # P5: while a question is open no new step starts
        limit = limits.get(step.target)
        if limit is not None and per_key.get(step.target, 0) >= limit:
            continue
        if step.requires_approval and approval_key(plan.version, step) not in approvals:
            if not needs_approval:
                needs_approval, approval = True, step
            continue
        price = cost(step, remaining, reservation)
        if price is None:
            short = True
            continue
        if step.kind == "agent" and price == remaining:
            takes_all.add(step.id)
        remaining -= price
        per_key[step.target] = per_key.get(step.target, 0) + 1
        starts.append((step, price))
    return Picked(
        starts=tuple(starts), approval=approval, needs_approval=needs_approval,
        short_of_budget=short, takes_all=frozenset(takes_all),
    )  # fmt: skip
