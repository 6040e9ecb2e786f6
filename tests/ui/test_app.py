"""The view over HTTP, served by hypercorn on the test's event loop: the token, every route,
the history stream resuming with Last-Event-ID (V2), the controls reaching the store, ids
checked before any query (X1), bounded bodies, redaction (E5)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import mainspring as ms
from mainspring.storage import FileStore, SqliteStore
from mainspring.ui import RemoteRefused, is_loopback, serve
from mainspring.ui._server import GRACE
from mainspring.ui._stream import history_end
from tests.executions._kit import FAST, Gate, agent, plan_of, tool
from tests.ui._kit import APP, SECRET, client, fill, raw, reaches, sse

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    path = str(tmp_path / "store.sqlite3")
    await fill(path)
    opened = await anyio.to_thread.run_sync(SqliteStore, path)
    try:
        yield opened
    finally:
        opened.close()


async def test_every_request_needs_the_token(store: Any) -> None:
    async with serve(store) as ui, client(ui, token=False) as http:
        for path in ("/", "/api/runs", "/api/runs/ex-ok", "/static/run.js", "/nowhere"):
            refused = await http.get(path)
            assert refused.status_code == 403, path
            assert "ex-ok" not in refused.text
        assert (
            await http.get("/api/runs", headers={"x-mainspring-token": "x" + ui.token})
        ).status_code == 403
        assert (await http.get("/api/runs", params={"token": ui.token[:-1]})).status_code == 403
        bad_cookie = {"cookie": f"mainspring_ui_{ui.port}=nope"}
        assert (await http.get("/api/runs", headers=bad_cookie)).status_code == 403
        posted = await http.post("/api/runs/ex-ask/cancel", json={})
        assert posted.status_code == 403
        assert (await store_status(store, "ex-ask")) == "waiting_for_clarification"


async def store_status(store: Any, execution_id: str) -> str:
    record = await anyio.to_thread.run_sync(store.get, execution_id)
    return str(record.status)


async def test_the_printed_url_sets_a_strict_http_only_cookie_and_drops_the_token(
    store: Any,
) -> None:
    async with serve(store) as ui, client(ui, token=False) as http:
        assert ui.url == f"http://127.0.0.1:{ui.port}/?token={ui.token}"
        landing = await http.get(ui.url)
        assert landing.status_code == 303
        assert landing.headers["location"] == "/"
        cookie = landing.headers["set-cookie"]
        assert cookie.startswith(f"mainspring_ui_{ui.port}={ui.token};")
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        deep = await http.get(f"/runs/ex-ok?token={ui.token}&x=1")
        assert deep.headers["location"] == "/runs/ex-ok?x=1"
        http.cookies.set(f"mainspring_ui_{ui.port}", ui.token)
        page = await http.get("/")
        assert page.status_code == 200
        assert "text/html" in page.headers["content-type"]
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        assert page.headers["x-content-type-options"] == "nosniff"


async def test_pages_and_static_files_are_the_packages_own(store: Any) -> None:
    async with serve(store) as ui, client(ui) as http:
        index = (await http.get("/")).text
        run = (await http.get("/runs/ex-ok")).text
        for page in (index, run):
            # nothing from elsewhere (the one URL is the SVG namespace's name)
            assert page.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http") == 0
            assert "<script>" not in page  # nothing inline (CSP)
            assert "style=" not in page
        for name in ("app.css", "common.js", "list.js", "run.js"):
            served = await http.get(f"/static/{name}")
            assert served.status_code == 200, name
            assert served.headers["content-security-policy"].startswith("default-src 'self'")
            assert ".innerHTML" not in served.text, name  # stored text is set as text only
        assert (await http.get("/static/../_app.py")).status_code == 404


async def test_the_runs_list_filters_by_status_and_text(store: Any) -> None:
    async with serve(store) as ui, client(ui) as http:
        every = (await http.get("/api/runs")).json()
        assert [r["id"] for r in every["runs"]] == ["ex-ask", "ex-ok", "ex-fail"]
        failed = (await http.get("/api/runs", params={"status": "failed,completed"})).json()
        assert {r["id"] for r in failed["runs"]} == {"ex-ok", "ex-fail"}
        (row,) = [r for r in failed["runs"] if r["id"] == "ex-fail"]
        assert row["steps"] == {"succeeded": 2, "failed": 1, "skipped": 1}
        assert row["status"] == "failed"
        text = (await http.get("/api/runs", params={"q": "TWICE"})).json()
        assert [r["id"] for r in text["runs"]] == ["ex-ok"]
        by_id = (await http.get("/api/runs", params={"q": "ex-as"})).json()
        assert [r["id"] for r in by_id["runs"]] == ["ex-ask"]
        assert (await http.get("/api/runs", params={"limit": "1"})).json()["more"] == 2
        for bad in ({"status": "nope"}, {"q": "x" * 201}, {"limit": "0"}, {"limit": "-1"}):
            assert (await http.get("/api/runs", params=bad)).status_code == 400, bad


async def test_a_run_view_has_its_graph_errors_and_redacted_tracebacks(store: Any) -> None:
    async with serve(store) as ui, client(ui) as http:
        got = await http.get("/api/runs/ex-fail")
        assert got.status_code == 200
        assert SECRET not in got.text  # E5
        view = got.json()
        plan = view["plan"]
        steps = {s["id"]: s for s in plan["steps"]}
        assert {k: (s["depth"], s["status"]) for k, s in steps.items()} == {
            "a": (0, "succeeded"),
            "b": (1, "succeeded"),
            "c": (1, "failed"),
            "d": (2, "skipped"),
        }
        assert sorted((s["depth"], s["row"]) for s in steps.values()) == [
            (0, 0),
            (1, 0),
            (1, 1),
            (2, 0),
        ]
        assert (plan["columns"], plan["rows"]) == (3, 2)
        assert steps["d"]["depends_on"] == ["b", "c"]
        assert "this tool always fails" in steps["c"]["error"]
        assert "Traceback" in steps["c"]["traceback"]
        assert "RuntimeError" in steps["c"]["traceback"]
        assert steps["a"]["seconds"] is not None
        assert view["summary"]["status"] == "failed"
        assert view["terminal"] is True
        assert view["can_resume"] is False


async def test_a_waiting_run_shows_its_question_task_and_inner_steps(store: Any) -> None:
    async with serve(store) as ui, client(ui) as http:
        view = (await http.get("/api/runs/ex-ask")).json()
        assert view["pending"]["kind"] == "clarification"
        (task,) = view["tasks"]
        assert task["question"] == "which way?"
        assert view["questions"] == [
            {"task_id": task["id"], "question": "which way?", "asked_at": task["asked_at"]}
        ]
        assert [s["id"] for s in task["inner_steps"]] == ["look"]
        assert task["inner_steps"][0]["status"] == "succeeded"
        assert view["plan"]["steps"][0]["agent_task_id"] == task["id"]
        assert view["memory"] == {"facts": [], "this_run": 0, "scopes": [], "more": False}
        assert view["workers"]["workers"] == []


async def test_ids_are_checked_before_any_query(store: Any) -> None:
    async with serve(store) as ui, client(ui) as http:
        for bad in ("a%20b", "a%2Cb", "x" * 257, "a%00b", "%E2%80%AE"):
            assert (await http.get(f"/api/runs/{bad}")).status_code == 400, bad
            assert (await http.get(f"/runs/{bad}")).status_code == 400, bad
            assert (await http.get(f"/api/runs/{bad}/events")).status_code == 400, bad
            assert (await http.post(f"/api/runs/{bad}/pause", json={})).status_code == 400, bad
            assert (await http.post(f"/api/tasks/{bad}/stop", json={})).status_code == 400, bad
        assert (await http.get("/api/runs/ex-none")).status_code == 404


async def test_the_history_stream_resumes_after_last_event_id(store: Any) -> None:
    """V2: every entry from the start, then from Last-Event-ID on: nothing twice, nothing
    missed; a browser's reconnection carries it, over the page's first ``after``."""
    async with serve(store) as ui, client(ui) as http:
        history = await anyio.to_thread.run_sync(
            lambda: store.history("ex-fail", after=0, limit=1000)
        )
        seqs = [e.seq for e in history]
        first = await sse(ui, "/api/runs/ex-fail/events?after=0", len(seqs))
        assert [seq for seq, _ in first] == seqs
        assert all(data["execution_id"] == "ex-fail" for _, data in first)
        assert first[0][1]["kind"] == "created"
        middle = seqs[len(seqs) // 2]
        rest = await sse(
            ui,
            "/api/runs/ex-fail/events?after=0",
            len(seqs) - seqs.index(middle) - 1,
            headers={"last-event-id": str(middle)},
        )
        assert [seq for seq, _ in rest] == seqs[seqs.index(middle) + 1 :]
        every = await sse(ui, "/api/events?after=0", 3)
        assert [seq for seq, _ in every] == [1, 2, 3]
        for bad in ("-1", "x", "1.5", "9" * 30):
            got = await http.get("/api/runs/ex-fail/events", headers={"last-event-id": bad})
            assert got.status_code == 400, bad


async def test_a_live_update_arrives_from_a_run_another_runtime_is_running(tmp_path: Path) -> None:
    """A store a live server writes to: its commits reach the stream as they are made."""
    path = str(tmp_path / "live.sqlite3")
    gate = Gate()
    async with ms.open_runtime(
        store=path, tools={"inc": APP["tools"]["inc"], "gate": gate}, **FAST
    ) as server:
        handle = await server.start(
            "wait at the gate",
            plan_of(tool("g", "gate"), tool("b", "inc", "g")),
            execution_id="ex-live",
        )
        await gate.entered.wait()
        async with serve(path) as ui, client(ui) as http:
            async with raw(ui, "GET", "/api/runs/ex-live/events?after=0") as stream:
                with anyio.fail_after(30):  # the history so far: the run is running
                    while '"status":"running"' not in (await stream.line() or '"status":"running"'):
                        pass
                gate.opened.set()  # the run goes on in the other runtime: its entries arrive
                seen = []
                with anyio.fail_after(30):
                    while (line := await stream.line()) is not None:
                        seen.append(line)
                        if '"kind":"status"' in line and '"status":"completed"' in line:
                            break
                assert any('"step_id":"g"' in line and '"succeeded"' in line for line in seen)
            assert (await handle.wait()).status == "completed"
            view = (await http.get("/api/runs/ex-live")).json()
            assert view["summary"]["status"] == "completed"


async def test_pause_and_cancel_reach_the_store_and_a_finished_run_has_nothing_to_do(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "controls.sqlite3")
    gate = Gate()
    async with ms.open_runtime(
        store=path, tools={"gate": gate, "inc": APP["tools"]["inc"]}, **FAST
    ) as server:
        handle = await server.start(
            "gated", plan_of(tool("g", "gate"), tool("b", "inc", "g")), execution_id="ex-g"
        )
        await gate.entered.wait()
        async with serve(path) as ui, client(ui) as http:
            paused = await http.post("/api/runs/ex-g/pause", json={"reason": "lunch"})
            assert paused.status_code == 200, paused.text
            assert paused.json()["status"] == "paused"
            result = await handle.wait()
            assert result.status == "paused"
            assert isinstance(gate.reasons[-1], ms.Pause)  # V3: the runner saw the pause as such
            again = await http.post("/api/runs/ex-g/pause", json={})
            assert again.status_code == 409
            assert "nothing to pause" in again.json()["error"]
            view = (await http.get("/api/runs/ex-g")).json()
            assert [(c["action"], c["reason"]) for c in view["controls"]] == [("pause", "lunch")]
            assert {s["id"]: s["status"] for s in view["plan"]["steps"]} == {
                "g": "pending",
                "b": "pending",
            }
            cancelled = await http.post("/api/runs/ex-g/cancel", json={})
            assert cancelled.json()["status"] == "cancelled"
            assert (await http.post("/api/runs/ex-g/cancel", json={})).status_code == 409
            assert (await http.post("/api/runs/ex-none/pause", json={})).status_code == 404
            assert (await http.post("/api/runs/ex-g/explode", json={})).status_code == 404
        record = await server.get("ex-g")
        assert record is not None
        assert record.status == "cancelled"


async def test_an_answer_reaches_a_waiting_run_through_a_runtime_open_on_the_store(
    store: Any,
) -> None:
    """The page's answer is stored (as ``mainspring answer``); a runtime open on the store
    (a server's) takes the run up and it goes on."""
    async with (
        ms.open_runtime(store=store, **APP) as server,
        serve(store) as ui,
        client(ui) as http,
    ):
        answered = await http.post("/api/runs/ex-ask/answer", json={"text": f"left {SECRET}"})
        assert answered.status_code == 200, answered.text
        assert SECRET not in answered.text
        assert answered.json()["answered"] is True
        await reaches(server, "ex-ask", "completed")
        refused = await http.post("/api/runs/ex-ok/answer", json={"text": "nobody asked"})
        assert refused.status_code == 409
        assert (await http.post("/api/runs/ex-ask/answer", json={"text": " "})).status_code == 400


async def test_resume_needs_the_users_code_and_says_how(store: Any) -> None:
    async with serve(store) as ui, client(ui) as http:
        refused = await http.post("/api/runs/ex-ask/resume", json={"answer": "left"})
        assert refused.status_code == 409
        assert "--app" in refused.json()["error"]
        assert await store_status(store, "ex-ask") == "waiting_for_clarification"
    async with serve(store, app=APP) as ui, client(ui) as http:
        assert (await http.get("/api/runs/ex-ask")).json()["can_resume"] is True
        resumed = await http.post("/api/runs/ex-ask/resume", json={"answer": "left"})
        assert resumed.status_code == 200, resumed.text
        await reaches(ui.runtime, "ex-ask", "completed")
        finished = await http.post("/api/runs/ex-ok/resume", json={})
        assert finished.status_code == 409
        assert "nothing to resume" in finished.json()["error"]


async def test_stop_task_reaches_the_store_and_an_unknown_task_is_said(store: Any) -> None:
    async with serve(store) as ui, client(ui) as http:
        (task,) = (await http.get("/api/runs/ex-ask")).json()["tasks"]
        stopped = await http.post(f"/api/tasks/{task['id']}/stop", json={"cascade": False})
        assert stopped.status_code == 200, stopped.text
        assert stopped.json()["task_id"] == task["id"]
        (after,) = (await http.get("/api/runs/ex-ask")).json()["tasks"]
        assert after["state"] == "cancelled"
        unknown = await http.post("/api/tasks/ex-ask:t99/stop", json={})
        assert unknown.status_code == 404
        assert (
            await http.post(f"/api/tasks/{task['id']}/stop", json={"cascade": "yes"})
        ).status_code == 400


async def test_control_bodies_are_bounded_json_from_this_origin(store: Any) -> None:
    async with serve(store) as ui, client(ui) as http:
        form = await http.post("/api/runs/ex-ask/cancel", data={"reason": "x"})
        assert form.status_code == 415
        json_head = {"content-type": "application/json"}
        huge = {**json_head, "content-length": "70000"}
        async with raw(ui, "POST", "/api/runs/ex-ask/answer", headers=huge) as said:
            assert said.status == 413  # refused before its body was read

        # A body longer than it said: refused once it passes the bound, whatever it said.
        lying = {**json_head, "content-length": str(80 * 1024)}
        body = b'{"text": "' + b"x" * 70_000
        async with raw(ui, "POST", "/api/runs/ex-ask/answer", headers=lying, body=body) as said:
            assert said.status == 413
        foreign = await http.post(
            "/api/runs/ex-ask/cancel", json={}, headers={"origin": "http://evil.example"}
        )
        assert foreign.status_code == 403
        for bad in (b"[1]", b"{", b'{"reason": 3}'):
            got = await http.post(
                "/api/runs/ex-ask/cancel", content=bad, headers={"content-type": "application/json"}
            )
            assert got.status_code == 400, bad
        assert await store_status(store, "ex-ask") == "waiting_for_clarification"


async def test_a_file_store_is_shown_too(tmp_path: Path) -> None:
    path = tmp_path / "files"
    await fill(str(path))
    files = await anyio.to_thread.run_sync(FileStore, path)
    try:
        async with serve(files) as ui, client(ui) as http:
            runs = (await http.get("/api/runs")).json()["runs"]
            assert {r["id"] for r in runs} == {"ex-fail", "ex-ok", "ex-ask"}
            assert (await http.get("/api/runs/ex-fail")).json()["plan"]["columns"] == 3
            entries = await sse(ui, "/api/runs/ex-ok/events", 2)
            assert entries[0][1]["kind"] == "created"
    finally:
        files.close()


async def test_a_host_other_machines_reach_is_refused_unless_allowed(store: Any) -> None:
    with pytest.raises(RemoteRefused, match="not a loopback address"):
        async with serve(store, host="0.0.0.0"):
            pass
    for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.1.2.3"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.com", ""):
        assert not is_loopback(host), host


async def test_stopping_the_view_ends_its_streams(store: Any) -> None:
    """V4: a stream open when the view stops ends (the browser reconnects to the next view
    with its Last-Event-ID), within the view's grace."""
    async with serve(store) as ui, raw(ui, "GET", "/api/runs/ex-ok/events?after=999") as stream:
        assert stream.status == 200
        assert await stream.line() == "retry: 1000"
        ui.stop()
        with anyio.fail_after(GRACE + 5):
            while await stream.line() is not None:
                pass


@pytest.mark.parametrize("version", ["1.0", "1.1"])
async def test_V4_a_stream_ended_by_the_stop_closes_its_connection_without_the_grace(
    store: Any, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """V4: the stream's connection closes as soon as the stream ends, so stopping the view
    does not wait out its grace for it. On trio the server's close ran inside the stream's
    cancelled scope (the server reports ``http.disconnect`` during the last chunk's send)
    and failed: the socket stayed open until the grace ran out. A grace of ten minutes
    here makes that a timeout, not a slow pass."""
    monkeypatch.setattr("mainspring.ui._server.GRACE", 600.0)
    head = f"GET /api/events HTTP/{version}\r\nhost: 127.0.0.1\r\nx-mainspring-token: "
    with anyio.fail_after(60):
        async with serve(store) as ui, await anyio.connect_tcp(ui.host, ui.port) as sock:
            await sock.send(f"{head}{ui.token}\r\n\r\n".encode())
            seen = b""
            while b"retry: 1000" not in seen:
                seen += await sock.receive()
            ui.stop()
            seen += await _until_closed(sock)  # the server closed it: EOF
    assert b"200" in seen.split(b"\r\n", 1)[0]
    assert seen.endswith(b"0\r\n\r\n") or version == "1.0", seen[-40:]


async def _until_closed(sock: anyio.abc.ByteStream) -> bytes:
    """What the peer sends until it closes the connection."""
    rest = b""
    while True:
        try:
            rest += await sock.receive()
        except anyio.EndOfStream:
            return rest


async def test_a_deep_plan_listed_last_step_first_is_laid_out(tmp_path: Path) -> None:
    """A chain of 600 steps whose plan lists the last one first: the run view lays it out
    (each step one column right of its dependency), without recursing once per step."""
    path = str(tmp_path / "deep.sqlite3")
    gate = Gate()
    chain = [tool("s0", "gate")] + [tool(f"s{i}", "inc", f"s{i - 1}") for i in range(1, 600)]
    async with ms.open_runtime(
        store=path, tools={"gate": gate, "inc": APP["tools"]["inc"]}, **FAST
    ) as server:
        await server.start("deep", plan_of(*reversed(chain)), execution_id="ex-deep")
        await gate.entered.wait()
        async with serve(path) as ui, client(ui) as http:
            got = await http.get("/api/runs/ex-deep")
            assert got.status_code == 200, got.text[:200]
            plan = got.json()["plan"]
            assert {s["id"]: s["depth"] for s in plan["steps"]} == {f"s{i}": i for i in range(600)}
            assert (plan["columns"], plan["rows"]) == (600, 1)
            assert len(got.content) < 600 * 1_000  # bounded: no step sends more than its own
        gate.opened.set()


async def test_a_limit_of_digits_int_cannot_read_is_a_400_not_a_crash(store: Any) -> None:
    """``str.isdigit`` says yes to a superscript two; ``int`` does not: refused as a bad
    limit (400), never an internal error."""
    async with serve(store) as ui, client(ui) as http:
        for bad in ("\u00b2", "\u0661", "1\u00b2", "\uff11"):
            got = await http.get("/api/runs", params={"limit": bad})
            assert got.status_code == 400, (bad, got.status_code)
            assert "limit" in got.json()["error"]


async def test_S1_stop_task_on_a_finished_task_is_refused_and_says_why(store: Any) -> None:
    """S1: a finished task is reported and left alone: the button's answer is a refusal
    (409, as a pause of a paused run, and as the command's exit 1) with the reason, never
    a success the page would show as done."""
    async with serve(store) as ui, client(ui) as http:
        (task,) = (await http.get("/api/runs/ex-ask")).json()["tasks"]
        first = await http.post(f"/api/tasks/{task['id']}/stop", json={})
        assert first.status_code == 200, first.text
        again = await http.post(f"/api/tasks/{task['id']}/stop", json={})
        assert again.status_code == 409, again.text
        assert "already cancelled" in again.json()["error"]
        (after,) = (await http.get("/api/runs/ex-ask")).json()["tasks"]
        assert after["state"] == "cancelled"


async def test_the_printed_urls_redirect_stays_on_this_view(store: Any) -> None:
    """The landing's redirect names a path of this view only: a path starting ``//`` is not
    sent on to another host, and one holding CR LF is encoded, not a broken response."""
    async with serve(store) as ui:
        for path, expected in (
            ("//evil.example/x", "/evil.example/x"),
            ("/%2F%2Fevil.example", "/evil.example"),
            ("/%0D%0ASet-Cookie:%20x=1", "/%0D%0ASet-Cookie%3A%20x%3D1"),
            ("/runs/ex-ok", "/runs/ex-ok"),
        ):
            async with raw(ui, "GET", f"{path}?token={ui.token}") as said:
                assert said.status == 303, (path, said.status)
                assert said.headers["location"] == expected, path
                assert "x=1" not in said.headers.get("set-cookie", ""), path


async def rememberer(ctx: ms.AgentContext, input: Any) -> str:
    await ctx.memory.remember("deploys use canary releases", scope="project")
    await ctx.memory.remember("acme ships on fridays", scope="organization")
    return "remembered"


async def test_K2_a_run_shows_the_facts_of_the_scopes_it_used_and_of_its_organization_only(
    tmp_path: Path,
) -> None:
    """K2 and the run's scopes: the run view lists the facts this run remembered, then the
    other facts of the scopes it remembered in; not a scope it never used, nor another
    run's facts of such a scope, and an organization's facts only to a view of that
    organization (``--app`` naming it)."""
    path = str(tmp_path / "memory.sqlite3")
    async with ms.open_runtime(
        store=path, agents={"rem": rememberer}, organization="acme", **FAST
    ) as rt:
        run = await rt.start("remember", plan_of(agent("r", "rem")), execution_id="ex-mem")
        assert (await run.wait()).status == "completed"
        await rt.memory.remember("ci uses python 3.12", scope="project")
        await rt.memory.remember("prefers short answers", scope="user")
    async with ms.open_runtime(store=path, organization="globex", **FAST) as other:
        await other.memory.remember("globex ships on mondays", scope="organization")
    async with serve(path) as ui, client(ui) as http:
        memory = (await http.get("/api/runs/ex-mem")).json()["memory"]
        assert [(f["text"], f["this_run"]) for f in memory["facts"]] == [
            ("deploys use canary releases", True),
            ("ci uses python 3.12", False),
        ]
        assert memory["scopes"] == ["project"]
        assert memory["this_run"] == 1
        assert memory["more"] is False
    async with serve(path, app={"organization": "acme"}) as ui, client(ui) as http:
        memory = (await http.get("/api/runs/ex-mem")).json()["memory"]
        assert [(f["text"], f["this_run"]) for f in memory["facts"]] == [
            ("deploys use canary releases", True),
            ("acme ships on fridays", True),
            ("ci uses python 3.12", False),
        ]
        assert memory["scopes"] == ["project", "organization"]
        assert "globex ships on mondays" not in str(memory)


async def test_R9_an_answer_stored_for_a_run_nothing_runs_is_shown_waiting_not_asked_again(
    store: Any,
) -> None:
    """R9/P5: an answer stored while no runtime runs the run fills its one open question:
    the view says the answer waits for a runtime to take it (the page offers no second
    answer, which would be refused as busy), and the run still waits."""
    async with serve(store) as ui, client(ui) as http:
        before = (await http.get("/api/runs/ex-ask")).json()
        assert before["pending"]["answered"] is False
        answered = await http.post("/api/runs/ex-ask/answer", json={"text": "left"})
        assert answered.status_code == 200, answered.text
        assert answered.json()["live"] is False
        view = (await http.get("/api/runs/ex-ask")).json()
        assert view["summary"]["status"] == "waiting_for_clarification"
        assert view["pending"]["answered"] is True
        assert view["questions"] == []  # no question waits for an answer any more
        again = await http.post("/api/runs/ex-ask/answer", json={"text": "right"})
        assert again.status_code == 409
        assert "answer already" in again.json()["error"]


async def test_the_store_wide_stream_from_the_end_carries_only_what_comes_next(
    tmp_path: Path,
) -> None:
    """V2 for the runs list: ``/api/events?after=end`` starts after the store's newest entry
    (found in a few reads, however long the history) and carries every run's entries
    committed from then on, by any process; ``Last-Event-ID`` still wins on a reconnection."""
    path = str(tmp_path / "list.sqlite3")
    await fill(path)
    gate = Gate()
    async with ms.open_runtime(
        store=path, tools={"inc": APP["tools"]["inc"], "gate": gate}, **FAST
    ) as server:
        every = await anyio.to_thread.run_sync(lambda: server.store.history(None, limit=10_000))
        assert await anyio.to_thread.run_sync(history_end, server.store) == every[-1].seq
        empty = await anyio.to_thread.run_sync(SqliteStore, str(tmp_path / "empty.sqlite3"))
        try:
            assert await anyio.to_thread.run_sync(history_end, empty) == 0
        finally:
            empty.close()
        async with serve(path) as ui, client(ui):
            async with raw(ui, "GET", "/api/events?after=end") as stream:
                assert stream.status == 200
                handle = await server.start(
                    "gated", plan_of(tool("g", "gate"), tool("b", "inc", "g")), execution_id="ex-n"
                )
                await gate.entered.wait()
                gate.opened.set()
                seen: list[int] = []
                with anyio.fail_after(30):
                    while (line := await stream.line()) is not None:
                        if line.startswith("id: "):
                            seen.append(int(line[4:]))
                        if '"status":"completed"' in line and '"execution_id":"ex-n"' in line:
                            break
                assert seen[:1] == [every[-1].seq + 1]  # nothing before, nothing missed
                assert seen == sorted(set(seen))
            assert (await handle.wait()).status == "completed"
            resumed = await sse(ui, "/api/events?after=end", 1, headers={"last-event-id": "0"})
            assert resumed[0][0] == 1


def _owners_store(path: Path, dead: str) -> SqliteStore:
    """Running runs held, lapsed, let go and held by ``dead`` (a process that ended), and a
    paused one, as a server's shutdown or ``kill -9`` leaves them."""
    far = time.time() + 3_600
    leases = {
        "ex-held": ms.storage.Lease(owner="host-a:1:aaaa", expires_at=far, epoch=1),
        "ex-lapsed": ms.storage.Lease(owner="host-a:1:aaaa", expires_at=1_500, epoch=1),
        "ex-released": ms.storage.Lease(owner="", expires_at=0, epoch=1),
        "ex-dead": ms.storage.Lease(owner=dead, expires_at=far, epoch=1),
        "ex-paused": ms.storage.Lease(owner="", expires_at=0, epoch=1),
    }
    store = SqliteStore(path)
    for run_id, lease in leases.items():
        assert store.create(
            ms.storage.Execution(
                id=run_id,
                goal="g",
                status="paused" if run_id == "ex-paused" else "running",
                plan=ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s1", tool="t"),)),
                plan_version=1,
                lease=lease,
                created_at=1_000.0,
                updated_at=2_000.0,
            )
        )
    return store


#: This checkout, for a child process to import it.
_ROOT = str(Path(ms.__file__).resolve().parent.parent)


async def test_L7_the_view_says_when_nobody_runs_a_running_run(tmp_path: Path) -> None:
    """As ``ls`` and ``show`` do: a running run whose lease lapsed or was let go (a shutdown)
    has no owner since then; one whose owner's process on this host ended (``kill -9``) has
    its owner gone (L7), though its lease still looks live. A held run, a paused one: none."""
    child = await anyio.run_process(
        [
            sys.executable,
            "-c",
            "from mainspring.storage._seam import new_owner_id as n; print(n())",
        ],
        env={**os.environ, "PYTHONPATH": _ROOT},
    )
    dead = child.stdout.decode().strip()  # the process that made this owner id has ended
    store = await anyio.to_thread.run_sync(_owners_store, tmp_path / "s.sqlite3", dead)
    try:
        async with serve(store) as ui, client(ui) as http:
            rows = {r["id"]: r for r in (await http.get("/api/runs")).json()["runs"]}
            since = {run_id: row["no_owner_since"] for run_id, row in rows.items()}
            assert since == {
                "ex-held": None, "ex-lapsed": 1_500, "ex-released": 2_000, "ex-dead": None,
                "ex-paused": None,
            }  # fmt: skip
            gone = {run_id for run_id, row in rows.items() if row["owner_gone"]}
            assert gone == {"ex-dead"}
            view = (await http.get("/api/runs/ex-dead")).json()
            assert view["summary"]["owner_gone"] is True
            view = (await http.get("/api/runs/ex-lapsed")).json()
            assert view["summary"]["no_owner_since"] == 1_500
            assert view["lease"] is None
    finally:
        await anyio.to_thread.run_sync(store.close)
