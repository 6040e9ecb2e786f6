"""Review of issue #16 (agent memory): an organization's facts belong to it (README): a
runtime of another organization, or of none, neither reads one by id (``get`` answers None,
as ``list`` and ``search`` never show it) nor deletes one (``forget`` answers False and
changes nothing). Before, ``get`` and ``forget`` took any id: a runtime that may not even
supersede an organization's fact could delete it. Every backend, ``rt.memory`` and
``ctx.memory``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms

from ._kit import agent, plan_of
from ._memory_kit import StoreSpec, store_spec

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "files", "postgres"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreSpec]:
    yield from store_spec(request.param, tmp_path)


@pytest.mark.parametrize("other", [None, "globex"])
async def test_another_organization_neither_gets_nor_forgets_this_ones_facts(
    spec: StoreSpec, other: str | None
) -> None:
    async with ms.open_runtime(store=spec.target, organization="acme") as acme:
        mine = await acme.memory.remember("release day is friday", scope="organization")
        shared = await acme.memory.remember("the repo is a monorepo", scope="repository")
    async with ms.open_runtime(store=spec.target, organization=other) as rt:
        assert await rt.memory.get(mine.id) is None
        assert await rt.memory.forget(mine.id) is False
        assert await rt.memory.get(shared.id) == shared  # other scopes are everyone's
    async with ms.open_runtime(store=spec.target, organization="acme") as acme:
        assert await acme.memory.get(mine.id) == mine  # still there
        assert await acme.memory.forget(mine.id) is True
        assert await acme.memory.get(mine.id) is None


async def test_an_agent_of_another_organization_neither_gets_nor_forgets(
    spec: StoreSpec,
) -> None:
    async with ms.open_runtime(store=spec.target, organization="acme") as acme:
        mine = await acme.memory.remember("on-call rotates weekly", scope="organization")

    async def peek(ctx: ms.AgentContext, input: Any) -> list[Any]:
        seen = await ctx.memory.get(mine.id)
        return [seen is None, await ctx.memory.forget(mine.id)]

    async with ms.open_runtime(
        store=spec.target, organization="globex", agents={"peek": peek}
    ) as rt:
        result = await (await rt.start("g", plan_of(agent("p", "peek")))).wait()
        assert result.status == "completed"
        assert result.outputs["p"] == [True, False]
    async with ms.open_runtime(store=spec.target, organization="acme") as acme:
        assert await acme.memory.get(mine.id) == mine
