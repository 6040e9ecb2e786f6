"""The messages an ExecutionActor takes and the configuration every run shares."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ...actors import (
    ActorRef,
    ActorTask,
    CancelReason,
    LeaseLost,
    MainspringError,
    ParentCancel,
    Pause,
    Timeout,
)
from ...storage import Committer, Plan, PlanStep, encode_value, sha256_hex
from .._rules.deadlines import Bounds
from .._rules.usage import Meter
from .events import RunEvent
from .lease_guard import lease_clock as default_lease_clock
from .results import ExecutionResult

if TYPE_CHECKING:
    from .._memory.memory import Memory


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
    publish: Callable[[RunEvent], None]
    skill_versions: Mapping[str, str]
    tool_hashes: Mapping[str, str]
    agent_hashes: Mapping[str, str] = attrs.field(factory=dict)  # definitions (R8)
    agent_envelope: str = ""  # what wraps every agent's definition here (R8)
    # Each run's default token and cost budgets (B3); None: unbounded.
    max_tokens: int | None = None
    max_cost: Decimal | None = None
    # What an agent task may spend of the tokens and cost a run has left (P4); None: all.
    token_reservation: Callable[[int], int] | None = None
    cost_reservation: Callable[[Decimal], Any] | None = None
    # E10: the plans, with their real inputs, of this runtime's runs whose stored inputs are
    # masked; a resume here runs them as planned (kept until the run ends, bounded).
    live_plans: dict[str, Plan] = attrs.field(factory=dict)
    # ...and, for their agent tasks, a digest of the real input each ran with (R8, E10).
    secret_inputs: dict[str, str] = attrs.field(factory=dict)
    # ...and the real results of their inner steps stored masked: (task id, step) -> value.
    kept_results: dict[tuple[str, str], Any] = attrs.field(factory=dict)
    #: Default timeouts and retry policies per kind and target (B1).
    bounds: Bounds = attrs.field(factory=Bounds)
    #: Agent memory (``runtime.memory``; each agent's ``ctx.memory`` is made from it).
    memory: Memory | None = None
    #: The most active workers a run has (with max_parallel_steps), and where handoffs
    #: and proofs are sealed (#17).
    max_workers: int = 8
    evidence: Any = None
    #: The worker boards of the runs live here, by execution id (Runtime.repair_worker).
    worker_boards: dict[str, Any] = attrs.field(factory=dict)
    #: The holder's clock for its lease's age (L5, ``executions._lease_guard``): monotonic
    #: seconds that go on through a suspend (``_lease_guard.lease_clock``); tests pass a
    #: fake one.
    lease_clock: Callable[[], float] = default_lease_clock


class RunWatcher(Protocol):
    """Who hears about a run's end: told when it starts settling (its last writes are under
    way, so controls must wait for it) and when it has ended, with the result."""

    def settling(self) -> None: ...

    def ended(self, result: ExecutionResult) -> None: ...


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
    cascade: bool = False  # cancel the step and its dependents instead of stopping it (S2)
    by: str = ""  # the owner that asked, when the request came through the record (V3)


@attrs.frozen
class Heartbeat:
    pass


class Unstorable(MainspringError):
    """The record as changed cannot be written (too large, or not a valid record)."""


@attrs.define
class Running:
    step: PlanStep
    ref: ActorRef | ActorTask  # an agent task's actor, or a tool or skill step's task
    cost: int  # calls held for this step while it runs (P4)
    task_id: str | None = None
    meter: Meter | None = None  # the agent's calls as it makes them, saved or not
    #: When its child was started (the runtime's wall clock): a step that times out or
    #: crashes without reporting still says when it ran (O2).
    started_at: float = attrs.field(factory=time.time)


def for_children(reason: CancelReason, source: str) -> CancelReason:
    """What a step in flight sees: a pause, a lost lease or the run's deadline as itself
    (R1, E3, B1), anything else as a ParentCancel leading to it (R2)."""
    if isinstance(reason, Pause | LeaseLost | Timeout):
        return reason
    return ParentCancel(reason, source=source)


MAX_LIVE_PLANS = 1_000


def keep_live_plan(plans: dict[str, Plan], execution_id: str, plan: Plan) -> None:
    """Remember ``plan`` (with its real inputs) for ``execution_id``: the oldest go first."""
    plans.pop(execution_id, None)
    plans[execution_id] = plan
    while len(plans) > MAX_LIVE_PLANS:
        del plans[next(iter(plans))]


def keep_secret_input(digests: dict[str, str], task_id: str, digest: str) -> None:
    """Remember which real input ``task_id`` ran with (memory only): the oldest go first."""
    digests.pop(task_id, None)
    digests[task_id] = digest
    while len(digests) > MAX_LIVE_PLANS * 10:
        del digests[next(iter(digests))]


def real_input_hash(step: PlanStep) -> str:
    """A digest of ``step``'s real input, secrets included: kept in memory, never stored."""
    return sha256_hex(encode_value(step.input))


def forget(cfg: RunConfig, execution_id: str) -> None:
    """A finished run's real plan, inputs and results kept in memory go (E10)."""
    cfg.live_plans.pop(execution_id, None)
    prefix = f"{execution_id}:t"
    for task_id in [t for t in cfg.secret_inputs if t.startswith(prefix)]:
        del cfg.secret_inputs[task_id]
    for key in [k for k in cfg.kept_results if k[0].startswith(prefix)]:
        del cfg.kept_results[key]
