"""Review of issue #16 (agent memory): a runtime of one organization (or of none)
remembering in a conflict group never hides another organization's facts from it."""

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
async def test_another_organization_does_not_hide_this_ones_facts(
    spec: StoreSpec, other: str | None
) -> None:
    async with ms.open_runtime(store=spec.target, organization="acme") as acme:
        mine = await acme.memory.remember(
            "release day is friday", scope="organization", conflict_group="release"
        )
    async with ms.open_runtime(store=spec.target, organization=other) as rt:
        theirs = await rt.memory.remember(
            "release day is monday", scope="project", conflict_group="release"
        )
        assert await rt.memory.get(mine.id) is None  # acme's: not another runtime's to read
    async with ms.open_runtime(store=spec.target, organization="acme") as acme:
        assert (await acme.memory.get(mine.id)).superseded_by is None  # type: ignore[union-attr]
        found = await acme.memory.search("release day")
        assert {hit.fact.id for hit in found.hits} == {mine.id, theirs.id}
        # acme's own write supersedes both: the project fact and its organization fact
        newest = await acme.memory.remember(
            "release day is tuesday", scope="project", conflict_group="release"
        )
        found = await acme.memory.search("release day")
        assert [hit.fact.id for hit in found.hits] == [newest.id]


async def test_an_agent_passes_its_runtimes_organization(spec: StoreSpec) -> None:
    async with ms.open_runtime(store=spec.target, organization="acme") as acme:
        mine = await acme.memory.remember(
            "on-call rotates weekly", scope="organization", conflict_group="oncall"
        )

    async def note(ctx: ms.AgentContext, input: Any) -> str:
        fact = await ctx.memory.remember("on-call rotates daily", conflict_group="oncall")
        return fact.id

    async with ms.open_runtime(
        store=spec.target, organization="globex", agents={"note": note}
    ) as rt:
        result = await (await rt.start("g", plan_of(agent("n", "note")))).wait()
        assert result.status == "completed"
    async with ms.open_runtime(store=spec.target, organization="acme") as acme:
        assert (await acme.memory.get(mine.id)).superseded_by is None  # type: ignore[union-attr]
        await acme.memory.remember("pagers escalate", scope="organization")
        found = await acme.memory.search("rotates")
        assert {hit.fact.id for hit in found.hits} == {mine.id, result.outputs["n"]}
