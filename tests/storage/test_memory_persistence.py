"""Memory writes through the persistence actor (``Committer.memory``): answered once
durable, shared flushes, per-write errors, stores without memory, failed flushes."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.to_thread
import attrs
import pytest

import mainspring as ms
from mainspring.storage._persistence import PersistenceFailed, open_committer
from mainspring.storage._seam import ForgetFact, RememberFact
from tests.storage._memory_kit import fact, memory_store

__all__ = ["memory_store"]

pytestmark = pytest.mark.anyio

OWNER = "host:1:aaaa"


class HoldingStore:
    """Wraps a store: records each memory batch, holds the first until released, and fails
    every batch after ``fail_after`` with an I/O error."""

    def __init__(self, inner: Any, *, hold_first: bool = False, fail_after: int | None = None):
        self.inner = inner
        self.batches: list[int] = []
        self.release = threading.Event()
        if not hold_first:
            self.release.set()
        self.fail_after = fail_after

    def memory_apply(self, writes: Sequence[Any]) -> Any:
        self.release.wait(timeout=30)  # a worker thread: blocking is what it is for
        if self.fail_after is not None and len(self.batches) >= self.fail_after:
            raise OSError(5, "Input/output error")
        self.batches.append(len(writes))
        return self.inner.memory_apply(writes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class WithoutMemory:
    """A store that keeps executions only."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("memory_"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def execution(execution_id: str, **changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id=execution_id, **(fields | changes))


async def read(fn: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(fn, *args)


async def test_memory_writes_are_answered_once_durable(memory_store: Any) -> None:
    a = fact("a", "the writer keeps facts", conflict_group="g")
    b = fact("b", "the writer keeps newer facts", conflict_group="g")
    async with ms.open_system() as system:
        committer = await open_committer(system, memory_store)
        assert await committer.memory([RememberFact(a), ForgetFact("zz")]) == (a, False)
        assert await read(memory_store.memory_get, "a") == a  # durable: a fresh read sees it
        assert await committer.memory([RememberFact(b), RememberFact(a)]) == (
            b,
            attrs.evolve(a, superseded_by="b"),  # as stored: b superseded it
        )
        assert await committer.memory([]) == ()
    assert await read(memory_store.memory_count) == 2


async def test_concurrent_remembers_share_flushes(memory_store: Any) -> None:
    holding = HoldingStore(memory_store, hold_first=True)
    answers: dict[int, Any] = {}
    async with ms.open_system() as system:
        committer = await open_committer(system, holding)

        async def remember(n: int) -> None:
            answers[n] = await committer.memory([RememberFact(fact(f"f{n}", f"fact {n}"))])

        async with anyio.create_task_group() as tg:
            # The first flush is held on disk; 19 more writers queue up meanwhile.
            for n in range(20):
                tg.start_soon(remember, n)
                await anyio.wait_all_tasks_blocked()
            holding.release.set()
        stats = await committer.drain()
    assert answers == {n: (fact(f"f{n}", f"fact {n}"),) for n in range(20)}
    assert holding.batches == [1, 19]  # one transaction for everything that queued
    assert stats.flushes == 2 < len(answers)
    assert await read(memory_store.memory_count) == 20


async def test_a_write_that_cannot_apply_fails_alone_and_the_writer_goes_on(
    memory_store: Any,
) -> None:
    memory_store.create(execution("ex-1"))
    assert memory_store.acquire("ex-1", OWNER, ttl=3600).acquired
    forged = fact("bad", "to be emptied")
    object.__setattr__(forged, "text", " ")
    async with ms.open_system() as system:
        committer = await open_committer(system, memory_store)
        first, second = await committer.memory([RememberFact(forged), RememberFact(fact("ok"))])
        assert isinstance(first, ValueError)
        assert second == fact("ok")
        assert (await committer.memory([ForgetFact("ok")])) == (True,)
        assert (await committer.submit(execution("ex-1", calls_used=2), OWNER)).ok
    assert await read(memory_store.memory_count) == 0


async def test_a_store_without_memory_is_refused_before_anything_is_sent(
    memory_store: Any,
) -> None:
    async with ms.open_system() as system:
        committer = await open_committer(system, WithoutMemory(memory_store))
        with pytest.raises(TypeError, match="keeps no memory"):
            await committer.memory([RememberFact(fact("a"))])
        stats = await committer.drain()
    assert stats.flushes == 0


async def test_a_failed_memory_flush_fails_its_writers_and_stops_the_writer(
    memory_store: Any,
) -> None:
    memory_store.create(execution("ex-1"))
    assert memory_store.acquire("ex-1", OWNER, ttl=3600).acquired
    failing = HoldingStore(memory_store, fail_after=1)
    async with ms.open_system() as system:
        committer = await open_committer(system, failing)
        assert await committer.memory([RememberFact(fact("kept"))]) == (fact("kept"),)
        with pytest.raises(PersistenceFailed, match="nothing in it was applied") as info:
            await committer.memory([RememberFact(fact("lost")), ForgetFact("kept")])
        assert isinstance(info.value.__cause__, OSError)
        with pytest.raises(PersistenceFailed, match="stopped after a failed write"):
            await committer.memory([RememberFact(fact("later"))])
        with pytest.raises(PersistenceFailed, match="stopped after a failed write"):
            await committer.submit(execution("ex-1", calls_used=3), OWNER)
    assert await read(memory_store.memory_get, "kept") == fact("kept")
    assert await read(memory_store.memory_get, "lost") is None
    assert memory_store.get("ex-1").calls_used == 0


async def test_a_store_that_refuses_a_batch_without_a_disk_error_keeps_the_writer(
    memory_store: Any,
) -> None:
    class Refusing(HoldingStore):
        def memory_apply(self, writes: Sequence[Any]) -> Any:
            if not self.batches:
                self.batches.append(len(writes))
                raise ms.storage.StorageError("opened read-only")
            return self.inner.memory_apply(writes)

    async with ms.open_system() as system:
        committer = await open_committer(system, Refusing(memory_store))
        with pytest.raises(PersistenceFailed, match="read-only"):
            await committer.memory([RememberFact(fact("a"))])
        assert await committer.memory([RememberFact(fact("b"))]) == (fact("b"),)
