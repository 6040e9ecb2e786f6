"""What a run's step costs on PostgreSQL beyond its one commit (issue #29): counted, never
timed. A cached run commit waits for the server once; a runtime's change feed does no work
between the notices it reads (psycopg's own timed wait spins its last millisecond, which
took as much CPU per commit as the commit itself); and leaving a pipeline, which is where a
transaction's last answers are read, reports the server's first refusal, not the "pipeline
aborted" of the statements it skipped after it (a stamp guard's miss, so answered,
is decided again by its SQLSTATE)."""

from __future__ import annotations

import select
import threading
from collections.abc import Generator
from typing import Any

import attrs
import psycopg
import psycopg.connection
import pytest

import mainspring as ms
from mainspring.storage._backends.postgres.connect import quiet_pipeline
from tests._postgres import postgres_url, server_url

__all__ = ["postgres_url"]  # the fixture, used by name

OWNER = "host-a:1:x"


@pytest.fixture
def store(postgres_url: str) -> Any:
    made = ms.storage.PostgresStore(postgres_url)
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
    store: ms.storage.PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten commits of a live run whose row this host wrote last, each with a step's
    observation: each sends BEGIN, its row lock and a Sync not waited for (L6), then its
    header and part row in one statement, its history and COMMIT, and waits once, as it
    leaves its pipeline: one round trip, two Syncs, nothing read before it writes."""
    assert store.create(ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0))
    assert store.acquire("ex-1", OWNER, 60.0).acquired
    live = store.get("ex-1")
    assert live is not None
    live = attrs.evolve(live, status="running")
    assert store.commit_runs([(live, OWNER)]) == (ms.storage._seam.CommitOutcome.OK,)
    counts = _syncs_and_statements(monkeypatch)
    for n in range(1, 11):
        seen = ms.storage.Observation(step_id=f"s{n}", ok=True, output=n)
        live = attrs.evolve(live, calls_used=n, observations=(*live.observations, seen))
        assert store.commit_runs([(live, OWNER)]) == (ms.storage._seam.CommitOutcome.OK,)
    assert counts["waited"] == 10
    assert counts["sent"] == 20
    # BEGIN, the row lock, the header with its part row (one statement: two before), COMMIT
    # (an observation adds no history entry).
    assert counts["statements"] == 40
    monkeypatch.undo()
    stored = store.get("ex-1")
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
    store: ms.storage.PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty notices, each sent and read before the next, then a wait that times out: the
    feed reads each with a few laps, never a busy wait (which laps hundreds of times a
    millisecond, and took a core's millisecond after every notice)."""
    feed = store.listen()
    laps = _counted_notifies(monkeypatch)
    try:
        with psycopg.connect(server_url(), autocommit=True) as conn:
            for n in range(20):
                conn.execute("SELECT pg_notify(%s, %s)", (store.channel, f"h {n + 1}"))
                notes: list[tuple[str, str]] = []
                while not notes:
                    notes = feed.wait(10.0)
                assert notes == [("history", str(n + 1))]
        assert feed.wait(0.05) == []
    finally:
        feed.close()
    assert laps[0] <= 20 * 5 + 10


def test_leaving_a_pipeline_reports_the_first_refusal_not_the_abort_after_it(
    postgres_url: str,
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


def test_the_feed_wakes_at_a_notice_from_another_thread(store: ms.storage.PostgresStore) -> None:
    """A wait that began before the notice was sent returns with it (the feed waits on its
    socket, not for its timeout)."""
    feed = store.listen()
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
            conn.execute("SELECT pg_notify(%s, 'c ex-9')", (store.channel,))
        thread.join(20.0)
        assert not thread.is_alive()
        assert got == [[("control", "ex-9")]]
    finally:
        feed.close()
        thread.join(30.0)
