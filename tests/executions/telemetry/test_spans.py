"""A run's spans (O1): their tree, their attributes, a failing step's attempts, a cancel's
status and event, redaction, and none at all when telemetry is off."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import anyio
import pytest
from opentelemetry.trace import StatusCode

import mainspring as ms
from mainspring.storage import RetryPolicy, Usage, register_secret

from .._kit import Gate, agent, plan_of, skill, tool
from ._otel import Otel

pytestmark = pytest.mark.anyio

QUICK = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001, jitter=0.0)


async def _inc(x: int = 0) -> int:
    return x + 1


async def _model(prompt: str = "") -> ms.WithUsage:
    return ms.WithUsage(f"said {prompt}", usage=Usage(input_tokens=12, output_tokens=5, cost="0.5"))


async def _agent(ctx: ms.AgentContext, _: Any) -> int:
    first = await ctx.step("first", lambda: 1)
    return int(await ctx.call_tool("inc", x=first))


def _three_steps() -> ms.Plan:
    return plan_of(
        tool("a", "inc", x=1), skill("b", "model", "a", prompt="hi"), agent("c", "ag", "b")
    )


async def _run_three(otel: Otel) -> str:
    async with otel.runtime(
        tools={"inc": _inc}, skills={"model": _model}, agents={"ag": _agent}
    ) as rt:
        handle = await rt.start("count", _three_steps())
        result = await handle.wait()
    assert result.status == "completed"
    return handle.execution_id


async def test_O1_a_three_step_plan_is_a_run_span_over_its_steps_and_their_calls() -> None:
    # A tool or skill step's attempt is one call: one span, named for the call, carries the
    # step's facts (no step span over a call span saying the same). An agent step's attempt
    # is a `mainspring.step` span over its inner steps and calls.
    otel = Otel()
    await _run_three(otel)
    run = otel.one("mainspring.run")
    assert run.parent is None
    steps = {s.attributes["mainspring.step.id"]: s for s in otel.attempts()}
    assert sorted(steps) == ["a", "b", "c"]
    for step in steps.values():
        assert step.parent is not None
        assert step.parent.span_id == run.context.span_id
    tool_call = otel.one("mainspring.tool")
    skill_call = otel.one("mainspring.skill")
    assert tool_call.context.span_id == steps["a"].context.span_id
    assert skill_call.context.span_id == steps["b"].context.span_id
    assert tool_call.parent.span_id == run.context.span_id
    assert skill_call.parent.span_id == run.context.span_id
    assert otel.one("mainspring.step").context.span_id == steps["c"].context.span_id
    inner = otel.one("mainspring.agent.inner_step")
    agent_tool = otel.one("mainspring.agent.tool")
    assert inner.parent.span_id == steps["c"].context.span_id
    assert agent_tool.parent.span_id == steps["c"].context.span_id
    assert {s.context.trace_id for s in otel.spans()} == {run.context.trace_id}
    assert len(otel.spans()) == 6


async def test_O1_spans_carry_ids_states_counts_and_usage() -> None:
    otel = Otel()
    execution_id = await _run_three(otel)
    run = otel.one("mainspring.run")
    assert run.attributes["mainspring.execution.id"] == execution_id
    assert run.attributes["mainspring.execution.status"] == "completed"
    assert run.attributes["mainspring.calls_used"] == 1  # the skill step
    assert run.attributes["mainspring.steps.completed"] == 3
    assert run.attributes["gen_ai.usage.input_tokens"] == 12
    assert run.attributes["gen_ai.usage.output_tokens"] == 5
    assert run.attributes["mainspring.usage.cost"] == 0.5
    assert run.attributes["mainspring.resumed"] is False
    assert run.status.status_code is StatusCode.UNSET
    (b,) = otel.attempts("b")
    assert b.name == "mainspring.skill"
    assert b.attributes["mainspring.step.kind"] == "skill"
    assert b.attributes["mainspring.target"] == "model"
    assert b.attributes["mainspring.step.state"] == "succeeded"
    assert b.attributes["mainspring.step.attempt"] == 1
    assert b.attributes["gen_ai.usage.input_tokens"] == 12
    assert b.attributes["mainspring.calls_used"] == 1
    c = otel.one("mainspring.step", **{"mainspring.step.id": "c"})
    task_id = c.attributes["mainspring.agent_task.id"]
    assert task_id == f"{execution_id}:t1"
    inner = otel.one("mainspring.agent.inner_step")
    assert inner.attributes["mainspring.target"] == "first"
    assert inner.attributes["mainspring.agent_task.id"] == task_id
    assert inner.attributes["mainspring.inner_step.rerun"] is False
    # V1: never an input, an output or the goal.
    text = repr([dict(s.attributes or {}) for s in otel.spans()])
    assert "said hi" not in text
    assert "count" not in text.replace("calls_used", "")


async def test_O1_a_failing_step_has_a_span_per_attempt_and_no_message() -> None:
    async def fail(**_: Any) -> None:
        raise RuntimeError("a message that no span shows")

    otel = Otel()
    async with otel.runtime(tools={"fail": fail}, retries={"tool": QUICK}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "fail")))).wait()
    assert result.status == "failed"
    attempts = otel.attempts()  # each attempt is its call's span
    assert [s.attributes["mainspring.step.attempt"] for s in attempts] == [1, 2, 3]
    assert [s.attributes["mainspring.step.state"] for s in attempts] == [
        "retrying",
        "retrying",
        "failed",
    ]
    assert all(s.status.status_code is StatusCode.ERROR for s in attempts)
    assert attempts[-1].attributes["error.type"] == "RuntimeError"
    calls = otel.spans("mainspring.tool")
    assert len(calls) == 3
    assert {c.context.span_id for c in calls} == {a.context.span_id for a in attempts}
    assert {c.attributes["error.type"] for c in calls} == {"RuntimeError"}
    assert {c.status.description for c in calls} == {"RuntimeError"}
    run = otel.one("mainspring.run")
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes["mainspring.execution.status"] == "failed"
    everything = repr([(dict(s.attributes or {}), s.events, s.status) for s in otel.spans()])
    assert "no span shows" not in everything  # V1: an error's type, never its message


async def _stopped(otel: Otel, control: str, reason: str) -> None:
    gate = Gate()
    async with otel.runtime(tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "gate")))
        with anyio.fail_after(30):
            await gate.entered.wait()
        await getattr(rt, control)(handle.execution_id, reason=reason)
        await handle.wait()


def _cancel_event(span: Any) -> dict[str, Any]:
    (event,) = [e for e in span.events if e.name == "mainspring.cancel"]
    return dict(event.attributes)


async def test_O1_a_pause_is_an_event_on_the_spans_it_ended_not_an_error() -> None:
    otel = Otel()
    await _stopped(otel, "pause", "lunch")
    run = otel.one("mainspring.run")
    assert run.status.status_code is StatusCode.UNSET
    assert run.attributes["mainspring.execution.status"] == "paused"
    assert _cancel_event(run) == {
        "mainspring.cancel.kind": "pause",
        "mainspring.cancel.root": "pause",
        "mainspring.cancel.detail": "lunch",
        "mainspring.cancel.source": _cancel_event(run)["mainspring.cancel.source"],
    }
    (step,) = otel.attempts()  # the tool's attempt, its call's span: one cancel event
    assert step.name == "mainspring.tool"
    assert step.attributes["mainspring.step.state"] == "interrupted"
    assert _cancel_event(step)["mainspring.cancel.kind"] == "pause"
    call = otel.one("mainspring.tool")
    assert _cancel_event(call)["mainspring.cancel.root"] == "pause"
    assert call.status.status_code is StatusCode.UNSET


async def test_O1_a_cancel_is_the_spans_error_status_and_event() -> None:
    otel = Otel()
    await _stopped(otel, "cancel", "not needed")
    run = otel.one("mainspring.run")
    assert run.attributes["mainspring.execution.status"] == "cancelled"
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "cancel"
    assert _cancel_event(run)["mainspring.cancel.detail"] == "not needed"
    call = otel.one("mainspring.tool")  # the tool saw its parent's cancel (R2)
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == "parent-cancel"
    assert _cancel_event(call)["mainspring.cancel.root"] == "cancel"
    (step,) = otel.attempts()  # the call's span is the attempt's
    assert step.status.status_code is StatusCode.ERROR
    assert step.attributes["mainspring.step.state"] == "interrupted"


async def test_O1_E5_a_registered_secret_never_reaches_a_span() -> None:
    secret = "tel-secret-7f3a9c"
    register_secret(secret)
    otel = Otel()
    await _stopped(otel, "pause", f"rotate {secret} now")
    event = _cancel_event(otel.one("mainspring.run"))
    assert secret not in event["mainspring.cancel.detail"]
    assert "[redacted" in event["mainspring.cancel.detail"]
    everything = repr([(dict(s.attributes or {}), s.events) for s in otel.spans()])
    assert secret not in everything


async def test_O1_no_span_and_no_point_when_telemetry_is_off() -> None:
    otel = Otel()
    async with otel.runtime(tools={"inc": _inc}, telemetry=False) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "inc")))).wait()
        assert result.status == "completed"
        record = await rt.get(result.execution_id)
    assert otel.spans() == []
    assert otel.points("mainspring.steps.started") == []
    assert record is not None
    assert record.trace_context is None


async def test_O1_a_resumed_step_keeps_counting_its_attempts() -> None:
    # Attempt 1 fails and the run is paused while it waits to retry: the resumed run's
    # attempt is the step's 2nd (as its record and the history say), not a 1st again.
    calls: list[int] = []

    async def flaky(**_: Any) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first time")
        return 1

    slow = RetryPolicy(max_attempts=3, base_delay=60.0, max_delay=60.0, jitter=0.0)
    otel = Otel()
    async with otel.runtime(tools={"flaky": flaky}, retries={"tool": slow}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "flaky")))
        history = rt.events(handle.execution_id, after=0, poll=0.01)
        with anyio.fail_after(30):
            async with aclosing(history):
                async for entry in history:
                    if entry.kind == "retry":
                        break
        await rt.pause(handle.execution_id)
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    attempts = [s.attributes["mainspring.step.attempt"] for s in otel.attempts("a")]
    assert attempts == [1, 2]
