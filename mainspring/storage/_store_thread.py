"""One long-lived thread that runs one writer's blocking store calls, in order, off the loop.

Why not ``anyio.to_thread.run_sync`` per call: measured here (issue #29, one trivial call at
a time), a call through it costs the event loop's thread ~31-34 us of CPU on asyncio and
~34-35 us on trio: a checkpoint before it, the capacity limiter's shielded checkpoint, a
cancel scope, a future, the context copied, then the wake-up. A limiter of its own changes
nothing (the same path). A thread kept for the writer, fed by a queue and waking the loop
once per call through ``anyio.from_thread.run_sync`` on the loop's token, costs ~21-23 us on
asyncio; on trio about what a hop cost (~33-35 us), since there the wake-up itself dominates
(trio's way back into the loop). The persistence actor calls its store one call at a time,
so one thread serves it in order; its caller waits shielded, as it did in a worker thread,
so a call under way always finishes: a commit sent is never abandoned half-way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

__all__ = ["StoreThread"]


class _Job:
    __slots__ = ("args", "done", "error", "fn", "value")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], done: anyio.Event) -> None:
        self.fn = fn
        self.args = args
        self.done = done
        self.value: Any = None
        self.error: BaseException | None = None


class StoreThread:
    """Runs ``fn(*args)`` in one thread of its own, started on the first call and ended by
    :meth:`close`; the calls of one caller at a time, in order (not a pool)."""

    __slots__ = ("_closed", "_jobs", "_name", "_new_event", "_thread", "_token")

    def __init__(
        self, name: str = "mainspring-store", new_event: Callable[[], anyio.Event] = anyio.Event
    ) -> None:
        self._name = name
        self._new_event = new_event
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._closed = False

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the thread; its value, or its exception raised here. Shielded:
        cancelling the caller does not abandon a call under way (it waits for its end)."""
        if self._closed:
            raise RuntimeError("the store's thread is closed")
        if self._thread is None:
            self._token = anyio.lowlevel.current_token()
            self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
            self._thread.start()
        job = _Job(fn, args, self._new_event())
        self._jobs.put(job)
        with anyio.CancelScope(shield=True):  # a write under way finishes before we go on
            await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.value

    def close(self) -> None:
        """No more calls; the thread ends once the call under way (if any) has."""
        if not self._closed:
            self._closed = True
            if self._thread is not None:
                self._jobs.put(None)

    def _serve(self) -> None:
        jobs, token = self._jobs, self._token
        while True:
            job = jobs.get()
            if job is None:
                return
            try:
                job.value = job.fn(*job.args)
            except BaseException as exc:  # carried to the caller, as a worker thread would
                job.error = exc
            try:
                anyio.from_thread.run_sync(job.done.set, token=token)
            except RuntimeError:  # the loop is gone (RunFinishedError): nobody waits
                return
