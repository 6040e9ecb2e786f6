"""Ranking memory by meaning: the math (pure, no event loop), then searches on a runtime with
a deterministic fake embedder (sync and async): cosine order, ties by id, only scores above
0, each fallback and its flag, the vector cache, and the filters."""

from __future__ import annotations

import logging
import math
import threading
import time
from array import array
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.executions._memory.rank import (
    EMBED_BATCH,
    MAX_EMBEDDER_THREADS,
    VectorCache,
    cosine,
    rank,
    rank_by_meaning,
    unit_vector,
)
from mainspring.executions._seam import MemorySearch
from mainspring.storage import Fact, Scope
from mainspring.storage._seam import FactFilter

from ..._examples import examples
from .._memory_kit import EMBEDDERS, AsyncBag, StoreSpec, SyncBag, bag_of_words

# -- the math ----------------------------------------------------------------------------------


def test_cosine_of_plain_vectors() -> None:
    assert cosine([1, 0], [1, 0]) == pytest.approx(1.0)
    assert cosine([1, 0], [0, 1]) == 0.0
    assert cosine([1, 1], [1, 0]) == pytest.approx(1 / math.sqrt(2))
    assert cosine([1, 0], [-1, 0]) == pytest.approx(-1.0)
    assert cosine([2, 4], [1, 2]) == pytest.approx(1.0)  # length does not matter


def test_cosine_is_0_for_mismatched_lengths_and_zero_magnitude() -> None:
    assert cosine([1, 0, 0], [1, 0]) == 0.0
    assert cosine([0, 0], [1, 0]) == 0.0
    assert cosine([], []) == 0.0
    assert cosine([1e300, 1e300], [1e300, 1e300]) == pytest.approx(1.0)  # no overflow
    assert cosine([1e-300, 0], [1e-300, 0]) == pytest.approx(1.0)  # no underflow to 0


@pytest.mark.parametrize(
    "raw",
    [[], [math.nan, 1.0], [math.inf], [True, 1.0], ["1", 2], "12", b"12", {"a": 1}, None, 3],
)
def test_what_is_not_a_usable_vector(raw: Any) -> None:
    assert unit_vector(raw) is None


def test_a_zero_vector_is_usable_but_empty() -> None:
    zero = unit_vector([0, 0.0])
    assert zero is not None
    assert len(zero) == 0
    assert list(unit_vector((3, 4)) or []) == pytest.approx([0.6, 0.8])


_vector = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=8)


@settings(max_examples=examples(200))
@given(_vector, _vector)
def test_cosine_matches_the_textbook_formula(a: list[float], b: list[float]) -> None:
    got = cosine(a, b)
    assert got == cosine(b, a)
    assert -1.0 <= got <= 1.0
    if len(a) != len(b) or not any(a) or not any(b):
        assert got == 0.0
        return
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    if na < 1e-100 or nb < 1e-100:  # the textbook formula itself loses precision there
        return
    assert got == pytest.approx(sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb), abs=1e-9)


def _fact(fact_id: str, text: str = "t") -> Fact:
    return Fact(id=fact_id, text=text, scope=Scope.PROJECT)


def _unit(values: list[float]) -> array[float]:
    vector = unit_vector(values)
    assert vector is not None
    return vector


def test_rank_keeps_scores_above_0_best_first_ties_by_id() -> None:
    query, same, half, ortho, opposite, short = (
        _unit(v) for v in ([1.0, 0.0], [2.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 0.0], [1.0])
    )
    candidates = [
        (_fact("f-c"), same),
        (_fact("f-a"), same),
        (_fact("f-b"), half),
        (_fact("f-d"), ortho),
        (_fact("f-e"), opposite),
        (_fact("f-f"), short),
    ]
    ranked = rank(query, candidates, 10)
    assert [(f.id, round(s, 6)) for f, s in ranked] == [
        ("f-a", 1.0),
        ("f-c", 1.0),
        ("f-b", round(1 / math.sqrt(2), 6)),
    ]
    assert [f.id for f, _ in rank(query, candidates, 1)] == ["f-a"]


def test_the_vector_cache_is_bounded_and_least_recently_used_goes_first() -> None:
    cache = VectorCache(size=2)
    vector = unit_vector([1.0])
    assert vector is not None
    a, b, c = _fact("f-a", "a"), _fact("f-b", "b"), _fact("f-c", "c")
    cache.put(a, vector)
    cache.put(b, vector)
    assert cache.get(a) is vector  # a is now the most recently used
    cache.put(c, vector)
    assert cache.get(b) is None
    assert cache.get(a) is vector
    assert cache.get(_fact("f-a", "other text")) is None  # checked against the text
    cache.drop("f-a")
    assert cache.get(a) is None
    assert len(cache) == 1


# -- searches on a runtime ---------------------------------------------------------------------


@asynccontextmanager
async def opened(spec: StoreSpec, embedder: Any, **options: Any) -> AsyncIterator[ms.Runtime]:
    async with ms.open_runtime(store=spec.target, embedder=embedder, **options) as rt:
        yield rt


@pytest.fixture(params=sorted(EMBEDDERS))
def bag(request: pytest.FixtureRequest) -> SyncBag:
    made: SyncBag = EMBEDDERS[request.param]()
    return made


def ids(found: MemorySearch) -> list[str]:
    return [hit.fact.id for hit in found.hits]


@pytest.mark.anyio
async def test_a_runtime_with_an_embedder_ranks_by_cosine(
    memory_store: StoreSpec, bag: SyncBag
) -> None:
    async with opened(memory_store, bag) as rt:
        m = rt.memory
        cats = await m.remember("cat cat cat")
        mixed = await m.remember("cat and dog")
        dogs = await m.remember("dog only")
        found = await m.search("a cat")
        assert found.ranking == "cosine"
        assert (found.fallback, found.detail) == (None, "")
        assert found.considered == 3
        assert found.capped is False
        assert ids(found) == [cats.id, mixed.id]  # the dog fact scores 0: left out
        assert found.hits[0].score == pytest.approx(1.0)
        assert found.hits[1].score == pytest.approx(1 / math.sqrt(2))
        # A fact in no word of the vocabulary ("cat" is not in "dog only") is never shown.
        assert dogs.id not in ids(await m.search("cat", limit=100))


@pytest.mark.anyio
async def test_sync_embedders_run_in_a_worker_thread_async_ones_on_the_loop(
    memory_store: StoreSpec, bag: SyncBag
) -> None:
    async with opened(memory_store, bag) as rt:
        await rt.memory.remember("tea time")
        loop_thread = threading.get_ident()
        await rt.memory.search("tea")
    if isinstance(bag, AsyncBag):
        assert bag.threads == {loop_thread}
    else:
        assert loop_thread not in bag.threads


@pytest.mark.anyio
async def test_equal_scores_are_ordered_by_id(memory_store: StoreSpec, bag: SyncBag) -> None:
    async with opened(memory_store, bag) as rt:
        facts = [await rt.memory.remember(f"coffee note {i}") for i in range(4)]
        found = await rt.memory.search("coffee")
        assert ids(found) == sorted(f.id for f in facts)
        assert len({hit.score for hit in found.hits}) == 1


@pytest.mark.anyio
async def test_a_vector_of_another_length_scores_0(memory_store: StoreSpec, bag: SyncBag) -> None:
    async with opened(memory_store, bag) as rt:
        bag.vectors["fish of another size"] = [1.0, 0.0, 1.0]  # 3 dimensions, not 6
        odd = await rt.memory.remember("fish of another size")
        fine = await rt.memory.remember("fish swim")
        found = await rt.memory.search("fish")
        assert found.ranking == "cosine"
        assert ids(found) == [fine.id]
        assert odd.id not in ids(found)


@pytest.mark.anyio
async def test_each_search_respects_the_filters_and_the_limit(
    memory_store: StoreSpec, bag: SyncBag
) -> None:
    async with opened(memory_store, bag, organization="acme") as rt:
        m = rt.memory
        kept = await m.remember("bird watching", domain="hobby", confidence=0.9)
        low = await m.remember("bird song", domain="hobby", confidence=0.1)
        await m.remember("bird flu", domain="health")
        await m.remember("bird migration", valid_until=time.time() - 1)
        old = await m.remember("bird feeder red", conflict_group="feeder")
        new = await m.remember("bird feeder green", conflict_group="feeder", scope="user")
        org = await m.remember("bird logo", scope="organization")
        everything = await m.search("bird", limit=100)
        assert everything.ranking == "cosine"
        shown = set(ids(everything))
        assert old.id not in shown  # hidden by its superseder
        assert {kept.id, low.id, new.id, org.id} <= shown
        assert len(shown) == 5  # and bird flu; the expired fact is not shown
        assert everything.considered == 5
        hobby = await m.search("bird", domain="hobby", min_confidence=0.5)
        assert ids(hobby) == [kept.id]
        assert ids(await m.search("bird", scopes=["user"])) == [new.id]
        assert ids(await m.search("bird", scopes="organization")) == [org.id]
        assert len((await m.search("bird", limit=2)).hits) == 2


# -- fallbacks ---------------------------------------------------------------------------------


async def _two_facts(rt: ms.Runtime) -> tuple[Fact, Fact]:
    return (
        await rt.memory.remember("dog walking rota"),
        await rt.memory.remember("coffee machine rota"),
    )


def _assert_full_text(found: MemorySearch, rt: ms.Runtime, fallback: str) -> None:
    assert found.ranking == rt.store.memory_ranking  # type: ignore[attr-defined]
    assert found.fallback == fallback
    assert found.detail


@pytest.mark.anyio
async def test_an_empty_query_is_degenerate(memory_store: StoreSpec, bag: SyncBag) -> None:
    async with opened(memory_store, bag) as rt:
        await _two_facts(rt)
        found = await rt.memory.search("  \n ")
        _assert_full_text(found, rt, "degenerate-query")
        assert found.hits == ()
        assert bag.calls == []  # the embedder was not asked


@pytest.mark.anyio
async def test_a_query_vector_of_zero_magnitude_falls_back_to_full_text(
    memory_store: StoreSpec, bag: SyncBag
) -> None:
    async with opened(memory_store, bag) as rt:
        walking, _ = await _two_facts(rt)
        found = await rt.memory.search("walking")  # no vocabulary word: a zero vector
        _assert_full_text(found, rt, "degenerate-query")
        assert "zero magnitude" in found.detail
        assert ids(found) == [walking.id]  # found by its words
        bag.vectors["rota"] = [math.nan] * 6
        found = await rt.memory.search("rota")
        _assert_full_text(found, rt, "degenerate-query")
        assert len(found.hits) == 2


@pytest.mark.anyio
async def test_no_usable_vectors_falls_back_and_unusable_ones_are_not_cached(
    memory_store: StoreSpec, bag: SyncBag
) -> None:
    async with opened(memory_store, bag) as rt:
        walking, coffee = await _two_facts(rt)
        bag.vectors[walking.text] = []
        bag.vectors[coffee.text] = [1.0, math.inf, 0, 0, 0, 0]
        found = await rt.memory.search("dog rota")
        _assert_full_text(found, rt, "no-usable-vectors")
        assert found.considered == 2
        assert set(ids(found)) == {walking.id, coffee.id}
        # Asked again next time (not cached): now they are usable.
        del bag.vectors[walking.text], bag.vectors[coffee.text]
        again = await rt.memory.search("dog rota")
        assert again.ranking == "cosine"
        assert ids(again) == [walking.id]
        assert bag.texts[walking.text] == 2
        assert bag.texts[coffee.text] == 2


@pytest.mark.anyio
async def test_an_embedder_that_raises_falls_back_with_a_redacted_reason(
    memory_store: StoreSpec, bag: SyncBag, caplog: pytest.LogCaptureFixture
) -> None:
    key = "sk-" + "k" * 40
    caplog.set_level(logging.DEBUG, logger="mainspring.memory")
    async with opened(memory_store, bag) as rt:
        walking, _ = await _two_facts(rt)
        bag.fail = ConnectionError(f"the service refused key {key}")
        found = await rt.memory.search("walking")
        _assert_full_text(found, rt, "embedder-error")
        assert "ConnectionError" in found.detail
        assert key not in found.detail
        assert "[redacted openai-key]" in found.detail
        assert len(found.detail) <= 300
        assert ids(found) == [walking.id]
    # O1: said once in the log, at WARNING, as redacted as the search's detail
    (said,) = [r for r in caplog.records if r.name == "mainspring.memory"]
    assert said.levelno == logging.WARNING
    assert (said.fallback, said.considered) == ("embedder-error", 2)
    assert (
        said.getMessage() == f"memory search ranked by full text (embedder-error): {found.detail}"
    )
    assert key not in caplog.text


@pytest.mark.anyio
async def test_the_wrong_number_of_vectors_is_an_embedder_error(
    memory_store: StoreSpec, bag: SyncBag
) -> None:
    async with opened(memory_store, bag) as rt:
        walking, _ = await _two_facts(rt)
        bag.short = True
        found = await rt.memory.search("dog walking")
        _assert_full_text(found, rt, "embedder-error")
        assert "0 vectors for 1 texts" in found.detail  # the query's batch
        assert ids(found) == [walking.id]
        bag.short = False
        bag.vectors["dog walking"] = [1.0, 1.0, 0, 0, 0, 0]
        bag.vectors[walking.text] = "not a vector"  # unusable, not a wrong count
        ranked = await rt.memory.search("dog walking")
        assert ranked.ranking == "cosine"


@pytest.mark.anyio
async def test_an_embedder_answering_something_else_is_an_embedder_error(
    memory_store: StoreSpec,
) -> None:
    async def weird(texts: list[str]) -> Any:
        return 42

    async with opened(memory_store, weird) as rt:
        await rt.memory.remember("cat")
        found = await rt.memory.search("cat")
        assert found.fallback == "embedder-error"
        assert "int" in found.detail


# -- the cache ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_each_fact_is_embedded_once_across_searches(
    memory_store: StoreSpec, bag: SyncBag
) -> None:
    async with opened(memory_store, bag) as rt:
        facts = [await rt.memory.remember(f"cat fact {i}") for i in range(EMBED_BATCH + 3)]
        for query in ("cat", "cats", "a cat"):
            found = await rt.memory.search(query, limit=1_000)
            assert len(found.hits) == len(facts)
        assert all(bag.texts[f.text] == 1 for f in facts)  # cached after the first search
        assert bag.texts["cat"] == 1  # queries are embedded each time (not cached)
        # Fact texts went in batches of EMBED_BATCH (plus one call per query).
        sizes = [len(call) for call in bag.calls if call[0].startswith("cat fact")]
        assert sizes == [EMBED_BATCH, 3]
        # A new fact is embedded once, the others not again.
        new = await rt.memory.remember("cat newest")
        await rt.memory.search("cat")
        assert bag.texts[new.text] == 1
        assert all(bag.texts[f.text] == 1 for f in facts)


@pytest.mark.anyio
async def test_searching_by_meaning_never_writes(
    memory_store: StoreSpec, bag: SyncBag, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .._memory_kit import memory_apply_calls

    async with opened(memory_store, bag) as rt:
        await _two_facts(rt)
        writes = memory_apply_calls(rt, monkeypatch)
        stats = await rt._services.committer.stats()
        await rt.memory.search("dog")
        bag.fail = RuntimeError("down")
        await rt.memory.search("dog")
        assert writes == []
        assert await rt._services.committer.stats() == stats


@pytest.mark.anyio
async def test_the_newest_candidates_are_ranked_and_the_cap_is_reported(
    memory_store: StoreSpec,
) -> None:
    bag = SyncBag()
    async with opened(memory_store, bag) as rt:
        facts = [await rt.memory.remember(f"tea blend {i}") for i in range(5)]
        backend: Any = rt.store
        ranked = await rank_by_meaning(backend, bag, VectorCache(), "tea", FactFilter(), 10, cap=3)
        assert (ranked.considered, ranked.capped) == (3, True)
        assert {f.id for f, _ in ranked.hits} == {f.id for f in facts[2:]}
        whole = await rank_by_meaning(backend, bag, VectorCache(), "tea", FactFilter(), 10, cap=5)
        assert (whole.considered, whole.capped) == (5, False)


# ----------------------------------------------------------------------
# Agent memory: what an embedder can do to a runtime. A sync embedder that
# hangs must not take the worker threads the persistence actor needs, nor leave unbounded
# threads behind cancelled searches; an answer that never ends is read only as far as it
# counts; an error that cannot even be printed still falls back.


class Hanging:
    """A sync embedder that blocks its thread until ``release`` is set (as a network call
    without a timeout would); ``entered`` counts the calls under way."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.changed = threading.Condition()
        self.entered = 0

    def __call__(self, texts: list[str]) -> list[list[float]]:
        with self.changed:
            self.entered += 1
            self.changed.notify_all()
        self.release.wait(60)
        return [bag_of_words(text) for text in texts]

    async def wait_entered(self, count: int) -> None:
        """Until ``count`` calls are in the embedder (waited for in a thread)."""

        def wait() -> None:
            with self.changed:
                assert self.changed.wait_for(lambda: self.entered >= count, timeout=30)

        await anyio.to_thread.run_sync(wait)


@pytest.mark.anyio
async def test_K3_a_hanging_sync_embedder_never_holds_up_memory_writes(
    memory_store: StoreSpec,
) -> None:
    """Forty-five searches at once, each stuck in the embedder: before the fix each took
    one of anyio's 40 default worker threads, which the persistence actor's flushes need,
    so every commit of the runtime (memory writes, heartbeats, step results) waited."""
    hanging = Hanging()
    try:
        async with ms.open_runtime(store=memory_store.target, embedder=hanging) as rt:
            await rt.memory.remember("cats purr")
            async with anyio.create_task_group() as tg:
                for _ in range(45):
                    tg.start_soon(rt.memory.search, "cat")
                await hanging.wait_entered(MAX_EMBEDDER_THREADS)
                await anyio.wait_all_tasks_blocked()
                assert hanging.entered == MAX_EMBEDDER_THREADS
                with anyio.fail_after(20):
                    written = await rt.memory.remember("dogs bark")
                    assert await rt.memory.get(written.id) == written
                hanging.release.set()
            assert hanging.entered >= 45  # every search got its turn
    finally:
        hanging.release.set()


@pytest.mark.anyio
async def test_K3_searches_cancelled_while_the_embedder_hangs_leave_bounded_threads(
    memory_store: StoreSpec,
) -> None:
    """A cancelled search abandons its embedder thread (cancellation is prompt), but the
    threads it leaves behind are bounded: once every slot is held by an abandoned call, a
    search falls back to full text at once instead of starting yet another thread."""
    hanging = Hanging()
    try:
        async with ms.open_runtime(store=memory_store.target, embedder=hanging) as rt:
            await rt.memory.remember("cats purr")
            for round_ in range(MAX_EMBEDDER_THREADS):
                with anyio.CancelScope() as scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(rt.memory.search, "cat")
                        await hanging.wait_entered(round_ + 1)
                        scope.cancel()
                assert scope.cancelled_caught, round_
            assert hanging.entered == MAX_EMBEDDER_THREADS
            for _ in range(2 * MAX_EMBEDDER_THREADS):  # every slot is held: no new thread
                with anyio.fail_after(20):
                    found = await rt.memory.search("cat")
                assert found.fallback == "embedder-error"
                assert "still running" in found.detail
                assert [hit.fact.text for hit in found.hits] == ["cats purr"]
            assert hanging.entered == MAX_EMBEDDER_THREADS
            hanging.release.set()
    finally:
        hanging.release.set()


def _endless(pulled: list[int]) -> Any:
    def embedder(texts: list[str]) -> Iterator[list[float]]:
        for text in texts:
            pulled[0] += 1
            yield bag_of_words(text)
        while pulled[0] < 10_000_000:  # would run for ever without the guard
            pulled[0] += 1
            yield [1.0]

    return embedder


@pytest.mark.anyio
async def test_K3_an_answer_with_too_many_vectors_is_read_only_as_far_as_it_counts(
    memory_store: StoreSpec,
) -> None:
    """Before the fix the whole answer was listed (in a thread that cancellation waits
    for): an endless generator held the search for ever and grew without bound."""
    pulled = [0]
    async with ms.open_runtime(store=memory_store.target, embedder=_endless(pulled)) as rt:
        await rt.memory.remember("cats purr")
        with anyio.fail_after(20):
            found = await rt.memory.search("cat")
    assert found.fallback == "embedder-error"
    assert "more vectors than" in found.detail
    assert pulled[0] <= 2 + 1  # the query's batch: one vector, and one too many


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this error cannot be printed")


@pytest.mark.anyio
async def test_K3_an_embedder_error_that_cannot_be_printed_still_falls_back(
    memory_store: StoreSpec,
) -> None:
    def broken(texts: list[str]) -> list[list[float]]:
        raise Unprintable

    async with ms.open_runtime(store=memory_store.target, embedder=broken) as rt:
        await rt.memory.remember("cats purr")
        found = await rt.memory.search("cat")
    assert found.fallback == "embedder-error"
    assert "Unprintable" in found.detail
    assert [hit.fact.text for hit in found.hits] == ["cats purr"]


@pytest.mark.anyio
async def test_K3_keyboard_interrupt_and_cancellation_from_an_embedder_are_not_swallowed(
    memory_store: StoreSpec,
) -> None:
    def interrupted(texts: list[str]) -> list[list[float]]:
        raise KeyboardInterrupt

    async with ms.open_runtime(store=memory_store.target, embedder=interrupted) as rt:
        await rt.memory.remember("cats purr")
        with pytest.raises(KeyboardInterrupt):
            await rt.memory.search("cat")


@pytest.mark.anyio
async def test_K3_a_huge_embedder_error_is_redacted_off_the_event_loop(
    memory_store: StoreSpec,
) -> None:
    """The reason a search reports is redacted then cut; redacting a multi-megabyte message
    (an embedder that quotes its whole request, say) held the event loop for about a
    second. The loop guard of tests/conftest.py fails the test if it is held."""
    key = "sk-" + "A1b2C3d4" * 5

    def verbose(texts: list[str]) -> list[list[float]]:
        raise ValueError(f"rejected {key} " + "request body " * 400_000)

    async with ms.open_runtime(store=memory_store.target, embedder=verbose) as rt:
        await rt.memory.remember("cats purr")
        found = await rt.memory.search("cat")
    assert found.fallback == "embedder-error"
    assert key not in found.detail
    assert "[redacted openai-key]" in found.detail
    assert len(found.detail) <= 300
