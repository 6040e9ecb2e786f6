"""No private exception passes through agent code (README, Errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from tests.executions._kit import FAST, Gate, agent, plan_of, runtime

pytestmark = pytest.mark.anyio

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


async def test_shielded_cleanup_step_after_ask_sees_no_private_exception(tmp_path: Path) -> None:
    """README: "clean up in finally, shielded if the cleanup awaits". A durable cleanup
    (ctx.step) there got the private executions._agent.Refused; now the public SaveRefused."""
    seen: list[BaseException] = []

    async def tidy(ctx: ms.AgentContext, input: Any) -> str:
        try:
            return await ctx.ask("?")
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await ctx.step("cleanup", lambda: "ok")
                except BaseException as exc:
                    seen.append(exc)
                    raise

    async with runtime(tmp_path, agents={"a": tidy}, **FAST) as rt:
        with anyio.fail_after(30):
            r = await (await rt.start("g", plan_of(agent("q", "a")))).wait()
    assert r.status == "waiting_for_clarification"
    assert all(_is_public(e) for e in seen), [type(e) for e in seen]


async def test_shielded_cleanup_step_after_stop_agent_task_sees_no_private_exception(
    tmp_path: Path,
) -> None:
    seen: list[BaseException] = []
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        try:
            return await ctx.call_tool("gate")
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await ctx.step("cleanup", lambda: "ok")
                except BaseException as exc:
                    seen.append(exc)
                    raise

    async with runtime(tmp_path, agents={"a": worker}, tools={"gate": gate}, **FAST) as rt:
        with anyio.fail_after(30):
            h = await rt.start("g", plan_of(agent("w", "a")))
            await gate.entered.wait()
            (task,) = await rt.agent_tasks(h.execution_id)
            await rt.stop_agent_task(task.id)
            await h.wait()
    assert all(_is_public(e) for e in seen), [type(e) for e in seen]
