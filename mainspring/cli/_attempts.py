"""What ``show`` says about deadlines and retries (B1): the run's deadline, each step's
limits, and every attempt of a retried step with its error. Read leniently from the record:
an entry that does not parse is left out, never fatal (reads never write, E7)."""

from __future__ import annotations

import time
from typing import Any

from ..storage import Execution
from ._failures import span
from ._output import clamp, when

__all__ = ["attempt_lines", "deadline_line"]


def deadline_line(execution: Execution, now: float | None = None) -> str | None:
    """``deadline: <when>`` (and whether it passed), or None without one."""
    at = execution.deadline_at
    if at is None:
        return None
    passed = " (passed)" if at <= (time.time() if now is None else now) else ""
    return f"deadline: {when(at)}{passed}"


def _entries(data: dict[str, Any]) -> list[dict[str, Any]]:
    raw = data.get("attempts")
    if type(raw) is not list:
        return []
    return [item for item in raw[:100] if type(item) is dict]


def attempt_lines(execution: Execution) -> list[str]:
    """One line per failed attempt of each step that had a retry policy, then how it
    stands: succeeded at attempt n, gave up, or waiting for the next attempt."""
    lines: list[str] = []
    plan = execution.plan
    limits = {step.id: step for step in (plan.steps if plan is not None else ()) if step.timeout}
    for obs in execution.observations:
        entries = _entries(obs.data)
        if not entries:
            continue
        most = obs.data.get("max_attempts")
        of = f" of {most}" if type(most) is int else ""
        for item in entries:
            number = item.get("attempt")
            at = item.get("at")
            stamp = f" {when(at)}" if isinstance(at, int | float) else ""
            took = span(item.get("started_at"), at)  # O2: kept by newer runtimes
            timed = " (timed out)" if item.get("timed_out") is True else ""
            timed += f" after {took}" if took is not None else ""
            error = clamp(str(item.get("error", "")), 160)
            lines.append(
                f"  step {obs.step_id}: attempt {number}{of} failed{stamp}{timed}: {error}"
            )
        last = obs.data.get("attempt")
        if obs.data.get("retrying") is True:
            lines.append(f"  step {obs.step_id}: waiting to try again")
        elif obs.ok and type(last) is int:
            lines.append(f"  step {obs.step_id}: attempt {last}{of} succeeded")
        elif type(last) is int:
            lines.append(f"  step {obs.step_id}: failed for good after attempt {last}{of}")
        elif not obs.ok:  # cancelled while it waited for its next attempt
            lines.append(f"  step {obs.step_id}: stopped before its next attempt")
    for step_id, step in limits.items():
        lines.append(f"  step {step_id}: timeout {step.timeout:g} s")
    return lines
