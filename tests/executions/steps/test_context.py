"""ctx.ask and the lifecycles around it, from the public API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from tests.executions._kit import FAST, Gate, agent, plan_of, runtime, tool

pytestmark = pytest.mark.anyio


async def test_agent_that_swallows_the_stop_does_not_hang_and_answer_is_handed_back(
    tmp_path: Path,
) -> None:
    seen: list[Any] = []

    async def stubborn(ctx: ms.AgentContext, input: Any) -> str:
        try:
            answer = await ctx.ask("name?")
        except BaseException:
            seen.append(ctx.cancel_reason())
            return "gave up"  # swallows the cancellation
        seen.append(answer)
        return answer

    async with runtime(tmp_path, agents={"a": stubborn}, **FAST) as rt:
        with anyio.fail_after(30):
            first = await (await rt.start("g", plan_of(agent("q", "a")))).wait()
            assert first.status == "waiting_for_clarification"
            done = await (await rt.resume(first.execution_id, answer="Ada")).wait()
    assert isinstance(seen[0], ms.Stop)
    assert done.status == "completed"
    assert done.outputs["q"] == "Ada"
    assert seen[-1] == "Ada"


async def test_ask_twice_and_inside_step(tmp_path: Path) -> None:
    async def twice(ctx: ms.AgentContext, input: Any) -> list[str]:
        a = await ctx.ask("first?")
        b = await ctx.step("inner", ctx.ask, "second?")
        return [a, b]

    async with runtime(tmp_path, agents={"a": twice}, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g", plan_of(agent("q", "a")))).wait()
            assert r.pending is not None
            assert r.pending.question == "first?"
            r = await (await rt.resume(r.execution_id, answer="one")).wait()
            assert r.status == "waiting_for_clarification"
            assert r.pending is not None
            assert r.pending.question == "second?"
            r = await (await rt.resume(r.execution_id, answer="two")).wait()
    assert r.status == "completed", r
    assert r.outputs["q"] == ["one", "two"]


@pytest.mark.parametrize("answer", ["", "  spaced  ", "naïve ✓", "line\nbreak"])
async def test_the_resumed_agent_is_handed_the_answer_exactly(tmp_path: Path, answer: str) -> None:
    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    async with runtime(tmp_path, agents={"a": asker}, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g", plan_of(agent("q", "a")))).wait()
            r = await (await rt.resume(r.execution_id, answer=answer)).wait()
    assert r.status == "completed", r
    assert r.outputs["q"] == answer


async def test_answer_in_another_runtime(tmp_path: Path) -> None:
    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return "got " + await ctx.ask("?")

    store = tmp_path / "s.sqlite3"
    async with runtime(store, agents={"a": asker}, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g", plan_of(agent("q", "a"), tool("t", "inc")))).wait()
    assert r.status == "waiting_for_clarification"
    async with runtime(store, agents={"a": asker}, **FAST) as rt2:
        with anyio.fail_after(30):
            r2 = await (await rt2.resume(r.execution_id, answer="x")).wait()
    assert r2.status == "completed", r2
    assert r2.outputs["q"] == "got x"


@pytest.mark.parametrize("control", ["pause", "cancel"])
async def test_pause_or_cancel_while_waiting_for_an_answer(tmp_path: Path, control: str) -> None:
    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    async with runtime(tmp_path, agents={"a": asker}, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g", plan_of(agent("q", "a")))).wait()
            out = await getattr(rt, control)(r.execution_id)
            assert out.status == ("paused" if control == "pause" else "cancelled")
            if control == "pause":
                r = await (await rt.resume(r.execution_id, answer="later")).wait()
                assert r.status == "completed", r
                assert r.outputs["q"] == "later"


async def test_stop_a_task_that_waits(tmp_path: Path) -> None:
    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("?")

    async with runtime(tmp_path, agents={"a": asker}, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g", plan_of(agent("q", "a"), tool("t", "inc", "q")))).wait()
            (task,) = await rt.agent_tasks(r.execution_id)
            res = await rt.stop_agent_task(task.id)
            assert res.ok, res
            r = await (await rt.resume(r.execution_id)).wait()
    assert r.status in ("failed", "completed"), r


# ----------------------------------------------------------------------
# No private exception passes through agent code (README, Errors).

PUBLIC = (
    "mainspring",
    "mainspring.actors",
    "mainspring.supervision",
    "mainspring.storage",
    "mainspring.executions",
)


def _is_public(exc: BaseException) -> bool:
    cls = type(exc)
    return not issubclass(cls, ms.MainspringError) or cls.__module__ in PUBLIC


def _cleaning_up(work: Any, seen: list[BaseException]) -> Any:
    """An agent doing ``work(ctx)``, then a durable cleanup step in a shielded ``finally``
    (as the README advises), recording what that cleanup raised."""

    async def agent_fn(ctx: ms.AgentContext, input: Any) -> Any:
        try:
            return await work(ctx)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await ctx.step("cleanup", lambda: "ok")
                except BaseException as exc:
                    seen.append(exc)
                    raise

    return agent_fn


def _only_public_refusals(seen: list[BaseException]) -> None:
    assert seen, "the cleanup step after the task stopped must be refused, not recorded"
    assert all(_is_public(e) for e in seen), [type(e) for e in seen]
    assert any(isinstance(e, ms.executions.SaveRefused) for e in seen), seen


async def test_shielded_cleanup_step_after_ask_sees_no_private_exception(tmp_path: Path) -> None:
    """README: "clean up in finally, shielded if the cleanup awaits". A durable cleanup
    (ctx.step) there got the private executions._agent.Refused; now the public SaveRefused."""
    seen: list[BaseException] = []
    tidy = _cleaning_up(lambda ctx: ctx.ask("?"), seen)
    async with runtime(tmp_path, agents={"a": tidy}, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g", plan_of(agent("q", "a")))).wait()
    assert r.status == "waiting_for_clarification"
    _only_public_refusals(seen)


async def test_shielded_cleanup_step_after_stop_agent_task_sees_no_private_exception(
    tmp_path: Path,
) -> None:
    seen: list[BaseException] = []
    gate = Gate()
    worker = _cleaning_up(lambda ctx: ctx.call_tool("gate"), seen)
    async with runtime(tmp_path, agents={"a": worker}, tools={"gate": gate}, **FAST) as rt:
        with anyio.fail_after(30):
            h = await rt.start("g", plan_of(agent("w", "a")))
            await gate.entered.wait()
            (task,) = await rt.agent_tasks(h.execution_id)
            await rt.stop_agent_task(task.id)
            await h.wait()
    _only_public_refusals(seen)
