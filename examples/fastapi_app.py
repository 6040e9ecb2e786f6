"""mainspring inside a FastAPI app: the runtime lives in the app's lifespan.

Run it with ``uvicorn examples.fastapi_app:app`` (install ``fastapi`` and ``uvicorn``), then:

    curl -X POST localhost:8000/executions -d '{"goal": "research wind"}' \\
         -H 'content-type: application/json'
    curl localhost:8000/executions/<id>
    curl -X POST localhost:8000/executions/<id>/resume -d '{"answer": "yes"}' ...
    curl -N localhost:8000/events            # server-sent events, ids and states only

The runtime's store defaults to ``$MAINSPRING_HOME``; set ``MAINSPRING_STORE`` to put it
elsewhere. Every endpoint returns quickly: runs go on in the background, inside the
lifespan, and stop (releasing their leases, resumable) when the server shuts down.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

import mainspring as ms

# -- the agent world: deterministic stand-ins for real tools, models and agents -----------


async def search(topic: str) -> str:
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


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    store = os.environ.get("MAINSPRING_STORE")
    async with ms.open_runtime(store=store, **runtime_options()) as rt:
        app.state.runtime = rt
        # Runs the last shutdown (or crash) interrupted go on here: the runtime takes them
        # over by itself (at once if their process on this host is gone, else once their
        # lease lapses); recover() does a pass now and says what it left alone.
        await rt.recover()
        yield


app = FastAPI(title="mainspring example", lifespan=lifespan)


@app.exception_handler(ms.storage.InvalidId)
async def invalid_id(request: Request, exc: ms.storage.InvalidId) -> JSONResponse:
    return JSONResponse({"detail": "invalid id"}, status_code=400)


class StartBody(BaseModel):
    goal: str


class ResumeBody(BaseModel):
    answer: str | None = None
    approve: bool = False


def _rt(request: Request) -> ms.Runtime:
    runtime: ms.Runtime = request.app.state.runtime
    return runtime


def _view(execution: ms.storage.Execution) -> dict[str, Any]:
    plan = execution.plan
    return {
        "id": execution.id,
        "status": execution.status,
        "steps": {s.id: s.status for s in plan.steps} if plan else {},
        "pending": execution.pending.question if execution.pending else None,
        "calls_used": execution.calls_used,
    }


def _result(result: ms.ExecutionResult) -> dict[str, Any]:
    return {"id": result.execution_id, "status": result.status, "summary": result.summary}


@app.post("/executions", status_code=202)
async def start(body: StartBody, request: Request) -> dict[str, str]:
    handle = await _rt(request).start(body.goal)
    return {"id": handle.execution_id}


@app.get("/executions/{execution_id}")
async def show(execution_id: str, request: Request) -> dict[str, Any]:
    execution = await _rt(request).get(execution_id)
    if execution is None:
        raise HTTPException(404, "no such execution")
    return _view(execution)


@app.get("/executions/{execution_id}/tasks")
async def tasks(execution_id: str, request: Request) -> list[dict[str, Any]]:
    try:
        records = await _rt(request).agent_tasks(execution_id)
    except ms.UnknownExecution:
        raise HTTPException(404, "no such execution") from None
    return [{"id": t.id, "state": t.state, "step": t.step_id} for t in records]


@app.post("/executions/{execution_id}/pause")
async def pause(execution_id: str, request: Request) -> dict[str, Any]:
    try:
        return _result(await _rt(request).pause(execution_id, reason="paused over HTTP"))
    except ms.UnknownExecution:
        raise HTTPException(404, "no such execution") from None


@app.post("/executions/{execution_id}/cancel")
async def cancel(execution_id: str, request: Request) -> dict[str, Any]:
    try:
        return _result(await _rt(request).cancel(execution_id, reason="cancelled over HTTP"))
    except ms.UnknownExecution:
        raise HTTPException(404, "no such execution") from None


@app.post("/executions/{execution_id}/resume", status_code=202)
async def resume(execution_id: str, body: ResumeBody, request: Request) -> dict[str, str]:
    try:
        handle = await _rt(request).resume(execution_id, answer=body.answer, approve=body.approve)
    except ms.UnknownExecution:
        raise HTTPException(404, "no such execution") from None
    except ms.ExecutionBusy as exc:
        raise HTTPException(409, str(exc)) from None
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
async def events(request: Request, limit: int = 0) -> StreamingResponse:
    """Server-sent events: every runtime event (ids, states, counts only). ``limit`` ends
    the stream after that many events (0: never)."""
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
