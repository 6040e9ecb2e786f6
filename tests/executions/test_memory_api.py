"""``runtime.memory``: scopes, clamping, redaction, validity, supersession and forgetting
through the API, each search filter, bad input, and who writes (the persistence actor
only; reads never write). Every test runs on each store kind of ``_memory_kit``."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import mainspring as ms
from mainspring.executions import Memory, ScopeNotConfigured
from mainspring.executions._seam import MemorySearch
from mainspring.storage import Fact, InvalidId, Scope
from mainspring.storage._seam import MAX_FACT_TEXT

from ._kit import MemoryStore
from ._memory_kit import StoreSpec, memory_apply_calls

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def opened(spec: StoreSpec, **options: Any) -> AsyncIterator[ms.Runtime]:
    async with ms.open_runtime(store=spec.target, **options) as rt:
        yield rt


async def every_fact(memory: Memory) -> list[Fact]:
    return await memory.list(include_hidden=True, limit=1_000)


async def stored_count(rt: ms.Runtime) -> int:
    return len(await every_fact(rt.memory))


# -- scopes ------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("scope", [None, 3, b"user", object()])
async def test_a_scope_that_is_not_a_name_is_a_type_error(
    memory_store: StoreSpec, scope: Any
) -> None:
    async with opened(memory_store) as rt:
        with pytest.raises(TypeError, match="scope"):
            await rt.memory.remember("text", scope=scope)
        assert await stored_count(rt) == 0


# -- what a fact holds -------------------------------------------------------------------------


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


async def test_search_returns_ten_by_default(memory_store: StoreSpec) -> None:
    async with opened(memory_store) as rt:
        for i in range(12):
            await rt.memory.remember(f"release note {i}")
        assert len((await rt.memory.search("release")).hits) == 10
        assert len((await rt.memory.search("release", limit=12)).hits) == 12


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
