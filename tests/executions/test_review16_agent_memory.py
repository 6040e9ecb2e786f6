"""Review of agent memory (#16), inside agents: the documented way to replay a search
(a ``ctx.step`` that returns storable values taken from it) replays on resume, and the
objects memory hands back are refused by ``ctx.step`` with a clear error, as now
documented (the docs used to say "wrap a search in ctx.step to replay its result", which
raised ``ValueError``)."""

from __future__ import annotations

from typing import Any

import pytest

import mainspring as ms

from ._kit import FAST, Gate, agent, plan_of
from ._memory_kit import StoreSpec

pytestmark = pytest.mark.anyio


async def test_a_search_replayed_through_ctx_step_as_the_docs_say(
    memory_store: StoreSpec,
) -> None:
    gate = Gate()
    searched: list[list[str]] = []
    got: list[list[str]] = []

    async def recaller(ctx: ms.AgentContext, input: Any) -> list[str]:
        async def recall() -> list[str]:
            found = await ctx.memory.search("python", domain="ci")
            texts = [hit.fact.text for hit in found.hits]
            searched.append(texts)
            return texts

        texts: list[str] = await ctx.step("recall", recall)
        got.append(texts)
        await gate()
        return texts

    agents = {"recaller": recaller}
    async with ms.open_runtime(store=memory_store.target, agents=agents, **FAST) as a:
        await a.memory.remember("CI runs python 3.12", domain="ci")
        handle = await a.start("g", plan_of(agent("r", "recaller")))
        await gate.entered.wait()
        assert (await a.pause(handle.execution_id)).status == "paused"
        await a.memory.remember("CI also runs python 3.13", domain="ci")  # not seen again
    gate.opened.set()
    async with ms.open_runtime(store=memory_store.target, agents=agents, **FAST) as b:
        done = await (await b.resume(handle.execution_id)).wait()
    assert done.status == "completed"
    assert searched == [["CI runs python 3.12"]]  # the search ran once
    assert got == [["CI runs python 3.12"]] * 2  # and was replayed as the first run saw it
    assert done.outputs["r"] == ["CI runs python 3.12"]


async def test_memory_objects_returned_from_ctx_step_are_a_clear_error(
    memory_store: StoreSpec,
) -> None:
    errors: dict[str, str] = {}

    async def wrapper(ctx: ms.AgentContext, input: Any) -> None:
        fact = await ctx.memory.remember("CI runs python 3.12")
        readers = {
            "search": lambda: ctx.memory.search("python"),
            "get": lambda: ctx.memory.get(fact.id),
            "list": lambda: ctx.memory.list(),
        }
        for name, read in readers.items():
            with pytest.raises(ValueError, match="cannot be stored exactly") as caught:
                await ctx.step(name, read)
            errors[name] = str(caught.value)

    async with ms.open_runtime(store=memory_store.target, agents={"w": wrapper}) as rt:
        done = await (await rt.start("g", plan_of(agent("w", "w")))).wait()
    assert done.status == "completed"
    assert "MemorySearch" in errors["search"]
    assert "Fact" in errors["get"]
    assert "Fact" in errors["list"]
    # What failed is now what the docs say, wherever they speak of replaying a read.
    docs = [
        ms.executions._seam.AgentMemory.__doc__ or "",
        ms.executions.Memory.search.__doc__ or "",
        ms.AgentContext.memory.__doc__ or "",
    ]
    for doc in docs:
        flat = " ".join(doc.split())
        assert "to replay its result" not in flat
        assert "storable" in flat
