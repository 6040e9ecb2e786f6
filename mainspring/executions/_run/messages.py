"""The messages an ExecutionActor takes, and what every run of a runtime is given: its
options (:class:`RunConfig`) and its services (:class:`RunServices`)."""

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
from ...storage import PlanStep
from ...storage._seam import Committer
from .._rules.deadlines import Bounds
from .._rules.usage import Meter
from .events import RunEvent
from .lease_guard import lease_clock as default_lease_clock
from .results import ExecutionResult

if TYPE_CHECKING:
    from .._memory.memory import Memory
    from .._telemetry import Telemetry


@attrs.frozen(kw_only=True)
class RunConfig:
    """The options every run of a runtime shares: frozen values, checked by ``open_runtime``
    before anything starts. What the runs use (the committer, the event bus, memory, the
    evidence shelf) is :class:`RunServices`; what the runtime holds of its live runs is its
    registry (``_facade.live``), never here."""

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
    #: Default timeouts and retry policies per kind and target (B1).
    bounds: Bounds = attrs.field(factory=Bounds)
    #: The most active workers a run has (with max_parallel_steps, #17).
    max_workers: int = 8
    #: The holder's clock for its lease's age (L5, ``executions._lease_guard``): monotonic
    #: seconds that go on through a suspend (``_lease_guard.lease_clock``); tests pass a
    #: fake one.
    lease_clock: Callable[[], float] = default_lease_clock


def _always() -> bool:
    return True


@attrs.frozen(kw_only=True)
class RunServices:
    """What every run of a runtime uses and none owns, made once by ``open_runtime``."""

    #: The persistence actor's front: the only way a run writes (E2).
    committer: Committer
    #: Announces a run's events on the runtime's live bus (V1).
    publish: Callable[[RunEvent], None]
    #: Whether anyone hears an event published now (the bus's ``listening``): a run skips
    #: building its per-step events when nobody does (V1 unchanged for a subscriber).
    listening: Callable[[], bool] = _always
    #: Agent memory (``runtime.memory``; each agent's ``ctx.memory`` is made from it).
    memory: Memory | None = None
    #: Where worker handoffs and proofs are sealed (#17): an ``EvidenceShelf``.
    evidence: Any = None
    #: Spans and metrics (O1, ``executions._telemetry``); None: telemetry is off.
    telemetry: Telemetry | None = None


class RunWatcher(Protocol):
    """Who hears about a run's end: told when it starts settling (its last writes are under
    way, so controls must wait for it) and when it has ended, with the result."""

    def settling(self) -> None: ...

    def ended(self, result: ExecutionResult, *, settled: bool = True) -> None:
        """``settled``: False when the run's wind-down was cut short (its stop's time ran
        out, e.g. its last write waited on the store): ``result`` is then the runner's
        last known state, and where the run stands is the store's to say once the write
        under way is done (E2)."""


@attrs.frozen
class Begin:
    """The first message: commit the record the runtime prepared, then plan or go on."""

    resumed: bool
    check_drift: bool = False
    replan_goal: bool = False
    in_flight: tuple[str, ...] = ()  # steps running when the run was interrupted
    #: O1: the caller's trace context where the run was started or resumed (None: telemetry
    #: is off); the run's span is its child unless the execution kept one of its own.
    caller: Any = None


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
