"""What a run says in the application's log, through stdlib ``logging`` (and where the
durable layer's other loggers are).

One logger per job, each under ``mainspring`` (whose ``NullHandler`` keeps everything silent
until the application configures logging, O1):

- ``mainspring.executions``: a run's lifecycle (started, resumed, waiting, paused, cancelled,
  completed, failed) and the controls issued to it at INFO; its steps and agent tasks
  starting and ending at DEBUG, with their durations; a failed attempt that will be retried
  at WARNING and a step or run that failed for good at ERROR, with its redacted traceback
  (``_steps.failures.log_failure``, O2), as is an agent task's or the run's actor that
  crashed (the kernel leaves those to this logger) and a run stopped by a failed write;
  takeovers from a gone owner and lost leases at WARNING, a run taken up again after a
  shutdown at INFO.
- ``mainspring.workers``: the fleet's external agent processes changing state (a takeover
  or a blocked worker at WARNING).
- ``mainspring.memory`` (``_memory.memory``): a search that could not rank by meaning.

Invariant O1 (V1, E5): a record carries ids, states, counts and durations, in its message
and as attributes (``extra``: ``execution_id``, ``step_id``, ``task_id``, ``worker_id``,
``attempt``, ``status``, ``reason``, ``duration``...) so that a structured handler gets
fields; never text an agent, a tool or a user wrote. ``reason`` is a cancel reason's kind
(``pause``, ``cancel``, ``timeout``, ``lease-lost``...), never its free-text detail.

Cost: messages are %-formatted by ``logging`` only when a handler emits them, and whatever
a record needs built is built only after ``isEnabledFor`` said it will be kept: a run with
logging unconfigured pays one level check per event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...actors import CancelReason, LeaseLost
from ...storage import redact
from .._steps.failures import clamp_message
from . import events as ev

__all__ = [
    "EXECUTIONS",
    "WORKERS",
    "control",
    "lease_lost",
    "recovered",
    "run_event",
    "step_finished",
    "step_started",
    "steps_logged",
    "stopped_for_later",
    "writes_failed",
]

EXECUTIONS = logging.getLogger("mainspring.executions")
WORKERS = logging.getLogger("mainspring.workers")

_DEBUG = logging.DEBUG
_INFO = logging.INFO
_WARNING = logging.WARNING


def _owner(owner: str | None) -> str | None:
    """An owner id as a record carries it. It is read from the store, where anyone sharing
    it may have written it: shown as :func:`_shown` shows it."""
    return _shown(owner) if owner is not None else None


def _shown(text: str) -> str:
    """Text that is anyone's (read from the store, an error's message) as a record carries
    it: redacted as everything stored is (E5), cut, and with the characters a terminal
    would act on shown as escapes."""
    text = clamp_message(redact(text))
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _kind(reason: CancelReason | None) -> str | None:
    """A reason as a log names it: its kind, the root's for a parent's cancel."""
    return reason.root.kind if reason is not None else None


# -- a run's events ----------------------------------------------------------------------------


def run_event(event: ev.RunEvent, reason: CancelReason | None = None) -> None:
    """Log ``event`` (published by a run or by a control) at its level; ``reason``: what
    stopped the run, for a pause or a cancel. Step events are logged by
    :func:`step_started` and :func:`step_finished` (they are built only when heard)."""
    say = _SAID.get(type(event))
    if say is not None:
        say(event, reason)


def _started(event: Any, _: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_INFO):
        EXECUTIONS.info(
            "execution %s started (plan=v%d, steps=%d)",
            event.execution_id,
            event.plan_version,
            event.steps,
            extra={
                "execution_id": event.execution_id,
                "status": "running",
                "plan_version": event.plan_version,
                "steps": event.steps,
            },
        )


def _resumed(event: Any, _: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_INFO):
        EXECUTIONS.info(
            "execution %s resumed (done=%d%s)",
            event.execution_id,
            event.completed,
            ", drifted: it replans" if event.drifted else "",
            extra={
                "execution_id": event.execution_id,
                "completed": event.completed,
                "drifted": event.drifted,
            },
        )


def _waiting(event: Any, _: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_INFO):
        EXECUTIONS.info(
            "execution %s is %s",
            event.execution_id,
            event.status,
            extra={
                "execution_id": event.execution_id,
                "status": event.status,
                "task_id": event.task_id,
            },
        )


def _paused(event: Any, reason: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_INFO):
        kind = _kind(reason) or event.cause
        EXECUTIONS.info(
            "execution %s paused (reason=%s, requeued=%d)",
            event.execution_id,
            kind,
            event.requeued,
            extra={
                "execution_id": event.execution_id,
                "status": "paused",
                "reason": kind,
                "requeued": event.requeued,
            },
        )


def _cancelled(event: Any, reason: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_INFO):
        kind = _kind(reason) or "cancel"
        EXECUTIONS.info(
            "execution %s cancelled (reason=%s, cancelled_tasks=%d)",
            event.execution_id,
            kind,
            event.cancelled_tasks,
            extra={
                "execution_id": event.execution_id,
                "status": "cancelled",
                "reason": kind,
                "cancelled_tasks": event.cancelled_tasks,
            },
        )


def _completed(event: Any, _: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_INFO):
        EXECUTIONS.info(
            "execution %s completed (steps=%d, calls=%d)",
            event.execution_id,
            event.steps,
            event.calls_used,
            extra={
                "execution_id": event.execution_id,
                "status": "completed",
                "steps": event.steps,
                "calls_used": event.calls_used,
            },
        )


def _failed(event: Any, _: CancelReason | None) -> None:
    # O2: why it failed is logged once, at ERROR, where the failure was found (the step's
    # or the run's own); this is the lifecycle's line.
    if EXECUTIONS.isEnabledFor(_INFO):
        EXECUTIONS.info(
            "execution %s failed (failed_steps=%d)",
            event.execution_id,
            event.failed,
            extra={
                "execution_id": event.execution_id,
                "status": event.status,
                "failed": event.failed,
            },
        )


def _task_started(event: Any, _: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_DEBUG):
        EXECUTIONS.debug(
            "execution %s: agent task %s of step %s started (calls_reserved=%d)",
            event.execution_id,
            event.task_id,
            event.step_id,
            event.calls_reserved,
            extra={
                "execution_id": event.execution_id,
                "step_id": event.step_id,
                "task_id": event.task_id,
                "calls_reserved": event.calls_reserved,
            },
        )


def _task_progress(event: Any, _: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_DEBUG):
        EXECUTIONS.debug(
            "execution %s: agent task %s progressed (inner_done=%d, calls=%d)",
            event.execution_id,
            event.task_id,
            event.inner_done,
            event.calls_used,
            extra={
                "execution_id": event.execution_id,
                "task_id": event.task_id,
                "inner_done": event.inner_done,
                "calls_used": event.calls_used,
            },
        )


def _task_waiting(event: Any, _: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_INFO):
        EXECUTIONS.info(
            "execution %s: agent task %s waits for an answer",
            event.execution_id,
            event.task_id,
            extra={
                "execution_id": event.execution_id,
                "task_id": event.task_id,
                "status": "waiting_for_clarification",
            },
        )


def _task_ended(event: Any, _: CancelReason | None) -> None:
    # A failed task's failure is logged where it was found (O2); this is its end.
    if EXECUTIONS.isEnabledFor(_DEBUG):
        EXECUTIONS.debug(
            "execution %s: agent task %s %s (calls=%d)",
            event.execution_id,
            event.task_id,
            event.state,
            event.calls_used,
            extra={
                "execution_id": event.execution_id,
                "task_id": event.task_id,
                "status": event.state,
                "calls_used": event.calls_used,
            },
        )


def _task_stopped(event: Any, _: CancelReason | None) -> None:
    if EXECUTIONS.isEnabledFor(_INFO):
        EXECUTIONS.info(
            "execution %s: agent task %s stopped (operation=%s)",
            event.execution_id,
            event.task_id,
            event.operation_id,
            extra={
                "execution_id": event.execution_id,
                "task_id": event.task_id,
                "status": event.state,
                "operation_id": event.operation_id,
            },
        )


#: Worker moves that happen at every turn of an agent: at DEBUG, not to flood INFO.
_BUSY = frozenset({"running", "idle"})


def _worker(event: Any, _: CancelReason | None) -> None:
    if event.reason == "takeover" or event.status == "blocked":
        level = _WARNING
    else:
        level = _DEBUG if event.status in _BUSY else _INFO
    if WORKERS.isEnabledFor(level):
        WORKERS.log(
            level,
            "execution %s: worker %s of agent task %s is %s (generation=%d, reason=%s)",
            event.execution_id,
            event.worker_id,
            event.task_id,
            event.status,
            event.generation,
            event.reason,
            extra={
                "execution_id": event.execution_id,
                "worker_id": event.worker_id,
                "task_id": event.task_id,
                "step_id": event.step_id,
                "status": event.status,
                "generation": event.generation,
                "reason": event.reason,
            },
        )


#: What logs each event (the step events have their own functions, below).
_SAID: dict[type[Any], Callable[[Any, CancelReason | None], None]] = {
    ev.ExecutionStarted: _started,
    ev.ExecutionResumed: _resumed,
    ev.ExecutionWaiting: _waiting,
    ev.ExecutionPaused: _paused,
    ev.ExecutionCancelled: _cancelled,
    ev.ExecutionCompleted: _completed,
    ev.ExecutionFailed: _failed,
    ev.AgentTaskStarted: _task_started,
    ev.AgentTaskProgress: _task_progress,
    ev.AgentTaskWaiting: _task_waiting,
    ev.AgentTaskCompleted: _task_ended,
    ev.AgentTaskStopped: _task_stopped,
    ev.WorkerChanged: _worker,
}


# -- steps (DEBUG) -----------------------------------------------------------------------------


def steps_logged() -> bool:
    """Whether a step's start and end are logged now: guard whatever they need built."""
    return EXECUTIONS.isEnabledFor(_DEBUG)


def step_started(execution_id: str, step_id: str, kind: str, target: str) -> None:
    EXECUTIONS.debug(
        "execution %s: step %s (%s %s) started",
        execution_id,
        step_id,
        kind,
        target,
        extra={"execution_id": execution_id, "step_id": step_id, "kind": kind},
    )


def step_finished(
    execution_id: str,
    step_id: str,
    state: str,
    duration: float | None,
    attempt: int | None,
    done: int,
    total: int,
) -> None:
    """A step ended ``state`` after ``duration`` seconds (None: it never ran, e.g. skipped),
    on ``attempt`` when it had a retry policy; ``done`` of ``total`` steps are finished."""
    took = ""
    if duration is not None:
        took = f" in {duration * 1000:.1f} ms" if duration < 1 else f" in {duration:.2f} s"
    EXECUTIONS.debug(
        "execution %s: step %s %s%s (%sfinished=%d/%d)",
        execution_id,
        step_id,
        state,
        took,
        f"attempt={attempt}, " if attempt is not None else "",
        done,
        total,
        extra={
            "execution_id": execution_id,
            "step_id": step_id,
            "status": state,
            "duration": duration,
            "attempt": attempt,
            "done": done,
            "total": total,
        },
    )


# -- controls, ends, leases, recoveries -------------------------------------------------------


def control(execution_id: str, what: str, *, live: bool, task_id: str | None = None) -> None:
    """A control issued through this runtime: ``what`` is ``pause``, ``cancel``, ``answer``
    or ``stop-task``; ``live``: the run is live in this runtime (else the record carries
    it to whoever runs it)."""
    if EXECUTIONS.isEnabledFor(_INFO):
        EXECUTIONS.info(
            "execution %s: %s issued (%s)",
            execution_id,
            what,
            "live here" if live else "through the store",
            extra={
                "execution_id": execution_id,
                "control": what,
                "task_id": task_id,
                "live": live,
            },
        )


def stopped_for_later(execution_id: str, reason: CancelReason) -> None:
    """The run stopped here without an end of its own (a shutdown): left as it is on disk,
    for a resume or a recovery (R3)."""
    if EXECUTIONS.isEnabledFor(_INFO):
        kind = _kind(reason)
        EXECUTIONS.info(
            "execution %s stopped here (reason=%s); left for a resume",
            execution_id,
            kind,
            extra={"execution_id": execution_id, "status": "running", "reason": kind},
        )


def lease_lost(execution_id: str, reason: LeaseLost, refused: str | None) -> None:
    """E3: the run stops here because another owner may hold it (``refused``: the store's
    answer that said so, None when the answer came too late)."""
    if EXECUTIONS.isEnabledFor(_WARNING):
        holder = _owner(reason.owner or None)
        EXECUTIONS.warning(
            "execution %s lost its lease (%s, holder=%s): it stops here and writes nothing more",
            execution_id,
            f"commit refused: {refused}" if refused else "the store answered too late",
            holder,
            extra={
                "execution_id": execution_id,
                "reason": reason.kind,
                "refused": refused,
                "holder": holder,
            },
        )


def writes_failed(execution_id: str, status: str, error: str) -> None:
    """The run stopped because a write of its failed: the writer logged why, once, under
    ``mainspring.storage``; this is the run's end, once (O2). Nothing of it could be saved:
    the store keeps it ``status`` as last saved, for a resume (R3)."""
    if EXECUTIONS.isEnabledFor(logging.ERROR):
        EXECUTIONS.error(
            "execution %s stopped because its writes failed: %s; it is left %s as last "
            "saved, for a resume",
            execution_id,
            _shown(error),
            status,
            extra={"execution_id": execution_id, "status": status, "reason": "crash"},
        )


def recovered(execution_id: str, status: str, previous: str | None, *, recovery: bool) -> None:
    """A run left ``status`` (running, planned) was taken up here (R3), by the runtime's
    recovery or by a resume by hand. ``previous``: the owner that held its lease, gone
    (a crash): a takeover, at WARNING. None: its owner let the lease go as a shutdown does,
    leaving the run for a resume: taking it up is no takeover from a dead owner, at INFO."""
    if previous is None:
        if EXECUTIONS.isEnabledFor(_INFO):
            EXECUTIONS.info(
                "execution %s resumed after a shutdown: it was %s, left for a resume",
                execution_id,
                status,
                extra={
                    "execution_id": execution_id,
                    "status": status,
                    "reason": "shutdown",
                    "previous_owner": None,
                    "recovery": recovery,
                },
            )
        return
    if EXECUTIONS.isEnabledFor(_WARNING):
        owner = _owner(previous)
        EXECUTIONS.warning(
            "execution %s taken over by %s: it was %s and its owner %s was gone",
            execution_id,
            "recovery" if recovery else "a resume",
            status,
            owner,
            extra={
                "execution_id": execution_id,
                "status": status,
                "reason": "owner-gone",
                "previous_owner": owner,
                "recovery": recovery,
            },
        )
