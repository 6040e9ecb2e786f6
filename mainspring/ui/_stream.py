"""Server-sent events from the durable history (V2): every committed entry of a run (or of
every run) after a sequence number, then each one as it is committed, by any process on the
store. Each event's ``id`` is the entry's ``seq``: a browser that loses the stream reconnects
with ``Last-Event-ID`` and the stream starts after it, so nothing is missed or sent twice.

The stream ends when the view begins to stop (``Runtime.close_streams``, V4); the browser
reconnects to the next view and resumes from its last id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from ..executions import Runtime
from ..storage._seam import check_history_after
from ._views import history_entry

#: How long the browser waits before reconnecting a lost stream (milliseconds).
RETRY_MS = 1_000
#: How often a follower looks for other processes' commits (seconds).
POLL = 0.25


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
    async for event in runtime.events(execution_id, after=after, poll=POLL):
        data = orjson.dumps(history_entry(event)).decode()
        yield f"id: {event.seq}\nevent: entry\ndata: {data}\n\n".encode()
