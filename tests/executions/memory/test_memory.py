"""``runtime.memory``: scopes, clamping, redaction, validity, supersession and forgetting
through the API, each search filter, bad input, and who writes (the persistence actor
only; reads never write). Every test runs on each store kind of ``_memory_kit``."""

from __future__ import annotations

import datetime as dt
import decimal
import fractions
import json
import logging
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.executions import AgentMemory, Memory, MemorySearch, ScopeNotConfigured
from mainspring.executions._memory.memory import _logged_fallback
from mainspring.storage import Fact, InvalidId, Scope, StorageError
from mainspring.storage._seam import MAX_FACT_TEXT, FactFilter

from .._kit import FAST, Gate, MemoryStore, agent, plan_of, stored, tasks_of
from .._memory_kit import StoreSpec, SyncBag, memory_apply_calls, store_spec


@asynccontextmanager
async def opened(spec: StoreSpec, **options: Any) -> AsyncIterator[ms.Runtime]:
    async with ms.open_runtime(store=spec.target, **options) as rt:
        yield rt


async def every_fact(memory: Memory) -> list[Fact]:
    return await memory.list(include_hidden=True, limit=1_000)


async def stored_count(rt: ms.Runtime) -> int:
    return len(await every_fact(rt.memory))


# -- scopes ------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("user", Scope.USER),
        ("project", Scope.PROJECT),
        ("repository", Scope.REPOSITORY),
        (Scope.REPOSITORY, Scope.REPOSITORY),
        (" User ", Scope.USER),  # a name is trimmed and lowercased
        ("team", Scope.PROJECT),  # any other name falls back to project
        ("", Scope.PROJECT),
        ("organisation", Scope.PROJECT),  # not the organization's name
    ],
)
async def test_a_scope_name_resolves_and_unknown_names_mean_project(
    memory_store: StoreSpec, given: Any, expected: Scope
) -> None:
    async with opened(memory_store) as rt:
        fact = await rt.memory.remember("the build uses tox", scope=given)
        assert fact.scope is expected
        assert fact.organization is None
        assert await rt.memory.get(fact.id) == fact


@pytest.mark.anyio
async def test_the_organization_scope_on_a_runtime_opened_with_one(
    memory_store: StoreSpec,
) -> None:
    async with opened(memory_store, organization="acme") as rt:
        assert rt.memory.organization == "acme"
        org = await rt.memory.remember("acme deploys on fridays", scope="organization")
        by_enum = await rt.memory.remember("acme uses tabs", scope=Scope.ORGANIZATION)
        mine = await rt.memory.remember("I deploy on mondays", scope="user")
        assert (org.scope, org.organization) == (Scope.ORGANIZATION, "acme")
        assert by_enum.organization == "acme"
        assert mine.organization is None
        # Every scope by default, the organization's included; or only the one asked for.
        found = await rt.memory.search("deploy")
        assert {hit.fact.id for hit in found.hits} == {org.id, mine.id}
        only = await rt.memory.search("deploy", scopes=["organization"])
        assert [hit.fact.id for hit in only.hits] == [org.id]
        listed = await rt.memory.list(scopes="organization")
        assert {fact.id for fact in listed} == {org.id, by_enum.id}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "scope", ["organization", "Organization", " ORGANIZATION ", Scope.ORGANIZATION]
)
async def test_the_organization_scope_without_one_is_an_error_never_a_fallback(
    memory_store: StoreSpec, scope: Any
) -> None:
    async with opened(memory_store) as rt:
        assert rt.memory.organization is None
        with pytest.raises(ScopeNotConfigured, match="organization=") as info:
            await rt.memory.remember("acme deploys on fridays", scope=scope)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, ms.MainspringError)
        with pytest.raises(ScopeNotConfigured):
            await rt.memory.search("deploys", scopes=[scope])
        with pytest.raises(ScopeNotConfigured):
            await rt.memory.list(scopes=["user", scope])
        assert await stored_count(rt) == 0  # nothing fell back into the project


@pytest.mark.anyio
@pytest.mark.parametrize("scope", [None, 3, b"user", object()])
async def test_a_scope_that_is_not_a_name_is_a_type_error(
    memory_store: StoreSpec, scope: Any
) -> None:
    async with opened(memory_store) as rt:
        with pytest.raises(TypeError, match="scope"):
            await rt.memory.remember("text", scope=scope)
        assert await stored_count(rt) == 0


# -- what a fact holds -------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("given", "stored"), [(1.5, 1.0), (-0.25, 0.0), (0, 0.0), (1, 1.0), (0.75, 0.75)]
)
async def test_confidence_is_clamped_to_0_1(
    memory_store: StoreSpec, given: float, stored: float
) -> None:
    async with opened(memory_store) as rt:
        fact = await rt.memory.remember("a claim", confidence=given)
        assert fact.confidence == stored
        assert (await rt.memory.get(fact.id)) == fact


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("given", "error"),
    [
        (math.nan, ValueError),
        (math.inf, ValueError),
        (-math.inf, ValueError),
        (True, TypeError),
        ("0.5", TypeError),
        (None, TypeError),
    ],
)
async def test_a_confidence_that_is_not_a_finite_number_is_refused(
    memory_store: StoreSpec, given: Any, error: type[Exception]
) -> None:
    async with opened(memory_store) as rt:
        with pytest.raises(error, match="confidence"):
            await rt.memory.remember("a claim", confidence=given)
        with pytest.raises(error, match="min_confidence"):
            await rt.memory.search("claim", min_confidence=given)
        assert await stored_count(rt) == 0


@pytest.mark.anyio
async def test_text_is_redacted_before_it_is_stored(memory_store: StoreSpec) -> None:
    secret = "hunter2-memory-" + "q7x9"  # registered: masked wherever it appears
    ms.storage.register_secret(secret)
    key = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    async with opened(memory_store) as rt:
        fact = await rt.memory.remember(f"deploy with password {secret} and key {key}")
        assert secret not in fact.text
        assert key not in fact.text
        assert "[redacted secret]" in fact.text
        assert "[redacted openai-key]" in fact.text
        assert await rt.memory.get(fact.id) == fact
    assert not memory_store.raw_contains(secret)
    assert not memory_store.raw_contains(key)
    assert memory_store.raw_contains("deploy with password")  # the fact itself is there


@pytest.mark.anyio
async def test_the_length_bound_applies_to_the_redacted_text(memory_store: StoreSpec) -> None:
    key = "sk-" + "Z" * 40
    async with opened(memory_store) as rt:
        # Too long as given, within bounds once the key is masked.
        text = "x" * (MAX_FACT_TEXT - 30) + " " + key
        assert len(text) > MAX_FACT_TEXT
        fact = await rt.memory.remember(text)
        assert len(fact.text) <= MAX_FACT_TEXT
        with pytest.raises(ValueError, match=f"at most {MAX_FACT_TEXT}"):
            await rt.memory.remember("y" * (MAX_FACT_TEXT + 1))
        assert await stored_count(rt) == 1


@pytest.mark.anyio
async def test_valid_until_as_epoch_seconds_or_an_aware_datetime(
    memory_store: StoreSpec,
) -> None:
    later = dt.datetime.now(dt.timezone(dt.timedelta(hours=2))) + dt.timedelta(hours=1)
    async with opened(memory_store) as rt:
        by_datetime = await rt.memory.remember("the freeze lasts an hour", valid_until=later)
        assert by_datetime.valid_until == pytest.approx(later.timestamp())
        by_seconds = await rt.memory.remember("the freeze is short", valid_until=time.time() + 60)
        lapsed = await rt.memory.remember("the freeze was yesterday", valid_until=time.time() - 60)
        found = await rt.memory.search("freeze")
        assert {hit.fact.id for hit in found.hits} == {by_datetime.id, by_seconds.id}
        assert await rt.memory.get(lapsed.id) == lapsed  # stored, just not shown
        with pytest.raises(ValueError, match="aware"):
            await rt.memory.remember("naive", valid_until=dt.datetime(2030, 1, 1))
        with pytest.raises(TypeError, match="valid_until"):
            await rt.memory.remember("a string", valid_until="tomorrow")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="valid_until"):
            await rt.memory.remember("never", valid_until=math.inf)
        assert await stored_count(rt) == 3


# -- supersession and forgetting ---------------------------------------------------------------


@pytest.mark.anyio
async def test_a_conflict_group_supersedes_across_scopes_and_forget_relinks(
    memory_store: StoreSpec,
) -> None:
    async with opened(memory_store) as rt:
        memory = rt.memory
        a = await memory.remember("timezone is UTC", scope="user", conflict_group="tz")
        b = await memory.remember("timezone is CET", scope="project", conflict_group="tz")
        c = await memory.remember("timezone is JST", scope="repository", conflict_group="tz")
        other = await memory.remember("timezone docs live in the wiki")
        assert a.superseded_by is None  # as stored when remembered
        assert (await memory.get(a.id)).superseded_by == b.id  # type: ignore[union-attr]
        assert (await memory.get(b.id)).superseded_by == c.id  # type: ignore[union-attr]
        shown = await memory.search("timezone")
        assert {hit.fact.id for hit in shown.hits} == {c.id, other.id}
        assert {f.id for f in await memory.list()} == {c.id, other.id}
        assert {f.id for f in await every_fact(memory)} == {a.id, b.id, c.id, other.id}

        assert await memory.forget(b.id) is True  # the middle of the chain: a goes to c
        assert await memory.get(b.id) is None
        assert (await memory.get(a.id)).superseded_by == c.id  # type: ignore[union-attr]
        assert await memory.forget(c.id) is True  # the head: a is current again
        assert (await memory.get(a.id)).superseded_by is None  # type: ignore[union-attr]
        shown = await memory.search("timezone")
        assert {hit.fact.id for hit in shown.hits} == {a.id, other.id}
        assert await memory.forget(c.id) is False  # already gone
        assert await memory.forget("fact-never-stored") is False


# -- search ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_search_filters_and_ranks_by_full_text(memory_store: StoreSpec) -> None:
    async with opened(memory_store) as rt:
        m = rt.memory
        strong = await m.remember("deploy deploy deploy on friday", domain="ops")
        weak = await m.remember("deploy on monday", domain="ops", confidence=0.2)
        user = await m.remember("I deploy with a script", scope="user", domain="ops")
        other_domain = await m.remember("deploy the docs", domain="docs")
        await m.remember("deploy yesterday", valid_until=time.time() - 1)  # expired
        old = await m.remember("deploy with fabric", conflict_group="how")
        new = await m.remember("deploy with ansible", conflict_group="how")
        await m.remember("nothing to see here")

        found = await m.search("deploy")
        assert isinstance(found, MemorySearch)
        assert found.ranking == rt.store.memory_ranking  # type: ignore[attr-defined]
        assert found.ranking in ("bm25", "ts_rank")
        assert (found.fallback, found.detail) == (None, "")
        ids = [hit.fact.id for hit in found.hits]
        assert set(ids) == {strong.id, weak.id, user.id, other_domain.id, new.id}
        assert old.id not in ids  # hidden by its superseder
        scores = [hit.score for hit in found.hits]
        assert scores == sorted(scores, reverse=True)

        confident = await m.search("deploy", min_confidence=0.5)
        assert weak.id not in {hit.fact.id for hit in confident.hits}
        in_ops = await m.search("deploy", domain="ops")
        assert {hit.fact.id for hit in in_ops.hits} == {strong.id, weak.id, user.id}
        users = await m.search("deploy", scopes=["user"])
        assert [hit.fact.id for hit in users.hits] == [user.id]
        assert (await m.search("deploy", limit=2)).hits == found.hits[:2]
        assert (await m.search("   ")).hits == ()  # no words: nothing matches
        assert (await m.search("unrelated")).hits == ()


@pytest.mark.anyio
async def test_search_returns_ten_by_default(memory_store: StoreSpec) -> None:
    async with opened(memory_store) as rt:
        for i in range(12):
            await rt.memory.remember(f"release note {i}")
        assert len((await rt.memory.search("release")).hits) == 10
        assert len((await rt.memory.search("release", limit=12)).hits) == 12


@pytest.mark.anyio
async def test_list_pages_oldest_first(memory_store: StoreSpec) -> None:
    async with opened(memory_store) as rt:
        facts = [await rt.memory.remember(f"fact number {i}") for i in range(5)]
        first = await rt.memory.list(limit=2)
        assert first == facts[:2]
        second = await rt.memory.list(limit=2, after=first[-1])
        assert second == facts[2:4]
        rest = await rt.memory.list(after=(second[-1].created_at, second[-1].id))
        assert rest == facts[4:]


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_bad_input_is_a_clear_error_and_stores_nothing(
    memory_store: StoreSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(memory_store) as rt:
        m = rt.memory
        writes = memory_apply_calls(rt, monkeypatch)
        bad_remembers: list[tuple[dict[str, Any], type[Exception], str]] = [
            ({"text": ""}, ValueError, "empty"),
            ({"text": " \n\t"}, ValueError, "empty"),
            ({"text": "a\0b"}, ValueError, "NUL"),
            ({"text": 42}, TypeError, "text"),
            ({"text": "x" * (MAX_FACT_TEXT + 1)}, ValueError, "at most"),
            ({"text": "x" * 10_000_000}, ValueError, "at most"),  # refused before redaction
            ({"text": "ok", "domain": "has space"}, ValueError, "match"),
            ({"text": "ok", "domain": "d" * 129}, ValueError, "domain"),
            ({"text": "ok", "domain": None}, TypeError, "domain"),
            ({"text": "ok", "conflict_group": "../etc"}, ValueError, "match"),
            ({"text": "ok", "conflict_group": 7}, TypeError, "conflict_group"),
        ]
        for kwargs, error, match in bad_remembers:
            text = kwargs.pop("text")
            with pytest.raises(error, match=match):
                await m.remember(text, **kwargs)
        for limit, error in (
            (0, ValueError),
            (1_001, ValueError),
            (True, TypeError),
            (2.0, TypeError),
        ):
            with pytest.raises(error, match="limit"):
                await m.search("x", limit=limit)  # type: ignore[arg-type]
            with pytest.raises(error, match="limit"):
                await m.list(limit=limit)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="query"):
            await m.search(b"bytes")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="query"):
            await m.search("q" * (MAX_FACT_TEXT + 1))
        with pytest.raises(TypeError, match="include_hidden"):
            await m.list(include_hidden="yes")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="after"):
            await m.list(after="fact-1")  # type: ignore[arg-type]
        with pytest.raises(InvalidId):
            await m.list(after=(1.0, "../x"))
        with pytest.raises(ValueError, match="at least one"):
            await m.search("x", scopes=[])
        for bad_id in ("../etc/passwd", "", "a b", 5):
            with pytest.raises(InvalidId):
                await m.get(bad_id)  # type: ignore[arg-type]
            with pytest.raises(InvalidId):
                await m.forget(bad_id)  # type: ignore[arg-type]
        assert writes == []  # nothing reached the store's writer
        assert await stored_count(rt) == 0


@pytest.mark.anyio
async def test_open_runtime_checks_the_memory_options_up_front(memory_store: StoreSpec) -> None:
    with pytest.raises(InvalidId):
        async with opened(memory_store, organization="acme/evil"):
            pass
    with pytest.raises(InvalidId):
        async with opened(memory_store, organization=7):
            pass
    with pytest.raises(TypeError, match="embedder must be callable"):
        async with opened(memory_store, embedder="openai"):
            pass


@pytest.mark.anyio
async def test_a_store_that_keeps_no_memory_says_so() -> None:
    async with ms.open_runtime(store=MemoryStore()) as rt:
        memory = rt.memory
        for call in (
            memory.remember("x"),
            memory.search("x"),
            memory.get("fact-1"),
            memory.forget("fact-1"),
            memory.list(),
        ):
            with pytest.raises(TypeError, match="MemoryStore keeps no memory"):
                await call


# -- who writes --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_writes_go_through_the_persistence_actor_and_reads_never_write(
    memory_store: StoreSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(memory_store) as rt:
        committer = rt._services.committer
        writes = memory_apply_calls(rt, monkeypatch)
        before = await committer.stats()
        fact = await rt.memory.remember("the cache lives in redis", conflict_group="cache")
        newer = await rt.memory.remember("the cache lives in memcached", conflict_group="cache")
        assert await rt.memory.forget(newer.id) is True
        after_writes = await committer.stats()
        assert writes == [1, 1, 1]  # each call one batch, applied by the writer
        assert after_writes.flushes == before.flushes + 3  # each one durable flush
        # Reads: nothing is written, nothing flushed.
        assert await rt.memory.get(fact.id) is not None
        await rt.memory.list(include_hidden=True)
        await rt.memory.search("cache")
        await rt.memory.search("cache", scopes="user", domain="general", min_confidence=0.5)
        assert writes == [1, 1, 1]
        assert await committer.stats() == after_writes


# ----------------------------------------------------------------------
# ``ctx.memory``: the same API inside agents, with provenance on what they remember, and a
# ``remember`` that a resumed agent replays without a duplicate or a second supersession.


async def every_fact_memory_agents(rt: ms.Runtime) -> list[Fact]:
    return await rt.memory.list(include_hidden=True, limit=1_000)


@pytest.mark.anyio
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


@pytest.mark.anyio
async def test_the_same_fact_twice_in_one_run_is_two_facts(memory_store: StoreSpec) -> None:
    async def twice(ctx: ms.AgentContext, input: Any) -> list[str]:
        first = await ctx.memory.remember("lint before pushing")
        second = await ctx.memory.remember("lint before pushing")
        return [first.id, second.id]

    async with ms.open_runtime(store=memory_store.target, agents={"twice": twice}) as rt:
        result = await (await rt.start("g", plan_of(agent("t", "twice")))).wait()
        first, second = result.outputs["t"]
        assert first != second
        assert len(await every_fact_memory_agents(rt)) == 2


@pytest.mark.anyio
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
        facts = {f.id: f for f in await every_fact_memory_agents(b)}
    assert len(answers) == 2  # the agent ran its remember twice...
    replayed = answers[1]
    assert replayed.id == first.id == done.outputs["r"]
    assert set(facts) == {first.id, newer.id}  # ...and one fact was stored
    assert facts[first.id].superseded_by == newer.id  # superseded once, by the newer fact
    assert facts[newer.id].superseded_by is None  # not superseded by the replay
    assert replayed == facts[first.id]  # the replay got the stored fact
    assert replayed.created_at == first.created_at


@pytest.mark.anyio
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
        assert await every_fact_memory_agents(rt) == []
    assert len(raised) == 1


@pytest.mark.anyio
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


# ----------------------------------------------------------------------
# Agent memory inside agents: the documented way to replay a search
# (a ``ctx.step`` that returns storable values taken from it) replays on resume, and the
# objects memory hands back are refused by ``ctx.step`` with a clear error, as now
# documented (the docs used to say "wrap a search in ctx.step to replay its result", which
# raised ``ValueError``).


@pytest.mark.anyio
async def test_E10_a_search_replayed_through_ctx_step_as_the_docs_say(
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


@pytest.mark.anyio
async def test_E10_memory_objects_returned_from_ctx_step_are_a_clear_error(
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
        ms.executions.AgentMemory.__doc__ or "",
        ms.executions.Memory.search.__doc__ or "",
        ms.AgentContext.memory.__doc__ or "",
    ]
    for doc in docs:
        flat = " ".join(doc.split())
        assert "to replay its result" not in flat
        assert "storable" in flat


# ----------------------------------------------------------------------
# What ``Memory`` takes. Every number the API clamps or
# bounds is taken whatever its size (a huge int clamps, it does not overflow) and whatever
# its kind of number (``Decimal`` too); a domain or conflict group shaped like a secret is
# refused instead of being stored in the clear; a wrong argument names its own type.

HUGE = 10**400  # finite, but beyond a float's range


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (HUGE, 1.0),
        (-HUGE, 0.0),
        (fractions.Fraction(HUGE, 3), 1.0),
        (decimal.Decimal("0.25"), 0.25),
        (decimal.Decimal("1e500"), 1.0),
        (decimal.Decimal("-1e500"), 0.0),
        (fractions.Fraction(1, 4), 0.25),
    ],
)
async def test_K5_any_finite_number_is_a_confidence_clamped_to_0_1(
    memory_store: StoreSpec, given: Any, stored: float
) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        fact = await rt.memory.remember("a claim", confidence=given)
        assert fact.confidence == stored
        found = await rt.memory.search("claim", min_confidence=given)
        assert [hit.fact.id for hit in found.hits] == [fact.id]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("given", "error"),
    [
        (decimal.Decimal("NaN"), ValueError),
        (decimal.Decimal("sNaN"), ValueError),
        (decimal.Decimal("Infinity"), ValueError),
        (complex(0.5, 0), TypeError),
    ],
)
async def test_K5_a_decimal_that_is_not_finite_is_refused_like_a_float(
    memory_store: StoreSpec, given: Any, error: type[Exception]
) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        with pytest.raises(error, match="confidence"):
            await rt.memory.remember("a claim", confidence=given)
        with pytest.raises(error, match="valid_until"):
            await rt.memory.remember("a claim", valid_until=given)
        assert await rt.memory.list() == []


@pytest.mark.anyio
async def test_K5_valid_until_of_any_size_is_a_clear_answer(memory_store: StoreSpec) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        forever = await rt.memory.remember("for ever", valid_until=HUGE)
        assert forever.valid_until == sys.float_info.max
        assert [hit.fact.id for hit in (await rt.memory.search("ever")).hits] == [forever.id]
        with pytest.raises(ValueError, match="valid_until"):
            await rt.memory.remember("before the epoch", valid_until=-HUGE)
        later = await rt.memory.remember("later", valid_until=decimal.Decimal("4e9"))
        assert later.valid_until == 4e9
        assert await rt.memory.list(after=(HUGE, forever.id)) == []  # past every fact
        assert await rt.memory.list(after=(decimal.Decimal(0), "a")) != []


@pytest.mark.anyio
@pytest.mark.parametrize("what", ["domain", "conflict_group"])
@pytest.mark.parametrize(
    "secret",
    [
        "sk-" + "A1b2C3d4" * 5,
        "AKIA" + "ABCDEFGHIJKLMNOP",
        "ghp_" + "x1" * 18,
        "xoxb-1234567890-abc",
    ],
)
async def test_E5_a_name_shaped_like_a_secret_is_refused_never_stored(
    memory_store: StoreSpec, what: str, secret: str
) -> None:
    """Before the fix only the text was redacted: a key given as a domain or a conflict
    group (both ids, and many keys are shaped like ids) reached the store in the clear."""
    async with ms.open_runtime(store=memory_store.target) as rt:
        with pytest.raises(ValueError, match=f"{what} looks like a secret"):
            await rt.memory.remember("a claim", **{what: secret})
        assert await rt.memory.list(include_hidden=True) == []
        await rt.memory.remember("a claim", domain="tokens", conflict_group="api-key")
    assert not memory_store.raw_contains(secret)


@pytest.mark.anyio
async def test_K5_a_wrong_scopes_argument_names_its_own_type(memory_store: StoreSpec) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        with pytest.raises(TypeError, match="not bytes"):
            await rt.memory.search("x", scopes=b"user")  # type: ignore[arg-type]
        found = await rt.memory.search("x", scopes=[Scope.USER, " Project "])
        assert found.hits == ()


# ----------------------------------------------------------------------
# Agent memory: ``rt.memory`` after the runtime exited raises
# StorageError on every store kind (a FileStore opened its memory file again, and left the
# connection open).


@pytest.mark.anyio
async def test_D4_memory_after_the_runtime_exited_raises(memory_store: StoreSpec) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        fact = await rt.memory.remember("the build uses tox")
        memory = rt.memory
    with pytest.raises(StorageError):
        await memory.search("build")
    with pytest.raises(StorageError):
        await memory.get(fact.id)
    store = rt.store
    if isinstance(store, ms.storage.FileStore):
        assert store._memory._memory is None  # nothing opened again


# ----------------------------------------------------------------------
# Agent memory: an organization's facts belong to it (README): a
# runtime of another organization, or of none, neither reads one by id (``get`` answers None,
# as ``list`` and ``search`` never show it) nor deletes one (``forget`` answers False and
# changes nothing). Before, ``get`` and ``forget`` took any id: a runtime that may not even
# supersede an organization's fact could delete it. Every backend, ``rt.memory`` and
# ``ctx.memory``.


@pytest.fixture(params=["sqlite", "files", "postgres"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreSpec]:
    yield from store_spec(request.param, tmp_path)


@pytest.mark.anyio
@pytest.mark.parametrize("other", [None, "globex"])
async def test_K2_another_organization_neither_gets_nor_forgets_this_ones_facts(
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


@pytest.mark.anyio
async def test_K2_an_agent_of_another_organization_neither_gets_nor_forgets(
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


# ----------------------------------------------------------------------
# Agent memory: a runtime of one organization (or of none)
# remembering in a conflict group never hides another organization's facts from it.


@pytest.mark.anyio
@pytest.mark.parametrize("other", [None, "globex"])
async def test_K2_another_organization_does_not_hide_this_ones_facts(
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


@pytest.mark.anyio
async def test_K2_an_agent_passes_its_runtimes_organization(spec: StoreSpec) -> None:
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


# ----------------------------------------------------------------------
# Agent memory: an agent's ``remember`` across a kill -9 and a resume in a
# fresh process stores each fact once, superseded once, with its provenance (slow: two
# subprocesses per backend).

WORKER = Path(__file__).parents[1] / "_memory_worker.py"
REPO = Path(ms.__file__).parent.parent
EXECUTION = "memory-crash"


def _spawn(mode: str, store: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, WORKER, mode, str(store), EXECUTION],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _facts(kind: str, store: Path) -> list[Fact]:
    backend = ms.storage.SqliteStore(store) if kind == "sqlite" else ms.storage.FileStore(store)
    try:
        return backend.memory_list(FactFilter(include_hidden=True), limit=100)
    finally:
        backend.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_K1_remembered_facts_are_stored_once_across_a_kill_and_a_resume(
    kind: str, tmp_path: Path
) -> None:
    store = tmp_path / ("store.sqlite3" if kind == "sqlite" else "store")
    child = _spawn("start", store)
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 60.0)
    line = child.stdout.readline().strip() if readable else b"timed out"
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=30)
    assert line == b"ready", (line, err.decode()[-3000:])
    at_kill = {fact.id: fact for fact in _facts(kind, store)}
    assert len(at_kill) == 2

    child = _spawn("resume", store)
    out, err = child.communicate(timeout=90)
    assert child.returncode == 0, (out.decode(), err.decode()[-3000:])
    answer = json.loads(out.decode().strip().splitlines()[-1])
    assert answer["status"] == "completed"
    facts = {fact.id: fact for fact in _facts(kind, store)}
    assert facts == at_kill  # one fact each, not two, and nothing changed on the replay
    old_id, new_id = answer["ids"]
    assert set(facts) == {old_id, new_id}
    old, new = facts[old_id], facts[new_id]
    assert old.superseded_by == new_id
    assert new.superseded_by is None
    assert (old.text, old.scope, old.confidence) == ("the build uses tox", Scope.REPOSITORY, 0.5)
    for fact in (old, new):
        assert fact.execution_id == EXECUTION
        assert fact.step_id == "c"
        assert fact.task_id is not None
        assert fact.task_id.startswith(EXECUTION)


def test_O1_a_fallback_of_the_embedder_is_a_WARNING_the_others_DEBUG(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="mainspring.memory")
    _logged_fallback("embedder-error", "ConnectionError: down\x1b[31m", 3)
    _logged_fallback("degenerate-query", "the query is empty", 0)
    failed, empty = caplog.records
    assert (failed.levelno, empty.levelno) == (logging.WARNING, logging.DEBUG)
    assert "\x1b" not in failed.getMessage()  # a terminal's escape is shown, not obeyed
    assert failed.getMessage().endswith("ConnectionError: down\\x1b[31m")
    assert (empty.fallback, empty.considered) == ("degenerate-query", 0)
