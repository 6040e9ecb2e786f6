"""The routes: two pages, their static files, the JSON reads, the history stream and the
controls, behind the token (:mod:`._auth`).

Pages: ``/`` (the runs) and ``/runs/{id}`` (one run). Reads: ``GET /api/runs`` (``status``
comma-separated, ``q`` text, ``limit``), ``GET /api/runs/{id}``, ``GET /api/runs/{id}/events``
(server-sent events; ``after`` or ``Last-Event-ID``) and ``GET /api/events`` (every run's;
``after=end``: from now on, as the runs list follows them).
Controls, ``POST`` with a JSON body: ``/api/runs/{id}/pause | cancel`` (``reason``),
``/api/runs/{id}/resume`` (``answer``, ``approve``), ``/api/runs/{id}/answer`` (``text``),
``/api/tasks/{id}/stop`` (``cascade``).

Every id is checked (X1) before it reaches the store (400 otherwise); a body is JSON of at
most :data:`MAX_BODY` bytes (413), sent as ``application/json`` from this origin (a form or
another site cannot post one: 415, 403).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..executions import Runtime
from ..storage import InvalidId, Store
from ..storage._seam import check_id
from ._auth import ASGIApp, TokenGate
from ._controls import Controls, Refused
from ._stream import BadCursor, EventStream, cursor, history_end, history_events
from ._views import MAX_RUNS, STATUSES, run_view, runs_view

STATIC = Path(__file__).parent / "static"
#: The largest request body a control takes (an answer is the longest).
MAX_BODY = 64 * 1024
#: The longest ``q`` a list filter takes.
MAX_QUERY = 200
#: Store reads the view makes at once (the runtime's writer keeps its own threads).
READERS = 4


class _Problem(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _json(value: Any, status: int = 200) -> Response:
    body = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    return Response(body, status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def _whole(text: str) -> bool:
    """Whether ``text`` is a whole number ``int`` reads: ASCII digits only (``isdigit``
    alone also says yes to a superscript two, which ``int`` refuses), at most 20 of them."""
    return text.isascii() and text.isdigit() and len(text) <= 20


def _id(request: Request, what: str = "execution") -> str:
    raw = request.path_params["id"]
    try:
        check_id(raw)
    except InvalidId:
        raise _Problem(400, f"not a valid {what} id") from None
    return str(raw)


async def _body(request: Request) -> dict[str, Any]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise _Problem(415, "send the control as application/json")
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host')}":
        raise _Problem(403, "a control comes from this view's own page only")
    length = request.headers.get("content-length")
    if length is not None and (not _whole(length) or int(length) > MAX_BODY):
        raise _Problem(413, f"a control's body is at most {MAX_BODY} bytes")
    size = 0
    chunks = []
    async with contextlib.aclosing(request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > MAX_BODY:
                raise _Problem(413, f"a control's body is at most {MAX_BODY} bytes")
            chunks.append(chunk)
    try:
        body = orjson.loads(b"".join(chunks) or b"{}")
    except orjson.JSONDecodeError:
        raise _Problem(400, "the body is not JSON") from None
    if type(body) is not dict:
        raise _Problem(400, "the body is a JSON object")
    return body


def _text(body: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if type(value) is not str or (required and not value.strip()):
        raise _Problem(400, f"{key} must be text" + (" (not empty)" if required else ""))
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Problem(400, f"{key} must be valid Unicode") from None
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if type(value) is not bool:
        raise _Problem(400, f"{key} must be true or false")
    return value


class _View:
    """The handlers of one view: its store, its runtime and its controls."""

    def __init__(self, runtime: Runtime, controls: Controls) -> None:
        self.rt = runtime
        self.store: Store = runtime.store
        self.controls = controls
        self.readers = anyio.CapacityLimiter(READERS)

    async def read(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            return function(*args, **kwargs)

        return await anyio.to_thread.run_sync(call, limiter=self.readers)

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    async def run_page(self, request: Request) -> Response:
        _id(request)
        return FileResponse(STATIC / "run.html", media_type="text/html; charset=utf-8")

    async def runs(self, request: Request) -> Response:
        params = request.query_params
        statuses = [s for s in params.get("status", "").split(",") if s]
        unknown = [s for s in statuses if s not in STATUSES]
        if unknown:
            raise _Problem(400, f"not a status: {unknown[0][:40]!r}")
        text = params.get("q", "")
        if len(text) > MAX_QUERY:
            raise _Problem(400, f"the text filter is at most {MAX_QUERY} characters")
        raw_limit = params.get("limit", str(MAX_RUNS))
        if not _whole(raw_limit) or not 1 <= int(raw_limit) <= MAX_RUNS:
            raise _Problem(400, f"limit is a whole number in 1..{MAX_RUNS}")
        view = await self.read(
            runs_view, self.store, statuses=statuses, text=text, limit=int(raw_limit)
        )
        return _json(view)

    async def run(self, request: Request) -> Response:
        execution_id = _id(request)
        execution = await self.read(self.store.get, execution_id)
        if execution is None:
            raise _Problem(404, f"no execution {execution_id} in this store")
        view = await self.read(
            run_view,
            self.store,
            execution,
            can_resume=self.controls.can_resume,
            organization=self.rt.memory.organization,
        )
        return _json(view)

    async def _stream(self, request: Request, execution_id: str | None) -> Response:
        resumed = request.headers.get("last-event-id")
        start = request.query_params.get("after")
        if start == "end" and resumed in (None, ""):  # what happens from now on
            start = str(await self.read(history_end, self.store))
        try:
            after = cursor(resumed, start)
        except BadCursor as exc:
            raise _Problem(400, str(exc)) from None
        return EventStream(
            history_events(self.rt, execution_id, after), headers={"x-accel-buffering": "no"}
        )

    async def run_events(self, request: Request) -> Response:
        return await self._stream(request, _id(request))

    async def all_events(self, request: Request) -> Response:
        return await self._stream(request, None)

    async def control(self, request: Request) -> Response:
        execution_id = _id(request)
        action = request.path_params["action"]
        body = await _body(request)
        if action in ("pause", "cancel"):
            reason = _text(body, "reason") or ""
            if len(reason) > 4_000:
                raise _Problem(400, "a reason is at most 4000 characters")
            done = await self.controls.pause_or_cancel(action, execution_id, reason)
        elif action == "resume":
            done = await self.controls.resume(
                execution_id, answer=_text(body, "answer"), approve=_flag(body, "approve")
            )
        elif action == "answer":
            text = _text(body, "text", required=True)
            assert text is not None
            done = await self.controls.answer(execution_id, text)
        else:
            raise _Problem(404, "no such control")
        return _json(done)

    async def stop_task(self, request: Request) -> Response:
        task_id = _id(request, "task")
        body = await _body(request)
        return _json(await self.controls.stop_task(task_id, cascade=_flag(body, "cascade")))


def _guarded(handler: Any) -> Any:
    async def guarded(request: Request) -> Response:
        try:
            response: Response = await handler(request)
        except _Problem as exc:
            return _error(exc.status, str(exc))
        except Refused as exc:
            return _error(exc.status, str(exc))
        return response

    return guarded


def make_app(runtime: Runtime, *, token: str, can_resume: bool = False) -> ASGIApp:
    """The view as an ASGI app on ``runtime`` (its store is the one shown; its calls are the
    controls), behind ``token``. ``can_resume``: the runtime was opened with the user's code
    (``--app``), so the resume button may run it."""
    view = _View(runtime, Controls(runtime, can_resume=can_resume))
    routes = [
        Route("/", _guarded(view.index)),
        Route("/favicon.ico", lambda _: Response(status_code=204)),
        Route("/runs/{id}", _guarded(view.run_page)),
        Route("/api/runs", _guarded(view.runs)),
        Route("/api/runs/{id}", _guarded(view.run)),
        Route("/api/runs/{id}/events", _guarded(view.run_events)),
        Route("/api/events", _guarded(view.all_events)),
        Route("/api/runs/{id}/{action}", _guarded(view.control), methods=["POST"]),
        Route("/api/tasks/{id}/stop", _guarded(view.stop_task), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    return TokenGate(Starlette(routes=routes), token)
