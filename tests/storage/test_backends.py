"""One contract, run against every backend: reads, leases (L1-L3), commits (E2), ids (X1),
size bounds (X2), corrupt data (E7) and file modes."""

from __future__ import annotations

import os
import random
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import mainspring as ms
from mainspring.storage._backends.contract import CommitOutcome, Store, new_owner_id
from mainspring.storage._backends.file.frames import encode_frame
from mainspring.storage._backends.file.store import FileStore
from mainspring.storage._backends.postgres.store import PostgresStore
from mainspring.storage._backends.sqlite.store import SqliteStore
from mainspring.storage._journal.model import Base
from mainspring.testing import MemoryStore
from tests._postgres import (
    drop_schema,
    fresh_schema,
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
    if request.param == "postgres":
        url = require_server()
        schema = fresh_schema()

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
    for store in made:
        if isinstance(store, SqliteStore | PostgresStore):
            store.close()
    if schema:
        drop_schema(schema)


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
    assert "test_backends.py" in doc
    assert "Store" in (ms.storage.__doc__ or "")  # the package docstring points to it


@pytest.mark.parametrize("store_class", [FileStore, SqliteStore, PostgresStore])
def test_a_store_holds_its_memory_and_evidence_rather_than_inheriting_them(
    store_class: type,
) -> None:
    from mainspring.storage._backends.compare_and_set import CompareAndSetStore

    assert store_class.__bases__ == (CompareAndSetStore,)
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
        assert name in vars(store_class), f"{store_class.__name__}.{name} is not its own"


def test_every_store_keeps_memory_and_evidence(make_store: Factory) -> None:
    store = make_store()
    assert isinstance(store, ms.storage._seam.MemoryBackend)
    assert isinstance(store, ms.storage._seam.EvidenceStore)
    assert store.memory_count() == 0  # type: ignore[attr-defined]
