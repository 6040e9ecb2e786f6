"""The trace context a run keeps with its record: the W3C ``traceparent`` of its first run's
span (``Execution.trace_context``), so that every later run of it (a resume, a recovery, in
this process or another) continues the same trace."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["parent_from", "traceparent_of"]

_W3C = TraceContextTextMapPropagator()
_KEY = "traceparent"


def traceparent_of(span: trace.Span) -> str | None:
    """``span``'s W3C traceparent (``00-<trace id>-<span id>-<flags>``), or None for a span
    with no valid context (a no-op provider's)."""
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get(_KEY)


def parent_from(traceparent: str | None, fallback: Context | None) -> Context | None:
    """The context a run's span starts under: the stored traceparent's when there is a valid
    one (the same trace as the run's first span), else ``fallback`` (the caller's context
    when the run was started or resumed)."""
    if traceparent:
        stored = _W3C.extract({_KEY: traceparent})
        if trace.get_current_span(stored).get_span_context().is_valid:
            return stored
    return fallback
