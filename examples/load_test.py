"""A load test with actors: 10,000 virtual users against a server on 127.0.0.1.

Each virtual user is an actor that sends requests one after another over a shared pool of
connections and records each latency. After the test window, one cancel with reason
``Timeout`` stops the whole swarm; every user reports, in ``on_stop``, why it stopped, and
the summary counts those reasons. Run ``python examples/load_test.py --users 10000
--seconds 5 [--backend trio]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

import mainspring as ms


class Stats:
    """What the users measured: shared by all of them (one event loop, no locks needed)."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.stopped: Counter[str] = Counter()


class Pool:
    """A fixed set of connections to the server, lent to one request at a time. A connection
    whose request did not finish (an error, a cancel) is closed, not lent again: it could
    still hold the unread reply."""

    def __init__(self, connections: list[tuple[SocketStream, BufferedByteReceiveStream]]) -> None:
        self._free = connections
        self._ready = anyio.Semaphore(len(connections))
        self.broken: list[SocketStream] = []

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[tuple[SocketStream, BufferedByteReceiveStream]]:
        await self._ready.acquire()
        conn = self._free.pop()
        try:
            yield conn
        except BaseException:
            self.broken.append(conn[0])  # closed by run(); the pool lends one fewer
            raise
        self._free.append(conn)
        self._ready.release()


class VirtualUser(ms.Actor):
    """Sends requests until it is stopped; says why it stopped."""

    def __init__(self, number: int, pool: Pool, stats: Stats) -> None:
        self.number = number
        self.pool = pool
        self.stats = stats

    async def receive(self, message: Any) -> None:
        request = f"GET /item/{self.number}\n".encode()
        while True:
            started = time.perf_counter()
            async with self.pool.connection() as (stream, reader):
                await stream.send(request)
                reply = await reader.receive_until(b"\n", 1024)
            if reply == b"ok":
                self.stats.latencies.append(time.perf_counter() - started)
            else:
                self.stats.errors += 1

    async def on_stop(self, reason: ms.CancelReason) -> None:
        root = reason.root if isinstance(reason, ms.ParentCancel) else reason
        self.stats.stopped[f"{reason.kind} <- {root.kind}: {root.detail}"] += 1


class Swarm(ms.Actor):
    """The parent of every virtual user: cancelling it cancels them all, with its reason."""

    def __init__(self) -> None:
        self.users: list[ms.ActorRef] = []

    async def receive(self, message: Any) -> Any:
        if message == "go":  # everyone starts at once, after all are spawned
            for index, user in enumerate(self.users):
                user.tell_nowait("go")
                if index % 500 == 499:
                    await anyio.lowlevel.checkpoint()  # let the first ones run meanwhile
            return len(self.users)
        count, pool, stats = message
        for number in range(count):
            ref = await self.spawn(VirtualUser, number, pool, stats, name=f"user-{number}")
            self.users.append(ref)
        return count


async def _serve(stream: SocketStream) -> None:
    reader = BufferedByteReceiveStream(stream)
    async with stream:
        try:
            while True:
                await reader.receive_until(b"\n", 1024)
                await stream.send(b"ok\n")
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            return


async def run(users: int, seconds: float, connections: int) -> Stats:
    """Run the test and return what was measured."""
    stats = Stats()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    try:
        async with anyio.create_task_group() as server:
            server.start_soon(listener.serve, _serve)
            streams: list[SocketStream] = []
            try:
                for _ in range(connections):
                    streams.append(await anyio.connect_tcp("127.0.0.1", port))
                pool = Pool([(s, BufferedByteReceiveStream(s)) for s in streams])
                async with ms.open_system("load-test") as system:
                    swarm = await system.spawn(Swarm, name="swarm")
                    await swarm.ask((users, pool, stats))
                    await swarm.ask("go")
                    await anyio.sleep(seconds)  # the test window itself
                    swarm.cancel(ms.Timeout(detail=f"the {seconds:g} s test window ended"))
                    await swarm.wait_stopped()
            finally:
                for stream in streams:  # every connection, whatever happened
                    await anyio.aclose_forcefully(stream)
                server.cancel_scope.cancel()  # stops serving
    finally:
        await listener.aclose()
    return stats


def report(stats: Stats, seconds: float, users: int) -> str:
    lat = sorted(stats.latencies)
    lines = [f"{users:,} virtual users, {seconds:g} s: {len(lat):,} requests, "
             f"{len(lat) / seconds:,.0f} requests/s, {stats.errors} errors"]  # fmt: skip
    if lat:
        q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [lat[0]] * 99
        lines.append(
            f"latency p50 {q[49] * 1e3:.2f} ms, p90 {q[89] * 1e3:.2f} ms, "
            f"p99 {q[98] * 1e3:.2f} ms, max {lat[-1] * 1e3:.2f} ms"
        )
    for why, count in stats.stopped.most_common():
        lines.append(f"{count:,} users stopped: {why}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    stats = anyio.run(run, args.users, args.seconds, args.connections, backend=args.backend)
    print(report(stats, args.seconds, args.users))


if __name__ == "__main__":
    main()
