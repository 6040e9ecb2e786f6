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
