"""Deadlines and retries as values (B1): the runtime's defaults, the messages a run's timers
send, and the attempts a step has made as its observation keeps them.

Nothing here runs: ``_run_bounds.BoundedRun`` acts on these in an ExecutionActor.

Where a step's limits come from, first match wins:

1. the step itself: ``PlanStep.timeout`` / ``PlanStep.retry``;
2. the runtime's default for its target: ``timeouts={"tool:fetch": 30}``,
   ``retries={"skill:model": RetryPolicy(...)}``;
3. the runtime's default for its kind: ``timeouts={"tool": 600, "agent": None}``;
4. none: no timeout, one attempt.

The planner's timeout is ``timeouts["planner"]``.

Attempts are durable without a record part of their own: while a step waits to be tried
again its observation (``ok=False``) holds ``data["attempts"]``, one entry per failed attempt
(``attempt``, ``error``, ``at``, ``timed_out``), ``data["retrying"] = True`` and
``data["delay"]`` (the seconds before the next attempt); the
observation that ends the step (success or giving up) keeps the list, so ``show`` lists every
attempt. A crash or a pause between attempts therefore does not reset the count.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from ...actors import ActorRef, ActorTask
from ...storage import Execution, Observation, PlanStep, RetryPolicy, redact
from ...storage._seam import MAX_ATTEMPTS, MAX_COUNTER, check_id, check_timeout

__all__ = [
    "MAX_ATTEMPT_ERROR",
    "UNWIND",
    "Attempt",
    "Bounds",
    "DeadlinePassed",
    "PlannerTimedOut",
    "RetryDue",
    "StepTimedOut",
    "UnwindOver",
    "attempts_data",
    "attempts_of",
    "check_bounds",
    "check_deadline",
    "resumed_deadline",
]

KINDS = ("tool", "skill", "agent")
#: How much of each failed attempt's error is kept on the record.
MAX_ATTEMPT_ERROR = 300
#: How many of a step's last failed attempts keep their traceback (O2).
TRACEBACKS_KEPT = 5
#: Bounds of an attempt's exception type name and traceback as read back (O2, X2).
MAX_ERROR_TYPE = 200
MAX_TRACEBACK = 8192


@attrs.frozen(kw_only=True)
class Bounds:
    """The runtime's default timeouts and retry policies, checked (see the module doc)."""

    timeouts: Mapping[str, float | None] = attrs.field(factory=dict)
    retries: Mapping[str, RetryPolicy] = attrs.field(factory=dict)

    def timeout_for(self, step: PlanStep) -> float | None:
        """The step's timeout in seconds, or None (B1)."""
        if step.timeout is not None:
            return step.timeout
        key = f"{step.kind}:{step.target}"
        if key in self.timeouts:
            return self.timeouts[key]
        return self.timeouts.get(step.kind)

    @property
    def planner_timeout(self) -> float | None:
        return self.timeouts.get("planner")

    def retry_for(self, step: PlanStep) -> RetryPolicy | None:
        """The step's retry policy, or None (one attempt). Agents are not retried."""
        if step.kind == "agent":
            return None
        if step.retry is not None:
            return step.retry
        key = f"{step.kind}:{step.target}"
        return self.retries.get(key, self.retries.get(step.kind))


def _check_key(option: str, key: Any, registries: Mapping[str, Mapping[str, Any]]) -> None:
    if not isinstance(key, str):
        raise TypeError(f"{option} keys are strings, not {type(key).__name__}")
    kinds = (*KINDS, "planner") if option == "timeouts" else ("tool", "skill")
    kind, colon, name = key.partition(":")
    # "tool:" would be kept under a key no step is ever looked up by (B1): refused.
    if kind not in kinds or (kind == "planner" and colon) or (colon and not name):
        raise ValueError(
            f"{option} key {key!r}: use a kind ({', '.join(kinds)}) or kind:name "
            f"(e.g. {kinds[0]}:fetch)"
        )
    if name:
        check_id(name)
        if name not in registries[kind]:
            raise ValueError(f"{option} key {key!r}: this runtime has no {kind} {name!r}")


def check_bounds(
    timeouts: Mapping[str, Any] | None,
    retries: Mapping[str, Any] | None,
    registries: Mapping[str, Mapping[str, Any]],
) -> Bounds:
    """``open_runtime``'s ``timeouts`` and ``retries`` checked: keys are a kind or
    ``kind:name`` naming a registered target, timeouts positive and finite (or None),
    policies :class:`RetryPolicy` values. ValueError / TypeError say which entry is wrong."""
    for option, given in (("timeouts", timeouts), ("retries", retries)):
        if given is not None and not isinstance(given, Mapping):
            raise TypeError(f"{option} must be a mapping, not {type(given).__name__}")
    checked_timeouts: dict[str, float | None] = {}
    for key, value in (timeouts or {}).items():
        _check_key("timeouts", key, registries)
        checked_timeouts[key] = check_timeout(value, f"timeouts[{key!r}]")
    checked_retries: dict[str, RetryPolicy] = {}
    for key, value in (retries or {}).items():
        _check_key("retries", key, registries)
        if not isinstance(value, RetryPolicy):
            raise TypeError(f"retries[{key!r}] must be a RetryPolicy, not {type(value).__name__}")
        checked_retries[key] = value
    return Bounds(timeouts=checked_timeouts, retries=checked_retries)


def check_deadline(deadline: Any) -> float | None:
    """A run's ``deadline`` (seconds from now, or None) checked like a timeout."""
    return check_timeout(deadline, "deadline")


def resumed_deadline(
    stored: Execution, record: Execution, deadline: float | None, now: float
) -> Execution:
    """``record`` (what a resume of ``stored`` commits) with the deadline it runs under, the
    ``resume`` audit line saying why when it changed (see :func:`deadline_after_resume`)."""
    at, note = deadline_after_resume(stored, deadline, now)
    if at != record.deadline_at:
        record = attrs.evolve(record, deadline_at=at)
    if note and record.controls and record.controls[-1].action == "resume":
        last = attrs.evolve(record.controls[-1], reason=note)
        record = attrs.evolve(record, controls=(*record.controls[:-1], last))
    return record


def deadline_after_resume(
    stored: Execution, deadline: float | None, now: float
) -> tuple[float | None, str]:
    """The deadline a resume runs under, and a note for the audit line (empty: none).

    ``deadline`` given: a new one, that many seconds from now. Otherwise the stored one
    stands while it has not passed (it is absolute, from the start). One that passed is
    dropped when the run was paused or waiting: resuming is the decision to go on. A run
    left ``running`` (a crash or a shutdown: recover) keeps it, so it stops again with
    ``Timeout`` as soon as it runs (B1)."""
    if deadline is not None:
        return now + deadline, f"new deadline in {deadline:g} s"
    at = stored.deadline_at
    if at is None or at > now or stored.status in ("running", "planned"):
        return at, ""
    return None, "its deadline had passed; resumed without one"


# -- the messages a run's timers send -------------------------------------------------------


@attrs.frozen
class StepTimedOut:
    """``step_id``'s child ``ref`` reached its timeout of ``seconds``."""

    step_id: str
    ref: ActorRef | ActorTask  # an agent task's actor, or a tool or skill step's task
    seconds: float


@attrs.frozen
class PlannerTimedOut:
    ref: ActorRef
    seconds: float


@attrs.frozen
class UnwindOver:
    """Child ``ref`` (of step ``step_id``; ``""``: the planner), cancelled when its timeout
    fired, had its time to unwind (``UNWIND``): if it has not ended, its timeout is recorded
    without it (B1)."""

    step_id: str
    ref: ActorRef | ActorTask


#: How long a child cancelled by its timeout may take to end (its ``finally`` blocks, a
#: program's tree stopped) before its timeout is recorded without waiting for it: code that
#: cannot be interrupted (blocking code in a worker thread) would otherwise keep its step,
#: or the planner, running past its timeout for as long as it blocks (B1).
UNWIND = 5.0


@attrs.frozen
class RetryDue:
    """``step_id`` may be tried again: attempt ``attempt`` starts."""

    step_id: str
    attempt: int


@attrs.frozen
class DeadlinePassed:
    """The run's deadline passed."""


# -- attempts, as an observation keeps them -------------------------------------------------


@attrs.frozen(kw_only=True)
class Attempt:
    """One failed attempt of a step: its number, why it failed, when it ended (``at``) and
    began (``started_at``), and, when it raised, the exception's class name and its bounded,
    redacted traceback (O2; kept on the last ``TRACEBACKS_KEPT`` attempts only)."""

    attempt: int
    error: str
    at: float
    timed_out: bool = False
    started_at: float | None = None
    error_type: str | None = None
    traceback: str | None = None

    def as_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "attempt": self.attempt,
            "error": self.error,
            "at": self.at,
            "timed_out": self.timed_out,
        }
        # O2: written only when known, so attempts stored before read as they were.
        for name in ("started_at", "error_type", "traceback"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _text(value: Any, limit: int) -> str | None:
    return value[:limit] if type(value) is str else None


def _attempt(raw: Any) -> Attempt | None:
    if type(raw) is not dict:
        return None
    number, error, at = raw.get("attempt"), raw.get("error"), raw.get("at")
    if type(number) is not int or not 1 <= number <= MAX_ATTEMPTS or type(error) is not str:
        return None
    if not isinstance(at, int | float) or not math.isfinite(at):
        return None
    return Attempt(
        attempt=number,
        error=error[:MAX_ATTEMPT_ERROR],
        at=float(at),
        timed_out=raw.get("timed_out") is True,
        started_at=_finite(raw.get("started_at")),
        error_type=_text(raw.get("error_type"), MAX_ERROR_TYPE),
        traceback=_text(raw.get("traceback"), MAX_TRACEBACK),
    )


def attempts_of(observation: Observation | None, *, live_only: bool = True) -> list[Attempt]:
    """The failed attempts ``observation`` records (read leniently: an entry that does not
    parse is left out). ``live_only``: only while the step waits to be tried again, so an
    old observation (of a step that ended, then was planned again) starts the count anew."""
    if observation is None or (observation.ok and live_only):
        return []
    data = observation.data
    if live_only and data.get("retrying") is not True:
        return []
    raw = data.get("attempts")
    if type(raw) is not list:
        return []
    return [a for a in (_attempt(item) for item in raw[:MAX_ATTEMPTS]) if a is not None]


def attempts_data(
    attempts: list[Attempt],
    policy: RetryPolicy,
    outcome: Literal["retrying", "ended"],
    delay: float | None = None,
) -> dict[str, Any]:
    """What an observation's ``data`` holds about the attempts (see the module doc); a
    step waiting to be tried again also keeps ``delay``, the seconds it waits (the history's
    ``retry`` entry says it)."""
    kept = attempts[-MAX_ATTEMPTS:]
    # O2: a traceback on the last few attempts only, so the record stays small.
    kept = [
        attrs.evolve(a, traceback=None) if i < len(kept) - TRACEBACKS_KEPT else a
        for i, a in enumerate(kept)
    ]
    data: dict[str, Any] = {
        "attempts": [a.as_data() for a in kept],
        "max_attempts": policy.max_attempts,
    }
    if outcome == "retrying":
        data["retrying"] = True
        if delay is not None:
            data["delay"] = delay
    return data


def new_attempt(
    number: int,
    error: str,
    *,
    timed_out: bool,
    started_at: float | None = None,
    error_type: str | None = None,
    traceback: str | None = None,
) -> Attempt:
    """A failed attempt as it is kept: redacted and clamped (E5); ``traceback`` is one
    already redacted and bounded (O2, ``_failures.describe``)."""
    return Attempt(
        attempt=min(max(number, 1), MAX_ATTEMPTS),
        error=redact(error)[:MAX_ATTEMPT_ERROR],
        at=time.time(),
        timed_out=timed_out,
        started_at=started_at,
        error_type=error_type[:MAX_ERROR_TYPE] if error_type is not None else None,
        traceback=traceback[:MAX_TRACEBACK] if traceback is not None else None,
    )


def error_types(exc: BaseException) -> tuple[str, ...]:
    """The names a :class:`RetryPolicy` matches an exception by: each class of its MRO by
    name and by qualified name (``module.Name``), builtins by name only. An exception group
    (as a task group raises) also goes by each name every error in it has, as ``except*``
    would see them: retried by ``retry_on`` only when each of its errors is."""
    names = _class_names(exc)
    if isinstance(exc, BaseExceptionGroup):
        leaves = _leaves(exc)
        if leaves:
            common = set(_class_names(leaves[0])).intersection(
                *(_class_names(leaf) for leaf in leaves[1:])
            )
            names += [name for name in _class_names(leaves[0]) if name in common]
    return tuple(dict.fromkeys(names))[:64]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending and len(found) < 100:  # bounded: a group may nest deeply
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            found.append(exc)
    return found


def _class_names(exc: BaseException) -> list[str]:
    names: list[str] = []
    for cls in type(exc).__mro__:
        if cls is object:
            continue
        names.append(cls.__name__)
        if cls.__module__ != "builtins":
            names.append(f"{cls.__module__}.{cls.__qualname__}")
    return names


def clamp_seconds(value: float) -> float:
    return min(max(value, 0.0), float(MAX_COUNTER))
