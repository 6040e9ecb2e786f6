"""examples/fastapi_app.py through httpx's ASGI transport, lifespan included."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples import fastapi_app  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    monkeypatch.setenv("MAINSPRING_STORE", str(tmp_path / "app.sqlite3"))
    app = fastapi_app.app
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            yield c


async def _until(client: Any, execution_id: str, status: str) -> dict[str, Any]:
    with anyio.fail_after(10):
        while True:
            view: dict[str, Any] = (await client.get(f"/executions/{execution_id}")).json()
            if view["status"] == status:
                return view
            await anyio.sleep(0.01)  # polling over HTTP, as a client would


async def test_start_wait_answer_and_finish_over_http(client: Any) -> None:
    started = await client.post("/executions", json={"goal": "research wind"})
    assert started.status_code == 202
    execution_id = started.json()["id"]
    waiting = await _until(client, execution_id, "waiting_for_clarification")
    assert waiting["pending"] == "How deep should the report on wind go?"
    tasks = (await client.get(f"/executions/{execution_id}/tasks")).json()
    assert [t["state"] for t in tasks] == ["waiting_for_clarification"]
    resumed = await client.post(f"/executions/{execution_id}/resume", json={"answer": "deep"})
    assert resumed.status_code == 202
    done = await _until(client, execution_id, "completed")
    assert done["steps"] == {"search": "succeeded", "sum": "succeeded", "research": "succeeded"}


async def test_pause_cancel_stop_and_errors_over_http(client: Any) -> None:
    execution_id = (await client.post("/executions", json={"goal": "research solar"})).json()["id"]
    await _until(client, execution_id, "waiting_for_clarification")
    paused = (await client.post(f"/executions/{execution_id}/pause")).json()
    assert paused["status"] == "paused"
    (task,) = (await client.get(f"/executions/{execution_id}/tasks")).json()
    stopped = (await client.post(f"/tasks/{task['id']}/stop")).json()
    assert (stopped["ok"], stopped["state"]) == (True, "cancelled")
    cancelled = (await client.post(f"/executions/{execution_id}/cancel")).json()
    assert cancelled["status"] == "cancelled"
    assert (await client.get("/executions/nope")).status_code == 404
    assert (await client.post("/executions/nope/pause")).status_code == 404
    assert (await client.post("/tasks/nope:t1/stop")).status_code == 404


async def test_server_sent_events_carry_ids_and_states(client: Any) -> None:
    async def read() -> str:
        response = await client.get("/events", params={"limit": 4})
        return str(response.text)

    async with anyio.create_task_group() as tg:
        texts: list[str] = []

        async def reader() -> None:
            texts.append(await read())

        tg.start_soon(reader)
        runtime = fastapi_app.app.state.runtime
        with anyio.fail_after(30):
            while runtime._bus.subscribers == 0:  # the stream has subscribed
                await anyio.lowlevel.checkpoint()
        await client.post("/executions", json={"goal": "research grid"})
    (text,) = texts
    assert text.startswith("event: ExecutionStarted\ndata: {")
    assert text.count("event: ") == 4
    assert "research grid" not in text  # V1: no free text
