"""Review of issue #14: the lease clock of a call that waited for a row lock (another host in
a transaction on the same execution). The store reads ``clock_timestamp()`` in the same
statement that locks the rows, but in the target list *before* the subqueries that wait for
the lock (``_postgres.py``, ``_lock_sql``): "now" is the time the call began waiting, not the
time it decided. A lease granted after the wait is then shorter than its ttl, or already
lapsed, and a heartbeat revives a lease that lapsed during the wait (L1, L2)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import mainspring as ms
from tests._postgres import postgres_url, server_url

__all__ = ["postgres_url"]  # a fixture

WAIT = 2.0  # how long the other host keeps the row locked (server seconds)


def _execution() -> ms.storage.Execution:
    return ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)


def _now(conn: psycopg.Connection[Any]) -> float:
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


@pytest.fixture
def store(postgres_url: str) -> Iterator[ms.storage.PostgresStore]:
    made = ms.storage.PostgresStore(postgres_url + "&application_name=rev14_lease_clock")
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
    store: ms.storage.PostgresStore,
) -> None:
    store.create(_execution())
    result, after = _behind_a_row_lock(store, lambda: store.acquire("ex-1", "a:1:x", 1.0))
    assert result.acquired
    # Decided after the lock was granted, the lease runs until (grant time + 1 s) > after - ...
    # at the least it must not have lapsed by the time acquire returned.
    assert result.lease.expires_at > after, (
        f"acquire returned a lease that had lapsed {after - result.lease.expires_at:.2f} s "
        "before it returned"
    )
    other = ms.storage.PostgresStore(store.address.conninfo, schema=store.schema)
    try:
        assert not other.acquire("ex-1", "b:1:y", 30.0).acquired  # L1: a's lease is live
    finally:
        other.close()


def test_L2_a_heartbeat_that_waited_for_the_row_does_not_revive_a_lapsed_lease(
    store: ms.storage.PostgresStore,
) -> None:
    store.create(_execution())
    granted = store.acquire("ex-1", "a:1:x", 1.0)
    assert granted.acquired
    with psycopg.connect(server_url()) as conn:
        assert _now(conn) < granted.lease.expires_at  # live when the heartbeat starts
    extended, after = _behind_a_row_lock(store, lambda: store.heartbeat("ex-1", "a:1:x", 30.0))
    assert after > granted.lease.expires_at  # it lapsed while the heartbeat waited
    assert extended is False, "a heartbeat revived a lease that lapsed before it decided"
