"""Review of agent memory (#16): what an embedder can do to a runtime. A sync embedder that
hangs must not take the worker threads the persistence actor needs, nor leave unbounded
threads behind cancelled searches; an answer that never ends is read only as far as it
counts; an error that cannot even be printed still falls back."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions._memory.rank import MAX_EMBEDDER_THREADS

from ._memory_kit import StoreSpec, bag_of_words

pytestmark = pytest.mark.anyio


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


async def test_a_hanging_sync_embedder_never_holds_up_memory_writes(
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


async def test_searches_cancelled_while_the_embedder_hangs_leave_bounded_threads(
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


async def test_an_answer_with_too_many_vectors_is_read_only_as_far_as_it_counts(
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


async def test_an_embedder_error_that_cannot_be_printed_still_falls_back(
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


async def test_keyboard_interrupt_and_cancellation_from_an_embedder_are_not_swallowed(
    memory_store: StoreSpec,
) -> None:
    def interrupted(texts: list[str]) -> list[list[float]]:
        raise KeyboardInterrupt

    async with ms.open_runtime(store=memory_store.target, embedder=interrupted) as rt:
        await rt.memory.remember("cats purr")
        with pytest.raises(KeyboardInterrupt):
            await rt.memory.search("cat")


async def test_a_huge_embedder_error_is_redacted_off_the_event_loop(
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
