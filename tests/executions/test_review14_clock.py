"""Review #14: leases on the server's clock, never a host's ("Use the database's clock for
lease expiry, never the hosts'", issue 14; L4 "whatever the writer's clock says")."""

from __future__ import annotations

import anyio
import anyio.to_thread
import pytest

import mainspring as ms

from .._postgres import (
    postgres_url,  # noqa: F401 - a fixture
    server_url,
)
from ._review14_host import Host

pytestmark = pytest.mark.anyio


async def test_a_host_whose_clock_is_an_hour_behind_can_still_run_a_plan(
    postgres_url: str,  # noqa: F811
) -> None:
    """Host A's wall clock is an hour slow; the server's is right. A starts a three-step plan
    of instant tools: nothing else touches the store, so it must complete. ``rt.start``
    writes the first lease as ``time.time() + lease_ttl`` on A's clock
    (executions/_runtime.py ``Lease(owner=..., expires_at=now + cfg.lease_ttl)``), which the
    server's clock sees as lapsed an hour ago: A's first commit is refused as a lost lease."""
    a = Host(postgres_url, "ex-skew", skew=-3600.0, block=False)
    try:
        line = await a.next_line()
    finally:
        await anyio.to_thread.run_sync(a.finish)
    assert line == "ended completed Stop"  # as every run that ends by itself


async def test_a_host_whose_clock_is_an_hour_ahead_leaves_no_hour_long_lease_behind(
    postgres_url: str,  # noqa: F811
) -> None:
    """Host A's clock is an hour fast. It starts a run and dies before its first heartbeat
    (SIGKILL while its first step is parked; a 60 s heartbeat). On the server's clock its
    lease must lapse after ``lease_ttl`` (120 s) — but the lease was written on A's clock, so
    it is live for an hour and two minutes: no ``recover()`` can take the orphan for an hour."""
    a = Host(postgres_url, "ex-ahead", skew=3600.0)
    try:
        assert await a.next_line() == "entered"
    finally:
        await anyio.to_thread.run_sync(a.finish)  # SIGKILL: A is gone

    def read() -> tuple[ms.storage.Execution | None, float]:
        store = ms.storage.PostgresStore(postgres_url)
        try:
            return store.get("ex-ahead"), server_clock()
        finally:
            store.close()

    record, server_now = await anyio.to_thread.run_sync(read)
    assert record is not None
    assert record.lease is not None
    # The lease may not outlive its ttl (120 s) on the server's clock.
    assert record.lease.expires_at <= server_now + 120.0 + 5.0


def server_clock() -> float:
    import psycopg

    with psycopg.connect(server_url()) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def _doctor(url: str, skew: float) -> tuple[int, str]:
    import subprocess
    import sys

    script = (
        "import sys, time; real = time.time; "
        f"time.time = lambda: real() + {skew!r}; "
        "from mainspring.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "doctor", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


async def test_mainspring_doctor_on_a_host_with_a_fast_clock_calls_a_live_run_orphaned(
    postgres_url: str,  # noqa: F811
) -> None:
    """Host A runs (its lease live on the server's clock for two minutes). ``mainspring
    doctor`` run on a host whose clock is an hour fast decides liveness on its own clock
    (cli/_reads.py ``_doctor``: ``holder(e.lease, time.time())``) and reports A's live run
    "orphaned", advising to resume it elsewhere."""
    a = Host(postgres_url, "ex-live")
    try:
        assert await a.next_line() == "entered"
        _, right = await anyio.to_thread.run_sync(_doctor, postgres_url, 0.0)
        _, fast = await anyio.to_thread.run_sync(_doctor, postgres_url, 3600.0)
    finally:
        await anyio.to_thread.run_sync(a.finish)
    assert "orphaned" not in right, right
    assert "orphaned" not in fast, fast
