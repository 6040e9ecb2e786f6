"""What is persisted: frozen, keyword-only attrs records with literal versions.

Every field is validated when a record is built, from code or from disk, so an invalid record
cannot exist in memory: ids match the id pattern (X1), counters are whole numbers in
0..1,000,000, scores are within 0..1, bounded lists stay bounded. An execution's agent task
records are parsed once, one by one, when first looked at (``_entries``): one that does not
parse is an :class:`Unreadable` holding what was stored, kept and written back as it was,
without hiding the others (E7, E8).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, Literal

import attrs

from ._codec import structure
from ._entries import Entries
from ._errors import RecordError
from ._requests import Approval, QuestionId, StopRequest
from ._retry import RetryPolicy, check_timeout
from ._unreadable import Unreadable
from ._usage import NO_USAGE, Usage, valid_cost, valid_tokens
from ._validators import (
    MAX_COUNTER,
    MAX_TOUCHED_PATHS,
    _absent,
    _at_most,
    _counter,
    _counter_field,
    _id,
    _ids,
    _kind,
    _member,
    _optional_digest,
    _optional_id,
    _optional_traceparent,
    _paths,
    _unit,
    one_of,
    same_step_ids,
    same_value,
    steps_unique,
)
from ._vector import Vector
from ._workers import (
    TrailItem,
    WorkerEntry,
    WorkerTaskEntry,
    trail_entries,
    worker_entries,
    worker_task_entries,
)

__all__ = [
    "EXECUTION_TERMINAL",
    "MAX_COUNTER",
    "MAX_DIAGNOSTICS",
    "MAX_ERROR_TYPE",
    "MAX_EVIDENCE",
    "MAX_TOUCHED_PATHS",
    "MAX_TRACEBACK",
    "STEP_FINISHED",
    "TASK_TERMINAL",
    "AbsentDimension",
    "AgentTaskRecord",
    "Approval",
    "BudgetInfo",
    "Checkpoint",
    "Control",
    "Evidence",
    "Execution",
    "ExecutionStatus",
    "Failure",
    "Finding",
    "FindingStatus",
    "Interruption",
    "Lease",
    "Observation",
    "ObservationCode",
    "Pending",
    "Plan",
    "PlanStep",
    "Provenance",
    "QuestionId",
    "StepStatus",
    "StopRequest",
    "TaskEntry",
    "TaskState",
    "parse_agent_task",
    "parse_agent_tasks",
]


MAX_FINDINGS = 200
MAX_DIAGNOSTICS = 200
MAX_CONTROLS = 100
MAX_CHECKPOINTS = 5
MAX_EVIDENCE = 100
#: How long a kept traceback may be (characters; it is cut to 8 KiB of UTF-8 when made), and
#: an exception's type name (O2).
MAX_TRACEBACK = 8192
MAX_ERROR_TYPE = 200


class ExecutionStatus(enum.StrEnum):
    """Where an execution stands. Stored as its value (snake_case, the one spelling of every
    state); a member equals its value, so ``status == "running"`` still holds."""

    PLANNED = "planned"
    RUNNING = "running"
    PAUSED = "paused"
    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_CLARIFICATION = "waiting_for_clarification"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    WAITING_FOR_BUDGET = "waiting_for_budget"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for ``completed``, ``failed`` and ``cancelled``: the run is over, for good
        (E2: a terminal status on disk is sticky)."""
        return self in EXECUTION_TERMINAL


class StepStatus(enum.StrEnum):
    """Where a plan step stands. ``stopped``: its agent task was stopped by a user; the step
    counts as done without a result, so its dependents run (S2)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    STOPPED = "stopped"

    @property
    def finished(self) -> bool:
        """True for every state but ``pending`` and ``running``: the step is over, and its
        dependents may be decided."""
        return self in STEP_FINISHED


class TaskState(enum.StrEnum):
    """Where an agent task stands (its lifecycle; an interruption is not a state, R3)."""

    CREATED = "created"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_CLARIFICATION = "waiting_for_clarification"
    PAUSED = "paused"

    @property
    def terminal(self) -> bool:
        """True for ``completed``, ``failed`` and ``cancelled``: the task is over, for good
        (R11)."""
        return self in TASK_TERMINAL


def execution_status(value: object) -> ExecutionStatus:
    """``value`` as an :class:`ExecutionStatus` (a member or its value); ValueError if not."""
    return _member(ExecutionStatus, value, "status")


def step_status(value: object) -> StepStatus:
    """``value`` as a :class:`StepStatus` (a member or its value); ValueError if not."""
    return _member(StepStatus, value, "status")


def task_state(value: object) -> TaskState:
    """``value`` as a :class:`TaskState` (a member or its value); ValueError if not."""
    return _member(TaskState, value, "state")


#: The finished states, written once: terminal executions and tasks are sticky (E2, R11).
EXECUTION_TERMINAL: frozenset[ExecutionStatus] = frozenset(
    {ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED}
)
#: The step states that end a step (its dependents may be decided).
STEP_FINISHED: frozenset[StepStatus] = frozenset(
    {
        StepStatus.SUCCEEDED,
        StepStatus.FAILED,
        StepStatus.SKIPPED,
        StepStatus.CANCELLED,
        StepStatus.STOPPED,
    }
)
#: The agent task states that end it for good (R11).
TASK_TERMINAL: frozenset[TaskState] = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED}
)

#: Why an observation records a step that did not simply succeed or fail in its own code.
ObservationCode = Literal[
    "cancelled",
    "stopped",
    "agent-failed",
    "agent-timeout",
    "step-timeout",
    "agent-call-budget",
    "agent-tool-budget",
    "finding-contract",
    "agent-not-enabled",
    "agent-waiting",
]


def _text_at_most(limit: int) -> Any:
    """An optional text of at most ``limit`` characters (X2: a read stays bounded)."""

    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and (type(value) is not str or len(value) > limit):
            raise ValueError(f"{attribute.name} must be a text of at most {limit} characters")

    return check


# -- plans and observations ----------------------------------------------------------------

_retry_instance = attrs.validators.instance_of(RetryPolicy)


def _retry_policy(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """None or a :class:`RetryPolicy` (attrs' own check, and its error, for anything else):
    a plain function, as a step is rebuilt whenever its status changes."""
    if value is not None and type(value) is not RetryPolicy:
        _retry_instance(instance, attribute, value)


@attrs.frozen(kw_only=True)
class PlanStep:
    """One step of a plan; it names exactly one of ``tool``, ``skill`` or ``agent`` (P1)."""

    id: str = attrs.field(validator=_id)
    description: str = ""
    tool: str | None = None
    skill: str | None = None
    agent: str | None = None
    # Stored in the typed encoding (E10); compared as stored, so 1 and True differ.
    input: dict[str, Any] = attrs.field(factory=dict, eq=attrs.cmp_using(eq=same_value))
    depends_on: tuple[str, ...] = attrs.field(default=(), validator=_ids)
    status: StepStatus = attrs.field(default=StepStatus.PENDING, converter=step_status)
    requires_approval: bool = False
    #: Seconds the step may run before it is cancelled with ``Timeout`` (B1); None: the
    #: runtime's default for its tool, skill or agent.
    timeout: float | None = attrs.field(default=None, converter=check_timeout)
    #: How a failed tool or skill step is tried again; None: the runtime's default.
    retry: RetryPolicy | None = attrs.field(default=None, validator=_retry_policy)

    def __attrs_post_init__(self) -> None:
        if (self.tool is not None) + (self.skill is not None) + (self.agent is not None) != 1:
            named = [kind for kind in ("tool", "skill", "agent") if getattr(self, kind) is not None]
            got = ", ".join(named) or "none"
            raise ValueError(f"step {self.id} must name exactly one of tool, skill, agent ({got})")
        if self.retry is not None and self.agent is not None:
            # An agent's inner steps are durable and its own to retry; a whole task is not
            # run again by a policy.
            raise ValueError(f"step {self.id}: a retry policy applies to tool and skill steps")

    @property
    def kind(self) -> Literal["tool", "skill", "agent"]:
        """Which of tool, skill or agent this step names."""
        if self.tool is not None:
            return "tool"
        return "skill" if self.skill is not None else "agent"

    @property
    def target(self) -> str:
        """The name of the tool, skill or agent the step calls."""
        return self.tool or self.skill or self.agent or ""


@attrs.frozen(kw_only=True)
class Plan:
    """A DAG of steps for one goal; ``version`` grows with every replan."""

    id: str = attrs.field(validator=_id)
    goal: str
    version: int = attrs.field(default=1, validator=_counter)
    steps: tuple[PlanStep, ...] = ()
    reason: str = ""
    requires_approval: bool = False

    def __attrs_post_init__(self) -> None:
        if self.steps and not same_step_ids(self.steps):
            ids = [step.id for step in self.steps]
            if len(set(ids)) != len(ids):
                raise ValueError(f"plan {self.id}: step ids must be unique")
            steps_unique(self.steps)


@attrs.frozen(kw_only=True)
class Observation:
    """What one step (or one inner step of an agent) produced. Findings are kept by id (E5).

    ``output`` is stored in the typed encoding (``storage/_values.py``), so it reads back as
    the value it was (E10). ``redacted`` says the stored output is not what the step returned:
    redaction masked something in it (E5), so it must not be replayed as if it were.

    ``code`` says why a step did not simply succeed or fail in its own code, or is None:
    ``"cancelled"``, ``"stopped"``, ``"agent-failed"``, ``"agent-timeout"``,
    ``"step-timeout"``, ``"agent-call-budget"``, ``"agent-tool-budget"``,
    ``"finding-contract"``, ``"agent-not-enabled"`` or ``"agent-waiting"``.

    A step that raised keeps why (O2): ``error_type`` (the exception's class name) and a
    bounded, redacted ``traceback``. ``started_at`` and ``ended_at`` say when the step (its
    last attempt) ran, on the runtime's wall clock; all four are None on observations stored
    before they were kept, and for steps that never ran (skipped, cancelled).
    """

    step_id: str = attrs.field(validator=_id)
    tool: str | None = None
    skill: str | None = None
    agent: str | None = None
    agent_task_id: str | None = attrs.field(default=None, validator=_optional_id)
    ok: bool
    output: Any = attrs.field(default=None, eq=attrs.cmp_using(eq=same_value))
    error: str | None = None
    code: ObservationCode | None = attrs.field(
        default=None, validator=one_of(ObservationCode, optional=True)
    )
    data: dict[str, Any] = attrs.field(factory=dict)
    finding_ids: tuple[str, ...] = attrs.field(default=(), validator=_ids)
    calls_used: int = _counter_field()
    redacted: bool = False
    error_type: str | None = attrs.field(default=None, validator=_text_at_most(MAX_ERROR_TYPE))
    traceback: str | None = attrs.field(default=None, validator=_text_at_most(MAX_TRACEBACK))
    started_at: float | None = None
    ended_at: float | None = None
    # The output's stored bytes, made once where the output was, travel beside the
    # observation (storage._carried), not in it: the record stays plain data (E10).


#: A checkpoint's dimensions that can be absent at capture (see ``Checkpoint.absent``).
AbsentDimension = Literal["git", "git_head", "config"]


@attrs.frozen(kw_only=True)
class Checkpoint:
    """The workspace as it was (R6).

    ``absent`` records what was missing at capture: ``git`` (no repository), ``git_head``
    (a repository whose HEAD named no commit yet), ``config`` (no configuration); one of them
    appearing later is drift. A dimension left ``None`` and not listed in ``absent`` was not
    recorded (a checkpoint written before the dimension existed) and is not compared.
    """

    at: float
    plan_version: int = attrs.field(validator=_counter)
    git_head: str | None = None
    file_hashes: dict[str, str] | None = None
    config_hash: str | None = None
    skill_versions: dict[str, str] | None = None
    completed_steps: tuple[str, ...] = attrs.field(default=(), validator=_ids)
    tool_hashes: dict[str, str] | None = None
    absent: tuple[AbsentDimension, ...] = attrs.field(default=(), validator=_absent)


# -- agent tasks ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Interruption:
    """Why a task went back to ``queued``: an explanation, not a state (R3). ``budget``: the
    run's budget ran out while the task needed more calls (P4)."""

    kind: Literal["crash", "pause", "parent-cancel", "budget"] = attrs.field(
        validator=attrs.validators.in_(("crash", "pause", "parent-cancel", "budget"))
    )
    at: float
    detail: str = ""


@attrs.frozen(kw_only=True)
class Evidence:
    """One item of a finding's evidence: its ``kind`` (``file``, ``url``, ``note``...),
    ``ref`` (where: a path, a URL, an id), ``detail`` (what it shows) and the inner step
    that produced it, if any."""

    kind: str = attrs.field(validator=_kind)
    ref: str = ""
    detail: str = ""
    step_id: str | None = attrs.field(default=None, validator=_optional_id)


@attrs.frozen(kw_only=True)
class Provenance:
    """Where a finding was made: the execution and the plan version it ran under."""

    execution_id: str = attrs.field(validator=_id)
    plan_version: int = attrs.field(validator=_counter)


#: A finding is active until a later one supersedes or contradicts it.
FindingStatus = Literal["active", "superseded", "contradicted"]


@attrs.frozen(kw_only=True)
class Finding:
    """A claim an agent reports, with its evidence; stored once, on its agent task (E5).

    ``status`` is ``"active"`` until a later finding supersedes it (``"superseded"``;
    ``superseded_by`` is the later one's id) or contradicts it (``"contradicted"``).
    ``agent_id``, ``task_id`` and ``provenance`` are set by the runtime (None on findings
    stored before they existed). Findings stored with evidence as plain strings and
    provenance as a string still parse: see :func:`_structure_finding`.
    """

    id: str = attrs.field(validator=_id)
    claim: str
    type: str = ""
    subject: str = ""
    verdict: str = ""
    confidence: float = attrs.field(default=0.0, validator=_unit)
    coverage: float = attrs.field(default=0.0, validator=_unit)
    evidence: tuple[Evidence, ...] = attrs.field(default=(), validator=_at_most(MAX_EVIDENCE))
    source_steps: tuple[str, ...] = attrs.field(default=(), validator=_ids)
    provenance: Provenance | None = None
    status: FindingStatus = attrs.field(
        default="active", validator=attrs.validators.in_(("active", "superseded", "contradicted"))
    )
    superseded_by: str | None = attrs.field(default=None, validator=_optional_id)
    created_at: float = 0.0
    agent_id: str | None = attrs.field(default=None, validator=_optional_id)
    task_id: str | None = attrs.field(default=None, validator=_optional_id)


@attrs.frozen(kw_only=True)
class Failure:
    """Why an agent task failed: a short code and a human message; when the agent raised,
    the exception's class name and a bounded, redacted traceback (O2; None on failures
    stored before they were kept, and on failures no exception caused)."""

    code: str
    message: str
    error_type: str | None = attrs.field(default=None, validator=_text_at_most(MAX_ERROR_TYPE))
    traceback: str | None = attrs.field(default=None, validator=_text_at_most(MAX_TRACEBACK))


@attrs.frozen(kw_only=True)
class AgentTaskRecord:
    """One agent step's durable state (``v: 1``); validated on read, fail-closed (E8)."""

    v: Literal[1] = 1
    id: str = attrs.field(validator=_id)
    agent_id: str = attrs.field(validator=_id)
    step_id: str = attrs.field(validator=_id)
    state: TaskState = attrs.field(default=TaskState.CREATED, converter=task_state)
    created_at: float
    updated_at: float
    started_at: float | None = None
    ended_at: float | None = None
    interruption: Interruption | None = None
    execution_id: str = attrs.field(validator=_id)
    plan_version: int = attrs.field(default=1, validator=_counter)
    definition_hash: str = ""
    envelope_hash: str = ""
    #: The agent definition hash a resume kept this completed task's result under (R7: not
    #: run again) when it differs from ``definition_hash``, the one it ran under; empty if
    #: never (stored only when set).
    kept_under_definition: str = ""
    input_hash: str = ""
    attempt: int = attrs.field(default=1, validator=_counter)
    inner_plan: Plan | None = None
    inner_completed: tuple[str, ...] = attrs.field(default=(), validator=_ids)
    inner_observations: tuple[Observation, ...] = ()
    inner_observations_omitted: int = _counter_field()
    inner_checkpoint: Checkpoint | None = None
    touched_paths: tuple[str, ...] = attrs.field(default=(), validator=_paths)
    pending_question: str | None = None
    pending_question_at: float | None = None
    answered_at: float | None = None
    answer_sha256: str | None = attrs.field(default=None, validator=_optional_digest)
    inner_steps_total: int = _counter_field()
    inner_steps_done: int = _counter_field()
    calls_reserved: int = _counter_field()
    calls_used: int = _counter_field()
    calls_refunded: int = _counter_field()
    tool_calls_used: int = _counter_field()
    #: Tokens and cost its model calls reported (B3): only grows, like ``calls_used``.
    usage: Usage = NO_USAGE
    findings: tuple[Finding, ...] = attrs.field(default=(), validator=_at_most(MAX_FINDINGS))
    diagnostics: tuple[str, ...] = attrs.field(default=(), validator=_at_most(MAX_DIAGNOSTICS))
    failure: Failure | None = None

    def __attrs_post_init__(self) -> None:
        if self.attempt < 1:
            raise ValueError("attempt must be at least 1")

    @property
    def terminal(self) -> bool:
        """True once the task completed, failed or was cancelled (sticky, R11)."""
        return self.state in TASK_TERMINAL


#: An item of ``Execution.agent_tasks``: the record, or what was stored if it does not parse.
TaskEntry = AgentTaskRecord | Unreadable


def _task_entries(value: Iterable[AgentTaskRecord | Unreadable | dict[str, Any]]) -> Any:
    """The agent tasks as the execution holds them: a run's persistent sequence as it is;
    stored objects (an execution built from stored data) held as read, each parsed once
    when first looked at (``_stored_form.held_entries``, E8)."""
    if type(value) is Vector:
        return value  # a run's versions of its tasks, made of records
    items = value if type(value) is tuple or type(value) is Entries else tuple(value)
    if type(items) is Entries or dict in map(type, items):  # (in C: an evolve costs no loop)
        from ._stored_form import held_entries

        return held_entries(items, AgentTaskRecord)
    return items


# -- executions ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Lease:
    """Who may write an execution, until when, and a fencing epoch that only grows (L1)."""

    owner: str
    expires_at: float
    epoch: int = attrs.field(validator=_counter)


@attrs.frozen(kw_only=True)
class BudgetInfo:
    """What a run waiting for budget has used, may use, and needs (P4, B3).

    ``budget`` names the budget that is exhausted: ``calls``, ``tokens`` or ``cost``.
    ``needed`` is how many more calls the rest of the plan would hold (a skill 1, an agent
    its reservation): ``max_calls`` of at least ``calls_used + needed`` lets every step
    start. Tokens and cost are known only once spent, so none is predicted: ``usage`` and
    the limits say where the run stands.
    """

    calls_used: int = _counter_field()
    max_calls: int = _counter_field()
    needed: int = _counter_field()
    budget: Literal["calls", "tokens", "cost"] = attrs.field(
        default="calls", validator=attrs.validators.in_(("calls", "tokens", "cost"))
    )
    usage: Usage = NO_USAGE
    max_tokens: int | None = None
    max_cost: Decimal | None = None


@attrs.frozen(kw_only=True)
class Pending:
    """The one open question of an execution (R9): first wins."""

    kind: Literal["approval", "clarification", "budget"] = attrs.field(
        validator=attrs.validators.in_(("approval", "clarification", "budget"))
    )
    question: str = ""
    budget: BudgetInfo | None = None
    agent_task_id: str | None = attrs.field(default=None, validator=_optional_id)
    asked_at: float | None = None  # None on records stored before it was kept


@attrs.frozen(kw_only=True)
class Control:
    """An audit line: who paused / resumed / cancelled / answered, when and why."""

    action: Literal["pause", "resume", "cancel", "answer", "approve", "stop-task"] = attrs.field(
        validator=attrs.validators.in_(
            ("pause", "resume", "cancel", "answer", "approve", "stop-task")
        )
    )
    by: str
    at: float
    #: Free text: why (a pause's, a cancel's reason), never an encoded value.
    reason: str = ""
    #: For a ``stop-task`` line: the stop request it wrote (its operation id ties the
    #: request to who asked, V3). None for every other action.
    stop: StopRequest | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(StopRequest))
    )
    #: For an answer: the sha256 of the answer's text as given (before redaction), so an
    #: audit can tell which answer was given without the record keeping it.
    answer_sha256: str | None = attrs.field(default=None, validator=_optional_digest)


@attrs.frozen(kw_only=True)
class AnswerRequest:
    """An answer given for an agent task that a run live somewhere holds (R8): written to the
    record by whoever answered, applied by that run at its next heartbeat (or by the next
    resume, wherever). Kept as stored: ``answer`` is already redacted, ``answer_sha256`` is
    the digest of the text as given."""

    task_id: str = attrs.field(validator=_id)
    #: The question it answers (stored as its ask step, ``ask.0``, ``ask.1``...), so an
    #: answer never lands on a later question of the same task (None: the question open now).
    ask: QuestionId | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(QuestionId))
    )
    answer: str
    redacted: bool = False
    answer_sha256: str = attrs.field(validator=_optional_digest)
    by: str
    at: float


@attrs.frozen(kw_only=True)
class Execution:
    """One durable run. Its ``agent_tasks`` are read one by one: an
    :class:`AgentTaskRecord`, or an :class:`Unreadable` for one that does not parse (E8)."""

    v: Literal[1] = 1
    id: str = attrs.field(validator=_id)
    goal: str
    status: ExecutionStatus = attrs.field(
        default=ExecutionStatus.PLANNED, converter=execution_status
    )
    plan: Plan | None = None
    plan_version: int = attrs.field(default=0, validator=_counter)
    completed_steps: tuple[str, ...] = attrs.field(default=(), validator=_ids)
    observations: tuple[Observation, ...] = ()
    checkpoints: tuple[Checkpoint, ...] = attrs.field(
        default=(), validator=_at_most(MAX_CHECKPOINTS)
    )
    pending: Pending | None = None
    lease: Lease | None = None
    calls_used: int = _counter_field()
    max_calls: int | None = attrs.field(default=None, validator=attrs.validators.optional(_counter))
    replans: int = _counter_field()  # plans replaced after a failure, counted for max_replans
    #: Tokens and cost the run's model calls reported, across resumes (B3, like calls_used);
    #: ``max_tokens`` (input and output together) and ``max_cost`` bound them (None: the
    #: runtime's default).
    usage: Usage = NO_USAGE
    max_tokens: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(valid_tokens)
    )
    max_cost: Decimal | None = attrs.field(
        default=None, validator=attrs.validators.optional(valid_cost)
    )
    # As read from a store: ``Entries``, each parsed once when first looked at; one that
    # does not parse is an Unreadable (E7, E8). Stores diff a commit against the last one
    # by identity first (records are frozen).
    agent_tasks: tuple[TaskEntry, ...] = attrs.field(default=(), converter=_task_entries)
    agent_tasks_dropped: int = _counter_field()
    controls: tuple[Control, ...] = attrs.field(default=(), validator=_at_most(MAX_CONTROLS))
    #: The approvals given for this plan version and earlier ones (the last MAX_CONTROLS).
    approvals: tuple[Approval, ...] = attrs.field(default=(), validator=_at_most(MAX_CONTROLS))
    #: Stops asked for and not yet applied by the run that holds the task (S1).
    stop_requests: tuple[StopRequest, ...] = attrs.field(
        default=(), validator=_at_most(MAX_CONTROLS)
    )
    answer_requests: tuple[AnswerRequest, ...] = attrs.field(
        default=(), validator=_at_most(MAX_CONTROLS)
    )
    # E10: steps whose stored input had to be masked; after a resume they cannot run with
    # the input they were planned with.
    masked_inputs: tuple[str, ...] = attrs.field(default=(), validator=_ids)
    # B1: when the run's deadline passes (wall-clock, absolute: it survives resumes); None:
    # no deadline. Its expiry pauses the run with ``Timeout``.
    deadline_at: float | None = None
    # External agent workers (storage._workers): read one by one, like ``agent_tasks``
    # (E8): the workers by worker id, the tasks they serve by agent task id, and the
    # diagnostic trail (oldest first, the last MAX_TRAIL entries).
    workers: tuple[WorkerEntry, ...] = attrs.field(default=(), converter=worker_entries)
    worker_tasks: tuple[WorkerTaskEntry, ...] = attrs.field(
        default=(), converter=worker_task_entries
    )
    worker_trail: tuple[TrailItem, ...] = attrs.field(default=(), converter=trail_entries)
    # The sha256 of the run's sealed proof, once it was finalized (executions._workers.fleet).
    proof_digest: str | None = attrs.field(default=None, validator=_optional_digest)
    #: O1: the W3C traceparent of the span of the execution's first traced run: every later
    #: run of it (a resume, a recovery, in any process) continues that trace. None: never
    #: traced. Written only when set, so a record without it reads as before.
    trace_context: str | None = attrs.field(default=None, validator=_optional_traceparent)
    created_at: float
    updated_at: float

    @property
    def terminal(self) -> bool:
        """True once the execution completed, failed or was cancelled (sticky, E2)."""
        return self.status in EXECUTION_TERMINAL

    @property
    def task_records(self) -> list[AgentTaskRecord]:
        """The agent task records that parsed, in order (E8: the others are left out)."""
        return [task for task in self.agent_tasks if type(task) is AgentTaskRecord]

    @property
    def unreadable_tasks(self) -> list[Unreadable]:
        """The stored agent task records that did not parse, kept as they were (E7, E8)."""
        return [task for task in self.agent_tasks if type(task) is Unreadable]


def parse_agent_task(raw: dict[str, Any]) -> AgentTaskRecord | None:
    """One stored agent task record (as stored: a dict), or None if it does not parse:
    fail-closed (E8), never coerced. An execution's are parsed where they are looked at
    (its ``agent_tasks``); this is for a record held as stored data."""
    try:
        return structure(raw, AgentTaskRecord)
    except RecordError:
        return None


def parse_agent_tasks(execution: Execution) -> tuple[list[AgentTaskRecord], int]:
    """The execution's agent task records that parsed, and how many did not (its
    :class:`Unreadable` entries); each is parsed once, the first time it is looked at.

    Fail-closed per record (E8): a record with unknown keys, a version other than 1, a counter
    out of range or too many findings is left out of the view and counted, never coerced.
    Reading never writes (E7): the execution is not changed.
    """
    tasks = execution.task_records
    return tasks, len(execution.agent_tasks) - len(tasks)


# The converter hooks of these records (versions required, the typed encoding of user values,
# fields omitted while unset, the first formats read) live in ``_record_codec``; imported
# here, last, so no record is ever structured without them.
from . import _record_codec  # noqa: E402, F401
