"""``ctx.memory``: the same API inside agents, with provenance on what they remember, and a
``remember`` that a resumed agent replays without a duplicate or a second supersession."""

from __future__ import annotations

import time
from typing import Any

import pytest

import mainspring as ms
from mainspring.executions import ScopeNotConfigured
from mainspring.executions._seam import AgentMemory, MemorySearch
from mainspring.storage import Fact, Scope

from ._kit import FAST, Gate, agent, plan_of, stored, tasks_of
from ._memory_kit import StoreSpec, SyncBag

pytestmark = pytest.mark.anyio


async def every_fact(rt: ms.Runtime) -> list[Fact]:
    return await rt.memory.list(include_hidden=True, limit=1_000)


async def test_an_agent_remembers_with_its_provenance_and_reads_live(
    memory_store: StoreSpec,
) -> None:
    seen: dict[str, Any] = {}

    async def curator(ctx: ms.AgentContext, input: Any) -> str:
        assert isinstance(ctx.memory, AgentMemory)
        assert ctx.memory is ctx.memory  # one per run of the agent
        found = await ctx.memory.search("deploy")  # a fact stored before the run
        seen["found"] = found
        fact = await ctx.memory.remember("deploys need a review", domain="ops", scope="user")
        seen["ids"] = (ctx.execution_id, ctx.task_id, ctx.step_id)
        seen["get"] = await ctx.memory.get(fact.id)
        seen["list"] = await ctx.memory.list(domain="ops")
        return fact.id

    async with ms.open_runtime(store=memory_store.target, agents={"curator": curator}) as rt:
        before = await rt.memory.remember("we deploy on fridays")
        assert (before.execution_id, before.task_id, before.step_id) == (None, None, None)
        result = await (await rt.start("g", plan_of(agent("c", "curator")))).wait()
        assert result.status == "completed"
        fact = await rt.memory.get(result.outputs["c"])
    assert fact is not None
    assert (fact.execution_id, fact.task_id, fact.step_id) == seen["ids"]
    assert fact.execution_id == result.execution_id
    assert fact.step_id == "c"
    assert (fact.scope, fact.domain) == (Scope.USER, "ops")
    assert isinstance(seen["found"], MemorySearch)
    assert [hit.fact.id for hit in seen["found"].hits] == [before.id]
    assert seen["get"] == fact
    assert seen["list"] == [fact]


async def test_the_same_fact_twice_in_one_run_is_two_facts(memory_store: StoreSpec) -> None:
    async def twice(ctx: ms.AgentContext, input: Any) -> list[str]:
        first = await ctx.memory.remember("lint before pushing")
        second = await ctx.memory.remember("lint before pushing")
        return [first.id, second.id]

    async with ms.open_runtime(store=memory_store.target, agents={"twice": twice}) as rt:
        result = await (await rt.start("g", plan_of(agent("t", "twice")))).wait()
        first, second = result.outputs["t"]
        assert first != second
        assert len(await every_fact(rt)) == 2


async def test_a_resumed_agent_replays_its_remember_without_a_duplicate_or_a_supersession(
    memory_store: StoreSpec,
) -> None:
    """The agent remembers, then parks; the run is paused; meanwhile a newer fact of the
    same conflict group supersedes the agent's. Resumed (in another runtime), the agent runs
    again and remembers the same thing at the same point: the store answers the fact it
    already holds. One fact, not two, and the newer fact stays current."""
    gate = Gate()
    answers: list[Fact] = []

    async def recorder(ctx: ms.AgentContext, input: Any) -> str:
        fact = await ctx.memory.remember(
            "the build uses tox",
            scope="repository",
            conflict_group="build",
            valid_until=time.time() + 3_600,  # from the clock: differs on the replay
        )
        answers.append(fact)
        await gate()  # not a durable step: the resumed run comes here again
        return fact.id

    agents = {"recorder": recorder}
    async with ms.open_runtime(store=memory_store.target, agents=agents, **FAST) as a:
        handle = await a.start("g", plan_of(agent("r", "recorder")))
        await gate.entered.wait()
        paused = await a.pause(handle.execution_id, reason="hold")
        assert paused.status == "paused"
        newer = await a.memory.remember(
            "the build uses nox", scope="project", conflict_group="build"
        )
    assert len(answers) == 1
    first = answers[0]
    gate.opened.set()
    async with ms.open_runtime(store=memory_store.target, agents=agents, **FAST) as b:
        done = await (await b.resume(handle.execution_id)).wait()
        assert done.status == "completed"
        (task,) = tasks_of(stored(b, handle.execution_id))
        assert task.state == "completed"
        facts = {f.id: f for f in await every_fact(b)}
    assert len(answers) == 2  # the agent ran its remember twice...
    replayed = answers[1]
    assert replayed.id == first.id == done.outputs["r"]
    assert set(facts) == {first.id, newer.id}  # ...and one fact was stored
    assert facts[first.id].superseded_by == newer.id  # superseded once, by the newer fact
    assert facts[newer.id].superseded_by is None  # not superseded by the replay
    assert replayed == facts[first.id]  # the replay got the stored fact
    assert replayed.created_at == first.created_at


async def test_an_agent_asking_for_an_organization_without_one_fails_clearly(
    memory_store: StoreSpec,
) -> None:
    raised: list[BaseException] = []

    async def org(ctx: ms.AgentContext, input: Any) -> None:
        try:
            await ctx.memory.remember("company wide", scope="organization")
        except ScopeNotConfigured as exc:
            raised.append(exc)
            raise

    async with ms.open_runtime(store=memory_store.target, agents={"org": org}) as rt:
        result = await (await rt.start("g", plan_of(agent("o", "org")))).wait()
        assert result.status == "failed"
        assert await every_fact(rt) == []
    assert len(raised) == 1


async def test_agents_share_the_runtime_s_organization_and_embedder(
    memory_store: StoreSpec,
) -> None:
    bag = SyncBag()

    async def org(ctx: ms.AgentContext, input: Any) -> dict[str, Any]:
        fact = await ctx.memory.remember("cat policy", scope="organization")
        found = await ctx.memory.search("cat")
        return {"org": fact.organization, "ranking": found.ranking, "n": len(found.hits)}

    async with ms.open_runtime(
        store=memory_store.target, agents={"org": org}, organization="acme", embedder=bag
    ) as rt:
        result = await (await rt.start("g", plan_of(agent("o", "org")))).wait()
        assert result.outputs["o"] == {"org": "acme", "ranking": "cosine", "n": 1}
        again = await rt.memory.search("cat")
        assert again.ranking == "cosine"
    assert bag.texts["cat policy"] == 1  # one vector cache per runtime, agents included
