"""The view on a PostgreSQL store (a URL), which other hosts may be writing to: the list,
a run, its history stream, and a control reaching the store."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from mainspring.ui import serve
from tests._cli_kit import run_cli
from tests._postgres import drop_schema, fresh_schema, postgres_url, require_server, with_schema
from tests.ui._kit import client, fill, sse

__all__ = ["postgres_url"]  # a fixture

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_the_view_reads_and_steers_a_postgresql_store(postgres_url: str) -> None:
    await fill(postgres_url)
    async with serve(postgres_url) as ui, client(ui) as http:
        runs = (await http.get("/api/runs")).json()["runs"]
        assert {r["id"] for r in runs} == {"ex-fail", "ex-ok", "ex-ask"}
        view = (await http.get("/api/runs/ex-fail")).json()
        assert [s["status"] for s in view["plan"]["steps"]] == [
            "succeeded",
            "succeeded",
            "failed",
            "skipped",
        ]
        entries = await sse(ui, "/api/runs/ex-ok/events?after=0", 3)
        assert entries[0][1]["kind"] == "created"
        rest = await sse(
            ui, "/api/runs/ex-ok/events", 1, headers={"last-event-id": str(entries[1][0])}
        )
        assert rest[0][0] == entries[2][0]
        cancelled = await http.post("/api/runs/ex-ask/cancel", json={"reason": "done"})
        assert cancelled.json()["status"] == "cancelled"
        assert (await http.get("/api/runs/ex-ask")).json()["summary"]["status"] == "cancelled"


def _schema_exists(schema: str) -> bool:
    import psycopg

    with psycopg.connect(require_server()) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    return found is not None


async def test_U6_the_command_on_a_postgresql_url_with_no_store_creates_nothing() -> None:
    """``mainspring ui`` (and a control) on a database or schema that holds no store says
    so (exit 5) and leaves it as it was: no schema, no table made by accident."""
    schema = fresh_schema()
    url = with_schema(require_server(), schema)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "mainspring.cli", "--store", url, "ui", "--port", "0"]
    try:
        process = await anyio.open_process(command, env=env)
        try:
            with anyio.fail_after(60):  # serving instead of refusing never ends: a failure
                assert await process.wait() == 5
        finally:
            if process.returncode is None:
                process.kill()
            await process.aclose()
        assert not _schema_exists(schema)
        code, _ = await anyio.to_thread.run_sync(run_cli, "--store", url, "pause", "ex-1")
        assert code == 5
        assert not _schema_exists(schema)
    finally:
        drop_schema(schema)
