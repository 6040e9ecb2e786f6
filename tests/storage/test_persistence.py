"""The persistence actor: the only writer, coalescing, group commit, failures, drain."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs
import pytest

import mainspring as ms
from mainspring.storage import Observation, SqliteStore, StorageError
from mainspring.storage._backends.contract import CommitOutcome
from mainspring.storage._backends.postgres.store import CommitUnknown
from mainspring.storage._persistence import PersistenceFailed, _Commit, open_committer
from mainspring.storage._seam import ForgetFact, RememberFact
from tests.storage._memory_kit import fact, memory_store

__all__ = ["memory_store"]
pytestmark = pytest.mark.anyio

OWNER = "host:1:aaaa"


def execution(id: str, **changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id=id, **(fields | changes))


@pytest.fixture(params=["file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "file":
        yield ms.storage.FileStore(tmp_path / "store")
        return
    made = ms.storage.SqliteStore(tmp_path / "store.db")
    yield made
    made.close()


class CountingStore:
    """Wraps a real store, counting durable flushes (one per commit_runs call)."""

    def __init__(self, inner: Any, fail_after: int | None = None, hold_first: bool = False) -> None:
        self.inner = inner
        self.flushes: list[int] = []
        self.threads: list[int] = []  # the thread each flush ran in
        self.fail_after = fail_after
        self.release = threading.Event()
        if not hold_first:
            self.release.set()

    def commit_runs(self, commits: Sequence[tuple[ms.storage.Execution, str]]) -> Any:
        self.threads.append(threading.get_ident())
        self.release.wait(timeout=30)  # runs in a worker thread: blocking is what it is for
        if self.fail_after is not None and len(self.flushes) >= self.fail_after:
            raise OSError(5, "Input/output error")
        self.flushes.append(len(commits))
        return self.inner.commit_runs(commits)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _prepare(store: Any, ids: list[str]) -> None:
    for execution_id in ids:
        store.create(execution(execution_id))
        assert store.acquire(execution_id, OWNER, ttl=3600).acquired


async def test_commits_are_answered_with_their_outcome_once_durable(store: Any) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a"])
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        assert await committer.submit(execution("a", calls_used=1), OWNER) is CommitOutcome.OK
        stored = store.get("a")  # durable: a fresh read sees it
        assert stored.calls_used == 1
        outcome = await committer.submit(execution("a"), "someone:else:1")
        assert outcome is CommitOutcome.FOREIGN_LEASE
        assert await committer.submit(execution("zzz"), OWNER) is CommitOutcome.MISSING


async def test_commits_of_one_execution_coalesce_latest_wins(store: Any) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a"])
    counting = CountingStore(store, hold_first=True)
    async with ms.open_system() as system:
        committer = await open_committer(system, counting)
        tickets = []

        async def hand_over(n: int) -> None:
            tickets.append(await committer.ref.ask(_Commit(execution("a", calls_used=n), OWNER)))

        async with anyio.create_task_group() as tg:
            # The first commit's flush is held on disk; 49 more queue up meanwhile, in order.
            for n in range(1, 51):
                tg.start_soon(hand_over, n)
                await anyio.wait_all_tasks_blocked()
            counting.release.set()
        for ticket in tickets:  # every waiter gets the outcome of the write that covered it
            await ticket.done.wait()
        stats = await committer.drain()
    assert {ticket.outcome for ticket in tickets} == {CommitOutcome.OK}
    assert store.get("a").calls_used == 50  # the latest commit is what is on disk
    assert stats.commits == 50
    assert stats.writes == 2  # the held one, then the other 49 coalesced into one write
    assert counting.flushes == [1, 1]


async def test_commits_of_many_executions_share_flushes(store: Any) -> None:
    ids = [f"ex-{i}" for i in range(40)]
    await anyio.to_thread.run_sync(_prepare, store, ids)
    counting = CountingStore(store)
    async with ms.open_system() as system:
        committer = await open_committer(system, counting)
        async with anyio.create_task_group() as tg:
            for execution_id in ids:
                tg.start_soon(committer.submit, execution(execution_id, calls_used=3), OWNER)
        await committer.drain()
    assert sum(counting.flushes) == 40
    assert len(counting.flushes) < 40  # group commit: several executions per durable flush
    stored = await anyio.to_thread.run_sync(lambda: [store.get(i) for i in ids])
    assert all(record.calls_used == 3 for record in stored)


async def test_a_failed_write_is_never_acknowledged_and_the_writer_refuses_more(
    store: Any,
) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a", "b"])
    failing = CountingStore(store, fail_after=1)
    async with ms.open_system() as system:
        committer = await open_committer(system, failing)
        assert (await committer.submit(execution("a", calls_used=1), OWNER)).ok
        with pytest.raises(PersistenceFailed) as info:
            await committer.submit(execution("a", calls_used=2), OWNER)
        assert isinstance(info.value.__cause__, OSError)
        with pytest.raises(PersistenceFailed, match="stopped after a failed write"):
            await committer.submit(execution("b", calls_used=9), OWNER)
    assert store.get("a").calls_used == 1  # the acknowledged version, and only it
    assert store.get("b").calls_used == 0


async def test_stopping_the_writer_flushes_what_it_accepted(store: Any) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a"])
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(committer.submit, execution("a", calls_used=4), OWNER)
            await anyio.wait_all_tasks_blocked()
            await committer.ref.stop()
    assert store.get("a").calls_used == 4


async def test_a_bad_record_fails_only_its_own_commit(store: Any) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a", "b"])
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        bad = execution("a", created_at=float("nan"))  # cannot be stored as JSON
        with pytest.raises(ValueError, match="created_at"):
            await committer.submit(bad, OWNER)
        assert (await committer.submit(execution("b", calls_used=2), OWNER)).ok  # still writing
    assert store.get("b").calls_used == 2


async def test_a_runner_that_lost_its_lease_hears_its_own_refusal(store: Any) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a"])
    counting = CountingStore(store, hold_first=True)
    async with ms.open_system() as system:
        committer = await open_committer(system, counting)
        results: dict[str, Any] = {}

        async def commit(who: str, owner: str, n: int) -> None:
            results[who] = await committer.submit(execution("a", calls_used=n), owner)

        async with anyio.create_task_group() as tg:
            tg.start_soon(commit, "held", OWNER, 1)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(commit, "stale", "old:1:x", 2)  # an old owner still unwinding
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(commit, "current", OWNER, 3)
            await anyio.wait_all_tasks_blocked()
            counting.release.set()
    assert results == {
        "held": CommitOutcome.OK,
        "stale": CommitOutcome.FOREIGN_LEASE,
        "current": CommitOutcome.OK,
    }
    assert store.get("a").calls_used == 3


async def test_L2_heartbeats_that_arrive_together_share_one_durable_write(store: Any) -> None:
    ids = [f"hb-{i}" for i in range(20)]
    await anyio.to_thread.run_sync(_prepare, store, ids)
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        before = await committer.stats()
        results: list[Any] = []

        async def beat(execution_id: str) -> None:
            results.append(await committer.renew(execution_id, OWNER, 60))

        async with anyio.create_task_group() as tg:
            for execution_id in ids:
                tg.start_soon(beat, execution_id)
        after = await committer.stats()
    assert [outcome for outcome, _ in results] == [CommitOutcome.OK] * 20
    assert after.flushes - before.flushes <= 2  # not one write per heartbeat


class LoopStore:
    """A store on a dict that never blocks, and says so: it records the thread of each call."""

    blocking = False

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.threads: list[int] = []

    def commit_runs(self, commits: Sequence[tuple[ms.storage.Execution, str]]) -> Any:
        self.threads.append(threading.get_ident())
        return self.inner.commit_runs(commits)

    def renew_many(self, renewals: Sequence[Any]) -> Any:
        self.threads.append(threading.get_ident())
        return self.inner.renew_many(renewals)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_store_that_never_blocks_is_called_on_the_loop_and_others_in_a_thread(
    store: Any,
) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a", "b"])
    loop_thread = threading.get_ident()
    on_loop = LoopStore(store)
    in_thread = CountingStore(store)  # says nothing (as every shipped store): it blocks
    assert getattr(store, "blocking", True) is not False
    async with ms.open_system() as system:
        committer = await open_committer(system, on_loop)
        assert (await committer.submit(execution("a", calls_used=1), OWNER)).ok
        assert (await committer.renew("a", OWNER, 60))[0] is CommitOutcome.OK
        other = await open_committer(system, in_thread, name="threaded")
        assert (await other.submit(execution("b", calls_used=2), OWNER)).ok
    assert on_loop.threads == [loop_thread, loop_thread]
    assert len(in_thread.threads) == 1
    assert in_thread.threads[0] != loop_thread
    assert store.get("a").calls_used == 1
    assert store.get("b").calls_used == 2


async def test_a_told_commit_still_queued_when_the_writer_stops_hears_it_never_hangs(
    store: Any,
) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a", "b"])
    counting = CountingStore(store, hold_first=True)
    results: dict[str, Any] = {}
    async with ms.open_system() as system:
        committer = await open_committer(system, counting)

        async def commit(who: str, n: int) -> None:
            try:
                results[who] = await committer.submit(execution(who, calls_used=n), OWNER)
            except ms.ActorDeadError as exc:
                results[who] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(commit, "a", 1)  # its flush is held on disk
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(commit, "b", 2)  # queued in the mailbox behind it
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(committer.ref.stop)  # after the current message: "b" is dropped
            await anyio.wait_all_tasks_blocked()
            counting.release.set()
    assert results["a"] is CommitOutcome.OK
    assert isinstance(results["b"], ms.ActorDeadError)  # as an asker would hear: not a hang
    assert store.get("a").calls_used == 1
    assert store.get("b").calls_used == 0  # dropped, never written


async def test_a_flush_under_way_finishes_even_if_its_caller_is_cancelled(store: Any) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a"])
    counting = CountingStore(store, hold_first=True)
    async with ms.open_system() as system:
        committer = await open_committer(system, counting)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(committer.submit, execution("a", calls_used=5), OWNER)
                await anyio.wait_all_tasks_blocked()  # its flush is held on disk
                scope.cancel()
        counting.release.set()
        stats = await committer.drain()  # the writer went on; the commit was written whole
    assert stats.writes == 1
    assert store.get("a").calls_used == 5


class OldNamesStore(ms.storage.Store):
    """A custom store written before the renames, declaring the ``Store`` protocol as its
    base: it defines ``commit_many``, so its ``commit_runs`` is the protocol's stub (None)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def commit_many(self, commits: Sequence[tuple[ms.storage.Execution, str]]) -> Any:
        return self.inner.commit_runs(commits)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_E2_a_store_whose_commit_runs_answers_nothing_fails_the_write_not_the_writer(
    store: Any,
) -> None:
    """A store that answers a batch with something that is not one result per commit (the
    protocol's stub's None) fails that write like any store error (PersistenceFailed, never
    acknowledged), as a store without ``commit_runs`` at all does (AttributeError): the
    writer does not crash with a TypeError that kills it and every caller's system."""
    await anyio.to_thread.run_sync(_prepare, store, ["a"])
    async with ms.open_system() as system:
        committer = await open_committer(system, OldNamesStore(store))
        with pytest.raises(PersistenceFailed):
            await committer.submit(execution("a", calls_used=1), OWNER)
    assert store.get("a").calls_used == 0


# ----------------------------------------------------------------------
# Memory writes through the persistence actor (``Committer.memory``): answered once
# durable, shared flushes, per-write errors, stores without memory, failed flushes.


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


def execution_memory_persistence(execution_id: str, **changes: Any) -> ms.storage.Execution:
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
    memory_store.create(execution_memory_persistence("ex-1"))
    assert memory_store.acquire("ex-1", OWNER, ttl=3600).acquired
    forged = fact("bad", "to be emptied")
    object.__setattr__(forged, "text", " ")
    async with ms.open_system() as system:
        committer = await open_committer(system, memory_store)
        first, second = await committer.memory([RememberFact(forged), RememberFact(fact("ok"))])
        assert isinstance(first, ValueError)
        assert second == fact("ok")
        assert (await committer.memory([ForgetFact("ok")])) == (True,)
        assert (
            await committer.submit(execution_memory_persistence("ex-1", calls_used=2), OWNER)
        ).ok
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
    memory_store.create(execution_memory_persistence("ex-1"))
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
            await committer.submit(execution_memory_persistence("ex-1", calls_used=3), OWNER)
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


# ----------------------------------------------------------------------
# Agent memory through the writer: memory batches through the persistence
# actor when the store fails.


class _UnknownOutcome:
    """A store whose memory batch is applied, then its COMMIT's answer is lost."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def memory_apply(self, writes: Sequence[Any]) -> Any:
        self.inner.memory_apply(writes)
        raise CommitUnknown("the connection was lost during COMMIT")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_D3_a_memory_batch_of_unknown_outcome_is_not_said_to_be_unapplied(
    tmp_path: Path,
) -> None:
    # The caller was told "nothing in it was applied" while the batch may well have been
    # (here it was): a caller that trusts it remembers again, and stores the fact twice.
    store = ms.storage.SqliteStore(tmp_path / "store.db")
    try:
        async with ms.open_system() as system:
            committer = await open_committer(system, _UnknownOutcome(store))
            with pytest.raises(PersistenceFailed) as info:
                await committer.memory([RememberFact(fact("maybe"))])
            assert "nothing in it was applied" not in str(info.value)
            assert "unknown" in str(info.value)
            assert isinstance(info.value.__cause__, CommitUnknown)
            with pytest.raises(PersistenceFailed, match="stopped after a failed write"):
                await committer.memory([RememberFact(fact("later"))])
        assert store.memory_get("maybe") is not None
    finally:
        store.close()


class _RefusesOnce:
    """A store whose first memory batch is refused with ``error`` (nothing applied)."""

    def __init__(self, inner: Any, error: Exception) -> None:
        self.inner = inner
        self.error: Exception | None = error

    def memory_apply(self, writes: Sequence[Any]) -> Any:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.inner.memory_apply(writes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_D3_a_refused_memory_batch_says_the_writer_goes_on_and_it_does(
    tmp_path: Path,
) -> None:
    # PersistenceFailed said "the writer has stopped", but a batch the store refused
    # without a disk error (here StorageError, as a read-only store raises) stops nothing.
    store = ms.storage.SqliteStore(tmp_path / "store.db")
    try:
        async with ms.open_system() as system:
            refusing = _RefusesOnce(store, StorageError("memory was opened read-only"))
            committer = await open_committer(system, refusing)
            with pytest.raises(PersistenceFailed) as info:
                await committer.memory([RememberFact(fact("refused"))])
            assert "the writer goes on" in str(info.value)
            assert "stopped" not in str(info.value)
            (answer,) = await committer.memory([RememberFact(fact("later"))])
            assert answer == fact("later")
        assert PersistenceFailed.__doc__ is not None
        assert "goes on" in PersistenceFailed.__doc__
    finally:
        store.close()


async def test_D3_a_memory_batch_failing_on_disk_says_the_writer_has_stopped(
    tmp_path: Path,
) -> None:
    store = ms.storage.SqliteStore(tmp_path / "store.db")
    try:
        async with ms.open_system() as system:
            committer = await open_committer(system, _RefusesOnce(store, OSError("disk full")))
            with pytest.raises(PersistenceFailed, match="the writer has stopped"):
                await committer.memory([RememberFact(fact("refused"))])
            with pytest.raises(PersistenceFailed, match="stopped after a failed write"):
                await committer.memory([RememberFact(fact("later"))])
    finally:
        store.close()


# ----------------------------------------------------------------------
# One record SQLite cannot store stops the persistence
# actor for every run in the process.


async def test_D3_a_record_sqlite_cannot_store_fails_only_its_own_commit(tmp_path: Path) -> None:
    # An execution with two observations of one step (the Execution record allows it)
    # makes SqliteStore raise sqlite3.IntegrityError from commit_runs: the whole flush
    # fails, the actor marks itself broken, and every later commit of every run is refused
    # with PersistenceFailed. The contract: "a bad record (too large, unstorable) fails only
    # its own commit and writes nothing of it".
    store = SqliteStore(tmp_path / "store.db")
    try:
        for name in ("bad", "good"):
            store.create(execution(name))
            assert store.acquire(name, OWNER, ttl=3600).acquired
        twice = (Observation(step_id="a", ok=False), Observation(step_id="a", ok=True))
        async with ms.open_system() as system:
            committer = await open_committer(system, store)
            # Stored as it is (a part whose keys repeat is kept by position) ...
            assert (await committer.submit(execution("bad", observations=twice), OWNER)).ok
            outcome = await committer.submit(execution("good", calls_used=1), OWNER)
            assert outcome is CommitOutcome.OK  # ... and the writer goes on for everyone
        again = SqliteStore(tmp_path / "store.db")
        try:
            stored = again.get("bad")
            assert stored is not None
            assert stored.observations == twice
        finally:
            again.close()
    finally:
        store.close()


# ----------------------------------------------------------------------
# The writer in the log (O1, O2): its stop at ERROR once, redacted; a memory batch refused
# alone at WARNING; each flush at DEBUG with its counts and duration.

LEAKED = "ghp_" + "L" * 36


class _FailsOnDisk(CountingStore):
    def commit_runs(self, commits: Sequence[tuple[ms.storage.Execution, str]]) -> Any:
        raise OSError(5, f"Input/output error near {LEAKED}")


async def test_O2_the_writer_stopping_is_logged_once_at_ERROR_redacted(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a", "b"])
    caplog.set_level(logging.DEBUG, logger="mainspring.storage")
    async with ms.open_system() as system:
        committer = await open_committer(system, _FailsOnDisk(store))
        for execution_id in ("a", "b", "a"):
            with pytest.raises(PersistenceFailed):
                await committer.submit(execution(execution_id, calls_used=1), OWNER)
    logged = [r for r in caplog.records if r.name == "mainspring.storage"]
    (stopped,) = logged  # the later refusals are the callers' to report
    assert stopped.levelno == logging.ERROR
    assert (stopped.error_type, stopped.status) == ("OSError", "stopped")
    assert stopped.getMessage().startswith(
        "the writer stopped after a failed write; every later write is refused: OSError: "
    )
    assert "[redacted github-token]" in stopped.getMessage()
    assert LEAKED not in caplog.text


async def test_O1_a_flush_is_logged_at_DEBUG_with_its_counts_and_duration(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await anyio.to_thread.run_sync(_prepare, store, ["a"])
    caplog.set_level(logging.DEBUG, logger="mainspring.storage")
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        assert (await committer.submit(execution("a", calls_used=1), OWNER)).ok
    (flushed,) = [r for r in caplog.records if r.name == "mainspring.storage"]
    assert flushed.levelno == logging.DEBUG
    assert (flushed.commits, flushed.count) == (1, 1)
    assert flushed.duration >= 0
    assert flushed.getMessage().startswith("flushed 1 commits of 1 executions in ")


async def test_a_memory_batch_refused_alone_is_logged_at_WARNING(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ms.storage.SqliteStore(tmp_path / "store.db")
    caplog.set_level(logging.WARNING, logger="mainspring.storage")
    try:
        async with ms.open_system() as system:
            refusing = _RefusesOnce(store, StorageError(f"read-only, key {LEAKED}"))
            committer = await open_committer(system, refusing)
            with pytest.raises(PersistenceFailed):
                await committer.memory([RememberFact(fact("refused"))])
    finally:
        store.close()
    (refused,) = [r for r in caplog.records if r.name == "mainspring.storage"]
    assert refused.levelno == logging.WARNING
    assert (refused.error_type, refused.count) == ("StorageError", 1)
    assert "the writer goes on" in refused.getMessage()
    assert LEAKED not in caplog.text
