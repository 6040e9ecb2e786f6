"""One contract, run against every backend: reads, leases (L1-L3), commits (E2), ids (X1),
size bounds (X2), corrupt data (E7) and file modes."""

from __future__ import annotations

import contextlib
import inspect
import os
import random
import select
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import mainspring as ms
from mainspring.storage import Execution, Observation, StorageError, TooLarge
from mainspring.storage._backends.contract import CommitOutcome, Store, new_owner_id
from mainspring.storage._backends.file import store as file_module
from mainspring.storage._backends.file.frames import encode_frame
from mainspring.storage._backends.file.store import FileStore
from mainspring.storage._backends.postgres.store import PostgresStore
from mainspring.storage._backends.sqlite.store import SqliteStore
from mainspring.storage._journal.model import Base
from mainspring.testing import MemoryStore
from tests._postgres import (
    drop_schema,
    fresh_schema,
    recycled_store,
    require_server,
    server_url,
    with_schema,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


Factory = Callable[..., Store]


@pytest.fixture(params=["file", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    made: list[Any] = []
    schema = ""
    recycled = contextlib.ExitStack()
    if request.param == "postgres":
        url = require_server()
        schema = recycled.enter_context(recycled_store())  # an empty store, perhaps reused

    def make(clock: Clock | None = None, **options: Any) -> Store:
        kwargs: dict[str, Any] = dict(options)
        if clock is not None:
            kwargs["clock"] = clock
        if request.param == "file":
            store: Any = FileStore(tmp_path / "store", **kwargs)
        elif request.param == "memory":
            store = MemoryStore(**kwargs)
        elif request.param == "postgres":
            store = PostgresStore(with_schema(url, schema), **kwargs)
        else:
            store = SqliteStore(tmp_path / "store" / "mainspring.db", **kwargs)
        made.append(store)
        return store  # type: ignore[no-any-return]

    make.kind = request.param  # type: ignore[attr-defined]
    yield make
    with recycled:  # emptied for the next test (or dropped) once its stores are closed
        for store in made:
            if isinstance(store, SqliteStore | PostgresStore):
                store.close()


#: The contract every store keeps, ``mainspring.testing.MemoryStore`` included (the tests of
#: files, rows, bytes on disk and connections run on the three real backends only).
EVERY_STORE = pytest.mark.parametrize(
    "make_store", ["file", "sqlite", "postgres", "memory"], indirect=True
)


def execution(id: str = "ex-1", **changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"goal": "write a report", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id=id, **(fields | changes))


@EVERY_STORE
def test_create_get_and_list(make_store: Factory) -> None:
    store = make_store()
    assert store.get("ex-1") is None
    assert store.create(execution("ex-1"))
    assert not store.create(execution("ex-1", goal="other"))  # nothing overwritten
    store.create(execution("ex-2"))
    assert store.get("ex-1") == execution("ex-1")
    listing = store.list()
    assert [e.id for e in listing.executions] == ["ex-1", "ex-2"]
    assert listing.problems == ()


@EVERY_STORE
def test_what_a_store_reads_back_holds_plain_tuples_even_of_a_live_record(
    make_store: Factory,
) -> None:
    # The contract (Store's docstring, "Live records"): a run commits records whose
    # sequences are Vector or AppendOnly; what get, list and unfinished return holds plain
    # tuples, so attrs.asdict, json and isinstance(x, tuple) see tuples on every store.
    from mainspring.storage._seam import Vector

    store = make_store()
    plan = ms.Plan(id="p", goal="g", steps=Vector([ms.PlanStep(id="a", tool="t")]))
    live = execution(plan=plan, completed_steps=Vector(["a"]))
    assert store.create(live)
    listed = store.list().executions
    unfinished = getattr(store, "unfinished", store.list)().executions
    for read in (store.get("ex-1"), *listed, *unfinished):
        assert read is not None
        assert read == live
        assert type(read.completed_steps) is tuple
        assert type(read.plan.steps) is tuple  # type: ignore[union-attr]
        assert type(attrs.asdict(read)["completed_steps"]) is tuple


@EVERY_STORE
def test_a_stored_record_is_not_changed_by_mutating_what_was_given_or_read(
    make_store: Factory,
) -> None:
    # A store keeps what was committed, not the caller's objects: changing a dict after
    # create, or one inside a record read back, changes nothing stored.
    store = make_store()
    step = ms.PlanStep(id="a", tool="t", input={"items": [1]})
    assert store.create(execution(plan=ms.Plan(id="p", goal="g", steps=(step,))))
    step.input["items"].append(2)  # the caller's object, after create
    first = store.get("ex-1")
    assert first is not None
    assert first.plan is not None
    assert first.plan.steps[0].input == {"items": [1]}
    first.plan.steps[0].input["more"] = True  # a reader's copy
    again = store.get("ex-1")
    assert again is not None
    assert again.plan is not None
    assert again.plan.steps[0].input == {"items": [1]}
    assert again.plan.steps[0].input is not first.plan.steps[0].input


@EVERY_STORE
def test_L1_acquire_is_compare_and_set_and_takes_over_an_expired_lease(
    make_store: Factory,
) -> None:
    clock = Clock()
    store = make_store(clock)
    store.create(execution())
    a, b = "host:1:aaaa", "host:2:bbbb"
    first = store.acquire("ex-1", a, ttl=10)
    assert first.acquired
    assert first.lease is not None
    assert (first.lease.owner, first.lease.epoch) == (a, 1)
    refused = store.acquire("ex-1", b, ttl=10)
    assert not refused.acquired
    assert a in refused.reason
    again = store.acquire("ex-1", a, ttl=10)  # the holder re-acquiring keeps its tenure
    assert again.acquired
    assert again.lease is not None
    assert again.lease.epoch == 1
    clock.now += 11
    taken = store.acquire("ex-1", b, ttl=10)
    assert taken.acquired
    assert taken.lease is not None
    assert (taken.lease.owner, taken.lease.epoch) == (b, 2)
    assert not store.acquire("missing", a, ttl=10).acquired
    with pytest.raises(ValueError, match="ttl"):
        store.acquire("ex-1", a, ttl=0)


@EVERY_STORE
def test_L2_heartbeat_extends_only_the_holders_lease(make_store: Factory) -> None:
    clock = Clock()
    store = make_store(clock)
    store.create(execution())
    store.acquire("ex-1", "a:1:x", ttl=10)
    clock.now += 9
    assert store.heartbeat("ex-1", "a:1:x", ttl=10)
    clock.now += 9  # 18 s after acquiring: alive only thanks to the heartbeat
    assert not store.acquire("ex-1", "b:2:y", ttl=10).acquired
    assert not store.heartbeat("ex-1", "b:2:y", ttl=10)
    assert not store.heartbeat("nope", "a:1:x", ttl=10)


@EVERY_STORE
def test_L3_release_frees_the_lease_and_the_epoch_keeps_growing(make_store: Factory) -> None:
    store = make_store()
    store.create(execution())
    store.acquire("ex-1", "a:1:x", ttl=10)
    assert not store.release("ex-1", "b:2:y")
    assert store.release("ex-1", "a:1:x")
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.lease is not None
    assert (stored.lease.owner, stored.lease.epoch) == ("", 1)
    result = store.acquire("ex-1", "b:2:y", ttl=10)
    assert result.lease is not None
    assert result.lease.epoch == 2


def test_E2_commit_run_outcomes(make_store: Factory) -> None:
    clock = Clock()
    store = make_store(clock)
    owner, other = "a:1:x", "b:2:y"
    assert store.commit_run(execution(), owner) is CommitOutcome.MISSING
    store.create(execution())
    assert store.commit_run(execution(), owner) is CommitOutcome.RELEASED
    store.acquire("ex-1", other, ttl=10)
    assert store.commit_run(execution(), owner) is CommitOutcome.FOREIGN_LEASE
    clock.now += 11
    assert store.commit_run(execution(), other) is CommitOutcome.RELEASED  # lapsed
    store.acquire("ex-1", owner, ttl=10)
    progressed = execution(status="running", calls_used=3)
    assert store.commit_run(progressed, owner) is CommitOutcome.OK
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.calls_used == 3
    assert stored.lease is not None
    assert stored.lease.owner == owner  # the lease on disk wins over the writer's copy (None)
    assert store.replace(execution(status="paused"), "cli:9:z") is False  # owner holds it
    assert store.commit_run(execution(status="completed"), owner).ok
    for status in ("running", "completed"):
        outcome = store.commit_run(execution(status=status), owner)
        assert outcome is CommitOutcome.TERMINAL  # terminal on disk is sticky


@EVERY_STORE
def test_E2_paused_on_disk_is_not_the_runners_to_overwrite(make_store: Factory) -> None:
    store = make_store()
    store.create(execution())
    store.acquire("ex-1", "a:1:x", ttl=60)
    store.release("ex-1", "a:1:x")
    assert store.replace(execution(status="paused"), "cli:9:z")  # out-of-run edit: allowed
    store.acquire("ex-1", "a:1:x", ttl=60)
    assert store.commit_run(execution(status="running"), "a:1:x") is CommitOutcome.PAUSED
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.status == "paused"


@EVERY_STORE
@pytest.mark.parametrize("bad", ["../escape", "a/b", "", ".", "..", "x" * 257, "sp ace"])
def test_X1_invalid_ids_are_refused_before_touching_storage(make_store: Factory, bad: str) -> None:
    store = make_store()
    with pytest.raises(ms.storage.InvalidId):
        store.get(bad)
    with pytest.raises(ms.storage.InvalidId):
        store.acquire(bad, "a:1:x", ttl=1)


def _corrupt(make_store: Factory, store: Store, execution_id: str, data: bytes) -> None:
    """Store ``data`` as the head of ``execution_id``, behind the backend's own checks: a
    journal frame that is intact but holds ``data`` (files), a header row (SQLite)."""
    if make_store.kind == "file":  # type: ignore[attr-defined]
        assert isinstance(store, FileStore)
        payload = b'{"seq":1,"changes":[["head",' + data + b"]]}"
        (store.path / f"{execution_id}.journal").write_bytes(encode_frame(payload))
    elif make_store.kind == "postgres":  # type: ignore[attr-defined]
        import psycopg

        assert isinstance(store, PostgresStore)
        with psycopg.connect(server_url(), autocommit=True) as conn:
            conn.execute(
                f'INSERT INTO "{store.schema}".executions (id, seq, stamp, status, updated_at, '
                "head, checkpoints) VALUES (%s, 1, 1, 'planned', 0, %s, '[]') ON CONFLICT (id) "
                "DO UPDATE SET head = excluded.head",
                (execution_id, data),
            )
    else:
        assert isinstance(store, SqliteStore)
        with sqlite3.connect(store.path) as db:
            db.execute(
                "INSERT OR REPLACE INTO executions (id, seq, status, updated_at, head, "
                "checkpoints) VALUES (?, 1, 'planned', 0, ?, '[]')",
                (execution_id, data),
            )


def test_X2_E7_oversize_and_corrupt_records_are_reported_not_deleted(
    make_store: Factory,
) -> None:
    store = make_store(max_bytes=4096)
    store.create(execution("good"))
    _corrupt(make_store, store, "huge", b"{" + b" " * 5000 + b"}")
    _corrupt(make_store, store, "broken", b'{"v": 1, "id": ')
    _corrupt(make_store, store, "wrong", b'{"v": 2}')
    listing = store.list()
    assert [e.id for e in listing.executions] == ["good"]
    problems = {p.id: p.error for p in listing.problems}
    assert set(problems) == {"huge", "broken", "wrong"}
    assert "over the 4,096-byte limit" in problems["huge"]
    with pytest.raises(ms.storage.TooLarge):
        store.get("huge")
    with pytest.raises(ms.storage.RecordError):
        store.acquire("broken", "a:1:x", ttl=1)  # refused, and nothing was changed
    again = store.list()  # reading never deletes or repairs
    assert {p.id for p in again.problems} == {"huge", "broken", "wrong"}


def _acknowledged(store: Store) -> list[ms.storage.Execution]:
    """A record committed four times; every acknowledged version, oldest first."""
    steps = tuple(ms.PlanStep(id=f"s{n}", tool="t") for n in range(3))
    record = execution("victim", plan=ms.Plan(id="p", goal="g", steps=steps))
    assert store.create(record)
    versions = [record]
    store.acquire("victim", "a:1:x", ttl=60)
    got = store.get("victim")
    assert got is not None
    versions.append(got)
    for n in range(3):
        done = tuple(f"s{i}" for i in range(n + 1))
        assert store.commit_run(attrs.evolve(got, completed_steps=done), "a:1:x").ok
        stored = store.get("victim")
        assert stored is not None
        versions.append(stored)
    return versions


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
def test_a_journal_cut_at_every_byte_reads_as_its_last_whole_commit(tmp_path: Path) -> None:
    # A crash mid-append leaves a torn last frame: readers see the commit before it, whole,
    # never a mix, never an error (a journal with no whole entry at all is unreadable, E7);
    # the next writer cuts the tail off.
    store = FileStore(tmp_path / "store")
    store.create(execution("bystander"))
    versions = _acknowledged(store)
    journal = store.path / "victim.journal"
    data = journal.read_bytes()
    ends = [0]
    while ends[-1] < len(data):
        length = int.from_bytes(data[ends[-1] + 4 : ends[-1] + 8], "little")
        ends.append(ends[-1] + 16 + length)
    for cut in range(len(data)):
        journal.write_bytes(data[:cut])
        whole = sum(1 for end in ends[1:] if end <= cut)
        if cut and not whole:
            # E7: bytes but no whole entry are unreadable, never taken for absent.
            with pytest.raises(ms.storage.RecordError, match="no whole entry"):
                FileStore(store.path).get("victim")
            continue
        got = FileStore(store.path).get("victim")
        if cut == 0:
            assert got is None  # nothing of it was ever written
        else:
            # frame 1 is the create, frame 2 the acquire, then one per commit
            assert got == versions[whole - 1]
    journal.write_bytes(data[: ends[-2] + 5])  # a torn last frame, then a new commit
    fresh = FileStore(store.path)
    stored = fresh.get("victim")
    assert stored == versions[-2]
    assert fresh.commit_run(attrs.evolve(stored, goal="after the crash"), "a:1:x").ok
    again = FileStore(store.path).get("victim")
    assert again is not None
    assert again.goal == "after the crash"


def test_a_thousand_random_bit_flips_never_yield_a_record_that_was_not_committed(
    make_store: Factory,
) -> None:
    store = make_store()
    store.create(execution("bystander"))
    versions = _acknowledged(store)
    rng = random.Random(1234)
    closing: list[Callable[[], None]] = []
    if make_store.kind == "file":  # type: ignore[attr-defined]
        assert isinstance(store, FileStore)
        journal = store.path / "victim.journal"
        data = bytearray(journal.read_bytes())

        def write(flipped: bytes) -> None:
            journal.write_bytes(flipped)

    elif make_store.kind == "postgres":  # type: ignore[attr-defined]
        import psycopg

        assert isinstance(store, PostgresStore)
        table = f'"{store.schema}".executions'
        conn = psycopg.connect(server_url(), autocommit=True)
        closing.append(conn.close)
        data = bytearray(
            conn.execute(f"SELECT head FROM {table} WHERE id = 'victim'").fetchone()[0]
        )

        def write(flipped: bytes) -> None:
            conn.execute(
                f"UPDATE {table} SET head = %s, stamp = stamp + 1 WHERE id = 'victim'",
                (flipped,),
            )

    else:
        assert isinstance(store, SqliteStore)
        with sqlite3.connect(store.path) as db:
            data = bytearray(
                db.execute("SELECT head FROM executions WHERE id = 'victim'").fetchone()[0]
            )

        def write(flipped: bytes) -> None:
            with sqlite3.connect(store.path) as db:
                db.execute("UPDATE executions SET head = ? WHERE id = 'victim'", (flipped,))

    accepted = 0
    for _ in range(1000):
        flipped = bytearray(data)
        position = rng.randrange(len(flipped))
        flipped[position] ^= 1 << rng.randrange(8)
        write(bytes(flipped))
        try:
            got = store.get("victim")
        except ms.storage.RecordError:
            continue
        accepted += 1
        assert got is not None
        if make_store.kind == "file":  # type: ignore[attr-defined]
            # checksummed: only a flip in the last frame is accepted, as the commit before it
            assert got == versions[-2]
        else:  # a flip inside a string of the head can still be a valid record
            assert (
                ms.storage._codec.decode(ms.storage._codec.encode(got), ms.storage.Execution) == got
            )
    for close in closing:
        close()
    assert accepted < 1000
    assert [e.id for e in store.list().executions] == ["bystander"] or accepted


def test_files_are_0600_and_directories_0700_even_under_umask_000(
    make_store: Factory, tmp_path: Path
) -> None:
    if make_store.kind == "postgres":  # type: ignore[attr-defined]
        pytest.skip("a PostgreSQL store keeps no files of its own")
    old = os.umask(0)
    try:
        store = make_store()
        store.create(execution())
        store.acquire("ex-1", "a:1:x", ttl=10)
    finally:
        os.umask(old)
    root = tmp_path / "store"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    files = [p for p in root.iterdir() if p.is_file()]
    assert files
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    assert not [p for p in files if p.name.startswith(".tmp-")]  # no temp files left behind


def test_owner_ids_are_host_pid_random() -> None:
    owner = new_owner_id()
    host, pid, token, process = owner.split(":")  # process: start time, boot id, pid ns (L7)
    assert host
    assert process.count(".") == 2
    assert int(pid) == os.getpid()
    assert len(token) == 8
    assert new_owner_id() != owner


@EVERY_STORE
@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
def test_L1_ttl_must_be_positive_and_finite(make_store: Factory, ttl: float) -> None:
    store = make_store()
    store.create(execution())
    with pytest.raises(ValueError, match="ttl"):
        store.acquire("ex-1", "a:1:x", ttl=ttl)
    with pytest.raises(ValueError, match="ttl"):
        store.heartbeat("ex-1", "a:1:x", ttl=ttl)


@EVERY_STORE
def test_L2_a_lapsed_lease_is_not_revived_by_a_heartbeat(make_store: Factory) -> None:
    clock = Clock()
    store = make_store(clock)
    store.create(execution())
    store.acquire("ex-1", "a:1:x", ttl=10)
    clock.now += 11
    assert store.replace(execution(goal="edited while the lease had lapsed"), "cli:9:z")
    assert not store.heartbeat("ex-1", "a:1:x", ttl=10)  # it must acquire again
    assert store.commit_run(execution(), "a:1:x") is CommitOutcome.RELEASED
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.goal == "edited while the lease had lapsed"


@EVERY_STORE
def test_X2_a_record_too_large_to_read_back_is_never_written(make_store: Factory) -> None:
    store = make_store(max_bytes=4096)
    store.create(execution())
    store.acquire("ex-1", "a:1:x", ttl=60)
    with pytest.raises(ms.storage.TooLarge):
        store.commit_run(execution(goal="x" * 5000), "a:1:x")
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.goal == "write a report"


def test_E2_a_commit_from_another_connection_is_seen(make_store: Factory, tmp_path: Path) -> None:
    # Two store objects on the same storage, as two processes would have.
    first = make_store()
    second = make_store()
    first.create(execution())
    first.acquire("ex-1", "a:1:x", ttl=60)
    assert first.commit_run(execution(status="running"), "a:1:x").ok
    assert second.replace(execution(status="cancelled"), "a:1:x")  # e.g. an operator's cancel
    assert first.commit_run(execution(status="running"), "a:1:x") is CommitOutcome.TERMINAL


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
def test_a_file_store_never_trusts_its_memory_after_another_store_wrote(tmp_path: Path) -> None:
    # Inodes are reused and mtimes are coarse: only the shared generation counter decides.
    first = FileStore(tmp_path / "s")
    second = FileStore(tmp_path / "s")
    first.create(execution())
    first.acquire("ex-1", "a:1:x", ttl=60)
    for n in range(200):
        assert first.commit_run(execution(calls_used=n), "a:1:x").ok
        assert second.replace(execution(calls_used=n, status="paused"), "a:1:x")
        assert first.commit_run(execution(calls_used=n), "a:1:x") is CommitOutcome.PAUSED
        assert second.replace(execution(calls_used=n, status="running"), "a:1:x")


def test_the_own_write_cache_is_bounded_and_forgets_terminal_executions() -> None:
    from mainspring.storage._backends.compare_and_set import OwnWrites

    cache = OwnWrites(limit=3)
    records = [
        ms.storage.Execution(id=f"e{i}", goal="g", created_at=0.0, updated_at=0.0) for i in range(5)
    ]
    for record in records:
        cache.remember(Base.of(record, 1, window=[]))
    assert len(cache) == 3
    assert cache.get("e0") is None
    cached = cache.get("e4")
    assert cached is not None
    assert cached.execution is records[4]
    cache.remember(Base.of(attrs.evolve(records[4], status="completed"), 2, window=[]))
    assert cache.get("e4") is None


@EVERY_STORE
def test_L2_E2_renew_answers_like_a_commit_and_extends_only_when_it_would_be_accepted(
    make_store: Factory,
) -> None:
    clock = Clock()
    store = make_store(clock)
    for name in ("mine", "theirs", "paused", "done"):
        store.create(execution(name))
    owner = "host:1:aaaa"
    assert store.acquire("mine", owner, ttl=10).acquired
    assert store.acquire("theirs", "host:2:bbbb", ttl=10).acquired
    assert store.acquire("paused", owner, ttl=10).acquired
    store.edit("paused", lambda ex, now: attrs.evolve(ex, status="paused"))
    store.edit("done", lambda ex, now: attrs.evolve(ex, status="completed"))
    clock.now += 5
    results = store.renew_many(
        [("mine", owner, 10), ("theirs", owner, 10), ("paused", owner, 10),
         ("done", owner, 10), ("gone", owner, 10), ("mine", owner, float("nan"))]
    )  # fmt: skip
    outcomes = [r[0] if isinstance(r, tuple) else type(r) for r in results]
    assert outcomes == [
        CommitOutcome.OK, CommitOutcome.FOREIGN_LEASE, CommitOutcome.PAUSED,
        CommitOutcome.TERMINAL, CommitOutcome.MISSING, ValueError,
    ]  # fmt: skip
    renewed = store.get("mine")
    assert renewed is not None
    assert renewed.lease is not None
    assert renewed.lease.expires_at == clock.now + 10
    paused = store.get("paused")
    assert paused is not None
    assert paused.lease is not None
    assert paused.lease.expires_at == 1_010.0  # a refused renewal writes nothing
    assert store.renew("mine", owner, 10)[0] is CommitOutcome.OK


@EVERY_STORE
def test_edit_keeps_the_stored_lease_whatever_the_change_returns(make_store: Factory) -> None:
    store = make_store()
    store.create(execution("e"))
    assert store.acquire("e", "host:1:aaaa", ttl=60).acquired
    before = store.get("e")
    assert before is not None
    written = store.edit("e", lambda ex, now: attrs.evolve(ex, lease=None, goal="new"))
    assert written is not None
    assert written.lease == before.lease
    assert written.goal == "new"
    assert store.edit("e", lambda ex, now: None) is None
    assert store.edit("missing", lambda ex, now: ex) is None


# -- storage v2: fencing, history, deletion, cost per commit -----------------------------


@EVERY_STORE
def test_L4_a_write_of_an_older_tenure_is_refused_even_by_the_same_owner(
    make_store: Factory,
) -> None:
    clock = Clock()
    store = make_store(clock)
    store.create(execution())
    first = store.acquire("ex-1", "a:1:x", ttl=10)
    assert first.acquired
    assert first.lease is not None
    clock.now += 60  # the tenure lapses; the same owner takes the lease again
    second = store.acquire("ex-1", "a:1:x", ttl=10)
    assert second.lease is not None
    assert second.lease.epoch == first.lease.epoch + 1
    stale = execution(lease=first.lease, calls_used=9)
    assert store.commit_run(stale, "a:1:x") is CommitOutcome.FOREIGN_LEASE
    # A heartbeat of the older tenure is refused too, and extends nothing.
    outcome, renewed = store.renew("ex-1", "a:1:x", 10, epoch=first.lease.epoch)
    assert outcome is CommitOutcome.FOREIGN_LEASE
    assert renewed is None
    assert store.renew_many([("ex-1", "a:1:x", 10, first.lease.epoch)])[0] == (
        CommitOutcome.FOREIGN_LEASE,
        None,
    )
    assert store.renew("ex-1", "a:1:x", 10, epoch=second.lease.epoch)[0].ok
    current = execution(lease=second.lease, calls_used=3)
    assert store.commit_run(current, "a:1:x").ok
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.calls_used == 3


@EVERY_STORE
def test_V2_history_is_written_with_each_commit_and_replayable_from_any_sequence(
    make_store: Factory,
) -> None:
    store = make_store()
    steps = tuple(ms.PlanStep(id=f"s{n}", tool="t") for n in range(3))
    plan = ms.Plan(id="p", goal="g", steps=steps)
    store.create(execution("a", plan=plan, plan_version=1))
    store.create(execution("b"))
    lease = store.acquire("a", "a:1:x", ttl=60).lease
    record = execution("a", plan=plan, plan_version=1, lease=lease, status="running")
    assert store.commit_run(record, "a:1:x").ok
    for n in range(3):
        done = attrs.evolve(steps[n], status="succeeded")
        steps = (*steps[:n], done, *steps[n + 1 :])
        record = attrs.evolve(
            record,
            plan=attrs.evolve(plan, steps=steps),
            completed_steps=tuple(s.id for s in steps[: n + 1]),
        )
        assert store.commit_run(record, "a:1:x").ok
    everything = store.history()
    seqs = [event.seq for event in everything]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    mine = store.history("a")
    assert [e.kind for e in mine] == ["created", "plan", "status", "step", "step", "step"]
    assert [(e.step_id, e.status, e.done, e.total) for e in mine if e.kind == "step"] == [
        ("s0", "succeeded", 1, 3),
        ("s1", "succeeded", 2, 3),
        ("s2", "succeeded", 3, 3),
    ]
    assert [e.execution_seq for e in mine] == sorted(e.execution_seq for e in mine)
    assert {e.execution_id for e in store.history("b")} == {"b"}
    middle = mine[3].seq
    assert store.history("a", after=middle) == mine[4:]
    assert store.history(after=everything[-1].seq) == ()
    assert store.history(limit=2) == everything[:2]
    with pytest.raises(ValueError, match="after"):
        store.history(after=-1)


@EVERY_STORE
@pytest.mark.parametrize("after", [2**63 - 1, 2**63, 10**30])
def test_V2_an_after_past_every_sequence_number_reads_nothing(
    make_store: Factory, after: int
) -> None:
    """A sequence number past what a 64-bit column holds (a client's Last-Event-ID from far
    in the future) reads as nothing after it, on every store, not as a driver's overflow."""
    store = make_store()
    store.create(execution("a"))
    assert store.history(after=after) == ()
    assert store.history("a", after=after) == ()


@EVERY_STORE
def test_delete_removes_only_a_finished_execution_with_its_history(make_store: Factory) -> None:
    store = make_store()
    store.create(execution("done", status="completed"))
    store.create(execution("live", status="running"))
    assert not store.delete("live")  # never a run that is not finished
    assert not store.delete("absent")
    assert store.delete("done")
    assert store.get("done") is None
    assert store.history("done") == ()
    assert [e.id for e in store.list().executions] == ["live"]
    assert not store.delete("done")


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
def test_a_commit_costs_what_changed_not_the_length_of_the_run(tmp_path: Path) -> None:
    # The bytes one step's commit appends are the same at step 10 and step 1,000.
    store = FileStore(tmp_path / "store")
    steps = tuple(ms.PlanStep(id=f"s{n}", tool="t") for n in range(1_000))
    plan = ms.Plan(id="p", goal="g", steps=steps)
    record = execution("long", plan=plan, plan_version=1)
    store.create(record)
    lease = store.acquire("long", "a:1:x", ttl=600).lease
    record = attrs.evolve(record, lease=lease, status="running")
    journal = store.path / "long.journal"
    grown: dict[int, int] = {}
    current = list(steps)
    done: list[str] = []
    observations: list[ms.storage.Observation] = []
    for n in range(1_000):
        current[n] = attrs.evolve(current[n], status="succeeded")
        done.append(f"s{n}")
        observations.append(ms.storage.Observation(step_id=f"s{n}", tool="t", ok=True, output=n))
        record = attrs.evolve(
            record,
            plan=attrs.evolve(plan, steps=tuple(current)),
            completed_steps=tuple(done),
            observations=tuple(observations),
        )
        before = journal.stat().st_size
        assert store.commit_run(record, "a:1:x").ok
        after = journal.stat().st_size
        if after > before:  # not a compaction
            grown[n] = after - before
    early = sum(grown[n] for n in range(10, 20) if n in grown) / 10
    late = [grown[n] for n in range(980, 1_000) if n in grown]
    assert late
    assert max(late) < early * 1.5 + 64
    stored = FileStore(store.path).get("long")
    assert stored == attrs.evolve(record, lease=stored.lease if stored else None)


def test_V2_a_follower_reading_on_from_its_last_seq_sees_each_entry_once_across_compactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mainspring.storage._backends.file import store as _file

    monkeypatch.setattr(_file, "_COMPACT_AT", 2048)  # compactions replace the journal often
    writer = FileStore(tmp_path / "store")
    follower = FileStore(tmp_path / "store")
    writer.create(execution("ex-1"))
    lease = writer.acquire("ex-1", "a:1:x", ttl=600).lease
    seen: list[ms.storage.HistoryEvent] = []
    last = 0
    for n in range(200):
        status = "running" if n % 2 == 0 else "waiting_for_budget"
        record = execution("ex-1", lease=lease, status=status, calls_used=n)
        assert writer.commit_run(record, "a:1:x").ok
        if n % 7 == 0:
            fresh = follower.history(after=last)
            seen.extend(fresh)
            last = fresh[-1].seq if fresh else last
    seen.extend(follower.history(after=last))
    assert seen == list(FileStore(tmp_path / "store").history(limit=10_000))
    assert len(seen) == 1 + 200  # created, then one status change per commit


def test_O2_failure_records_round_trip_on_every_backend(make_store: Factory) -> None:
    """A step's error type, traceback and times, and an agent task failure's traceback, are
    written and read back as they were; a fresh store object reads them from disk."""
    store = make_store()
    observation = ms.storage.Observation(
        step_id="s", tool="t", ok=False, error="ValueError: bad", error_type="ValueError",
        traceback='Traceback (most recent call last):\n  File "x.py"\nValueError: bad\n',
        started_at=1.5, ended_at=2.25,
    )  # fmt: skip
    failure = ms.storage.Failure(
        code="agent-failed", message="RuntimeError: no", error_type="RuntimeError",
        traceback="Traceback ...\nRuntimeError: no\n",
    )  # fmt: skip
    task = ms.storage.AgentTaskRecord(
        id="t-1", agent_id="a", step_id="s2", state="failed", created_at=1.0, updated_at=2.0,
        execution_id="ex-1", failure=failure,
    )  # fmt: skip
    raw_task = ms.storage._seam.unstructure(task)
    ex = execution(observations=(observation,), agent_tasks=(raw_task,))
    assert store.create(ex)
    for reader in (store, make_store()):
        back = reader.get("ex-1")
        assert back is not None
        assert back.observations == (observation,)
        (parsed,), dropped = ms.storage._seam.parse_agent_tasks(back)
        assert dropped == 0
        assert parsed.failure == failure


def test_O2_records_stored_before_failures_were_kept_read_with_defaults() -> None:
    old_observation = {"step_id": "s", "ok": False, "error": "boom"}
    back = ms.storage._seam.structure(old_observation, ms.storage.Observation)
    assert (back.error_type, back.traceback, back.started_at, back.ended_at) == (None,) * 4
    assert ms.storage._seam.unstructure(back) == ms.storage._seam.unstructure(
        ms.storage.Observation(step_id="s", ok=False, error="boom")
    )
    assert "traceback" not in ms.storage._seam.unstructure(back)  # left out while unset
    old_failure = ms.storage._seam.structure({"code": "c", "message": "m"}, ms.storage.Failure)
    assert ms.storage._seam.unstructure(old_failure) == {"code": "c", "message": "m"}


def test_O2_X2_a_stored_traceback_past_its_bound_is_refused() -> None:
    too_long = {"step_id": "s", "ok": False, "traceback": "x" * 8193}
    with pytest.raises(ms.storage.RecordError):
        ms.storage._seam.structure(too_long, ms.storage.Observation)


@EVERY_STORE
def test_L3_a_commit_carrying_a_released_lease_releases_it_in_that_same_write(
    make_store: Factory,
) -> None:
    store = make_store()
    owner, other = "a:1:x", "b:2:y"
    store.create(execution())
    taken = store.acquire("ex-1", owner, ttl=60)
    assert taken.lease is not None
    given_up = ms.storage.Lease(owner="", expires_at=0.0, epoch=taken.lease.epoch)
    final = execution(status="completed", lease=given_up)
    assert store.commit_run(final, owner) is CommitOutcome.OK
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.status == "completed"
    assert stored.lease == given_up  # released by the final write itself, epoch kept
    assert not store.release("ex-1", owner)  # nothing left for a second write to release
    # Still decided and fenced as any run's write (E2, L4): a writer that does not hold
    # the lease releases nothing, and one of another tenure is refused.
    store.create(execution("ex-2"))
    held = store.acquire("ex-2", other, ttl=60)
    assert held.lease is not None
    refused = execution("ex-2", status="completed", lease=given_up)
    assert store.commit_run(refused, owner) is CommitOutcome.FOREIGN_LEASE
    stale = ms.storage.Lease(owner="", expires_at=0.0, epoch=held.lease.epoch + 1)
    outcome = store.commit_run(execution("ex-2", lease=stale), other)
    assert outcome is CommitOutcome.FOREIGN_LEASE
    kept = store.get("ex-2")
    assert kept is not None
    assert kept.lease == held.lease


def _unreadable(make_store: Factory, store: Store, execution_id: str) -> None:
    """A record that exists and cannot be read: a journal with bytes but no whole entry
    (files), a header row whose head does not parse (SQLite, PostgreSQL)."""
    if make_store.kind == "file":  # type: ignore[attr-defined]
        assert isinstance(store, FileStore)
        frame = encode_frame(b'{"seq":1,"changes":[]}')
        (store.path / f"{execution_id}.journal").write_bytes(frame[:-3])  # cut short
    else:
        _corrupt(make_store, store, execution_id, b'{"v": 1, "id": ')


def _raw_bytes(make_store: Factory, store: Store, execution_id: str) -> Any:
    if make_store.kind == "file":  # type: ignore[attr-defined]
        assert isinstance(store, FileStore)
        return (store.path / f"{execution_id}.journal").read_bytes()
    if make_store.kind == "postgres":  # type: ignore[attr-defined]
        import psycopg

        assert isinstance(store, PostgresStore)
        with psycopg.connect(server_url(), autocommit=True) as conn:
            return conn.execute(
                f'SELECT seq, head FROM "{store.schema}".executions WHERE id = %s',
                (execution_id,),
            ).fetchall()
    assert isinstance(store, SqliteStore)
    with sqlite3.connect(store.path) as db:
        return db.execute(
            "SELECT seq, head FROM executions WHERE id = ?", (execution_id,)
        ).fetchall()


def test_E7_X2_an_unreadable_record_is_never_taken_for_absent_nor_written_over(
    make_store: Factory,
) -> None:
    store = make_store()
    _unreadable(make_store, store, "ex-1")
    before = _raw_bytes(make_store, store, "ex-1")
    assert [p.id for p in store.list().problems] == ["ex-1"]
    with pytest.raises(ms.storage.RecordError):
        store.get("ex-1")
    with pytest.raises(ms.storage.RecordError):
        store.create(execution("ex-1"))
    assert _raw_bytes(make_store, store, "ex-1") == before  # nothing written over it
    assert [p.id for p in store.list().problems] == ["ex-1"]


@EVERY_STORE
def test_L7_a_gone_owners_live_lease_is_taken_once_by_compare_and_set(
    make_store: Factory,
) -> None:
    clock = Clock()
    store = make_store(clock)
    store.create(execution())
    dead, a, b = "host:9:dead", "host:1:aaaa", "host:2:bbbb"
    seen = store.acquire("ex-1", dead, ttl=60).lease
    assert seen is not None
    # Without ``gone`` the live lease stands (L1); with a lease other than the one on disk
    # (another epoch) too.
    assert not store.acquire("ex-1", a, ttl=10).acquired
    assert not store.acquire(
        "ex-1", a, ttl=10, gone=attrs.evolve(seen, epoch=seen.epoch + 1)
    ).acquired
    # Two takers acting on one sighting: the first wins, with a new epoch (L4); the second
    # meets the winner's live lease.
    won = store.acquire("ex-1", a, ttl=10, gone=seen)
    assert won.acquired
    assert won.lease is not None
    assert (won.lease.owner, won.lease.epoch) == (a, seen.epoch + 1)
    lost = store.acquire("ex-1", b, ttl=10, gone=seen)
    assert not lost.acquired
    assert lost.lease == won.lease
    assert store.commit_run(attrs.evolve(execution(), lease=seen), dead) != CommitOutcome.OK


def test_l8_unfinished_lists_what_is_not_finished_and_reads_no_finished_run_twice(
    make_store: Factory,
) -> None:
    """What recovery sweeps (``Unfinished``): every run not completed, failed or
    cancelled, problems for those that do not read; a run that finishes drops out, and a
    finished run is not read again (a file store's finished journal, once read, is
    skipped until it changes)."""
    store = make_store()
    assert isinstance(store, ms.storage._seam.Unfinished)
    statuses = ["running", "planned", "paused", "waiting_for_clarification"]
    statuses += ["completed", "failed", "cancelled"]
    for status in statuses:
        assert store.create(execution(f"ex-{status}", status=status))
    _corrupt(make_store, store, "broken", b'{"v": 1, "id": ')
    listing = store.unfinished()
    assert [e.id for e in listing.executions] == sorted(f"ex-{s}" for s in statuses[:4])
    assert [p.id for p in listing.problems] == ["broken"]
    assert store.edit("ex-running", lambda e, now: attrs.evolve(e, status="completed"))
    assert [e.id for e in store.unfinished().executions] == sorted(f"ex-{s}" for s in statuses[1:4])
    assert store.unfinished() == store.unfinished()  # reading changes nothing
    if make_store.kind == "file":  # type: ignore[attr-defined]
        assert isinstance(store, FileStore)
        calls: list[str] = []
        read = store._read

        def counted(execution_id: str, **kwargs: Any) -> Any:
            calls.append(execution_id)
            return read(execution_id, **kwargs)

        store._read = counted  # type: ignore[method-assign]
        store.unfinished()
        assert sorted(calls) == sorted(["broken", *(f"ex-{s}" for s in statuses[1:4])])


def test_l8_unfinished_never_reads_the_runs_it_is_told_to_skip(make_store: Factory) -> None:
    """Recovery skips the runs live in its own runtime without reading them: folding a long
    live run whole at every sweep held the store's lock its commits need (a late step of a
    3,000-step run made 2.5x the calls of an early one)."""
    store = make_store()
    assert isinstance(store, ms.storage._seam.Unfinished)
    for name in ("ex-live", "ex-orphan"):
        assert store.create(execution(name, status="running"))
    read: list[str] = []
    real_get = store.get

    def counted(execution_id: str) -> Any:
        read.append(execution_id)
        return real_get(execution_id)

    if make_store.kind == "postgres":  # type: ignore[attr-defined]
        store.get = counted  # type: ignore[method-assign]
    else:
        real_read = store._read  # type: ignore[attr-defined]

        def counted_read(execution_id: str, **kwargs: Any) -> Any:
            read.append(execution_id)
            return real_read(execution_id, **kwargs)

        store._read = counted_read  # type: ignore[attr-defined]
    listing = store.unfinished(skip={"ex-live"})
    assert [e.id for e in listing.executions] == ["ex-orphan"]
    assert "ex-live" not in read


# -- the write methods' names (issue 30: names that do not collide) ----------------------


@pytest.mark.parametrize(
    "cls",
    [ms.storage.Store, ms.storage.FileStore, ms.storage.SqliteStore, ms.storage.PostgresStore],
    ids=lambda c: c.__name__,
)
def test_a_store_s_writes_are_named_for_what_they_do(cls: type) -> None:
    # commit_run: a run's write (E2); commit_runs: many, durable together; replace: a whole
    # record written from outside a run, owner-checked; edit: a change applied under the lock.
    for name in ("commit_run", "commit_runs", "replace", "edit", "renew", "renew_many"):
        assert callable(getattr(cls, name, None)), name
    for gone in ("commit", "commit_progress", "commit_many"):
        assert not hasattr(cls, gone), gone


def test_the_committer_submits_and_does_not_commit() -> None:
    # The writer's client hands a run's commit over: submit, never a second `commit`.
    assert callable(ms.storage._seam.Committer.submit)
    assert not hasattr(ms.storage._seam.Committer, "commit")


def test_E2_commit_outcomes_are_spelled_as_every_state_is() -> None:
    # snake_case, like the StrEnums of the records (an outcome is never stored, only said).
    assert [outcome.value for outcome in CommitOutcome] == [
        "ok", "missing", "foreign_lease", "released", "terminal", "paused",
    ]  # fmt: skip
    for outcome in CommitOutcome:
        assert outcome == outcome.name.lower(), outcome


def test_the_contract_is_the_store_protocols_docstring() -> None:
    """``help(Store)`` shows the written contract: every operation and the invariants it
    keeps, which this suite checks on every backend."""
    doc = ms.storage.Store.__doc__ or ""
    for operation in (
        "create",
        "acquire",
        "heartbeat",
        "release",
        "commit_run",
        "commit_runs",
        "renew_many",
        "edit",
        "delete",
        "get",
        "list",
        "history",
        "put_evidence",
        "get_evidence",
    ):
        assert f"``{operation}" in doc, operation
    for invariant in ("E2", "E7", "E8", "L1", "L3", "L4", "L7", "X1", "X2"):
        assert invariant in doc, invariant
    assert "test_contract.py" in doc
    assert "Store" in (ms.storage.__doc__ or "")  # the package docstring points to it


@pytest.mark.parametrize("store_class", [FileStore, SqliteStore, PostgresStore])
def test_a_store_holds_its_memory_and_evidence_rather_than_inheriting_them(
    store_class: type,
) -> None:
    # One chain, no mixin: the compare-and-set template, then the forwarding to what the
    # store holds (written once), then the backend, which makes the two collaborators.
    from mainspring.storage._backends.compare_and_set import CompareAndSetStore
    from mainspring.storage._backends.holding import HoldingStore

    assert store_class.__bases__ == (HoldingStore,)
    assert HoldingStore.__bases__ == (CompareAndSetStore,)
    made = inspect.getsource(store_class)
    assert "self._facts = " in made
    assert "self._evidence = " in made
    for name in (
        "memory_apply",
        "memory_get",
        "memory_list",
        "memory_search",
        "memory_count",
        "memory_dropped",
        "memory_ranking",
        "put_evidence",
        "get_evidence",
    ):
        assert name in vars(HoldingStore), f"{name} is not forwarded in one place"
        assert name not in vars(store_class), f"{store_class.__name__}.{name} forwards again"


def test_every_store_keeps_memory_and_evidence(make_store: Factory) -> None:
    store = make_store()
    assert isinstance(store, ms.storage._seam.MemoryBackend)
    assert isinstance(store, ms.storage._seam.EvidenceStore)
    assert store.memory_count() == 0  # type: ignore[attr-defined]


# ----------------------------------------------------------------------
# Processes contend for one execution's lease, with random kills: never two live holders,
# and every stale commit is refused (L1, L4, E2; slow).
#
# Four processes share a FileStore or a SqliteStore; eight, each with a PostgresStore of its own
# and its own owner id (hosts, as far as the store can tell), share a PostgreSQL schema. The
# ledger's times are the workers' wall clock; PostgreSQL decides on the server's clock, which is
# the same clock here (the test server runs on this machine): every decision the server makes
# in a call is read after the call's ``tb`` and before its ``ta``, so the bounds below hold on
# it as they do on the files' clock.

WORKER = Path(__file__).parents[1] / "_lease_worker.py"
ACQUISITIONS = int(os.environ.get("MAINSPRING_LEASE_ACQUISITIONS", "2000"))
PROCESSES = {"file": 4, "sqlite": 4, "postgresql": 8}
#: The lease's ttl, the longest pause between a worker's attempts while another holds it, and
#: how often a holder sleeps (up to 1.5 ttl) before a commit. On PostgreSQL, eight workers on
#: a loaded machine: a call takes milliseconds to tens of them, and every attempt locks the
#: one row, so the ttl is longer than the files' and the workers poll less (the worker also
#: skips asking while it can see a live lease), or the holder's commits would queue behind
#: their attempts past its ttl and no commit but the stale would be tried.
TIMING = {"file": (0.05, 0.01, 0.2), "sqlite": (0.05, 0.01, 0.2), "postgresql": (0.15, 0.05, 0.1)}


def _spawn(backend: str, path: Path | str, ledger: Path, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, str(WORKER), backend, str(path), str(ledger), _owner(n), str(n),
            *map(str, TIMING[backend]),
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(ms.__file__).parent.parent)},
    )  # fmt: skip


def _owner(n: int) -> str:
    return f"w{n}:{n}:x"


def _ready(child: subprocess.Popen[bytes]) -> None:
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 60.0)
    assert readable, "a worker did not start within 60 s"
    assert child.stdout.readline().strip() == b"ready"


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend",
    # Eight processes, each call a durable transaction: on a loaded 2-core machine (load 10)
    # 2,000 acquisitions took four minutes.
    ["file", "sqlite", pytest.param("postgresql", marks=pytest.mark.timeout(600))],
)
def test_L1_never_two_live_holders_and_stale_commits_refused(tmp_path: Path, backend: str) -> None:
    if backend != "postgresql":
        _contend(tmp_path, backend)
        return
    schema = fresh_schema()
    try:
        _contend(tmp_path, backend, with_schema(require_server(), schema))
    finally:
        drop_schema(schema)


def _contend(tmp_path: Path, backend: str, url: str = "") -> None:
    path: Path | str
    store: Any
    if backend == "postgresql":
        path = url
        store = ms.storage.PostgresStore(url)
    else:
        path = tmp_path / "store" if backend == "file" else tmp_path / "store.db"
        store = ms.storage.FileStore(path) if backend == "file" else ms.storage.SqliteStore(path)
    store.create(ms.storage.Execution(id="contended", goal="g", created_at=1.0, updated_at=0.0))
    ledger = tmp_path / "ledger"
    ledger.touch()
    rng = random.Random(7)
    started = PROCESSES[backend]
    workers = [_spawn(backend, path, ledger, n) for n in range(started)]  # started at once
    owners = [_owner(n) for n in range(started)]
    # PostgreSQL: hosts die by SIGKILL, and half the kills hit the holder mid-tenure.
    signals = [signal.SIGKILL] if backend == "postgresql" else [signal.SIGKILL, signal.SIGTERM]
    at_holder = 0.5 if backend == "postgresql" else 0.0
    kills = 0
    deadline = time.monotonic() + (540 if backend == "postgresql" else 240)
    try:
        for worker in workers:
            _ready(worker)
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.05, 0.2))
            victim = rng.randrange(len(workers))
            if at_holder and rng.random() < at_holder:
                seen = store.get("contended")
                holder = seen.lease.owner if seen is not None and seen.lease is not None else ""
                victim = owners.index(holder) if holder in owners else victim
            workers[victim].send_signal(rng.choice(signals))
            workers[victim].wait()
            if workers[victim].stdout is not None:
                workers[victim].stdout.close()
            kills += 1
            workers[victim] = _spawn(backend, path, ledger, started)
            owners[victim] = _owner(started)
            _ready(workers[victim])
            started += 1
            if ledger.read_text().count("acq ") >= ACQUISITIONS:
                break
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()

    acquisitions: dict[int, tuple[str, float, float, float]] = {}
    releases: dict[int, float] = {}
    commits: list[tuple[str, int, float, float, str, float]] = []
    for line in ledger.read_text().splitlines():
        kind, owner, epoch, *rest = line.split()
        if kind == "acq":
            tb, ta, expires = map(float, rest)
            known = acquisitions.get(int(epoch))
            if known is not None:  # the holder acquiring again extends its own tenure
                assert known[0] == owner, f"two owners share epoch {epoch}"
                acquisitions[int(epoch)] = (owner, known[1], known[2], max(known[3], expires))
            else:
                acquisitions[int(epoch)] = (owner, tb, ta, expires)
        elif kind == "rel":
            releases[int(epoch)] = float(rest[0])
        else:
            tb, ta = float(rest[0]), float(rest[1])
            commits.append((owner, int(epoch), tb, ta, rest[2], float(rest[3])))
    acquired = ledger.read_text().count("acq ")
    assert acquired >= ACQUISITIONS
    assert len(acquisitions) > ACQUISITIONS // 2  # distinct tenures, most after a handover
    assert kills > 10

    # Never two live holders: the next tenure began only once this one could have ended.
    for epoch, (_, _, _, expires) in acquisitions.items():
        following = acquisitions.get(epoch + 1)
        if following is None:
            continue
        ended_by = min(expires, releases.get(epoch, float("inf")))
        assert following[2] >= ended_by, f"epoch {epoch + 1} overlapped epoch {epoch}"

    # Stale commits refused: an OK commit started before the lease expired and before the
    # next tenure had surely begun.
    stale = 0
    for owner, epoch, tb, _, outcome, expires in commits:
        following = acquisitions.get(epoch + 1)
        late = tb >= expires or (following is not None and tb >= following[2])
        if late:
            stale += 1
            assert outcome != "ok", f"a stale commit by {owner} (epoch {epoch}) was written"
    assert stale > 0  # the workers did try stale commits
    assert any(outcome == "ok" for *_, outcome, _ in commits)  # and live ones were written
    try:
        assert store.get("contended") is not None  # and the record still parses
    finally:
        if isinstance(store, ms.storage.SqliteStore | ms.storage.PostgresStore):
            store.close()


# ----------------------------------------------------------------------
# kill -9 of a writer at random moments (appends and compactions alike; on PostgreSQL
# inside transactions and during COMMIT): every record parses and holds an acknowledged
# version, whole, and no acknowledged commit is lost (slow).

WRITER = Path(__file__).parents[1] / "_crash_writer.py"
TRIALS = int(os.environ.get("MAINSPRING_CRASH_TRIALS", "120"))
#: A PostgreSQL trial starts a process that connects to the server: fewer, to stay well inside
#: the per-test timeout on a loaded machine.
PG_TRIALS = int(os.environ.get("MAINSPRING_PG_CRASH_TRIALS", "25"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend", ["file", "sqlite", pytest.param("postgresql", marks=pytest.mark.timeout(300))]
)
def test_kill_9_at_random_points_loses_no_acknowledged_commit(tmp_path: Path, backend: str) -> None:
    if backend != "postgresql":
        _trials(tmp_path, backend, TRIALS)
        return
    server = require_server()
    schemas: list[str] = []

    def url() -> str:  # a schema of each trial's own
        schemas.append(fresh_schema())
        return with_schema(server, schemas[-1])

    try:
        _trials(tmp_path, backend, PG_TRIALS, url)
    finally:
        for schema in schemas:
            drop_schema(schema)


def _trials(tmp_path: Path, backend: str, trials: int, url: Any = None) -> None:
    rng = random.Random(20261129)
    owner = "crash:1:test"
    checked = 0
    for trial in range(trials):
        where = tmp_path / f"t{trial}"
        where.mkdir()
        path: Path | str
        store: Any
        if backend == "postgresql":
            path = url()
            store = ms.storage.PostgresStore(path)
        else:
            path = where / "store" if backend == "file" else where / "store.db"
            store = (
                ms.storage.FileStore(path) if backend == "file" else ms.storage.SqliteStore(path)
            )
        store.create(ms.storage.Execution(id="victim", goal="g", created_at=1.0, updated_at=0.0))
        assert store.acquire("victim", owner, ttl=3600).acquired
        store.create(ms.storage.Execution(id="bystander", goal="g", created_at=1.0, updated_at=0.0))
        ledger = where / "ledger"
        child = subprocess.Popen(
            [sys.executable, str(WRITER), backend, str(path), str(ledger), owner],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(Path(ms.__file__).parent.parent)},
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, 0.15))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        acked = [int(line) for line in ledger.read_text().split()] if ledger.exists() else []
        stored = store.get("victim")  # parses, or this raises
        assert stored is not None
        last = acked[-1] if acked else 0
        # Everything acknowledged is durable; at most the one in flight made it further.
        assert last <= stored.calls_used <= last + 1, (trial, last, stored.calls_used)
        # One version whole, never a mix of two: its parts agree with its head.
        assert len(stored.observations) == stored.calls_used
        assert stored.completed_steps == tuple(f"s{n + 1}" for n in range(stored.calls_used))
        listing = store.list()
        assert [e.id for e in listing.executions] == ["bystander", "victim"]
        assert listing.problems == ()
        if isinstance(store, ms.storage.SqliteStore | ms.storage.PostgresStore):
            store.close()
        checked += 1
    assert checked == trials


# ----------------------------------------------------------------------
# Bugs found from ``mainspring.storage``'s public API.
#
# Each test names a bug that was once there and fails if it comes back.

Factory_storage_v2 = Callable[..., Any]


@pytest.fixture(params=["file", "sqlite"])
def make_store_storage_v2(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Factory_storage_v2]:
    made: list[Any] = []

    def make(**options: Any) -> Any:
        if request.param == "file":
            store: Any = FileStore(tmp_path / "store", **options)
        else:
            store = SqliteStore(tmp_path / "store" / "mainspring.db", **options)
        made.append(store)
        return store

    make.kind = request.param  # type: ignore[attr-defined]
    yield make
    for store in made:
        if isinstance(store, SqliteStore):
            store.close()


def execution_storage_v2(id: str = "ex-1", **changes: Any) -> Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return Execution(id=id, **(fields | changes))


def task(task_id: str, state: str = "running", **more: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "state": state,
        "inner_observations": [],
        "inner_completed": [],
        **more,
    }


# -- what is read back is what was committed --------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(
            {
                "observations": (
                    Observation(step_id="a", ok=False, error="first try"),
                    Observation(step_id="a", ok=True, output=1),
                )
            },
            id="two-observations-of-one-step",
        ),
        pytest.param({"completed_steps": ("a", "b", "a")}, id="a-completed-step-twice"),
    ],
)
def test_E10_a_record_with_repeated_part_keys_reads_back_as_committed_or_is_refused(
    make_store_storage_v2: Factory_storage_v2, changes: dict[str, Any]
) -> None:
    # Execution accepts repeated observation step ids and repeated completed steps (v1
    # stored them as given). v2 keys each part by step id: the file store acknowledges the
    # record and reads back fewer items (silent loss); SQLite acknowledges a create the same
    # way, and an edit fails with a raw sqlite3.IntegrityError (not a StorageError).
    store = make_store_storage_v2()
    store.create(execution_storage_v2("created", **changes))
    store.create(execution_storage_v2("edited"))
    try:
        written = store.edit("edited", lambda stored, now: attrs.evolve(stored, **changes))
    except (StorageError, ValueError):
        written = None  # refused cleanly: acceptable
    fresh = make_store_storage_v2()
    created = fresh.get("created")
    assert created is None or created == execution_storage_v2("created", **changes)
    if written is not None:
        assert fresh.get("edited") == written


def test_D3_sqlite_a_commit_that_cannot_be_stored_fails_only_itself_in_a_batch(
    tmp_path: Path,
) -> None:
    # The contract: "a bad record (too large, unstorable) fails only its own commit and
    # writes nothing of it". A repeated observation key raises sqlite3.IntegrityError out of
    # commit_runs, which fails the whole flush; the persistence actor then stops writing for
    # good (every other run in the process loses its writer).
    store = SqliteStore(tmp_path / "mainspring.db")
    try:
        for name in ("bad", "good"):
            store.create(execution_storage_v2(name, status="running"))
        bad_lease = store.acquire("bad", "a:1:x", ttl=600).lease
        good_lease = store.acquire("good", "a:1:x", ttl=600).lease
        twice = (Observation(step_id="a", ok=False), Observation(step_id="a", ok=True))
        bad = execution_storage_v2("bad", status="running", lease=bad_lease, observations=twice)
        good = execution_storage_v2("good", status="running", lease=good_lease, calls_used=3)
        results = store.commit_runs([(bad, "a:1:x"), (good, "a:1:x")])
        assert results[1] is CommitOutcome.OK
        stored = store.get("good")
        assert stored is not None
        assert stored.calls_used == 3
    finally:
        store.close()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"id": "t1", "state": "running"}, id="no-inner-fields"),
        pytest.param({"id": "t1", "inner_completed": ["s1"]}, id="only-inner-completed"),
    ],
)
def test_E7_an_agent_task_record_is_kept_as_it_is(
    make_store_storage_v2: Factory_storage_v2, raw: dict[str, Any]
) -> None:
    # "a record that does not parse is kept as it is (E7)": a raw task without the inner
    # fields reads back with empty ``inner_observations`` / ``inner_completed`` added, so
    # the fresh read is not the execution that was committed.
    store = make_store_storage_v2()
    committed = execution_storage_v2(agent_tasks=(raw,))
    store.create(committed)
    assert make_store_storage_v2().get("ex-1") == committed


# -- X2: nothing acknowledged that cannot be read back ----------------------------------


def test_X2_a_record_over_max_record_bytes_is_never_acknowledged(
    make_store_storage_v2: Factory_storage_v2,
) -> None:
    # Every row/frame is under max_bytes, but the execution as a whole is over
    # max_record_bytes: both backends acknowledge it, and then refuse to read it (TooLarge):
    # an acknowledged execution that can never be read, resumed or listed.
    limit = 20_000
    store = make_store_storage_v2(max_record_bytes=limit)
    store.create(execution_storage_v2())
    observations = tuple(
        Observation(step_id=f"s{n}", ok=True, output="x" * 100) for n in range(300)
    )
    with contextlib.suppress(TooLarge):  # refused: nothing acknowledged
        store.edit("ex-1", lambda stored, now: attrs.evolve(stored, observations=observations))
    make_store_storage_v2(max_record_bytes=limit).get("ex-1")  # must not raise TooLarge


def test_X2_a_file_journal_does_not_grow_past_its_read_bound_by_small_commits(
    tmp_path: Path,
) -> None:
    # The record stays tiny; each commit appends a frame and history entries, and the
    # history is never dropped (a compaction keeps it). The writer keeps acknowledging, and
    # a fresh reader refuses the journal as TooLarge once it passes max_record_bytes.
    limit = 50_000
    writer = FileStore(tmp_path / "store", max_record_bytes=limit)
    writer.create(execution_storage_v2(status="running"))
    lease = writer.acquire("ex-1", "a:1:x", ttl=600).lease
    for n in range(500):
        status = "running" if n % 2 == 0 else "waiting_for_budget"
        record = execution_storage_v2(status=status, lease=lease, calls_used=n)
        try:
            outcome = writer.commit_run(record, "a:1:x")
        except TooLarge:
            break  # refused before it is acknowledged: fine
        assert outcome.ok
        FileStore(tmp_path / "store", max_record_bytes=limit).get("ex-1")  # acked: readable


# -- V2: the history ----------------------------------------------------------------------


def test_V2_task_transitions_are_in_the_history_when_a_task_record_does_not_parse(
    make_store_storage_v2: Factory_storage_v2,
) -> None:
    # One agent task record that does not parse (kept as it is, E7) makes every later task
    # change a whole rewrite ("reset"), and events_for only derives task events from "put"
    # changes: t1 going queued -> completed never reaches the history (mainspring events
    # --follow misses the transition).
    store = make_store_storage_v2()
    unparsed = {"id": "not an id", "state": "garbage"}
    store.create(execution_storage_v2(agent_tasks=(task("t1", "queued"), unparsed)))
    store.edit(
        "ex-1",
        lambda stored, now: attrs.evolve(stored, agent_tasks=(task("t1", "completed"), unparsed)),
    )
    states = [
        (e.task_id, e.state) for e in make_store_storage_v2().history("ex-1") if e.kind == "task"
    ]
    assert ("t1", "completed") in states


def test_V2_a_follower_misses_nothing_when_a_new_journal_reuses_the_old_inode(
    disk_tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FileStore.history remembers how far it read a journal by (st_dev, st_ino) and length.
    # A compaction renames a new file over the journal and frees the old inode, which the
    # file system hands out again at the next compaction: the follower then takes the new
    # file for the one it read and reads on from its old length, mid-frame. It finds
    # nothing there (or a "corrupt" journal, skipped); meanwhile it moves its cursor on with
    # another execution's entries, so the entries of the compacted one are lost for good.
    # It needs a disk's file system: ext4 hands inodes out again, tmpfs (where the run may
    # keep tmp_path) does not.
    monkeypatch.setattr(file_module, "_COMPACT_AT", 1500)
    writer = FileStore(disk_tmp_path / "store")
    follower = FileStore(disk_tmp_path / "store")
    leases = {}
    for name in ("ex-1", "ex-2"):
        writer.create(execution_storage_v2(name, status="running"))
        leases[name] = writer.acquire(name, "a:1:x", ttl=600).lease
    journal = disk_tmp_path / "store" / "ex-1.journal"
    count = 0

    counts = {"ex-1": 0, "ex-2": 0}

    def commit(name: str = "ex-1") -> None:
        nonlocal count
        count += 1
        counts[name] += 1
        status = "running" if counts[name] % 2 == 0 else "waiting_for_budget"
        record = execution_storage_v2(name, status=status, lease=leases[name], calls_used=count)
        assert writer.commit_run(record, "a:1:x").ok

    seen: list[ms.storage.HistoryEvent] = []

    def follow() -> None:
        after = seen[-1].seq if seen else 0
        seen.extend(follower.history(after=after, limit=10_000))

    for _ in range(30):
        commit()
    # Rounds: read, then commit until the journal is a new file on the inode just read
    # (two compactions later), or read again and start over.
    while count < 5_000:
        follow()
        first = journal.stat()
        replaced, inode = 0, first.st_ino
        for _ in range(60):
            commit()
            now = journal.stat()
            if now.st_ino != inode:
                replaced, inode = replaced + 1, now.st_ino
            if replaced >= 2 and now.st_ino == first.st_ino and now.st_size >= first.st_size:
                break
        else:
            continue
        break
    else:
        pytest.skip("this file system did not reuse the journal's inode")
    for _ in range(3):
        commit()
        commit("ex-2")
        follow()
    truth = FileStore(disk_tmp_path / "store").history(limit=10_000)
    assert [e.seq for e in seen] == [e.seq for e in truth]


# -- read-only and foreign stores change nothing -----------------------------------------


def test_E7_a_read_only_file_store_creates_nothing(tmp_path: Path) -> None:
    FileStore(tmp_path / "store")  # a store nobody has written to yet: only .format
    before = sorted(os.listdir(tmp_path / "store"))
    reader = FileStore(tmp_path / "store", read_only=True)
    reader.list()
    reader.history()  # takes the shared lock by creating .lock (os.open O_CREAT)
    assert sorted(os.listdir(tmp_path / "store")) == before


def test_D2_sqlite_store_does_not_take_over_a_database_that_is_not_a_store(tmp_path: Path) -> None:
    # Pointed (not read-only) at an application's SQLite file, SqliteStore adds its nine
    # tables and a meta row to it, switches it to WAL and chmods it 0600, instead of
    # refusing it like read_only=True does ("a SQLite database, but not a mainspring store").
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(StorageError, match="not a mainspring store"):
        SqliteStore(path).close()
    db = sqlite3.connect(path)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert tables == {"users"}


def test_D2_sqlite_store_of_a_newer_layout_is_refused_without_being_changed(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('schema_version', '4')")
    db.commit()
    db.close()
    os.chmod(path, 0o640)
    with pytest.raises(StorageError, match="upgrade mainspring"):
        SqliteStore(path)
    db = sqlite3.connect(path)
    mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    db.close()
    assert mode == "delete"  # PRAGMA journal_mode=WAL ran before the layout check
    assert path.stat().st_mode & 0o777 == 0o640


# -- a commit costs what changed --------------------------------------------------------


# -- compaction --------------------------------------------------------------------------


def test_D3_a_file_store_compaction_never_fails_a_commit_that_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Compaction writes the snapshot in frames of about 512 KiB (_file._CHUNK) whatever
    # max_bytes is, and only an OSError from it is swallowed: with max_bytes=100_000 the
    # first compaction raises TooLarge out of commit_run *after* the commit was
    # appended and fsynced. The caller is told the commit failed though it is durable, and
    # every later commit does the same (each durable, each raising): the run is wedged.
    monkeypatch.setattr(file_module, "_COMPACT_AT", 2_000)
    store = FileStore(tmp_path / "store", max_bytes=100_000)
    store.create(execution_storage_v2(status="running"))
    lease = store.acquire("ex-1", "a:1:x", ttl=600).lease
    observations: list[Observation] = []
    for n in range(12):
        observations.append(Observation(step_id=f"s{n}", ok=True, output="x" * 20_000))
        record = execution_storage_v2(
            status="running", lease=lease, observations=tuple(observations), calls_used=n
        )
        try:
            outcome = store.commit_run(record, "a:1:x")
        except StorageError:
            stored = FileStore(tmp_path / "store", max_bytes=100_000).get("ex-1")
            assert stored is not None
            assert stored.calls_used != n, "refused, yet durable"
            raise
        assert outcome.ok


# -- migration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param({"agent_tasks": ({"id": "t1", "state": "running"},)}, id="task-without-inner"),
        pytest.param({"completed_steps": ("a", "a")}, id="completed-twice"),
    ],
)
def test_migrate_is_not_blocked_by_one_record_v2_cannot_store_as_it_is(
    tmp_path: Path, odd: dict[str, Any]
) -> None:
    # migrate_store creates each 0.1 execution in the v2 store and requires it to read back
    # equal; a record v2 changes on the way (see the round-trip tests above) stops the
    # whole migration ("does not read back ... as it was"), so the store can be neither
    # migrated nor opened (StoreNeedsMigration). It should migrate, or be reported as a
    # Problem kept in the backup while the others migrate.
    from mainspring.storage import migrate_store
    from mainspring.storage._seam import encode

    path = tmp_path / "store"
    path.mkdir(mode=0o700)
    (path / ".lock").write_bytes(b"")
    (path / "ok.json").write_bytes(encode(execution_storage_v2("ok")))
    (path / "odd.json").write_bytes(encode(execution_storage_v2("odd", **odd)))
    report = migrate_store(path)
    assert report.migrated + len(report.problems) == 2
    assert FileStore(path).get("ok") == execution_storage_v2("ok")


def test_D2_a_file_store_of_a_newer_layout_is_refused_without_being_changed(tmp_path: Path) -> None:
    # FileStore makes the directory 0700 (mkdir + chmod) before it reads .format, so a
    # store it refuses ("upgrade mainspring to open it") has its mode changed anyway.
    path = tmp_path / "store"
    path.mkdir(mode=0o750)
    os.chmod(path, 0o750)
    (path / ".format").write_bytes(b'{"layout": 4}')
    with pytest.raises(StorageError, match="upgrade mainspring"):
        FileStore(path)
    assert path.stat().st_mode & 0o777 == 0o750


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE executions SET head = 5 WHERE id = 'bad'",
        "INSERT INTO observations VALUES ('bad', 'k', 0, 7)",
    ],
)
def test_E7_sqlite_a_row_that_is_not_a_blob_is_a_problem_not_a_crash(
    tmp_path: Path, statement: str
) -> None:
    # SqliteStore._loads calls len(body) before anything else: an INTEGER body (a damaged or
    # hand-edited database) raises TypeError out of list(), get() and history(), so one bad
    # row hides every other execution (and `mainspring list` dies with a traceback).
    path = tmp_path / "mainspring.db"
    store = SqliteStore(path)
    store.create(execution_storage_v2("bad"))
    store.create(execution_storage_v2("ok"))
    store.close()
    db = sqlite3.connect(path)
    db.execute(statement)
    db.commit()
    db.close()
    fresh = SqliteStore(path)
    try:
        listing = fresh.list()
        assert [e.id for e in listing.executions] == ["ok"]
        assert [p.id for p in listing.problems] == ["bad"]
        with pytest.raises(StorageError):
            fresh.get("bad")
    finally:
        fresh.close()


def test_E7_sqlite_a_history_row_that_is_not_a_blob_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "mainspring.db"
    store = SqliteStore(path)
    store.create(execution_storage_v2("ok"))
    store.close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO events (execution_id, eseq, body) VALUES ('ok', 2, 3)")
    db.commit()
    db.close()
    fresh = SqliteStore(path)
    try:
        with pytest.raises(StorageError):
            fresh.history()
    finally:
        fresh.close()


# -- the timeline: lease entries in the history (V2) ---------------------------------------


def _timeline(store: Store, execution_id: str = "ex-1") -> list[tuple[Any, ...]]:
    kinds = ("takeover", "crash", "lapse", "shutdown")
    return [
        (e.kind, e.owner, e.previous_owner, e.reason)
        for e in store.history(execution_id)
        if e.kind in kinds
    ]


@EVERY_STORE
def test_V2_a_takeover_of_a_lapsed_lease_names_both_owners_and_the_lapse(
    make_store: Factory,
) -> None:
    clock = Clock()
    store = make_store(clock)
    a, b = "host:1:aaaa", "host:2:bbbb"
    store.create(
        execution(status="running", lease=ms.storage.Lease(owner=a, expires_at=0, epoch=1)),
        lease_ttl=30,
    )
    assert [(e.kind, e.owner) for e in store.history("ex-1")] == [("created", a)]
    clock.now += 20
    assert store.heartbeat("ex-1", a, 30)  # a heartbeat adds nothing
    assert _timeline(store) == []
    clock.now += 31  # a stops renewing: its lease lapses at 1,050
    taken = store.acquire("ex-1", b, ttl=30)
    assert taken.acquired
    entries = [e for e in store.history("ex-1") if e.kind in ("lapse", "takeover")]
    assert [(e.kind, e.owner, e.previous_owner, e.reason) for e in entries] == [
        ("lapse", a, None, "lease-expired"),
        ("takeover", b, a, "lease-expired"),
    ]
    lapse = entries[0]
    assert lapse.lapsed_at == 1_050.0
    assert lapse.last_seen == 1_020.0  # its last heartbeat: the expiry less a lease's length
    assert {e.at for e in entries} == {1_051.0}  # when the store decided it
    assert entries[0].execution_seq == entries[1].execution_seq  # one write
    # a lets go of a lease it no longer holds: nothing is written, no second entry.
    assert not store.release("ex-1", a)
    assert store.acquire("ex-1", b, ttl=30).acquired  # b again: no new tenure, no entry
    assert len(_timeline(store)) == 2


@EVERY_STORE
def test_V2_L7_a_gone_owners_lease_taken_over_is_a_crash_and_a_takeover(
    make_store: Factory,
) -> None:
    clock = Clock()
    store = make_store(clock)
    dead, a = "host:9:dead", "host:1:aaaa"
    store.create(execution(status="running"))
    seen = store.acquire("ex-1", dead, ttl=60).lease
    assert seen is not None
    assert _timeline(store) == []  # the first lease ever is taken from nobody
    clock.now += 5
    assert store.acquire("ex-1", a, ttl=10, gone=seen).acquired
    assert _timeline(store) == [
        ("crash", dead, None, "owner-gone"),
        ("takeover", a, dead, "owner-gone"),
    ]
    crash = store.history("ex-1")[-2]
    assert (crash.lapsed_at, crash.at) == (1_060.0, 1_005.0)


@EVERY_STORE
def test_V2_a_run_that_lets_its_lease_go_while_live_says_shutdown_once(
    make_store: Factory,
) -> None:
    clock = Clock()
    store = make_store(clock)
    a, b = "host:1:aaaa", "host:2:bbbb"
    store.create(execution())
    lease = store.acquire("ex-1", a, ttl=30).lease
    assert lease is not None
    running = execution(status="running", lease=lease)
    assert store.commit_run(running, a).ok
    released = attrs.evolve(
        running, lease=ms.storage.Lease(owner="", expires_at=0, epoch=lease.epoch)
    )
    assert store.commit_run(released, a).ok  # a runtime closing: the run stays running
    assert _timeline(store) == [("shutdown", a, None, None)]
    assert store.history("ex-1")[-1].status == "running"
    assert store.acquire("ex-1", b, ttl=30).acquired
    assert _timeline(store)[1:] == [("takeover", b, None, "after-shutdown")]


@EVERY_STORE
def test_V2_a_pause_or_an_end_that_releases_is_no_shutdown_and_a_resume_says_after_pause(
    make_store: Factory,
) -> None:
    store = make_store(Clock())
    a, b = "host:1:aaaa", "host:2:bbbb"
    for name, status in (("p", "paused"), ("w", "waiting_for_clarification"), ("c", "completed")):
        store.create(execution(name))
        lease = store.acquire(name, a, ttl=30).lease
        assert lease is not None
        free = ms.storage.Lease(owner="", expires_at=0, epoch=lease.epoch)
        assert store.commit_run(execution(name, status=status, lease=free), a).ok
        assert _timeline(store, name) == []
    assert store.acquire("p", b, ttl=30).acquired
    assert store.acquire("w", b, ttl=30).acquired
    assert _timeline(store, "p") == [("takeover", b, None, "after-pause")]
    assert _timeline(store, "w") == [("takeover", b, None, "released")]


@EVERY_STORE
def test_V2_L4_an_owner_that_lets_go_of_a_lease_that_lapsed_says_lapse(
    make_store: Factory,
) -> None:
    clock = Clock()
    store = make_store(clock)
    a = "host:1:aaaa"
    store.create(execution(status="running"))
    assert store.acquire("ex-1", a, ttl=30).acquired
    assert store.release("ex-1", a)  # let go in time: nothing to say
    assert _timeline(store) == []
    assert store.acquire("ex-1", a, ttl=30).acquired
    assert _timeline(store) == [("takeover", a, None, "after-shutdown")]
    clock.now += 40  # nobody took it; its owner finds out and lets it go
    assert store.release("ex-1", a)
    assert _timeline(store)[1:] == [("lapse", a, None, "lease-expired")]
    assert store.history("ex-1")[-1].lapsed_at == 1_030.0


def test_the_written_contract_names_the_layout_it_describes() -> None:
    # help(Store) is the contract a backend author reads: its first line names the storage
    # layout this mainspring writes, and every backend's docstring agrees with it.
    from mainspring.storage._backends.sqlite.schema import SCHEMA_VERSION

    current = f"storage v{SCHEMA_VERSION}"
    first = (Store.__doc__ or "").splitlines()[0]
    assert current in first, first
    for backend in (file_module, ms.storage._backends.sqlite.store, PostgresStore):
        opening = (inspect.getmodule(backend).__doc__ or "").splitlines()[0]  # type: ignore[union-attr]
        assert "storage v" not in opening or current in opening, opening


@EVERY_STORE
def test_V2_a_takeover_after_an_owner_let_a_lapsed_lease_go_says_lease_expired(
    make_store: Factory,
) -> None:
    # Its owner stalled past its lease and let it go (a lapse): the next tenure says the
    # lease expired, never that a runtime shut down (there was no shutdown).
    clock = Clock()
    store = make_store(clock)
    a, b = "host:1:aaaa", "host:2:bbbb"
    store.create(execution(status="running"))
    assert store.acquire("ex-1", a, ttl=30).acquired
    clock.now += 40
    assert store.release("ex-1", a)
    assert store.acquire("ex-1", b, ttl=30).acquired
    assert _timeline(store) == [
        ("lapse", a, None, "lease-expired"),
        ("takeover", b, None, "lease-expired"),
    ]
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.lease is not None
    assert stored.lease.owner == b
