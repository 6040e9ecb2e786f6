"""PostgreSQL: a run's last write (a pause) meets a row lock another connection holds for
longer than the stop's time (E2): the runner's wind-down is cut short while its write waits.
What ``pause`` and the handle's ``wait`` return must be where the run stands on the store
once the lock is let go."""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest

import mainspring as ms

from .._postgres import postgres_url, server_url  # noqa: F401 - a fixture

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # it waits out lock timeouts

_entered: dict[str, anyio.Event] = {}


async def _block(x: int = 0) -> int:
    if x == 1 and "gate" in _entered and not _entered["gate"].is_set():
        _entered["gate"].set()
        await anyio.sleep_forever()
    return x + 1


PLAN = ms.Plan(
    id="locked",
    goal="a pause under a held row lock",
    steps=(
        ms.PlanStep(id="a", tool="inc", input={"x": 0}),
        ms.PlanStep(id="b", tool="inc", input={"x": 1}),
    ),
)


def _lock_waits(conn: Any, schema: str, want: int) -> None:
    """Return once the runtime's sessions were seen waiting for a row lock ``want`` times
    (each wait ends at lock_timeout and the store tries again)."""
    seen: set[Any] = set()
    deadline = time.monotonic() + 60
    while len(seen) < want and time.monotonic() < deadline:
        rows = conn.execute(
            "SELECT pid, query_start FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE %s",
            (f"%{schema}%",),
        ).fetchall()
        seen.update(rows)
        time.sleep(0.05)


async def test_E2_a_pause_whose_write_waited_for_a_row_lock_returns_the_stored_status(
    postgres_url: str,  # noqa: F811
) -> None:
    schema = postgres_url.rsplit("schema=", 1)[1].split("&")[0]
    _entered["gate"] = anyio.Event()
    holder = await anyio.to_thread.run_sync(lambda: psycopg.connect(server_url()))
    watcher = await anyio.to_thread.run_sync(lambda: psycopg.connect(server_url(), autocommit=True))
    try:
        async with ms.open_runtime(
            store=postgres_url, tools={"inc": _block}, lease_ttl=120.0, heartbeat_interval=60.0
        ) as rt:
            handle = await rt.start("locked", PLAN, execution_id="ex-locked")
            with anyio.fail_after(30):
                await _entered["gate"].wait()
            await anyio.to_thread.run_sync(
                lambda: holder.execute(
                    f'SELECT 1 FROM "{schema}".executions WHERE id = %s FOR UPDATE',
                    ("ex-locked",),
                )
            )
            async with anyio.create_task_group() as tg:

                async def release() -> None:
                    await anyio.to_thread.run_sync(_lock_waits, watcher, schema, 4)
                    await anyio.to_thread.run_sync(holder.rollback)

                tg.start_soon(release)
                with anyio.fail_after(90):
                    paused = await rt.pause("ex-locked", reason="held")
            with anyio.fail_after(30):
                result = await handle.wait()
            stored = await rt.get("ex-locked")
            assert stored is not None
            assert stored.status == "paused"
            # Returned where the run stands: the store says paused, so must the answer.
            assert paused.status == stored.status, (paused.status, paused.error)
            assert result.status == stored.status, (result.status, result.error)
    finally:
        holder.close()
        watcher.close()
        _entered.pop("gate", None)
