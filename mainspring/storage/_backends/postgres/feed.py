"""The change notices a PostgresStore sends every host (LISTEN/NOTIFY), read by a runtime.

Each write transaction notifies, on the store's channel, ``c <id>`` for an execution changed
out of run (a pause, cancel, stop request or answer written by any host: its runner checks
at once instead of at its next heartbeat) and ``h <seq>`` for the newest history sequence it
committed (followers read on). Notices are delivered after COMMIT, in commit order.

A notice can be lost (the listening connection broke): :meth:`Feed.wait` then returns a
``("lost", "")`` note, after which a reader must assume anything changed. Heartbeats and
polling stay the backstop; the feed only makes them faster.
"""

from __future__ import annotations

import contextlib
import math
import select
import threading
import time
from typing import Any

from .connect import Connections, Lost

__all__ = ["Feed", "Note"]

#: ``("control", execution id)``, ``("history", seq as text)`` or ``("lost", "")``.
Note = tuple[str, str]


class Feed:
    """A connection listening on one store's channel; used from one thread at a time."""

    def __init__(self, connections: Connections, channel: str) -> None:
        self._connections = connections
        self._channel = channel
        self._conn: Any = None
        self._closed = threading.Event()
        self._using = threading.Lock()  # held by the thread in ``wait``
        self._connect()

    def _connect(self) -> bool:
        try:
            conn = self._connections.connect()
        except Lost:
            return False
        try:
            # The channel name is ours (``mainspring_<schema>``, the schema checked): quoted.
            conn.execute(f'LISTEN "{self._channel}"')
        except Exception:  # whatever the driver raised: retried, then "lost"
            conn.close()
            return False
        self._conn = conn
        return True

    def wait(self, timeout: float) -> list[Note]:
        """The notices that arrive within ``timeout`` seconds (returns at the first batch)."""
        with self._using:
            notes = self._wait(timeout)
            if self._closed.is_set():
                self._drop()  # closed while we waited: the connection is ours to close
            return notes

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a connection that may be broken
                conn.close()

    def _wait(self, timeout: float) -> list[Note]:
        if self._closed.is_set():
            return []
        if self._conn is None:
            if not self._connect():
                self._closed.wait(min(timeout, 1.0))
                return []
            return [("lost", "")]  # listening again: what was sent meanwhile is unknown
        notes: list[Note] = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                # What has arrived, without waiting: psycopg's own wait with a timeout spins
                # the CPU through its last millisecond (it rounds down to whole ones), which
                # on a store notified at every commit took a core's millisecond per commit
                # from the runs. The waiting is done here, on the socket.
                notes.extend(_parse(n.payload) for n in self._conn.notifies(timeout=0))
                remaining = deadline - time.monotonic()
                if notes or remaining <= 0:
                    break
                _readable(self._conn.fileno(), remaining)
        except Exception:  # the driver's or select's: a "lost" note
            self._drop()  # it is gone either way
            notes.append(("lost", ""))
            # Not on an event loop: a runtime calls ``wait`` in a worker thread
            # (StoreWatcher), the CLI from its own synchronous command.
            time.sleep(0.05)
        return [note for note in notes if note[0]]

    def close(self) -> None:
        """Stop listening. A ``wait`` under way returns within its timeout and closes the
        connection then (never closed under a thread using it)."""
        self._closed.set()
        if self._using.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._using.release()


def _readable(fd: int, timeout: float) -> None:
    """Return once ``fd`` has something to read, or after ``timeout`` seconds (rounded up to
    whole milliseconds: never a busy wait)."""
    if _poll is None:  # Windows: select takes sockets there
        select.select([fd], [], [fd], timeout)
        return
    poller = _poll()
    poller.register(fd, select.POLLIN)
    poller.poll(max(1, math.ceil(timeout * 1000)))


_poll = getattr(select, "poll", None)


def _parse(payload: str) -> Note:
    kind, _, value = payload.partition(" ")
    if kind == "c" and value:
        return ("control", value)
    if kind == "h" and value.isdigit():
        return ("history", value)
    return ("", "")
