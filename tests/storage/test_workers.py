"""Issue #17's worker records in storage v2, on every backend: workers, worker tasks and the
diagnostic trail are keyed parts (a commit writes what changed, the trail's oldest entries
leave one row each), read back exactly, and records that do not parse are kept as they are
and dropped from the view (E7, E8)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import mainspring as ms
from mainspring.storage._backends.contract import Store
from mainspring.storage._backends.file.store import FileStore
from mainspring.storage._backends.postgres.store import PostgresStore
from mainspring.storage._backends.sqlite.store import SqliteStore
from mainspring.storage._journal.model import Base, diff
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

Factory = Callable[[], Store]
OWNER = "host:1:aaaa"
DIGEST = "ab" * 32


@pytest.fixture(params=["file", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    made: list[Any] = []
    schema = ""
    url = ""
    if request.param == "postgres":
        url = require_server()
        schema = fresh_schema()

    def make() -> Store:
        store: Any
        if request.param == "file":
            store = FileStore(tmp_path / "store")
        elif request.param == "postgres":
            store = PostgresStore(with_schema(url, schema))
        else:
            store = SqliteStore(tmp_path / "store" / "mainspring.db")
        made.append(store)
        return store  # type: ignore[no-any-return]

    make.kind = request.param  # type: ignore[attr-defined]
    yield make
    for store in made:
        if isinstance(store, SqliteStore | PostgresStore):
            store.close()
    if schema:
        drop_schema(schema)


def worker(n: int, **changes: Any) -> dict[str, Any]:
    record = ms.storage.WorkerRecord(
        id=f"w-{n}",
        task_id=f"t-{n}",
        step_id="s-1",
        agent_id="coder",
        created_at=1.0,
        updated_at=1.0,
    )
    raw: dict[str, Any] = ms.storage._seam.unstructure(record)
    return raw | changes


def worker_task(n: int, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = ms.storage._seam.unstructure(
        ms.storage.WorkerTask(id=f"t-{n}", step_id="s-1", updated_at=1.0)
    )
    return raw | changes


def entry(seq: int) -> dict[str, Any]:
    raw: dict[str, Any] = ms.storage._seam.unstructure(
        ms.storage.TrailEntry(
            seq=seq,
            at=float(seq),
            worker_id="w-1",
            generation=1,
            event="heartbeat",
            status="running",
            detail=f"{seq:064x}"[:64],
        )
    )
    return raw


def execution(**fields: Any) -> ms.storage.Execution:
    base: dict[str, Any] = {"goal": "fleet", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id="ex-1", **(base | fields))


def started(store: Store, first: ms.storage.Execution) -> None:
    assert store.create(first)
    assert store.acquire(first.id, OWNER, ttl=600).acquired


def commit(store: Store, version: ms.storage.Execution) -> None:
    assert store.commit_run(version, OWNER) is ms.storage._seam.CommitOutcome.OK


def same(got: ms.storage.Execution | None, want: ms.storage.Execution) -> None:
    assert got is not None
    assert got.workers == want.workers
    assert got.worker_tasks == want.worker_tasks
    assert got.worker_trail == want.worker_trail
    assert got.proof_digest == want.proof_digest


# -- through every backend ------------------------------------------------------------------


def test_workers_tasks_and_trail_read_back_exactly_after_reopen(make_store: Factory) -> None:
    store = make_store()
    first = execution(workers=(worker(1),), worker_tasks=(worker_task(1),))
    started(store, first)
    version = first
    for n in range(2, 6):
        version = attrs.evolve(
            version,
            workers=(*version.workers[:-1], worker(n - 1, status="running"), worker(n)),
            worker_tasks=(*version.worker_tasks, worker_task(n, state="running")),
            worker_trail=(*version.worker_trail, entry(n)),
            proof_digest=DIGEST,
        )
        commit(store, version)
        same(store.get("ex-1"), version)
    again = make_store()  # a new store object reads what is stored, not a cache
    same(again.get("ex-1"), version)
    assert [w.id for w in version.workers] == ["w-1", "w-2", "w-3", "w-4", "w-5"]  # type: ignore[union-attr]
    parsed, dropped = ms.storage._seam.parse_workers(again.get("ex-1").workers)  # type: ignore[union-attr]
    assert dropped == 0
    assert [w.status for w in parsed] == ["running"] * 4 + ["assigned"]


def test_the_bounded_trail_keeps_the_last_entries_in_order(make_store: Factory) -> None:
    store = make_store()
    window = 40  # the execution layer bounds the trail (MAX_TRAIL); storage keeps what it gets
    version = execution()
    started(store, version)
    for seq in range(1, 101):
        version = attrs.evolve(version, worker_trail=(*version.worker_trail, entry(seq))[-window:])
        commit(store, version)
    same(store.get("ex-1"), version)
    same(make_store().get("ex-1"), version)
    assert [e.seq for e in version.worker_trail] == list(range(61, 101))  # type: ignore[union-attr]


def test_an_unparsable_worker_is_kept_as_stored_and_dropped_from_the_view(
    make_store: Factory,
) -> None:
    store = make_store()
    bad = {"v": 1, "id": "w-2", "status": "dancing"}  # does not parse as a WorkerRecord
    nameless = {"note": "no id at all"}
    first = execution(workers=(worker(1), bad, worker(3)))
    started(store, first)
    same(store.get("ex-1"), first)
    parsed, dropped = ms.storage._seam.parse_workers(store.get("ex-1").workers)  # type: ignore[union-attr]
    assert ([w.id for w in parsed], dropped) == (["w-1", "w-3"], 1)
    # A record with no id and a repeated id: the part is stored by position, as it is.
    second = attrs.evolve(first, workers=(worker(1), nameless, worker(1), worker(3)))
    commit(store, second)
    same(make_store().get("ex-1"), second)
    parsed, dropped = ms.storage._seam.parse_workers(make_store().get("ex-1").workers)  # type: ignore[union-attr]
    assert ([w.id for w in parsed], dropped) == (["w-1", "w-1", "w-3"], 1)
    # Back to good records: keyed again, one at a time from then on.
    third = attrs.evolve(second, workers=(worker(1), worker(3)))
    commit(store, third)
    fourth = attrs.evolve(third, workers=(worker(1), worker(3, status="running")))
    commit(store, fourth)
    same(make_store().get("ex-1"), fourth)


def test_one_changed_worker_writes_one_row_and_a_trail_append_two(tmp_path: Path) -> None:
    # Rows are counted on SQLite; every backend stores the same changes (see the diff test).
    store = SqliteStore(tmp_path / "mainspring.db")
    workers = tuple(worker(n) for n in range(50))
    trail = tuple(entry(seq) for seq in range(1, ms.storage._seam.MAX_TRAIL + 1))
    version = execution(workers=workers, worker_trail=trail)
    started(store, version)
    written: list[str] = []
    store._db.set_trace_callback(written.append)
    try:
        for seq in range(ms.storage._seam.MAX_TRAIL + 1, ms.storage._seam.MAX_TRAIL + 41):
            written.clear()
            changed = list(version.workers)
            changed[seq % 50] = worker(seq % 50, status="running", updated_at=float(seq))
            version = attrs.evolve(
                version,
                workers=tuple(changed),
                worker_trail=(*version.worker_trail, entry(seq))[-ms.storage._seam.MAX_TRAIL :],
            )
            commit(store, version)
            touched = [s for s in written if " workers " in s or " worker_trail " in s]
            # one worker upserted; one trail entry inserted and the oldest one deleted
            assert len(touched) == 3, touched
    finally:
        store._db.set_trace_callback(None)
    count = store._db.execute("SELECT count(*) FROM worker_trail").fetchone()[0]
    assert count == ms.storage._seam.MAX_TRAIL
    same(SqliteStore(store.path).get("ex-1"), version)
    store.close()


def test_a_journal_grows_by_what_a_trail_append_adds(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    trail = tuple(entry(seq) for seq in range(1, ms.storage._seam.MAX_TRAIL + 1))
    version = execution(worker_trail=trail)
    started(store, version)
    journal = tmp_path / "store" / "ex-1.journal"
    growth: list[int] = []
    for seq in range(ms.storage._seam.MAX_TRAIL + 1, ms.storage._seam.MAX_TRAIL + 21):
        before = journal.stat().st_size
        version = attrs.evolve(
            version, worker_trail=(*version.worker_trail, entry(seq))[-ms.storage._seam.MAX_TRAIL :]
        )
        commit(store, version)
        growth.append(journal.stat().st_size - before)
    assert max(growth) < 2_000  # one entry and one dropped key, not 2,000 entries (~400 KB)
    same(FileStore(tmp_path / "store").get("ex-1"), version)


def test_a_full_trail_stays_bounded_on_every_backend(make_store: Factory) -> None:
    store = make_store()
    trail = tuple(entry(seq) for seq in range(1, ms.storage._seam.MAX_TRAIL + 1))
    version = execution(worker_trail=trail)
    started(store, version)
    for seq in range(ms.storage._seam.MAX_TRAIL + 1, ms.storage._seam.MAX_TRAIL + 11):
        version = attrs.evolve(
            version, worker_trail=(*version.worker_trail, entry(seq))[-ms.storage._seam.MAX_TRAIL :]
        )
        commit(store, version)
    got = make_store().get("ex-1")
    same(got, version)
    assert got is not None
    assert got.worker_trail[0].seq == 11  # type: ignore[union-attr]
    if isinstance(store, PostgresStore):
        rows = store._retrying(_pg_count, store)
        assert rows == ms.storage._seam.MAX_TRAIL


def _pg_count(store: PostgresStore) -> int:
    with store._connections.reading() as conn:
        return int(conn.execute(f"SELECT count(*) FROM {store._s}.worker_trail").fetchone()[0])


def test_an_older_sqlite_store_gets_the_worker_tables_on_open(tmp_path: Path) -> None:
    path = tmp_path / "mainspring.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as db:  # as a store made before the worker tables
        for table in ("workers", "worker_tasks", "worker_trail", "evidence"):
            db.execute(f"DROP TABLE {table}")
    reader = SqliteStore(path, read_only=True)  # reads, creating nothing
    assert reader.get("ex-1") is None
    reader.close()
    store = SqliteStore(path)
    first = execution(workers=(worker(1),), worker_trail=(entry(1),))
    started(store, first)
    same(store.get("ex-1"), first)
    store.close()


# -- the journal: what a commit changes ------------------------------------------------------


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
def test_diff_costs_what_changed_at_thousands_of_trail_entries() -> None:
    version = execution(
        workers=tuple(worker(n) for n in range(20)),
        worker_tasks=tuple(worker_task(n) for n in range(20)),
    )
    base = Base.of(version, 1, window=[])
    limit = ms.storage._seam.MAX_TRAIL
    for seq in range(1, limit + 500):
        new = attrs.evolve(version, worker_trail=(*version.worker_trail, entry(seq))[-limit:])
        if seq % 7 == 0:
            changed = list(new.workers)
            changed[seq % 20] = worker(seq % 20, repeats=seq)
            new = attrs.evolve(new, workers=tuple(changed))
        changes = diff(base, new)
        ops = [(c[0], c[1]) for c in changes if c[0] != "head"]
        assert ("reset", "worker_trail") not in ops
        assert ops.count(("put", "worker_trail")) == 1
        assert ops.count(("drop", "worker_trail")) == (1 if seq > limit else 0)
        dropped = [c[2] for c in changes if c[0] == "drop"]
        assert all(len(keys) == 1 for keys in dropped)
        assert ops.count(("put", "workers")) == (1 if seq % 7 == 0 else 0)
        assert ("put", "worker_tasks") not in ops
        base.advance(new, changes)
        version = new
    assert len(base.keys["worker_trail"]) == limit


def test_the_raw_parts_leave_the_head_and_the_record_while_empty() -> None:
    from mainspring.storage._journal.model import snapshot_changes

    plain = execution()
    raw = ms.storage._seam.unstructure(plain)
    for name in ("workers", "worker_tasks", "worker_trail", "proof_digest"):
        assert name not in raw  # stored exactly as before these fields existed
    head = snapshot_changes(execution(workers=(worker(1),), proof_digest=DIGEST))[0][1]
    assert "workers" not in head
    assert head["proof_digest"] == DIGEST
