"""What ``show`` says about how a run's steps ended (O2): the counts by outcome, how long
each step ran, and each failure with its error, and with ``--traceback`` the traceback kept
for it (a step, each of its attempts, an agent task, the planner). Read leniently from the
record: what is missing is left out, never fatal (reads never write, E7)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..storage import AgentTaskRecord, Execution, Observation, redact
from ._output import clamp

__all__ = ["duration", "failure_lines", "run_observation", "span", "step_counts"]

#: How the counts are ordered; statuses not listed here come last.
_ORDER = ("succeeded", "failed", "skipped", "cancelled", "stopped", "running", "pending")
#: How much of one traceback ``show`` prints (lines, and characters per line).
_MAX_LINES = 200
_LINE_WIDTH = 400


def step_counts(execution: Execution) -> str:
    """``1 succeeded, 1 failed, 2 skipped of 4``: each outcome counted, never a failed step
    counted as done."""
    plan = execution.plan
    if plan is None or not plan.steps:
        return "no plan yet"
    counts: dict[str, int] = {}
    for step in plan.steps:
        counts[step.status] = counts.get(step.status, 0) + 1
    order = [*_ORDER, *sorted(set(counts) - set(_ORDER))]
    parts = [f"{counts[status]} {status}" for status in order if status in counts]
    return f"{', '.join(parts)} of {len(plan.steps)}"


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def run_observation(execution: Execution) -> Observation | None:
    """The run's own failed observation (why the planner or the run failed): kept under the
    id ``plan``, naming no tool, skill or agent. A plan step may be called ``plan`` too; its
    observation names what it ran, and it is never shown as the planner's."""
    for obs in execution.observations:
        if obs.step_id == "plan" and not obs.ok and obs.tool is obs.skill is obs.agent is None:
            return obs
    return None


def duration(observation: Observation | None) -> str:
    """How long the step (its last attempt) ran, or ``-`` when the record does not say."""
    if observation is None:
        return "-"
    return span(observation.started_at, observation.ended_at) or "-"


def span(start: Any, end: Any) -> str | None:
    """How long from ``start`` to ``end`` (as read from a record: either may be missing or
    not a number), or None."""
    first, last = _finite(start), _finite(end)
    if first is None or last is None:
        return None
    return _seconds(max(0.0, last - first))


def _seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.3f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{rest:02d}s" if hours else f"{minutes}m{rest:02d}s"


def _traceback(text: str) -> list[str]:
    """A kept traceback as lines to print: indented, redacted again, every character a
    terminal would act on shown as its escape (stored text is anyone's), bounded."""
    lines: list[str] = []
    kept = redact(text).splitlines()
    if len(kept) > _MAX_LINES:  # its end is kept: the exception's own line says most
        lines.append(
            f"      [traceback cut: its first {len(kept) - _MAX_LINES} lines are left out]"
        )
        kept = kept[-_MAX_LINES:]
    for raw in kept:
        body = raw.lstrip(" ")
        indent = " " * min(len(raw) - len(body), 40)
        shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in body)
        if len(shown) > _LINE_WIDTH:  # its start and its end (an exception's line ends it)
            half = _LINE_WIDTH // 2
            shown = f"{shown[:half]} … {shown[-half:]}"
        lines.append(f"      {indent}{shown}")
    return lines


def _attempt_tracebacks(observation: Observation) -> list[str]:
    raw = observation.data.get("attempts")
    if type(raw) is not list:
        return []
    lines: list[str] = []
    for item in raw[:100]:
        if type(item) is not dict or type(item.get("traceback")) is not str:
            continue
        lines.append(f"    attempt {item.get('attempt')}:")
        lines += _traceback(item["traceback"])
    return lines


def failure_lines(
    execution: Execution, tasks: Sequence[AgentTaskRecord], *, tracebacks: bool
) -> list[str]:
    """One line per failed step (and a failed planner) with its error; with ``tracebacks``,
    the traceback kept for it (every attempt's, for a retried step; the task's, for an
    agent), or a note that none was kept."""
    by_id = {obs.step_id: obs for obs in execution.observations}
    failures = {task.id: task.failure for task in tasks if task.failure is not None}
    lines: list[str] = []
    steps = execution.plan.steps if execution.plan is not None else ()
    for step in steps:
        obs = by_id.get(step.id)
        if step.status != "failed" or obs is None:
            continue
        task = f", task {obs.agent_task_id}" if obs.agent_task_id else ""
        lines.append(
            f"  step {step.id} ({step.kind} {step.target}{task}): {clamp(obs.error or '', 300)}"
        )
        if not tracebacks:
            continue
        kept = _attempt_tracebacks(obs)
        failure = failures.get(obs.agent_task_id or "")
        text = obs.traceback or (failure.traceback if failure is not None else None)
        if not kept and text:
            kept = _traceback(text)
        lines += kept or ["    (no traceback was kept: no exception caused it)"]
    plan = run_observation(execution)
    # A planner that raised (the run's other errors are on the "why:" line).
    if plan is not None and plan.error_type is not None:
        lines.append(f"  planner: {clamp(plan.error or plan.error_type, 300)}")
        if tracebacks and plan.traceback:
            lines += _traceback(plan.traceback)
    return lines
