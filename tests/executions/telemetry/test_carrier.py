"""O1: every run of an execution continues one trace: the first run's span is kept with the
record (its W3C traceparent), and a resume here or in another process is its child."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import trace

import mainspring as ms
from mainspring.executions._telemetry.carrier import parent_from, traceparent_of

from .._kit import Gate, plan_of, tool
from ._otel import Otel

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("_paused_child.py")


async def test_O1_a_resume_here_continues_the_first_runs_trace() -> None:
    otel = Otel()
    gate = Gate()
    async with otel.runtime(tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "gate")))
        with anyio.fail_after(30):
            await gate.entered.wait()
        await rt.pause(handle.execution_id)
        await handle.wait()
        stored = await rt.get(handle.execution_id)
        assert stored is not None
        first = otel.one("mainspring.run")
        assert stored.trace_context == _traceparent(first)
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        assert result.status == "completed"
        again = await rt.get(handle.execution_id)
    assert again is not None
    assert again.trace_context == stored.trace_context  # the first run's, never replaced
    runs = otel.spans("mainspring.run")
    assert len(runs) == 2
    second = next(s for s in runs if s.attributes["mainspring.resumed"])
    assert second.context.trace_id == first.context.trace_id
    assert second.parent is not None
    assert second.parent.span_id == first.context.span_id


def _traceparent(span: Any) -> str:
    ids = span.context
    return f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}"


async def test_O1_a_run_started_under_a_span_is_its_child() -> None:
    otel = Otel()
    tracer = otel.tracer_provider.get_tracer("the-application")
    async with otel.runtime(tools={"gate": Gate()}) as rt:
        with tracer.start_as_current_span("request") as request:
            handle = await rt.start("g", plan_of(tool("a", "gate")))
        await rt.cancel(handle.execution_id)
    run = otel.one("mainspring.run")
    assert run.parent is not None
    assert run.parent.span_id == request.get_span_context().span_id


async def test_O1_a_resume_in_another_process_continues_the_trace(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    out = tmp_path / "spans.json"
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, str(CHILD), store, "ex-traced", str(out)], check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    child = json.loads(out.read_text())
    (child_run,) = [s for s in child if s["name"] == "mainspring.run"]
    otel = Otel()

    async def gate(**_: Any) -> int:
        return 0

    gate.__qualname__ = "gate"
    async with otel.runtime(store=store, tools={"gate": gate}, recover=False) as rt:
        result = await (await rt.resume("ex-traced")).wait()
    assert result.status == "completed"
    run = otel.one("mainspring.run")
    assert run.context.trace_id == child_run["trace_id"]
    assert run.parent is not None
    assert run.parent.span_id == child_run["span_id"]
    assert run.attributes["mainspring.resumed"] is True
    (step,) = otel.attempts()  # a tool step's attempt: its call's span
    assert step.name == "mainspring.tool"
    assert step.context.trace_id == child_run["trace_id"]


def test_O1_a_stored_traceparent_that_is_not_valid_leaves_the_callers_context() -> None:
    fallback = trace.set_span_in_context(trace.INVALID_SPAN)
    assert parent_from(None, fallback) is fallback
    assert parent_from("00-" + "0" * 32 + "-" + "0" * 16 + "-01", fallback) is fallback
    assert traceparent_of(trace.INVALID_SPAN) is None


def test_O1_a_record_refuses_a_trace_context_that_is_not_a_traceparent() -> None:
    with pytest.raises(ValueError, match="traceparent"):
        ms.storage.Execution(
            id="x", goal="g", created_at=0.0, updated_at=0.0, trace_context="not one"
        )
