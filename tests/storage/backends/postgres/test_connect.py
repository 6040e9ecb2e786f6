"""L6: no PostgreSQL session of a store holds a row lock past a bound, against the real server.

A store's sessions carry server-side timeouts (``idle_in_transaction_session_timeout``,
``lock_timeout``, optionally ``statement_timeout``), and every transaction is synced before
the store does anything else, so a host frozen or cut off mid-transaction is, to the server,
a session idle in a transaction: it is ended within the bound and its row locks go with it.
A host waiting for such a lock waits a ``lock_timeout`` at a time and tries again, and the
caller can give up at any moment.
"""

from __future__ import annotations

import threading
import time

import anyio
import anyio.to_thread
import psycopg
import pytest

import mainspring as ms
from mainspring.storage import Execution, Lease
from mainspring.storage._backends.postgres.store import PostgresStore
from tests._postgres import postgres_store_url

__all__ = ["postgres_store_url"]  # the fixture, used by name

pytestmark = pytest.mark.anyio

ID = "ex-locked"


def _seed(url: str) -> None:
    """A running execution whose lease lapsed long ago: any host may take it over."""
    store = PostgresStore(url)
    try:
        now = store.now()
        record = Execution(
            id=ID,
            goal="locked",
            status="running",
            lease=Lease(owner="gone:1:x", expires_at=now - 100.0, epoch=1),
            created_at=now - 200.0,
            updated_at=now - 200.0,
        )
        assert store.create(record)
    finally:
        store.close()


@pytest.fixture
def seeded(postgres_store_url: str) -> str:
    _seed(postgres_store_url)
    return postgres_store_url


def test_l6_a_store_session_has_its_server_side_timeouts_in_effect(postgres_store_url: str) -> None:
    store = PostgresStore(
        postgres_store_url, session_timeout=3.0, lock_timeout=0.75, statement_timeout=40.0
    )
    try:
        with store._connections.reading() as conn:
            shown = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]
                for name in (
                    "idle_in_transaction_session_timeout",
                    "lock_timeout",
                    "statement_timeout",
                )
            }
    finally:
        store.close()
    assert shown == {
        "idle_in_transaction_session_timeout": "3s",
        "lock_timeout": "750ms",
        "statement_timeout": "40s",
    }


def test_l6_the_url_s_own_options_are_kept_beside_the_store_s_timeouts(
    postgres_store_url: str,
) -> None:
    url = f"{postgres_store_url}&options=-c%20work_mem%3D8MB%20-c%20lock_timeout%3D5s"
    store = PostgresStore(url)
    try:
        with store._connections.reading() as conn:
            work_mem = conn.execute("SHOW work_mem").fetchone()[0]
            lock = conn.execute("SHOW lock_timeout").fetchone()[0]
            idle = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0]
    finally:
        store.close()
    assert (work_mem, lock, idle) == ("8MB", "5s", "5s")  # the URL's lock_timeout wins


class Frozen(threading.Thread):
    """A host frozen mid-transaction: its store locks the execution's row (the first query
    of a write transaction) and then its thread stops, as in a GC pause or a frozen VM,
    until ``thaw``."""

    def __init__(self, url: str, session_timeout: float) -> None:
        super().__init__(daemon=True)
        self.store = PostgresStore(url, session_timeout=session_timeout)
        self.locked = threading.Event()
        self.thawed = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.store._atomic():
                self.store._prepare([ID])
                self.locked.set()
                self.thawed.wait(120)
        except BaseException as exc:  # the session was ended under it: expected
            self.error = exc

    def thaw(self) -> None:
        self.thawed.set()
        self.join(60)
        self.store.close()


async def test_l6_a_host_frozen_holding_a_row_lock_loses_it_and_another_host_resumes(
    seeded: str,
) -> None:
    """Host A locks the run's row and freezes. On today's pipelined lock the server sees
    A's session as active (not idle in a transaction), no timeout ends it, and B's resume
    waits for as long as A is frozen. Synced, A's session is ended after its
    ``session_timeout`` (1 s) and B takes the run over."""
    frozen = Frozen(seeded, session_timeout=1.0)
    frozen.start()
    try:
        assert await anyio.to_thread.run_sync(frozen.locked.wait, 30)
        async with ms.open_runtime(store=seeded, lease_ttl=5.0) as b:
            with anyio.fail_after(30):  # far beyond the bound; the frozen host waits 120 s
                handle = await b.resume(ID)
                result = await handle.wait()
            record = await b.get(ID)
    finally:
        await anyio.to_thread.run_sync(frozen.thaw)
    assert record is not None
    assert record.lease is not None
    assert record.lease.epoch == 2  # B's tenure
    assert result.execution_id == ID


async def test_l6_a_resume_waiting_for_a_row_lock_is_cancelled_promptly(
    seeded: str,
) -> None:
    """A session outside the library holds the run's row lock and keeps it (no timeout of
    ours applies to it). A resume that waits for it ends as soon as its caller cancels it,
    and the runtime's writer stops waiting within a bound (its ``lock_timeout``, retried
    within its ``reconnect_timeout``): the runtime closes."""
    holder = psycopg.connect(seeded.split("?")[0])
    schema = seeded.split("schema=")[1]
    holder.execute(f'SELECT 1 FROM "{schema}".executions WHERE id = %s FOR UPDATE', (ID,))
    try:
        store = PostgresStore(seeded, lock_timeout=0.5, reconnect_timeout=2.0)
        began = time.monotonic()
        async with ms.open_runtime(store=store, lease_ttl=5.0) as b:
            with anyio.move_on_after(1.0) as scope:
                await b.resume(ID)
            assert scope.cancelled_caught
            cancelled_in = time.monotonic() - began
        closed_in = time.monotonic() - began
    finally:
        holder.close()
    assert cancelled_in < 20.0, cancelled_in  # promptly: not when the holder lets go
    # A waiter with no lock_timeout would keep the runtime from closing for as long as
    # the holder keeps its lock; this one gives up after ~2 s of waits.
    assert closed_in < 30.0, closed_in


def test_l6_a_url_setting_deadlock_timeout_keeps_the_store_s_lock_timeout(
    postgres_store_url: str,
) -> None:
    """A setting is matched by its whole name: ``deadlock_timeout`` in the URL's options
    once passed for ``lock_timeout`` (a substring), and the lock wait was left unbounded."""
    url = f"{postgres_store_url}&options=-c%20deadlock_timeout%3D2s"
    store = PostgresStore(url, lock_timeout=0.75)
    try:
        with store._connections.reading() as conn:
            deadlock = conn.execute("SHOW deadlock_timeout").fetchone()[0]
            lock = conn.execute("SHOW lock_timeout").fetchone()[0]
    finally:
        store.close()
    assert (deadlock, lock) == ("2s", "750ms")


def test_l6_pgoptions_from_the_environment_are_kept_beside_the_store_s_timeouts(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq reads PGOPTIONS only when no options are given; the store's own options once
    replaced it, silently dropping what the operator set (and a lock_timeout set there)."""
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=8MB -c lock_timeout=5s")
    store = PostgresStore(postgres_store_url)
    try:
        with store._connections.reading() as conn:
            work_mem = conn.execute("SHOW work_mem").fetchone()[0]
            lock = conn.execute("SHOW lock_timeout").fetchone()[0]
            idle = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0]
    finally:
        store.close()
    assert (work_mem, lock, idle) == ("8MB", "5s", "5s")


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("lock_timeout", float("inf"), ValueError),
        ("lock_timeout", 1e10, ValueError),  # past the server's INT_MAX milliseconds
        ("session_timeout", float("nan"), ValueError),
        ("statement_timeout", float("inf"), ValueError),
        ("connect_timeout", float("nan"), ValueError),
        ("connect_timeout", -1, ValueError),
        ("connect_timeout", "3", TypeError),
        ("reconnect_timeout", -5, ValueError),
        ("reconnect_timeout", float("nan"), ValueError),
        ("reconnect_timeout", float("inf"), ValueError),
        ("pool_size", True, ValueError),
        ("max_bytes", -1, ValueError),
        ("max_record_bytes", 0, ValueError),
    ],
)
def test_l6_postgres_store_refuses_a_bad_bound_before_it_connects(
    option: str, value: object, error: type[Exception]
) -> None:
    """A bound that cannot hold (infinite, not a number, negative, beyond what the server
    accepts) is a typed error naming it, raised before any connection: once an
    OverflowError, a StorageError "cannot reach PostgreSQL", or a store that never waited."""
    with pytest.raises(error, match=option):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", **{option: value})


def test_l6_a_statement_timeout_shorter_than_a_lock_wait_is_waited_out_not_a_refusal(
    seeded: str,
) -> None:
    """With ``statement_timeout`` shorter than ``lock_timeout``, a wait for a row lock ends
    by the statement timeout (SQLSTATE 57014), not ``lock_not_available``. The transaction
    was rolled back, so the call is tried again like any lock wait; before, it was taken
    for the server refusing the write (StorageError: a runner's record "unstorable")."""
    holder = psycopg.connect(seeded.split("?")[0])
    schema = seeded.split("schema=")[1]
    holder.execute(f'SELECT 1 FROM "{schema}".executions WHERE id = %s FOR UPDATE', (ID,))
    let_go = threading.Timer(1.5, holder.commit)
    store = PostgresStore(seeded, statement_timeout=0.3, lock_timeout=2.0, reconnect_timeout=30)
    try:
        let_go.start()
        result = store.acquire(ID, "host-b", 5.0)
    finally:
        let_go.join()
        holder.close()
        store.close()
    assert result.acquired, result


def test_l6_a_statement_timeout_that_never_clears_is_store_unavailable_in_bound(
    seeded: str,
) -> None:
    """A lock held past ``reconnect_timeout`` under a short ``statement_timeout``: the call
    gives up within its bound with StoreUnavailable (nothing written), never a refusal."""
    holder = psycopg.connect(seeded.split("?")[0])
    schema = seeded.split("schema=")[1]
    holder.execute(f'SELECT 1 FROM "{schema}".executions WHERE id = %s FOR UPDATE', (ID,))
    store = PostgresStore(seeded, statement_timeout=0.2, lock_timeout=2.0, reconnect_timeout=1.0)
    try:
        began = time.monotonic()
        with pytest.raises(ms.storage.StoreUnavailable, match="statement_timeout"):
            store.acquire(ID, "host-b", 5.0)
        assert time.monotonic() - began < 20
    finally:
        holder.close()
        store.close()
