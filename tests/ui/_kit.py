"""Shared by the view's tests: a store with runs of every shape, a client that carries the
token, and a reader of server-sent events."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import orjson
from anyio.streams.buffered import BufferedByteReceiveStream

import mainspring as ms
from mainspring.ui import UiServer
from tests.executions._kit import FAST, agent, plan_of, tool

SECRET = "ghp_" + "Q" * 36


async def inc(x: int = 0) -> int:
    return x + 1


async def fail(**_: Any) -> None:
    raise RuntimeError(f"this tool always fails ({SECRET})")


async def asker(ctx: ms.AgentContext, input: Any) -> str:
    await ctx.step("look", lambda: {"seen": 1})
    answer = await ctx.ask("which way?")
    await ctx.step("go", lambda: {"way": len(answer)})
    return "went"


#: The code a view needs to resume these runs (as ``--app`` gives it).
APP: dict[str, Any] = {"tools": {"inc": inc, "fail": fail}, "agents": {"asker": asker}, **FAST}

#: ``a -> (b, c) -> d``: c fails, so d is skipped.
FAILING = plan_of(
    tool("a"), tool("b", "inc", "a"), tool("c", "fail", "a"), tool("d", "inc", "b", "c")
)


async def fill(store: Any) -> None:
    """Three runs: ``ex-fail`` (failed), ``ex-ok`` (completed), ``ex-ask`` (an agent waiting
    for an answer)."""
    async with ms.open_runtime(store=store, **APP) as rt:
        assert (
            await (await rt.start("count and fail", FAILING, execution_id="ex-fail")).wait()
        ).status == "failed"
        done = await (
            await rt.start(
                "count twice", plan_of(tool("a"), tool("b", "inc", "a")), execution_id="ex-ok"
            )
        ).wait()
        assert done.status == "completed"
        waiting = await (
            await rt.start("ask the way", plan_of(agent("q", "asker")), execution_id="ex-ask")
        ).wait()
        assert waiting.status == "waiting_for_clarification", waiting


@asynccontextmanager
async def client(ui: UiServer, *, token: bool = True) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"x-mainspring-token": ui.token} if token else {}
    async with httpx.AsyncClient(base_url=ui.base, headers=headers, timeout=30) as http:
        yield http


class Raw:
    """One HTTP/1.0 exchange over a plain socket, read a line at a time (an event stream is
    read this way: no client library's generators left open when a test stops reading)."""

    def __init__(self, stream: BufferedByteReceiveStream) -> None:
        self._stream = stream
        self.status = 0
        self.headers: dict[str, str] = {}

    async def line(self) -> str | None:
        """The next line, or None at the end of the response."""
        try:
            return (await self._stream.receive_until(b"\n", 1 << 20)).decode().rstrip("\r")
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            return None

    async def rest(self) -> bytes:
        chunks = []
        while True:
            try:
                chunks.append(await self._stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return b"".join(chunks)


@asynccontextmanager
async def raw(
    ui: UiServer,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> AsyncIterator[Raw]:
    """Send ``method path`` with the token (and ``headers``, ``body`` as given, which may
    be less than a content-length says) and read the status line and headers."""
    given = {"host": f"{ui.host}:{ui.port}", "x-mainspring-token": ui.token, **(headers or {})}
    head = f"{method} {path} HTTP/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in given.items())
    async with await anyio.connect_tcp(ui.host, ui.port) as sock:
        await sock.send(head.encode() + b"\r\n" + body)
        exchange = Raw(BufferedByteReceiveStream(sock))
        first = await exchange.line()
        assert first is not None
        exchange.status = int(first.split()[1])
        while line := await exchange.line():
            key, _, value = line.partition(":")
            exchange.headers[key.lower()] = value.strip()
        yield exchange


async def sse(
    ui: UiServer, path: str, count: int, *, headers: dict[str, str] | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """The first ``count`` events of the stream at ``path``: (id, data) pairs."""
    found: list[tuple[int, dict[str, Any]]] = []
    event_id: int | None = None
    with anyio.fail_after(30):
        async with raw(ui, "GET", path, headers=headers) as response:
            assert response.status == 200, await response.rest()
            assert response.headers["content-type"].startswith("text/event-stream")
            while len(found) < count and (line := await response.line()) is not None:
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("data: "):
                    assert event_id is not None
                    found.append((event_id, orjson.loads(line[6:])))
    return found


async def reaches(runtime: ms.Runtime, execution_id: str, status: str) -> None:
    """Wait until the durable history says ``execution_id`` reached ``status`` (committed
    by any process on the store)."""
    with anyio.fail_after(30):
        async with contextlib.aclosing(runtime.events(execution_id, after=0, poll=0.05)) as events:
            async for event in events:
                if event.kind == "status" and event.status == status:
                    return
