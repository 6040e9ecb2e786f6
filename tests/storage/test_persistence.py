"""The persistence actor: the only writer, coalescing, group commit, failures, drain."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.storage._backends.contract import CommitOutcome
from mainspring.storage._persistence import PersistenceFailed, _Commit, open_committer

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
    _prepare(store, ["a"])
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        assert await committer.submit(execution("a", calls_used=1), OWNER) is CommitOutcome.OK
        stored = store.get("a")  # durable: a fresh read sees it
        assert stored.calls_used == 1
        outcome = await committer.submit(execution("a"), "someone:else:1")
        assert outcome is CommitOutcome.FOREIGN_LEASE
        assert await committer.submit(execution("zzz"), OWNER) is CommitOutcome.MISSING


async def test_commits_of_one_execution_coalesce_latest_wins(store: Any) -> None:
    _prepare(store, ["a"])
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
    _prepare(store, ids)
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
    _prepare(store, ["a", "b"])
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
    _prepare(store, ["a"])
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(committer.submit, execution("a", calls_used=4), OWNER)
            await anyio.wait_all_tasks_blocked()
            await committer.ref.stop()
    assert store.get("a").calls_used == 4


async def test_a_bad_record_fails_only_its_own_commit(store: Any) -> None:
    _prepare(store, ["a", "b"])
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        bad = execution("a", created_at=float("nan"))  # cannot be stored as JSON
        with pytest.raises(ValueError, match="created_at"):
            await committer.submit(bad, OWNER)
        assert (await committer.submit(execution("b", calls_used=2), OWNER)).ok  # still writing
    assert store.get("b").calls_used == 2


async def test_a_runner_that_lost_its_lease_hears_its_own_refusal(store: Any) -> None:
    _prepare(store, ["a"])
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
    _prepare(store, ids)
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
    _prepare(store, ["a", "b"])
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
    _prepare(store, ["a", "b"])
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
    _prepare(store, ["a"])
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
    _prepare(store, ["a"])
    async with ms.open_system() as system:
        committer = await open_committer(system, OldNamesStore(store))
        with pytest.raises(PersistenceFailed):
            await committer.submit(execution("a", calls_used=1), OWNER)
    assert store.get("a").calls_used == 0
