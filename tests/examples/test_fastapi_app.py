"""examples/fastapi_app.py through httpx's ASGI transport, lifespan included, and as a real
uvicorn process: streams, ``Last-Event-ID``, Ctrl-C with clients streaming, kill -9."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import mainspring as ms

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


async def test_answer_list_and_the_runs_view_over_http(client: Any) -> None:
    execution_id = (await client.post("/executions", json={"goal": "research tide"})).json()["id"]
    await _until(client, execution_id, "waiting_for_clarification")
    listed = (await client.get("/executions")).json()
    assert [(e["id"], e["status"]) for e in listed] == [(execution_id, "waiting_for_clarification")]
    answered = await client.post(f"/executions/{execution_id}/answer", json={"text": "deep"})
    assert answered.status_code == 202
    done = await _until(client, execution_id, "completed")
    assert done["outputs"] == {
        "search": "3 sources on tide",
        "sum": "summary of tide",
        "research": "3 sources on tide, depth: deep",
    }
    assert done["errors"] == {}
    again = await client.post(f"/executions/{execution_id}/answer", json={"text": "more"})
    assert again.status_code == 409  # not waiting for an answer
    assert (await client.post("/executions/nope/answer", json={"text": "x"})).status_code == 404
    assert (await client.get("/executions", params={"limit": 0})).status_code == 422


async def test_v2_a_position_that_names_no_event_of_the_run_is_refused(client: Any) -> None:
    """``Last-Event-ID`` (or ``?after=``) must be 0 or one of this run's event ids: one from
    the future (past 64 bits too) or of another run is a 400, never a 500 or a stream that
    cannot reach the run's end; a real one resumes after it."""
    first = (await client.post("/executions", json={"goal": "research reef"})).json()["id"]
    await _until(client, first, "waiting_for_clarification")
    other = (await client.post("/executions", json={"goal": "research 42"})).json()["id"]
    await _until(client, other, "failed")
    runtime = fastapi_app.app.state.runtime
    mine = [e.seq for e in runtime.store.history(first)]
    theirs = runtime.store.history(other)[0].seq
    events = f"/executions/{other}/events"
    for position in (str(mine[0]), str(theirs + 10**6), str(2**63 - 1), str(2**63)):
        refused = await client.get(events, headers={"Last-Event-ID": position})
        assert refused.status_code == 400, position
        assert (await client.get(events, params={"after": position})).status_code == 400
    resumed = await client.get(events, headers={"Last-Event-ID": str(theirs)})
    assert resumed.status_code == 200
    assert f"id: {theirs}\n" not in resumed.text
    assert resumed.text.startswith("id: ")


@pytest.mark.parametrize(
    "body",
    [
        b'{"goal": "research \\ud800"}',  # a lone surrogate: valid JSON, not storable text
        b'{"goal": ""}',
        b'{"goal": "' + b"a" * 100_001 + b'"}',
    ],
)
async def test_x2_a_goal_that_cannot_be_stored_is_a_422(client: Any, body: bytes) -> None:
    started = await client.post(
        "/executions", content=body, headers={"content-type": "application/json"}
    )
    assert started.status_code == 422
    assert "research" not in started.text  # the input is not echoed back
    assert (await client.get("/executions")).json() == []
    bad_limit = await client.get("/events", params={"limit": -1})
    assert bad_limit.status_code == 422


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


async def test_v4_an_exit_signal_ends_the_streams_then_reaches_the_servers_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lifespan wraps the server's signal handler (here a stand-in for uvicorn's): the
    signal ends the open event stream, then reaches the server's handler; leaving the
    lifespan puts the server's handler back."""
    monkeypatch.setenv("MAINSPRING_STORE", str(tmp_path / "app.sqlite3"))
    received: list[int] = []

    def server_handler(signum: int, frame: object) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, server_handler)
    try:
        app = fastapi_app.app
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                runtime = app.state.runtime
                with anyio.fail_after(30):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(c.get, "/events")  # returns once the stream ended
                        while runtime._bus.subscribers == 0:
                            await anyio.lowlevel.checkpoint()
                        assert signal.getsignal(signal.SIGTERM) is not server_handler
                        signal.raise_signal(signal.SIGTERM)
                assert received == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is server_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- a real uvicorn process ----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]

#: A client that hangs up mid-stream leaves httpx's inner async generators to the garbage
#: collector, which trio warns about (httpx closes only the outer one): the client's, not
#: the server's under test.
_HANGS_UP = pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")


class _Server:
    """``uvicorn examples.fastapi_app:app`` in its own process, on a free 127.0.0.1 port,
    its store in the test's directory; its output goes to a file the test prints."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"uvicorn-{self.port}.log"
        environ = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "MAINSPRING_STORE": str(tmp_path / "app.sqlite3"),
            **env,
        }
        command = [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app"]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT
            )

    async def ready(self, client: Any) -> None:
        with anyio.fail_after(60):
            while True:
                assert self.process.poll() is None, self.output()
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{self.url}/executions")).status_code == 200:
                        return
                await anyio.sleep(0.05)  # polling a process that is starting, as a client would

    async def exited(self, within: float) -> int:
        wait = functools.partial(self.process.wait, timeout=within)
        return await anyio.to_thread.run_sync(wait)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    started: list[_Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
        server.process.wait(timeout=30)


async def _sse(
    client: Any,
    url: str,
    until: Callable[[dict[str, Any]], bool] | None,
    within: float = 60,
    **headers: str,
) -> list[dict[str, Any]]:
    """Server-sent events from ``url`` (each ``{"id", "event", "data"}``) until one meets
    ``until`` (then the client hangs up) or the server ends the stream, within ``within``
    seconds (a stream may be quiet for long: no read timeout)."""
    got: list[dict[str, Any]] = []
    block: dict[str, Any] = {}
    quiet = httpx.Timeout(30, read=None)
    with anyio.fail_after(within):
        async with client.stream("GET", url, headers=headers, timeout=quiet) as response:
            assert response.status_code == 200
            async with contextlib.aclosing(response.aiter_lines()) as lines:
                async for line in lines:
                    if line:
                        field, _, value = line.partition(": ")
                        block[field] = json.loads(value) if field == "data" else value
                        continue
                    got.append(block)
                    block = {}
                    if until is not None and until(got[-1]):
                        return got
    return got


def _is(kind: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    def matches(event: dict[str, Any]) -> bool:
        data = event["data"]
        return bool(event["event"] == kind and all(data.get(k) == v for k, v in fields.items()))

    return matches


@_HANGS_UP
async def test_v2_a_real_server_streams_a_run_and_last_event_id_resumes_exactly(
    tmp_path: Path, servers: list[_Server]
) -> None:
    """Start, stream, pause, cancel over a real uvicorn; a client that hangs up and comes
    back with ``Last-Event-ID`` gets every entry after it, none twice (V2)."""
    server = _Server(tmp_path)
    servers.append(server)
    async with httpx.AsyncClient(timeout=30) as client:
        await server.ready(client)
        url = server.url
        execution_id = (
            await client.post(f"{url}/executions", json={"goal": "research wind"})
        ).json()["id"]
        events = f"{url}/executions/{execution_id}/events"
        got = await _sse(client, events, _is("pending", pending="clarification"))
        assert got[0]["event"] == "created"
        paused = (await client.post(f"{url}/executions/{execution_id}/pause")).json()
        assert paused["status"] == "paused"
        got += await _sse(
            client, events, _is("status", status="paused"), **{"Last-Event-ID": got[-1]["id"]}
        )
        cancelled = (await client.post(f"{url}/executions/{execution_id}/cancel")).json()
        assert cancelled["status"] == "cancelled"
        # The run finished: the stream ends by itself after its last entry.
        got += await _sse(client, events, None, **{"Last-Event-ID": got[-1]["id"]})
        everything = await _sse(client, events, None)
        assert got == everything  # nothing missed, nothing repeated
        seqs = [int(e["id"]) for e in got]
        assert seqs == sorted(set(seqs))
        assert _is("status", status="cancelled")(got[-5])  # then its step, task...
        assert _is("control", action="cancel")(got[-1])
        assert all("wind" not in json.dumps(e) for e in got)  # V1: no free text
        finished = await client.get(events, headers={"Last-Event-ID": got[-1]["id"]})
        assert finished.status_code == 204  # all sent: an EventSource stops reconnecting
        bad = await client.get(events, headers={"Last-Event-ID": "x"})
        assert bad.status_code == 400

        # A step's error in the run's view; outputs of the steps that succeeded.
        failing = (await client.post(f"{url}/executions", json={"goal": "research 42"})).json()[
            "id"
        ]
        failed = await _sse(client, f"{url}/executions/{failing}/events", None)
        assert any(_is("status", status="failed")(e) for e in failed)
        view = (await client.get(f"{url}/executions/{failing}")).json()
        assert view["status"] == "failed"
        assert "nothing to search for" in view["errors"]["search"]["error"]
        view = (await client.get(f"{url}/executions/{execution_id}")).json()
        assert view["outputs"] == {"search": "3 sources on wind", "sum": "summary of wind"}
        listed = (await client.get(f"{url}/executions")).json()
        assert {e["id"]: e["status"] for e in listed} == {
            execution_id: "cancelled",
            failing: "failed",
        }
        server.process.send_signal(signal.SIGINT)
        assert await server.exited(within=30) is not None


@_HANGS_UP
async def test_v4_a_real_server_exits_promptly_on_sigint_with_clients_streaming(
    tmp_path: Path, servers: list[_Server]
) -> None:
    """Ctrl-C while clients stream (the live events and a waiting run's history): the
    streams end normally and the server exits; before, it waited for the clients to hang
    up. The bound is loose for a loaded machine; the time taken is printed."""
    server = _Server(tmp_path)
    servers.append(server)
    async with httpx.AsyncClient(timeout=30) as client:
        await server.ready(client)
        url = server.url
        execution_id = (
            await client.post(f"{url}/executions", json={"goal": "research sun"})
        ).json()["id"]
        run_events = f"{url}/executions/{execution_id}/events"
        await _sse(client, run_events, _is("status", status="waiting_for_clarification"))
        streams: dict[str, list[str]] = {}
        streaming = anyio.Event()
        ended = 0.0

        async def follow(name: str, stream_url: str) -> None:
            nonlocal ended
            quiet = httpx.Timeout(30, read=None)
            async with client.stream("GET", stream_url, timeout=quiet) as response:
                streams[name] = []
                if len(streams) == 2:
                    streaming.set()
                async with contextlib.aclosing(response.aiter_lines()) as lines:
                    async for line in lines:  # ends without an error
                        streams[name].append(line)
            ended = time.monotonic()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow, "run", run_events)
                tg.start_soon(follow, "live", f"{url}/events")
                await streaming.wait()
                sent = time.monotonic()
                server.process.send_signal(signal.SIGINT)
                returncode = await server.exited(within=10)
                exited = time.monotonic() - sent
        print(
            f"server exited {exited:.2f} s after SIGINT, streams ended after {ended - sent:.2f} s"
        )
        assert returncode is not None
        assert any(
            line.startswith("id: ") for line in streams["run"]
        )  # what is durable, then the end
        assert "Application shutdown complete" in server.output()
        # The run stopped with the server, resumable: its record says it was running.
    store, close = ms.storage.open_store(tmp_path / "app.sqlite3")
    try:
        stored = store.get(execution_id)
        assert stored is not None
        assert stored.status == "waiting_for_clarification"
        assert stored.lease is None or stored.lease.owner == ""  # released
    finally:
        close()


@_HANGS_UP
async def test_l7_l8_a_run_killed_with_its_server_goes_on_after_a_restart(
    tmp_path: Path, servers: list[_Server]
) -> None:
    """kill -9 while a step runs; the restarted server finishes the step by itself, no
    request needed and without waiting for the dead server's lease to lapse: that server
    was a process of this host, and it is gone (L7, L8)."""
    slow = _Server(tmp_path, EXAMPLE_SEARCH_LATENCY="600")
    servers.append(slow)
    async with httpx.AsyncClient(timeout=30) as client:
        await slow.ready(client)
        execution_id = (
            await client.post(f"{slow.url}/executions", json={"goal": "research tide"})
        ).json()["id"]
        await _sse(client, f"{slow.url}/executions/{execution_id}/events", _is("plan"))
        slow.process.kill()
        await slow.exited(within=30)
        again = _Server(tmp_path)
        servers.append(again)
        await again.ready(client)
        events = f"{again.url}/executions/{execution_id}/events"
        await _sse(client, events, _is("status", status="waiting_for_clarification"), 90)
        view = (await client.get(f"{again.url}/executions/{execution_id}")).json()
        assert view["outputs"]["search"] == "3 sources on tide"


@_HANGS_UP
async def test_o2_a_real_servers_log_says_why_a_step_failed(
    tmp_path: Path, servers: list[_Server]
) -> None:
    """A failing step is a line in uvicorn's log, with its run, its step and its traceback:
    before, mainspring's records met only its NullHandler (uvicorn configures its own
    loggers only) and the server's log said nothing."""
    server = _Server(tmp_path)
    servers.append(server)
    async with httpx.AsyncClient(timeout=30) as client:
        await server.ready(client)
        url = server.url
        execution_id = (
            await client.post(f"{url}/executions", json={"goal": "research wind-2"})
        ).json()["id"]
        events = f"{url}/executions/{execution_id}/events"
        await _sse(client, events, _is("status", status="failed"))
    # Logged before the failure was committed, so before the stream said "failed".
    output = server.output()
    line = f"execution {execution_id}: step search (tool search) failed: ValueError: "
    assert line + "nothing to search for in 'wind-2'" in output, output
    assert "in search\n" in output


async def test_r8_the_answer_endpoint_refuses_what_it_cannot_store_and_keeps_a_pause(
    client: Any,
) -> None:
    """An answer to a paused run is kept for its resume (the pause is a decision: the
    answer does not undo it); a second answer, one with no UTF-8 form, and an answer to a
    run not waiting are refused with 4xx, never a 500."""
    execution_id = (await client.post("/executions", json={"goal": "research reef"})).json()["id"]
    await _until(client, execution_id, "waiting_for_clarification")
    assert (await client.post(f"/executions/{execution_id}/pause")).json()["status"] == "paused"
    bad = await client.post(
        f"/executions/{execution_id}/answer",
        content=b'{"text": "caf\\udce9"}',
        headers={"content-type": "application/json"},
    )
    assert bad.status_code == 422
    answered = await client.post(f"/executions/{execution_id}/answer", json={"text": "deep"})
    assert answered.status_code == 202
    assert (await client.get(f"/executions/{execution_id}")).json()["status"] == "paused"
    again = await client.post(f"/executions/{execution_id}/answer", json={"text": "more"})
    assert again.status_code == 409  # answered already: refused, not a 500
    resumed = await client.post(f"/executions/{execution_id}/resume", json={})
    assert resumed.status_code == 202
    done = await _until(client, execution_id, "completed")
    assert done["outputs"]["research"] == "3 sources on reef, depth: deep"
    late = await client.post(f"/executions/{execution_id}/resume", json={"answer": "x"})
    assert late.status_code == 409  # NotWaiting: the run is finished


async def test_r1_resume_takes_no_body_as_the_docstring_shows(client: Any) -> None:
    """``curl -X POST .../resume`` (the module's docstring, no body) resumes a paused run:
    the answer and the approval are optional, and so is the body that carries them."""
    execution_id = (await client.post("/executions", json={"goal": "research kelp"})).json()["id"]
    await _until(client, execution_id, "waiting_for_clarification")
    assert (await client.post(f"/executions/{execution_id}/pause")).json()["status"] == "paused"
    answered = await client.post(f"/executions/{execution_id}/answer", json={"text": "deep"})
    assert answered.status_code == 202  # kept for the resume: an answer does not undo a pause
    resumed = await client.post(f"/executions/{execution_id}/resume")
    assert resumed.status_code == 202, resumed.text
    done = await _until(client, execution_id, "completed")
    assert done["outputs"]["research"] == "3 sources on kelp, depth: deep"
