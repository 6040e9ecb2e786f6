"""Server-sent events from the durable history (V2): every committed entry of a run (or of
every run) after a sequence number, then each one as it is committed, by any process on the
store. Each event's ``id`` is the entry's ``seq``: a browser that loses the stream reconnects
with ``Last-Event-ID`` and the stream starts after it, so nothing is missed or sent twice.

The stream ends when the view begins to stop (``Runtime.close_streams``, V4); the browser
reconnects to the next view and resumes from its last id.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from ..executions import Runtime
from ..storage import Store
from ..storage._seam import check_history_after
from ._views import history_entry

#: How long the browser waits before reconnecting a lost stream (milliseconds).
RETRY_MS = 1_000
#: How often a follower looks for other processes' commits (seconds).
POLL = 0.25


def history_end(store: Store) -> int:
    """The sequence number of the store's newest history entry (0: none), found in a few
    one-entry reads (a binary search over ``after``, whatever the history's length): where
    a stream of what happens from now on starts. Blocking: call it in a worker thread."""

    def beyond(seq: int) -> bool:
        return bool(store.history(None, after=seq, limit=1))

    if not beyond(0):
        return 0
    low, high = 0, 1  # beyond(low) holds; find a high it does not
    while beyond(high):
        low, high = high, high * 2
    while high - low > 1:  # beyond(low) and not beyond(high)
        middle = (low + high) // 2
        low, high = (middle, high) if beyond(middle) else (low, middle)
    return high


class BadCursor(ValueError):
    """A ``Last-Event-ID`` or ``after`` that is not a sequence number."""


def cursor(last_event_id: str | None, after: str | None) -> int:
    """Where a stream starts: after ``Last-Event-ID`` if the browser sent one (it resumes),
    else after ``after`` (the page's first connection), else from the start."""
    raw = last_event_id if last_event_id not in (None, "") else after
    if raw is None or raw == "":
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > 20:
        raise BadCursor(f"not a sequence number: {raw[:40]!r}")
    try:
        return int(check_history_after(int(raw)))
    except (ValueError, TypeError) as exc:
        raise BadCursor(str(exc)) from None


async def history_events(
    runtime: Runtime, execution_id: str | None, after: int
) -> AsyncIterator[bytes]:
    """The SSE body: a retry hint, then one ``entry`` event per history entry after
    ``after`` (of ``execution_id``, or of every run when None)."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    async with contextlib.aclosing(runtime.events(execution_id, after=after, poll=POLL)) as events:
        async for event in events:
            data = orjson.dumps(history_entry(event)).decode()
            yield f"id: {event.seq}\nevent: entry\ndata: {data}\n\n".encode()


class EventStream(StreamingResponse):
    """A ``text/event-stream`` response that ends when the browser leaves (its disconnect
    is watched while the stream waits for news: a closed tab frees its follower at once,
    not at the next commit) and whose body (an async generator) is closed however the
    response ends, on asyncio and on trio."""

    def __init__(self, body: AsyncIterator[bytes], **kwargs: Any) -> None:
        super().__init__(body, media_type="text/event-stream", **kwargs)
        self._body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_end_shielded(message: Message) -> None:
            # The server answers the response's last chunk with ``http.disconnect`` while
            # that send is still on its way (it recycles or closes the connection inside
            # it), so ``watch`` cancels the scope mid-send. On trio a cancelled scope fails
            # every later await, the connection's close among them: the socket stayed open
            # and a stopping view waited its whole grace for it (V4). The last chunk is
            # sent shielded; every other send stays cancellable (a browser that left).
            if message["type"] == "http.response.body" and not message.get("more_body"):
                with anyio.CancelScope(shield=True):
                    await send(message)
            else:
                await send(message)

        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                async with contextlib.aclosing(self._body):  # type: ignore[type-var]
                    await self.stream_response(send_end_shielded)
            except OSError:  # the browser left while an entry was on its way
                pass
            tg.cancel_scope.cancel()
