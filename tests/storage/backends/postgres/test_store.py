"""What PostgresStore adds to the contract: leases on the server's clock, fencing in the
statement that writes (L4), and the own-write cache trusted only while the row says so."""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import anyio
import anyio.to_thread
import attrs
import psycopg
import psycopg.connection
import pytest

import mainspring as ms
from mainspring.storage._backends.postgres.connect import quiet_pipeline
from tests._postgres import postgres_store_url, server_url

__all__ = ["postgres_store_url"]


def _execution(execution_id: str = "ex-1") -> ms.storage.Execution:
    return ms.storage.Execution(id=execution_id, goal="g", created_at=1.0, updated_at=1.0)


def _server_now() -> float:
    with psycopg.connect(server_url()) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def _sql(store: ms.storage.PostgresStore, statement: str) -> None:
    """Change the stored row behind the store's back (as another host's bug, or time, would)."""
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(statement.replace("{table}", f'"{store.schema}".executions'))


@pytest.fixture
def store(postgres_store_url: str) -> ms.storage.PostgresStore:
    made = ms.storage.PostgresStore(postgres_store_url)
    yield made  # type: ignore[misc]
    made.close()


def test_lease_times_are_the_servers_clock(store: ms.storage.PostgresStore) -> None:
    store.create(_execution())
    before = _server_now()
    result = store.acquire("ex-1", "host-a:1:x", 30.0)
    after = _server_now()
    assert result.acquired
    assert result.lease is not None
    assert before + 30.0 <= result.lease.expires_at <= after + 30.0


def test_L4_a_lease_that_lapsed_on_the_server_is_refused_in_the_writing_statement(
    store: ms.storage.PostgresStore,
) -> None:
    """The store's cached copy says the lease is live (it wrote it), but on the server it
    has lapsed: the commit's UPDATE checks the lease itself and writes nothing."""
    store.create(_execution())
    assert store.acquire("ex-1", "host-a:1:x", 60.0).acquired
    live = store.get("ex-1")
    assert live is not None
    # The lease lapses on the server (its columns and the record alike), the stamp unchanged:
    # the store's cache still holds it live.
    _sql(
        store,
        "UPDATE {table} SET lease_expires = 0, head = convert_to(jsonb_set(convert_from("
        "head, 'UTF8')::jsonb, '{lease,expires_at}', '0.0')::text, 'UTF8') WHERE id = 'ex-1'",
    )
    outcome = store.commit_run(attrs.evolve(live, goal="stale write"), "host-a:1:x")
    assert outcome is ms.storage._seam.CommitOutcome.RELEASED
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.goal == "g"  # nothing of the stale write


def test_L4_the_fence_holds_when_the_lease_lapses_between_the_decision_and_the_write(
    postgres_store_url: str,
) -> None:
    """A clock that jumps past the lease between the decision and the write: the decision
    says yes, the statement says no, and the call answers as the store now stands."""
    now = [1_000.0]
    calls = [0]

    def clock() -> float:
        calls[0] += 1
        return now[0]

    store = ms.storage.PostgresStore(postgres_store_url, clock=clock)
    try:
        store.create(_execution())
        assert store.acquire("ex-1", "host-a:1:x", 10.0).acquired
        live = store.get("ex-1")
        assert live is not None
        original = store._write

        def write_later(*args: object) -> bool:
            now[0] = 1_020.0  # the lease (to 1,010) lapses as the write is made
            return original(*args)  # type: ignore[arg-type]

        store._write = write_later  # type: ignore[method-assign]
        outcome = store.commit_run(attrs.evolve(live, goal="too late"), "host-a:1:x")
        assert outcome is ms.storage._seam.CommitOutcome.RELEASED
        store._write = original  # type: ignore[method-assign]
        stored = store.get("ex-1")
        assert stored is not None
        assert stored.goal == "g"
    finally:
        store.close()


def test_a_row_another_host_wrote_is_read_again_not_taken_from_the_cache(
    store: ms.storage.PostgresStore, postgres_store_url: str
) -> None:
    store.create(_execution())
    assert store.acquire("ex-1", "host-a:1:x", 60.0).acquired
    other = ms.storage.PostgresStore(postgres_store_url)
    try:
        assert other.edit("ex-1", lambda e, now: attrs.evolve(e, goal="edited on host B"))
    finally:
        other.close()
    renewed = store.renew("ex-1", "host-a:1:x", 60.0)
    assert renewed[0] is ms.storage._seam.CommitOutcome.OK
    assert renewed[1] is not None
    assert renewed[1].goal == "edited on host B"


def test_history_sequences_are_unique_and_in_commit_order_across_stores(
    postgres_store_url: str,
) -> None:
    stores = [ms.storage.PostgresStore(postgres_store_url) for _ in range(3)]
    try:
        for n, store in enumerate(stores):
            for k in range(5):
                assert store.create(_execution(f"ex-{n}-{k}"))
        seqs = [event.seq for event in stores[0].history(limit=10_000)]
        assert seqs == sorted(set(seqs))
        assert len(seqs) == 15
        tail = stores[1].history(after=seqs[6])
        assert [event.seq for event in tail] == seqs[7:]
    finally:
        for store in stores:
            store.close()


def test_a_row_whose_lease_columns_contradict_its_record_is_refused_not_retried_forever(
    store: ms.storage.PostgresStore,
) -> None:
    store.create(_execution())
    assert store.acquire("ex-1", "host-a:1:x", 60.0).acquired
    live = store.get("ex-1")
    assert live is not None
    _sql(store, "UPDATE {table} SET lease_expires = 0 WHERE id = 'ex-1'")  # the record says live
    with pytest.raises(ms.storage.StorageError, match="refused this write as decided"):
        store.commit_run(attrs.evolve(live, goal="x"), "host-a:1:x")
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.goal == "g"


# -- a run's commit in one round trip while the cached stamp is current -------------------


def _count_round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Round trips to the server from now on: pipeline syncs, pipelines left (psycopg sends
    a Sync then and waits for its answer), and statements sent outside a pipeline (each
    waits for its answer)."""
    trips = [0]
    sync = psycopg.Pipeline.sync
    leave = psycopg.Pipeline.__exit__
    execute = psycopg.Connection.execute

    def counted_sync(self: psycopg.Pipeline) -> None:
        trips[0] += 1
        sync(self)

    def counted_leave(self: psycopg.Pipeline, *args: Any) -> None:
        trips[0] += 1
        leave(self, *args)

    def counted_execute(
        self: psycopg.Connection[object], *args: object, **kwargs: object
    ) -> object:
        if self._pipeline is None:
            trips[0] += 1
        return execute(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(psycopg.Pipeline, "sync", counted_sync)
    monkeypatch.setattr(psycopg.Pipeline, "__exit__", counted_leave)
    monkeypatch.setattr(psycopg.Connection, "execute", counted_execute)
    return trips


def _running(store: ms.storage.PostgresStore) -> ms.storage.Execution:
    store.create(_execution())
    assert store.acquire("ex-1", "host-a:1:x", 60.0).acquired
    live = store.get("ex-1")
    assert live is not None
    return attrs.evolve(live, status="running")


def test_a_run_commit_takes_one_round_trip_while_the_cached_stamp_is_current(
    store: ms.storage.PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = _running(store)
    trips = _count_round_trips(monkeypatch)
    for n in range(1, 6):
        live = attrs.evolve(live, calls_used=n)
        assert store.commit_runs([(live, "host-a:1:x")]) == (ms.storage._seam.CommitOutcome.OK,)
    # BEGIN, the row lock, the writes, the history entries and COMMIT: one round trip each.
    assert trips[0] == 5
    monkeypatch.undo()
    fresh = ms.storage.PostgresStore(store.address.conninfo, schema=store.schema)
    try:
        stored = fresh.get("ex-1")
        assert stored is not None
        assert stored.calls_used == 5
        assert [e.execution_seq for e in fresh.history("ex-1")] == sorted(
            e.execution_seq for e in fresh.history("ex-1")
        )
    finally:
        fresh.close()


def test_E2_a_one_round_trip_commit_over_a_row_another_host_wrote_is_decided_again_locked(
    store: ms.storage.PostgresStore, postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host B pauses the run behind host A's cache: A's commit goes out in one round trip,
    its stamp guard writes nothing, and the commit is decided again with the row locked:
    ``paused`` (E2), and B's pause stands."""
    live = _running(store)
    assert store.commit_runs([(live, "host-a:1:x")]) == (ms.storage._seam.CommitOutcome.OK,)
    other = ms.storage.PostgresStore(postgres_store_url, schema=store.schema)
    try:
        assert other.edit("ex-1", lambda e, now: attrs.evolve(e, status="paused"))
    finally:
        other.close()
    trips = _count_round_trips(monkeypatch)
    outcome = store.commit_runs([(attrs.evolve(live, goal="overwrite"), "host-a:1:x")])
    assert outcome == (ms.storage._seam.CommitOutcome.PAUSED,)
    assert trips[0] > 1  # the guarded try, then the locked decision (and the read)
    monkeypatch.undo()
    stored = store.get("ex-1")
    assert stored is not None
    assert (stored.status, stored.goal) == ("paused", "g")
    # Then A is current again: one round trip per commit once more.
    assert store.commit_runs([(stored, "host-a:1:x")]) == (ms.storage._seam.CommitOutcome.PAUSED,)


def test_L4_a_one_round_trip_commit_is_fenced_by_the_servers_clock(
    store: ms.storage.PostgresStore,
) -> None:
    """The cache holds the lease live and the stamp is unchanged, so the commit goes out
    without locking first; the lease lapsed on the server: the UPDATE's fence writes
    nothing, and the commit, decided again, is refused."""
    live = _running(store)
    assert store.commit_runs([(live, "host-a:1:x")]) == (ms.storage._seam.CommitOutcome.OK,)
    _sql(
        store,
        "UPDATE {table} SET lease_expires = 0, head = convert_to(jsonb_set(convert_from("
        "head, 'UTF8')::jsonb, '{lease,expires_at}', '0.0')::text, 'UTF8') WHERE id = 'ex-1'",
    )
    outcome = store.commit_runs([(attrs.evolve(live, goal="stale write"), "host-a:1:x")])
    assert outcome == (ms.storage._seam.CommitOutcome.RELEASED,)
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.goal == "g"


# -- any thread may call the store: a transaction's state is its own thread's alone -------
#
# The persistence actor writes from one worker thread while recovery's sweep asks ``now()``
# and lists from another, and heartbeat batches come from a third: the Store contract lets
# any thread call. These pin a thread inside a transaction and call from another.


async def _waited(event: threading.Event) -> None:
    """Until ``event`` is set by another thread (bounded, so a broken thread fails the test
    instead of hanging it)."""
    assert await anyio.to_thread.run_sync(event.wait, 30.0)


def _held_at_its_pipeline(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, Any]:
    """Hold the calling thread of the returned function's next transaction after it has
    taken the store's lock and a connection, before its pipeline opens; returns the event
    set once it is held, and a wrapper that runs a call held so until ``release`` is set."""
    held = threading.Event()
    release = threading.Event()
    holding: set[int] = set()
    pipeline = psycopg.Connection.pipeline

    def opening(self: psycopg.Connection[Any]) -> Any:
        if threading.get_ident() in holding:
            holding.discard(threading.get_ident())
            held.set()
            assert release.wait(30.0)
        return pipeline(self)

    monkeypatch.setattr(psycopg.Connection, "pipeline", opening)

    def run(call: Any, *args: Any) -> Any:
        holding.add(threading.get_ident())
        return call(*args)

    run.release = release  # type: ignore[attr-defined]
    return held, run


@pytest.mark.anyio
async def test_now_from_another_thread_is_the_servers_clock_not_an_open_transactions(
    store: ms.storage.PostgresStore,
) -> None:
    """``now()`` asked while another thread's transaction is open is the server's clock as
    of the call, not the clock that transaction read when it began."""
    store.create(_execution())
    inside, leave = threading.Event(), threading.Event()
    began: list[float] = []

    def change(execution: ms.storage.Execution, now: float) -> ms.storage.Execution:
        began.append(now)
        inside.set()
        assert leave.wait(30.0)
        return attrs.evolve(execution, goal="edited")

    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, store.edit, "ex-1", change)
        try:
            await _waited(inside)
            after = await anyio.to_thread.run_sync(_server_now)
            seen = await anyio.to_thread.run_sync(store.now)
        finally:
            leave.set()
    assert began[0] < after <= seen
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.goal == "edited"


@pytest.mark.anyio
async def test_now_from_another_thread_never_runs_on_a_transactions_connection(
    store: ms.storage.PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction holds its connection, its pipeline not yet open, when another thread
    asks ``now()``: the answer comes from a connection of its own, and the transaction goes
    on untouched (read through the transaction, it sent BEGIN on that connection and failed
    on the pipeline that was not there yet)."""
    store.create(_execution())
    held, run = _held_at_its_pipeline(monkeypatch)
    edited: list[Any] = []

    def edit() -> None:
        edited.append(run(store.edit, "ex-1", lambda e, now: attrs.evolve(e, goal="edited")))

    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, edit)
        try:
            await _waited(held)
            before = await anyio.to_thread.run_sync(_server_now)
            seen = await anyio.to_thread.run_sync(store.now)
        finally:
            run.release.set()
    assert before <= seen
    assert edited[0] is not None
    assert edited[0].goal == "edited"
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.goal == "edited"


@pytest.mark.anyio
async def test_a_batch_skips_its_row_locks_only_by_its_own_decision_made_under_the_lock(
    store: ms.storage.PostgresStore, postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread B's heartbeat batch holds the store's lock, its transaction about to begin,
    when thread A's run commit (all cached: one round trip) arrives. A's choice to skip the
    row locks is A's alone, made holding the lock: B still locks its row (which this store
    never wrote, so it has no stamp to skip the lock by), and both are answered."""
    live = _running(store)
    assert store.commit_runs([(live, "host-a:1:x")]) == (ms.storage._seam.CommitOutcome.OK,)
    other = ms.storage.PostgresStore(postgres_store_url, schema=store.schema)
    try:
        other.create(_execution("ex-2"))
        assert other.acquire("ex-2", "host-b:1:x", 60.0).acquired
    finally:
        other.close()
    held, run = _held_at_its_pipeline(monkeypatch)
    asking = threading.Event()
    atomic = store._atomic

    def noted() -> Any:
        asking.set()
        return atomic()

    renewed: list[Any] = []
    committed: list[Any] = []

    def renew() -> None:
        renewed.append(run(store.renew_many, [("ex-2", "host-b:1:x", 60.0)]))

    def commit() -> None:
        batch = [(attrs.evolve(live, calls_used=1), "host-a:1:x")]
        committed.append(store.commit_runs(batch))

    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, renew)
        try:
            await _waited(held)
            monkeypatch.setattr(store, "_atomic", noted)
            tg.start_soon(anyio.to_thread.run_sync, commit)
            await _waited(asking)  # A is at the lock B holds
        finally:
            run.release.set()
    assert committed == [(ms.storage._seam.CommitOutcome.OK,)]
    [[(outcome, execution)]] = renewed
    assert outcome is ms.storage._seam.CommitOutcome.OK
    assert execution is not None
    assert execution.id == "ex-2"
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.calls_used == 1


# -- L6 on the one-round-trip path ------------------------------------------------------------


class _FrozenMidCommit(threading.Thread):
    """Host A, frozen (a GC pause, a frozen VM) in the middle of a run's commit: its store
    has decided the commit (rows cached, lease live: the one-round-trip path) and sent what
    it sends first, and then its thread stops until ``thaw``. The same freeze as
    ``test_pg_connect.Frozen``, on a run commit instead of a bare lock."""

    def __init__(self, store: ms.storage.PostgresStore, live: ms.storage.Execution) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.live = live
        self.decided = threading.Event()
        self.thawed = threading.Event()

    def run(self) -> None:
        # Its session ended under it raises on thawing: expected.
        with contextlib.suppress(BaseException), self.store._atomic():
            self.store._prepare([self.live.id], [(self.live, "host-a:1:x")])
            self.decided.set()
            self.thawed.wait(120)

    def thaw(self) -> None:
        self.thawed.set()
        self.join(60)
        self.store.close()


@pytest.mark.anyio
async def test_L6_a_host_frozen_mid_run_commit_loses_its_row_lock_and_another_host_resumes(
    postgres_store_url: str,
) -> None:
    """Host A's run commit goes out in one round trip (its row cached, its lease live) and
    A freezes right after deciding it, as in ``test_pg_connect``'s frozen host. A's lease
    lapses; host B resumes the run. The row lock A's commit sent is held by a session the
    server sees as *active* (nothing was synced), so no ``session_timeout`` ends it: B's
    resume waits for the lock for as long as A is frozen (here it gives up, unavailable,
    after its ``reconnect_timeout``). L6: no session of the store holds a row lock past a
    bound; A's session should be ended after its ``session_timeout`` (1 s) and B take over."""

    def begin() -> _FrozenMidCommit:
        a = ms.storage.PostgresStore(postgres_store_url, session_timeout=1.0)
        assert a.create(attrs.evolve(_execution("ex-frozen"), status="running"))
        assert a.acquire("ex-frozen", "host-a:1:x", 2.0).acquired  # lapses 2 s from now
        live = a.get("ex-frozen")
        assert live is not None
        frozen = _FrozenMidCommit(a, live)
        frozen.start()
        return frozen

    frozen = await anyio.to_thread.run_sync(begin)
    try:
        await _waited(frozen.decided)
        b = await anyio.to_thread.run_sync(
            lambda: ms.storage.PostgresStore(
                postgres_store_url, lock_timeout=0.5, reconnect_timeout=10.0
            )
        )
        assert frozen.live.lease is not None
        # A's lease lapses on the server's clock: until then the run is A's, frozen or not.
        await anyio.sleep(frozen.live.lease.expires_at - await anyio.to_thread.run_sync(b.now))
        async with ms.open_runtime(store=b, lease_ttl=5.0) as runtime:
            with anyio.fail_after(30):  # far beyond the bound; the frozen host waits 120 s
                handle = await runtime.resume("ex-frozen")
                result = await handle.wait()
            record = await runtime.get("ex-frozen")
    finally:
        await anyio.to_thread.run_sync(frozen.thaw)
    assert result.execution_id == "ex-frozen"
    assert record is not None
    assert record.lease is not None
    assert record.lease.epoch == 2  # B's tenure


def test_settling_a_lost_one_round_trip_commit_never_ends_a_session_that_is_not_its_own(
    store: ms.storage.PostgresStore,
) -> None:
    """A one-round-trip commit whose connection was lost before its transaction id came
    back is settled by ending its old session by backend pid, then reading the stamps. The
    old backend is usually gone already (the server ended it: that is how the connection
    was lost), and a gone backend's pid is the server's to give again: to another host's
    session, another application's (here ``pid_max`` is 32,768). ``settle`` (a lost COMMIT
    whose id came back) ends a session only if it runs that transaction (``backend_xid``);
    ``settle_by_stamps`` ends whatever session holds the pid. Here the pid has gone to an
    unrelated session in the middle of its own transaction: settling must leave it be."""
    live = _running(store)
    assert store.commit_runs([(live, "host-a:1:x")]) == (ms.storage._seam.CommitOutcome.OK,)
    stamp = store._stamps["ex-1"]
    with psycopg.connect(server_url()) as bystander:  # someone else's, mid-transaction
        bystander.execute("SELECT txid_current()")
        pid = bystander.info.backend_pid
        table = f'"{store.schema}".executions'
        # As settled after the lost commit's backend exited and its pid went to the bystander:
        # the guarded stamp still stands, so the lost commit did not land.
        status = store._connections.settle_by_stamps(pid, table, {"ex-1": 1}, {"ex-1": stamp}, 5.0)
        assert status == "aborted"
        (alive,) = bystander.execute("SELECT 1").fetchone() or (None,)  # raises if it was ended
    assert alive == 1


def test_settling_a_lost_one_round_trip_commit_ends_its_own_session_still_there(
    store: ms.storage.PostgresStore,
) -> None:
    """The other side of the test above: the lost commit's own session lives on (the
    network was cut, the server has not noticed) holding its row lock. Settling names it by
    its pid and the start noted when it connected, ends it (its lock goes with it, L6), and
    only then reads the stamps: the answer is final, and the run is writable at once."""
    live = _running(store)
    assert store.commit_runs([(live, "host-a:1:x")]) == (ms.storage._seam.CommitOutcome.OK,)
    stamp = store._stamps["ex-1"]
    table = f'"{store.schema}".executions'
    with store._connections.writing() as cut_off:
        started = store._connections.started(cut_off)
        assert started is not None
        cut_off.execute("BEGIN")
        cut_off.execute(f"SELECT 1 FROM {table} WHERE id = 'ex-1' FOR UPDATE")
        status = store._connections.settle_by_stamps(
            cut_off.info.backend_pid, table, {"ex-1": 1}, {"ex-1": stamp}, 5.0, started=started
        )
        assert status == "aborted"
        with pytest.raises(psycopg.OperationalError):
            cut_off.execute("SELECT 1")  # its session was ended
    nxt = attrs.evolve(live, calls_used=1)
    assert store.commit_runs([(nxt, "host-a:1:x")]) == (ms.storage._seam.CommitOutcome.OK,)


def test_O1_a_one_round_trip_batch_decided_again_prints_nothing(
    store: ms.storage.PostgresStore, postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every control another host makes (pause, cancel, an answer) makes this host's next
    cached commit of that run miss its stamp guard. In a group commit the server answers
    that error while the rest of the batch is still being sent (a batch of 30 or 50 runs
    does so on its own, often; here the second commit waits for the answer, to be sure),
    and psycopg logs a warning as the pipeline is left ("error ignored terminating
    <psycopg.Pipeline [INERROR] (host=... user=... database=...)>: pipeline aborted"):
    with no logging configured, the last-resort handler prints it on stderr, a line per
    control from elsewhere under load. O1: silent unless the application configures
    logging; the miss is an ordinary outcome (E2), not a fault."""
    printed: list[logging.LogRecord] = []

    class Last(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            printed.append(record)

    lives = []
    for n in range(3):  # runs in flight on this host, committed together
        execution_id = f"ex-{n}"
        assert store.create(attrs.evolve(_execution(execution_id), status="running"))
        assert store.acquire(execution_id, "host-a:1:x", 60.0).acquired
        live = store.get(execution_id)
        assert live is not None
        lives.append(live)
    batch = [(live, "host-a:1:x") for live in lives]
    assert store.commit_runs(batch) == (ms.storage._seam.CommitOutcome.OK,) * 3
    other = ms.storage.PostgresStore(postgres_store_url, schema=store.schema)
    try:
        assert other.edit("ex-0", lambda e, now: attrs.evolve(e, status="paused"))
    finally:
        other.close()
    write = store._write
    writes = [0]

    def write_once_answered(*args: Any) -> bool:
        writes[0] += 1
        if writes[0] == 2:  # ex-0's guarded UPDATE has been answered (its error) by now
            select.select([store._conn.pgconn.socket], [], [], 10.0)
        return write(*args)  # type: ignore[no-any-return]

    monkeypatch.setattr(store, "_write", write_once_answered)
    # As an application that configured nothing: no handler between the loggers and the root.
    monkeypatch.setattr(logging, "lastResort", Last(logging.WARNING))
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    batch = [(attrs.evolve(live, goal="next"), "host-a:1:x") for live in lives]
    outcomes = store.commit_runs(batch)
    assert (
        outcomes
        == (ms.storage._seam.CommitOutcome.PAUSED,) + (ms.storage._seam.CommitOutcome.OK,) * 2
    )
    assert [record.getMessage() for record in printed] == []


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
@pytest.mark.anyio
@pytest.mark.loop_guard(5.0)  # a plan of 8,200 steps: started and cancelled on the loop
async def test_R2_a_cancel_that_ends_8200_pending_steps_is_stored(postgres_store_url: str) -> None:
    # A cancel skips every step not started (P6): one commit of upserts alone, each step's
    # plan row and observation row. Written as one statement of 4 parameters a row, past
    # 8,190 steps it holds more than the 65,535 parameters a statement may carry, and the
    # cancel fails (retried as if the server were away, then StoreUnavailable).
    started = anyio.Event()

    async def block(i: int = 0) -> None:
        started.set()
        await anyio.sleep_forever()

    steps = tuple(ms.PlanStep(id=f"s{i}", tool="block", input={"i": i}) for i in range(8_200))
    # Opened and closed in a worker thread: connecting waits for the server, which a loaded
    # machine makes slow, and that wait is not the loop's to make.
    store = await anyio.to_thread.run_sync(
        lambda: ms.storage.PostgresStore(postgres_store_url, reconnect_timeout=2.0)
    )
    try:
        async with ms.open_runtime(store=store, tools={"block": block}, max_parallel_steps=1) as rt:
            run = await rt.start("g", ms.Plan(id="wide", goal="g", steps=steps))
            await started.wait()
            await rt.cancel(run.execution_id)
            assert (await run.wait()).status == "cancelled"
        stored = await anyio.to_thread.run_sync(store.get, run.execution_id)
        assert stored is not None
        assert stored.status == "cancelled"
    finally:
        await anyio.to_thread.run_sync(store.close)


# ----------------------------------------------------------------------
# What a run's step costs on PostgreSQL beyond its one commit (issue #29): counted, never
# timed. A cached run commit waits for the server once; a runtime's change feed does no work
# between the notices it reads (psycopg's own timed wait spins its last millisecond, which
# took as much CPU per commit as the commit itself); and leaving a pipeline, which is where a
# transaction's last answers are read, reports the server's first refusal, not the "pipeline
# aborted" of the statements it skipped after it (a stamp guard's miss, so answered,
# is decided again by its SQLSTATE).

OWNER = "host-a:1:x"


@pytest.fixture
def store_postgres_step_cost(postgres_store_url: str) -> Any:
    made = ms.storage.PostgresStore(postgres_store_url)
    yield made
    made.close()


def _syncs_and_statements(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """From now on: Syncs sent (each ends a batch the server answers), Syncs waited for
    (a pipeline synced or left: a round trip each), and statements."""
    counts = {"sent": 0, "waited": 0, "statements": 0}
    enqueue = psycopg.Pipeline._enqueue_sync
    sync = psycopg.Pipeline.sync
    leave = psycopg.Pipeline.__exit__
    execute = psycopg.Connection.execute

    def counted_enqueue(self: psycopg.Pipeline) -> None:
        counts["sent"] += 1
        enqueue(self)

    def counted_sync(self: psycopg.Pipeline) -> None:
        counts["waited"] += 1
        sync(self)

    def counted_leave(self: psycopg.Pipeline, *args: Any) -> None:
        counts["waited"] += 1
        leave(self, *args)

    def counted_execute(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        if self._pipeline is None:
            counts["waited"] += 1
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Pipeline, "_enqueue_sync", counted_enqueue)
    monkeypatch.setattr(psycopg.Pipeline, "sync", counted_sync)
    monkeypatch.setattr(psycopg.Pipeline, "__exit__", counted_leave)
    monkeypatch.setattr(psycopg.Connection, "execute", counted_execute)
    return counts


def test_a_cached_run_commit_waits_for_the_server_once(
    store_postgres_step_cost: ms.storage.PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten commits of a live run whose row this host wrote last, each with a step's
    observation: each sends BEGIN, its row lock and a Sync not waited for (L6), then its
    header and part row in one statement, its history and COMMIT, and waits once, as it
    leaves its pipeline: one round trip, two Syncs, nothing read before it writes."""
    assert store_postgres_step_cost.create(
        ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)
    )
    assert store_postgres_step_cost.acquire("ex-1", OWNER, 60.0).acquired
    live = store_postgres_step_cost.get("ex-1")
    assert live is not None
    live = attrs.evolve(live, status="running")
    assert store_postgres_step_cost.commit_runs([(live, OWNER)]) == (
        ms.storage._seam.CommitOutcome.OK,
    )
    counts = _syncs_and_statements(monkeypatch)
    for n in range(1, 11):
        seen = ms.storage.Observation(step_id=f"s{n}", ok=True, output=n)
        live = attrs.evolve(live, calls_used=n, observations=(*live.observations, seen))
        assert store_postgres_step_cost.commit_runs([(live, OWNER)]) == (
            ms.storage._seam.CommitOutcome.OK,
        )
    assert counts["waited"] == 10
    assert counts["sent"] == 20
    # BEGIN, the row lock, the header with its part row (one statement: two before), COMMIT
    # (an observation adds no history entry).
    assert counts["statements"] == 40
    monkeypatch.undo()
    stored = store_postgres_step_cost.get("ex-1")
    assert stored is not None
    assert stored.calls_used == 10
    assert [seen.output for seen in stored.observations] == list(range(1, 11))


def _counted_notifies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times psycopg's generator that reads notices is resumed from now on: once
    per readiness of the socket, or per lap of a busy wait."""
    laps = [0]
    reading = psycopg.connection.notifies

    def counted(pgconn: Any) -> Generator[Any, Any, Any]:
        inner = reading(pgconn)
        wanted = next(inner)
        while True:
            laps[0] += 1
            try:
                wanted = inner.send((yield wanted))
            except StopIteration as done:
                return done.value

    monkeypatch.setattr(psycopg.connection, "notifies", counted)
    return laps


def test_a_feed_does_no_work_between_notices(
    store_postgres_step_cost: ms.storage.PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty notices, each sent and read before the next, then a wait that times out: the
    feed reads each with a few laps, never a busy wait (which laps hundreds of times a
    millisecond, and took a core's millisecond after every notice)."""
    feed = store_postgres_step_cost.listen()
    laps = _counted_notifies(monkeypatch)
    try:
        with psycopg.connect(server_url(), autocommit=True) as conn:
            for n in range(20):
                conn.execute(
                    "SELECT pg_notify(%s, %s)", (store_postgres_step_cost.channel, f"h {n + 1}")
                )
                notes: list[tuple[str, str]] = []
                while not notes:
                    notes = feed.wait(10.0)
                assert notes == [("history", str(n + 1))]
        assert feed.wait(0.05) == []
    finally:
        feed.close()
    assert laps[0] <= 20 * 5 + 10


def test_leaving_a_pipeline_reports_the_first_refusal_not_the_abort_after_it(
    postgres_store_url: str,
) -> None:
    """The server refuses a statement while the rest of the transaction is queued behind
    it, and its answer is read as the pipeline is left (where a transaction's answers are
    read now): the error raised is that refusal (a stamp guard's miss is decided again by
    its SQLSTATE), not psycopg's "pipeline aborted" for the statements skipped after it."""

    def transaction(conn: psycopg.Connection[Any]) -> None:
        with quiet_pipeline(conn):
            conn.execute("BEGIN")
            conn.execute("SELECT 1 / 0")
            for _ in range(3):
                conn.execute("SELECT 1")
            conn.execute("COMMIT")
            select.select([conn.pgconn.socket], [], [], 10.0)  # the refusal has come

    with psycopg.connect(server_url(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            transaction(conn)
        conn.execute("ROLLBACK")
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_the_feed_wakes_at_a_notice_from_another_thread(
    store_postgres_step_cost: ms.storage.PostgresStore,
) -> None:
    """A wait that began before the notice was sent returns with it (the feed waits on its
    socket, not for its timeout)."""
    feed = store_postgres_step_cost.listen()
    waiting = threading.Event()
    got: list[list[tuple[str, str]]] = []

    def wait() -> None:
        waiting.set()
        got.append(feed.wait(30.0))

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        assert waiting.wait(10.0)
        with psycopg.connect(server_url(), autocommit=True) as conn:
            conn.execute("SELECT pg_notify(%s, 'c ex-9')", (store_postgres_step_cost.channel,))
        thread.join(20.0)
        assert not thread.is_alive()
        assert got == [[("control", "ex-9")]]
    finally:
        feed.close()
        thread.join(30.0)


# ----------------------------------------------------------------------
# The lease clock of a call that waited for a row lock (another host in
# a transaction on the same execution). The store reads ``clock_timestamp()`` in the same
# statement that locks the rows, but in the target list *before* the subqueries that wait for
# the lock (``_postgres.py``, ``_lock_sql``): "now" is the time the call began waiting, not the
# time it decided. A lease granted after the wait is then shorter than its ttl, or already
# lapsed, and a heartbeat revives a lease that lapsed during the wait (L1, L2).

WAIT = 2.0  # how long the other host keeps the row locked (server seconds)


def _execution_lease_clock() -> ms.storage.Execution:
    return ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)


def _now(conn: psycopg.Connection[Any]) -> float:
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


@pytest.fixture
def store_lease_clock(postgres_store_url: str) -> Iterator[ms.storage.PostgresStore]:
    made = ms.storage.PostgresStore(postgres_store_url + "&application_name=rev14_lease_clock")
    yield made
    made.close()


def _behind_a_row_lock(store: ms.storage.PostgresStore, call: Callable[[], Any]) -> Any:
    """Run ``call`` in a thread while another session holds the execution's row lock; the
    lock is let go ``WAIT`` server seconds after the call is seen waiting for it."""
    with psycopg.connect(server_url(), autocommit=True) as watch:
        blocker = psycopg.connect(server_url())
        try:
            blocker.execute(
                f'SELECT 1 FROM "{store.schema}".executions WHERE id = %s FOR UPDATE', ("ex-1",)
            )
            result: list[Any] = []
            thread = threading.Thread(target=lambda: result.append(call()))
            thread.start()
            deadline = time.monotonic() + 30
            while not watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                "'rev14_lease_clock' AND wait_event_type = 'Lock'"
            ).fetchone()[0]:  # type: ignore[index]
                assert time.monotonic() < deadline, "the call never waited for the lock"
                time.sleep(0.01)
            waiting_since = _now(watch)
            while _now(watch) < waiting_since + WAIT:  # the server's time passing
                time.sleep(0.05)
        finally:
            blocker.rollback()
            blocker.close()
        thread.join(30)
        assert result, "the call did not finish"
        return result[0], _now(watch)


def test_L1_a_lease_granted_after_waiting_for_the_row_is_live_for_its_ttl(
    store_lease_clock: ms.storage.PostgresStore,
) -> None:
    store_lease_clock.create(_execution_lease_clock())
    result, after = _behind_a_row_lock(
        store_lease_clock, lambda: store_lease_clock.acquire("ex-1", "a:1:x", 1.0)
    )
    assert result.acquired
    # Decided after the lock was granted, the lease runs until (grant time + 1 s) > after - ...
    # at the least it must not have lapsed by the time acquire returned.
    assert result.lease.expires_at > after, (
        f"acquire returned a lease that had lapsed {after - result.lease.expires_at:.2f} s "
        "before it returned"
    )
    other = ms.storage.PostgresStore(
        store_lease_clock.address.conninfo, schema=store_lease_clock.schema
    )
    try:
        assert not other.acquire("ex-1", "b:1:y", 30.0).acquired  # L1: a's lease is live
    finally:
        other.close()


def test_L2_a_heartbeat_that_waited_for_the_row_does_not_revive_a_lapsed_lease(
    store_lease_clock: ms.storage.PostgresStore,
) -> None:
    store_lease_clock.create(_execution_lease_clock())
    granted = store_lease_clock.acquire("ex-1", "a:1:x", 1.0)
    assert granted.acquired
    with psycopg.connect(server_url()) as conn:
        assert _now(conn) < granted.lease.expires_at  # live when the heartbeat starts
    extended, after = _behind_a_row_lock(
        store_lease_clock, lambda: store_lease_clock.heartbeat("ex-1", "a:1:x", 30.0)
    )
    assert after > granted.lease.expires_at  # it lapsed while the heartbeat waited
    assert extended is False, "a heartbeat revived a lease that lapsed before it decided"
