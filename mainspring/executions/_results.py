"""What a run hands back: its result, a stop's answer, summaries; and the hashes and
redaction applied to what a plan declares."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..actors import (
    CancelReason,
)
from ..storage import (
    STEP_FINISHED,
    Execution,
    Finding,
    Observation,
    Pending,
    Plan,
    parse_agent_tasks,
    redact,
    sha256_hex,
)


@attrs.frozen(kw_only=True)
class ExecutionResult:
    """Where a run stands when :meth:`ExecutionHandle.wait` returns.

    ``status`` is the execution's status as last committed (``completed``, ``paused``,
    ``waiting_for_clarification``...). ``outputs`` and ``observations`` hold what steps
    returned, unredacted for steps that ran in this process (E5: only disk is slimmed);
    ``redacted`` names the steps whose output here was read back from disk with secrets
    masked, so it is not what the step returned (E10; their observations say
    ``redacted=True``). ``findings`` are the agents' findings. ``pending`` is the open
    question, if any.
    ``stopped_by`` is the reason the run stopped in this process (None if it did not run
    here); ``error`` says what went wrong when the runtime itself failed.
    """

    execution_id: str
    status: str
    summary: str
    outputs: Mapping[str, Any] = attrs.field(factory=dict)
    redacted: tuple[str, ...] = ()
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
    tasks, _ = parse_agent_tasks(execution)
    findings = [finding for task in tasks for finding in task.findings]
    stored = {obs.step_id: obs.output for obs in execution.observations if obs.ok}
    live = dict(outputs or {})
    merged = {**stored, **live}
    observations = tuple(
        attrs.evolve(obs, output=live[obs.step_id], redacted=False)
        if obs.ok and obs.step_id in live
        else obs
        for obs in execution.observations
    )
    redacted = tuple(obs.step_id for obs in observations if obs.ok and obs.redacted)
    return ExecutionResult(
        execution_id=execution.id,
        status=execution.status,
        summary=summary,
        outputs=merged,
        redacted=redacted,
        observations=observations,
        findings=tuple(findings),
        pending=execution.pending,
        calls_used=execution.calls_used,
        steps_done=done,
        steps_total=total,
        stopped_by=stopped_by,
        error=error,
    )


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


def config_hash(config: Any) -> str | None:
    """The hash a checkpoint keeps of the runtime's ``config`` (R6); None when there is none."""
    if config is None:
        return None
    return sha256_hex(config)
