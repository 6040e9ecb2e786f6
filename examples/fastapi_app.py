"""mainspring inside a FastAPI app: a template to start from.

Run it with ``uvicorn examples.fastapi_app:app`` (install ``fastapi`` and ``uvicorn``), then:

    curl -X POST localhost:8000/executions -d '{"goal": "research wind"}' \\
         -H 'content-type: application/json'              # 202 {"id": ...}
    curl localhost:8000/executions                          # the runs, newest first
    curl localhost:8000/executions/<id>                     # steps, outputs, step errors
    curl -N localhost:8000/executions/<id>/events           # its history, as server-sent events
    curl -X POST localhost:8000/executions/<id>/answer -d '{"text": "deep"}' \\
         -H 'content-type: application/json'              # answer the question it waits on
    curl -X POST localhost:8000/executions/<id>/pause       # ... /cancel, /resume
    curl -N localhost:8000/events                           # live events of every run here

The per-run stream sends each committed change with an ``id:`` line (its sequence number);
a client that reconnects with ``Last-Event-ID`` (browsers' ``EventSource`` do) gets what
came after it, nothing missed and nothing repeated. Events carry ids, states and counts
only, never text an agent wrote.

The runtime's store defaults to ``$MAINSPRING_HOME``; set ``MAINSPRING_STORE`` to put it
elsewhere. Every endpoint returns quickly: runs go on in the background, inside the
lifespan. On Ctrl-C (or SIGTERM) the event streams end first, so the server does not wait
for their clients to hang up; then the lifespan closes the runtime and every run stops,
releasing its lease, resumable by the next start (``rt.recover()``). A client that stopped
reading while its socket's buffers were full holds its response, and so the server's exit,
until it reads again: run uvicorn with ``--timeout-graceful-shutdown 5`` to bound that.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from types import FrameType
from typing import Annotated, Any

import anyio
import anyio.to_thread
import attrs
from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import AfterValidator, BaseModel, Field

import mainspring as ms

# -- the agent world: deterministic stand-ins for real tools, models and agents -----------

#: Seconds the stand-in search takes, as a real one would (0 by default).
SEARCH_LATENCY = float(os.environ.get("EXAMPLE_SEARCH_LATENCY", "0"))


async def search(topic: str) -> str:
    await anyio.sleep(SEARCH_LATENCY)
    if not topic.isalpha():  # real tools fail too: the run's view shows the step's error
        raise ValueError(f"nothing to search for in {topic!r}")
    return f"3 sources on {topic}"


async def summarize(text: str) -> str:
    return f"summary of {text}"


async def researcher(ctx: ms.AgentContext, input: dict[str, Any]) -> str:
    found = await ctx.step("search", search, input["topic"])
    depth = await ctx.ask(f"How deep should the report on {input['topic']} go?")
    return f"{found}, depth: {depth}"


def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
    topic = goal.split()[-1]
    return ms.Plan(
        id="web",
        goal=goal,
        steps=(
            ms.PlanStep(id="search", tool="search", input={"topic": topic}),
            ms.PlanStep(id="sum", skill="summarize", input={"text": topic}, depends_on=("search",)),
            ms.PlanStep(
                id="research", agent="researcher", input={"topic": topic}, depends_on=("sum",)
            ),
        ),
    )


def runtime_options() -> dict[str, Any]:
    """What ``mainspring resume --app examples.fastapi_app:runtime_options`` needs too."""
    return {
        "tools": {"search": search},
        "skills": {"summarize": summarize},
        "agents": {"researcher": researcher},
        "planner": planner,
    }


# -- the app ------------------------------------------------------------------------------


@contextlib.contextmanager
def streams_end_on_exit_signal(rt: ms.Runtime) -> Iterator[None]:
    """On SIGINT or SIGTERM, end the runtime's event streams, then let the server stop.

    A server (uvicorn, like most) runs the lifespan's exit, where the runtime closes, only
    once its open responses have finished; an event stream finishes only when the runtime
    closes its streams. So this wraps the server's own signal handlers: each first asks the
    event loop to call ``rt.close_streams()`` (every ``async for`` over ``rt.events()`` then
    ends normally), then hands the signal to the server. Signals whose handler is not a
    Python callable (not a server's), and any thread but the main one, are left alone.

    That is uvicorn's way (its own process takes the signal). Hypercorn's command instead
    tells its worker processes to stop through an event from its parent, with the signals
    ignored in the workers: there this wraps nothing, and hypercorn cancels responses still
    open once its ``graceful_timeout`` has passed. A server stopped some other way can call
    ``rt.close_streams()`` itself where its shutdown begins.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        schedule: Callable[[Callable[[], None]], Any] = (
            asyncio.get_running_loop().call_soon_threadsafe
        )
    except RuntimeError:  # not asyncio: trio (a trio server run in this process)
        import trio

        schedule = trio.lowlevel.current_trio_token().run_sync_soon
    servers: dict[int, Callable[[int, FrameType | None], Any]] = {}

    def on_exit(signum: int, frame: FrameType | None) -> None:
        schedule(rt.close_streams)  # safe from a signal handler, unlike most loop calls
        servers[signum](signum, frame)

    for exit_signal in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(exit_signal)
        if callable(handler):
            servers[exit_signal] = handler
            signal.signal(exit_signal, on_exit)
    try:
        yield
    finally:
        for number, server in servers.items():
            if signal.getsignal(number) is on_exit:
                signal.signal(number, server)


def log_failures_with_the_server() -> None:
    """Let a step, planner or agent that fails say so in the server's log.

    mainspring logs each failure, with its run's and step's ids and traceback, under
    ``mainspring.executions``, and prints nothing unless the application configures
    logging. uvicorn configures its own loggers only: so, unless logging was configured
    otherwise (a root handler, or one on ``mainspring``), mainspring's records go where
    uvicorn's errors go. Under another server this does nothing; configure logging there.
    """
    ours = logging.getLogger("mainspring")
    if logging.getLogger().handlers or any(
        not isinstance(handler, logging.NullHandler) for handler in ours.handlers
    ):
        return  # the application configured logging: its choice stands
    for name in ("uvicorn.error", "uvicorn"):  # uvicorn's error log writes through these
        for handler in logging.getLogger(name).handlers:
            if handler not in ours.handlers:
                ours.addHandler(handler)
    if ours.level == logging.NOTSET:
        ours.setLevel(logging.INFO)  # a retried attempt is INFO, a failed step WARNING


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    log_failures_with_the_server()
    store = os.environ.get("MAINSPRING_STORE")
    async with ms.open_runtime(store=store, **runtime_options()) as rt:
        app.state.runtime = rt
        with streams_end_on_exit_signal(rt):
            # Runs the last shutdown (or crash) interrupted go on here: the runtime takes
            # them over by itself (at once if their process on this host is gone, else once
            # their lease lapses); recover() does a pass now and says what it left alone.
            await rt.recover()
            yield


app = FastAPI(title="mainspring example", lifespan=lifespan)


@app.exception_handler(RequestValidationError)
async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A 422 that says what is wrong without echoing the input, as FastAPI's own does: a
    goal may be large, hold a secret, or not even encode."""
    errors = [{"loc": e["loc"], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    return JSONResponse({"detail": errors}, status_code=422)


@app.exception_handler(ms.storage.InvalidId)
async def invalid_id(request: Request, exc: ms.storage.InvalidId) -> JSONResponse:
    return JSONResponse({"detail": "invalid id"}, status_code=400)


@app.exception_handler(ms.UnknownExecution)
async def unknown_execution(request: Request, exc: ms.UnknownExecution) -> JSONResponse:
    return JSONResponse({"detail": "no such execution"}, status_code=404)


def _storable(text: str) -> str:
    """JSON may carry lone surrogates (``"\\ud800"``); a store keeps UTF-8 only."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid UTF-8 text") from None
    return text


#: What a client may send as a goal: bounded, storable text (else 422).
Text = Annotated[str, Field(min_length=1, max_length=100_000), AfterValidator(_storable)]


class StartBody(BaseModel):
    goal: Text


class AnswerBody(BaseModel):
    text: str


class ResumeBody(BaseModel):
    answer: str | None = None
    approve: bool = False


def _rt(request: Request) -> ms.Runtime:
    runtime: ms.Runtime = request.app.state.runtime
    return runtime


async def _execution(rt: ms.Runtime, execution_id: str) -> ms.storage.Execution:
    execution = await rt.get(execution_id)
    if execution is None:
        raise HTTPException(404, "no such execution")
    return execution


def _view(execution: ms.storage.Execution) -> dict[str, Any]:
    """A run as its owner sees it. What is stored was redacted before it reached disk: an
    output or error holding a secret shows it masked."""
    plan = execution.plan
    outputs: dict[str, Any] = {}
    errors: dict[str, dict[str, Any]] = {}
    for obs in execution.observations:  # the last one of a step wins (retries, resumes)
        if obs.ok:
            outputs[obs.step_id] = obs.output
            errors.pop(obs.step_id, None)
        else:
            errors[obs.step_id] = {"error": obs.error, "code": obs.code}
            outputs.pop(obs.step_id, None)
    return {
        "id": execution.id,
        "status": execution.status,
        "goal": execution.goal,
        "steps": {s.id: s.status for s in plan.steps} if plan else {},
        "outputs": outputs,
        "errors": errors,
        "pending": execution.pending.question if execution.pending else None,
        "calls_used": execution.calls_used,
        "updated_at": execution.updated_at,
    }


def _result(result: ms.ExecutionResult) -> dict[str, Any]:
    return {"id": result.execution_id, "status": result.status, "summary": result.summary}


@app.post("/executions", status_code=202)
async def start(body: StartBody, request: Request) -> dict[str, str]:
    handle = await _rt(request).start(body.goal)
    return {"id": handle.execution_id}


@app.get("/executions")
async def list_executions(
    request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[dict[str, Any]]:
    """The stored runs, most recently changed first (at most ``limit``)."""
    found = sorted(await _rt(request).executions(), key=lambda e: e.updated_at, reverse=True)
    return [
        {
            "id": e.id,
            "status": e.status,
            "steps_done": sum(1 for s in e.plan.steps if s.status.finished) if e.plan else 0,
            "steps_total": len(e.plan.steps) if e.plan else 0,
            "updated_at": e.updated_at,
        }
        for e in found[:limit]
    ]


@app.get("/executions/{execution_id}")
async def show(execution_id: str, request: Request) -> dict[str, Any]:
    return _view(await _execution(_rt(request), execution_id))


@app.get("/executions/{execution_id}/tasks")
async def tasks(execution_id: str, request: Request) -> list[dict[str, Any]]:
    records = await _rt(request).agent_tasks(execution_id)
    return [{"id": t.id, "state": t.state, "step": t.step_id} for t in records]


def _sse(entry: ms.storage.HistoryEvent) -> str:
    data = {k: v for k, v in attrs.asdict(entry).items() if v is not None}
    return f"id: {entry.seq}\nevent: {entry.kind}\ndata: {json.dumps(data)}\n\n"


def _finished(entry: ms.storage.HistoryEvent) -> bool:
    if entry.kind != "status" or entry.status is None:
        return False
    return ms.storage.ExecutionStatus(entry.status).terminal  # the execution's new status


@app.get("/executions/{execution_id}/events")
async def execution_events(
    execution_id: str,
    request: Request,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    """Server-sent events: every change committed to this run, oldest first, each with
    ``id:`` its sequence number. Resumes after ``Last-Event-ID`` (or ``?after=``): nothing
    missed, nothing repeated. Ends once the run has finished (a reconnection then gets 204
    No Content, which tells an ``EventSource`` to stop), and when the server stops (the
    client reconnects with ``Last-Event-ID`` to the next one). A position that is neither 0
    nor the id of one of this run's events (another store's, one from the future) is a 400:
    the stream could never reach the run's end from there."""
    if last_event_id is not None:
        if not last_event_id.isdigit() or len(last_event_id) > 19:
            raise HTTPException(400, "Last-Event-ID must be a sequence number")
        after = int(last_event_id)
    after = after or 0
    rt = _rt(request)
    done = (await _execution(rt, execution_id)).terminal
    read = functools.partial(rt.store.history, execution_id)
    if after:  # it must name one of this run's events
        found = await anyio.to_thread.run_sync(functools.partial(read, after=after - 1, limit=1))
        if not found or found[0].seq != after:
            raise HTTPException(400, "no event of this run has that id")
    if done and not await anyio.to_thread.run_sync(functools.partial(read, after=after, limit=1)):
        return Response(status_code=204)  # finished, all sent: EventSource stops reconnecting

    async def stored(after: int) -> AsyncIterator[str]:
        """A finished run's entries after ``after``: nothing more will come."""
        while page := await anyio.to_thread.run_sync(functools.partial(read, after=after)):
            for entry in page:
                yield _sse(entry)
            after = page[-1].seq

    async def followed(after: int) -> AsyncIterator[str]:
        # Ends when the server stops too: rt.close_streams() (see streams_end_on_exit_signal).
        async with contextlib.aclosing(rt.events(execution_id, after=after)) as entries:
            async for entry in entries:
                yield _sse(entry)
                after = entry.seq
                if _finished(entry):
                    break
            else:
                return
        # The rest of the commit that finished it (its steps, tasks...) is durable with it.
        async for text in stored(after):
            yield text

    stream = stored(after) if done else followed(after)
    return StreamingResponse(stream, media_type="text/event-stream")


@app.post("/executions/{execution_id}/answer", status_code=202)
async def answer(execution_id: str, body: AnswerBody, request: Request) -> dict[str, str]:
    """Answer the question the run waits on; 409 if it waits on none or has its answer
    already, 422 for text that cannot be stored.

    ``rt.answer`` stores the answer durably (or refuses); a run live in another process
    takes it at its next heartbeat, a waiting one continues here. A paused run keeps the
    answer for its resume: answering does not undo a pause."""
    rt = _rt(request)
    try:
        await rt.answer(execution_id, body.text)
    except (ms.executions.NotWaiting, ms.ExecutionBusy) as exc:
        raise HTTPException(409, str(exc)) from None
    except ms.storage.InvalidId:
        raise  # 400, by its handler
    except ValueError as exc:  # no UTF-8 form (JSON can carry a lone surrogate)
        raise HTTPException(422, str(exc)) from None
    except ms.storage.TooLarge as exc:
        raise HTTPException(413, str(exc)) from None
    except ms.UnknownExecution:
        raise HTTPException(404, "no such execution") from None
    stored = await rt.get(execution_id)
    if stored is not None and stored.status == "waiting_for_clarification":
        with contextlib.suppress(ms.ExecutionBusy):  # live elsewhere: that runner takes it
            await rt.resume(execution_id)
    return {"id": execution_id}


@app.post("/executions/{execution_id}/pause")
async def pause(execution_id: str, request: Request) -> dict[str, Any]:
    return _result(await _rt(request).pause(execution_id, reason="paused over HTTP"))


@app.post("/executions/{execution_id}/cancel")
async def cancel(execution_id: str, request: Request) -> dict[str, Any]:
    return _result(await _rt(request).cancel(execution_id, reason="cancelled over HTTP"))


@app.post("/executions/{execution_id}/resume", status_code=202)
async def resume(
    execution_id: str, request: Request, body: ResumeBody | None = None
) -> dict[str, str]:
    body = body or ResumeBody()  # no body: resume with no answer and no approval
    try:
        handle = await _rt(request).resume(execution_id, answer=body.answer, approve=body.approve)
    except ms.executions.NotWaiting as exc:  # an answer for a run that waits for none
        raise HTTPException(409, str(exc)) from None
    except ms.ExecutionBusy:  # its message names the owner (host, pid): not the client's
        raise HTTPException(409, "the run is live in another process") from None
    except ms.storage.InvalidId:
        raise  # 400, by its handler
    except ValueError as exc:  # an answer with no UTF-8 form
        raise HTTPException(422, str(exc)) from None
    except ms.storage.TooLarge as exc:
        raise HTTPException(413, str(exc)) from None
    return {"id": handle.execution_id}


@app.post("/tasks/{task_id}/stop")
async def stop_task(task_id: str, request: Request, cascade: bool = False) -> dict[str, Any]:
    """Stop one agent task: its step counts as done without a result; ``?cascade=true``
    cancels the step and its dependents instead."""
    result = await _rt(request).stop_agent_task(task_id, cascade=cascade)
    if result.state == "unknown":
        raise HTTPException(404, "no such agent task")
    return attrs.asdict(result)


@app.get("/events")
async def events(request: Request, limit: Annotated[int, Query(ge=0)] = 0) -> StreamingResponse:
    """Server-sent events: the live events of every run in this process (ids, states,
    counts only). ``limit`` ends the stream after that many events (0: never); it ends
    when the server stops too."""
    rt = _rt(request)

    async def stream() -> AsyncIterator[str]:
        sent = 0
        async with contextlib.aclosing(rt.events()) as events:  # closed when the client goes
            async for event in events:
                data = attrs.asdict(event) if attrs.has(type(event)) else {}
                yield f"event: {type(event).__name__}\ndata: {json.dumps(data)}\n\n"
                sent += 1
                if limit and sent >= limit:
                    return

    return StreamingResponse(stream(), media_type="text/event-stream")
