"""A run's spans (O1): one per run of an execution, one per attempt of each step, one per
call of a tool, skill or program and one per durable inner step of an agent (``ctx.step``).

Attributes are ids, states, counts, durations and usage only (V1): never a goal, an input, an
output or an error message; free text that does reach a span (a cancel reason's detail) is
redacted first (E5). A span ends with the status of what ended it: an exception's type, or
the cancel reason (:func:`mark_cancelled`): ``ERROR`` described by the reason's kind for a
cancel, a timeout, a crash or a lost lease; left unset for a pause, a stop, a shutdown or a
budget wait, which are not failures. Either way an event ``mainspring.cancel`` says which
reason, its root (the reason a ``ParentCancel`` chain started from), its detail and source.

The tree: the run's span is the child of the span current where the run was started or
resumed, or, once the execution has a stored trace context (its first run's span), of that:
every run of one execution shares one trace, in any process. Each attempt of a step is a
span, the run's child. An attempt of a tool or skill step is one call, and its span is both:
named for the call (``mainspring.tool``, ``mainspring.skill``), with the step's ids, kind,
attempt and state, and current while the tool runs, so what the tool itself traces nests
under it. An agent step's attempt is ``mainspring.step``; the agent runs with it current,
and its inner steps and calls are its children, a span each.
"""

from __future__ import annotations

import enum
import inspect
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio
from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode

from ...actors import CancelReason, cancel_reason
from ...storage import Execution, PlanStep, Usage, redact
from .._rules.usage import split_usage
from .carrier import parent_from, traceparent_of
from .metrics import Meters

if TYPE_CHECKING:
    from ...storage import Observation

__all__ = ["RunSpans", "TaskSpans", "mark_cancelled"]

EXECUTION_ID = "mainspring.execution.id"
STEP_ID = "mainspring.step.id"
STEP_KIND = "mainspring.step.kind"
STEP_STATE = "mainspring.step.state"
TARGET = "mainspring.target"
ATTEMPT = "mainspring.step.attempt"
TASK_ID = "mainspring.agent_task.id"
STATUS = "mainspring.execution.status"
CALLS_USED = "mainspring.calls_used"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
COST = "mainspring.usage.cost"
ERROR_TYPE = "error.type"
CANCEL_EVENT = "mainspring.cancel"

#: Reasons that end work without anything having failed: the span's status stays unset.
_NOT_FAILURES = frozenset({"stop", "pause", "shutdown", "budget-exhausted"})

#: A step attempt's span name, by the step's kind: a tool or skill attempt is its call.
_ATTEMPT_NAMES = {"tool": "mainspring.tool", "skill": "mainspring.skill"}
_ATTEMPT = "mainspring.step"


def mark_cancelled(span: Span, reason: CancelReason) -> None:
    """``span`` ends because of ``reason``: its status and the ``mainspring.cancel`` event
    (see the module docstring); detail and source redacted (E5)."""
    root = reason.root
    span.add_event(
        CANCEL_EVENT,
        {
            "mainspring.cancel.kind": reason.kind,
            "mainspring.cancel.root": root.kind,
            "mainspring.cancel.detail": redact(root.detail),
            "mainspring.cancel.source": redact(root.source),
        },
    )
    if root.kind not in _NOT_FAILURES:
        span.set_status(Status(StatusCode.ERROR, reason.kind))


def _mark_error(span: Span, exc: BaseException) -> None:
    """An exception ended the span: its type names it, never its message (V1)."""
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        reason = cancel_reason()
        if reason is not None:
            mark_cancelled(span, reason)
        return
    name = type(exc).__qualname__
    span.set_attribute(ERROR_TYPE, name)
    span.set_status(Status(StatusCode.ERROR, name))


def _text(value: Any) -> str:
    """A state as its plain value (an enum's value, not its repr)."""
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


def _usage_into(attributes: dict[str, Any], usage: Usage) -> None:
    attributes[INPUT_TOKENS] = usage.input_tokens
    attributes[OUTPUT_TOKENS] = usage.output_tokens
    attributes[COST] = float(usage.cost)


def _usage(span: Span, usage: Usage) -> None:
    if usage:
        attributes: dict[str, Any] = {}
        _usage_into(attributes, usage)
        span.set_attributes(attributes)


class _Open:
    """A step's attempt whose span is open. ``marked``: its call already gave the span its
    status (an exception's type) or its cancel event, which its end does not repeat."""

    __slots__ = ("context", "kind", "marked", "span", "started")

    def __init__(self, span: Span, kind: str) -> None:
        self.span = span
        self.kind = kind
        self.context: Context | None = None  # the span's context, made when first needed
        self.marked = False
        self.started = time.perf_counter()

    def current(self) -> Context:
        if self.context is None:
            self.context = trace.set_span_in_context(self.span)
        return self.context


class RunSpans:
    """One run's spans and the metrics they feed; made when the run begins, ended when its
    actor stops. Every method is called from the run's actor, one message at a time."""

    def __init__(
        self,
        tracer: trace.Tracer,
        meters: Meters,
        record: Execution,
        caller: Context | None,
        *,
        resumed: bool,
    ) -> None:
        self._tracer = tracer
        self._meters = meters
        self._id = record.id
        self.span = tracer.start_span(
            "mainspring.run",
            context=parent_from(record.trace_context, caller),
            attributes={
                EXECUTION_ID: record.id,
                "mainspring.resumed": resumed,
                "mainspring.plan.version": record.plan_version,
            },
        )
        self._context = trace.set_span_in_context(self.span)
        #: The traceparent the execution keeps (its first run's span): None until one is
        #: stored, then what is stored (a later run's span is never stored over it).
        self.traceparent = record.trace_context or traceparent_of(self.span)
        self._steps: dict[str, _Open] = {}
        meters.runs.add(1, meters.status("running"))
        meters.leases_held.add(1)

    # -- steps -----------------------------------------------------------------------------

    def step_started(self, step: PlanStep, attempt: int) -> None:
        """Attempt ``attempt`` of ``step`` (counted on its record, across resumes) starts."""
        kind = step.kind
        span = self._tracer.start_span(
            _ATTEMPT_NAMES.get(kind, _ATTEMPT),
            context=self._context,
            attributes={
                EXECUTION_ID: self._id,
                STEP_ID: step.id,
                STEP_KIND: kind,
                TARGET: step.target,
                ATTEMPT: attempt,
            },
        )
        self._steps[step.id] = _Open(span, kind)
        meters = self._meters
        meters.steps_started.add(1, meters.kind(kind))

    def _close(self, step_id: str, state: str) -> _Open | None:
        opened = self._steps.pop(step_id, None)
        if opened is not None:
            seconds = time.perf_counter() - opened.started
            meters = self._meters
            meters.step_duration.record(seconds, meters.kind_state(opened.kind, state))
        return opened

    def step_retrying(self, step_id: str) -> None:
        """The step's attempt failed and it is retried: its span ends failed."""
        opened = self._close(step_id, "retrying")
        if opened is not None:
            span = opened.span
            span.set_attribute(STEP_STATE, "retrying")
            if not opened.marked:
                span.set_status(Status(StatusCode.ERROR, "attempt failed"))
            span.end()
            self._meters.steps_retried.add(1, self._meters.kind(opened.kind))

    def step_ended(
        self, step_id: str, state: str, observation: Observation | None, usage: Usage | None
    ) -> None:
        """The step's last attempt ended ``state`` (succeeded, failed, cancelled, stopped);
        ``usage``: what its agent task spent, for an agent step."""
        state = _text(state)
        opened = self._close(step_id, state)
        if opened is None:
            return  # skipped or cancelled before it ran: it had no span
        span = opened.span
        ending: dict[str, Any] = {STEP_STATE: state}
        if observation is not None:
            ending[CALLS_USED] = observation.calls_used
            if observation.agent_task_id:
                ending[TASK_ID] = observation.agent_task_id
            if observation.error_type:
                ending[ERROR_TYPE] = observation.error_type
        if usage:
            _usage_into(ending, usage)
        span.set_attributes(ending)
        meters = self._meters
        if state == "succeeded":
            meters.steps_succeeded.add(1, meters.kind(opened.kind))
        elif state == "failed":
            meters.steps_failed.add(1, meters.kind(opened.kind))
            if not opened.marked:
                why = (observation.code if observation is not None else None) or state
                span.set_status(Status(StatusCode.ERROR, str(why)))
        span.end()

    # -- what runs under a step ------------------------------------------------------------

    def traced_call(self, step: PlanStep, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (a tool or skill step's callable) wrapped so that its attempt's span (which
        is the call's) is current while it runs; what it raises, or the cancel that stops
        it, marks the span, and what it spent is added to it."""
        opened = self._steps.get(step.id)
        if opened is None:
            return fn
        span, current = opened.span, opened.current()

        async def traced(**kwargs: Any) -> Any:
            token = context.attach(current)
            try:
                result = fn(**kwargs)  # a tool may be sync or async, as run_step takes it
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                if span.is_recording():  # else the run ended it already, with its reason
                    _mark_error(span, exc)
                    opened.marked = True
                raise
            finally:
                context.detach(token)
            usage = split_usage(result)[1]
            if usage and span.is_recording():
                _usage(span, usage)
            return result

        return traced

    def for_task(self, step: PlanStep, task_id: str) -> TaskSpans | None:
        """The spans of the agent task that runs ``step`` (None: the step has no span)."""
        opened = self._steps.get(step.id)
        if opened is None:
            return None
        opened.span.set_attribute(TASK_ID, task_id)
        ids = {EXECUTION_ID: self._id, STEP_ID: step.id, TASK_ID: task_id}
        return TaskSpans(self._tracer, opened.span, ids)

    # -- the end ---------------------------------------------------------------------------

    def end(self, reason: CancelReason, status: str, record: Execution) -> None:
        """The run's actor stopped with ``reason``, leaving the execution ``status``: every
        span still open ends with the reason, then the run's."""
        for step_id in list(self._steps):
            opened = self._close(step_id, "interrupted")
            if opened is not None:
                opened.span.set_attribute(STEP_STATE, "interrupted")
                if not opened.marked:  # its call saw the cancel: it said why already
                    mark_cancelled(opened.span, reason)
                opened.span.end()
        span = self.span
        status = _text(status)
        span.set_attribute(STATUS, status)
        span.set_attribute(CALLS_USED, record.calls_used)
        span.set_attribute("mainspring.plan.version", record.plan_version)
        span.set_attribute("mainspring.steps.completed", len(record.completed_steps))
        if record.plan is not None:
            span.set_attribute("mainspring.plan.steps", len(record.plan.steps))
        _usage(span, record.usage)
        if reason.kind != "stop":  # a run that finished or waits ended as it chose
            mark_cancelled(span, reason)
        if status == "failed":
            span.set_status(Status(StatusCode.ERROR, "failed"))
        span.end()
        meters = self._meters
        meters.runs.add(-1, meters.status("running"))
        meters.leases_held.add(-1)
        meters.runs_ended.add(1, meters.status(status))


class TaskSpans:
    """The spans of one agent task: its step's span, current while the agent runs, and a
    span per durable inner step and per tool, skill or program call under it."""

    def __init__(self, tracer: trace.Tracer, step: Span, ids: Mapping[str, str]) -> None:
        self._tracer = tracer
        self._step = step
        self._ids = dict(ids)

    @contextmanager
    def running(self) -> Iterator[None]:
        """The agent's code runs with its step's span current."""
        with trace.use_span(self._step, end_on_exit=False, record_exception=False):
            yield

    @contextmanager
    def span(self, kind: str, name: str, **attributes: Any) -> Iterator[Span]:
        """A span for an inner step (``kind`` ``inner_step``) or a call (``tool``, ``skill``,
        ``program``) named ``name`` (an id, or a program's name: redacted all the same),
        current while it runs; an exception ends it with the exception's type."""
        with self._tracer.start_as_current_span(
            f"mainspring.agent.{kind}",
            attributes={**self._ids, TARGET: redact(name), **attributes},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                _mark_error(span, exc)
                raise

    def usage(self, span: Span, usage: Usage) -> None:
        _usage(span, usage)
