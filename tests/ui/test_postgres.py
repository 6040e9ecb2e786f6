"""The view on a PostgreSQL store (a URL), which other hosts may be writing to: the list,
a run, its history stream, and a control reaching the store."""

from __future__ import annotations

import pytest

from mainspring.ui import serve
from tests._postgres import postgres_url
from tests.ui._kit import client, fill, sse

__all__ = ["postgres_url"]  # a fixture

pytestmark = pytest.mark.anyio


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
