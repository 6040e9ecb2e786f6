"""Kernel benchmarks: mainspring actors beside raw anyio streams, bare tasks and Pykka.

Run ``python benchmarks/bench_actors.py`` (``pip install -e '.[bench]'`` first). Every figure
is the median of ``--runs`` runs (default 5); each run is a fresh subprocess so memory figures
start clean, and runs are interleaved across measurements so machine drift hits all alike.
Peers run in the same invocation; the ratios are what to read, not the absolute numbers.

What each row measures:
- tell: messages/s from one sender to one actor (mailbox 1000), ending with one ask so every
  message was processed; peer: one producer -> one consumer on an anyio memory object stream
  (buffer 1000), and Pykka ``tell`` followed by one final ``ask``.
- ask: sequential round trips/s; peers: Pykka ``ask().get()``, and anyio streams with a new
  reply stream per request.
- spawn / stop: 100,000 idle actors started (until every one waits on its mailbox), then all
  stopped by ``shutdown``; peer: 100,000 tasks each blocked on a 16-slot stream pair, started
  then cancelled. Memory: RSS growth per idle actor (task) once all are started.
- cancel: 10,000 idle children of one actor, cancelled through the parent with a reason, until
  the parent has stopped; peer: 10,000 tasks in one anyio task group, cancel to exit.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from _harness import in_subprocess, run_on

BACKENDS = ["asyncio", "asyncio+uvloop", "trio"]


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


# -- mainspring ---------------------------------------------------------------------------


def _mainspring_classes() -> tuple[Any, Any]:
    import mainspring as ms

    class Counter(ms.Actor):
        def __init__(self) -> None:
            self.count = 0

        async def receive(self, message: Any) -> Any:
            self.count += 1
            return self.count

    class Parent(ms.Actor):
        async def receive(self, message: Any) -> Any:
            for _ in range(message):
                await self.spawn(Counter)
            return None

    return Counter, Parent


def ms_tell(backend: str, n: int) -> float:
    import mainspring as ms

    counter, _ = _mainspring_classes()

    async def main() -> float:
        async with ms.open_system() as system:
            ref = await system.spawn(counter)
            await ref.ask("warm-up")
            start = time.perf_counter()
            for i in range(n):
                await ref.tell(i)
            await ref.ask("done")
            return n / (time.perf_counter() - start)

    return float(run_on(backend, main))


def ms_ask(backend: str, n: int) -> float:
    import mainspring as ms

    counter, _ = _mainspring_classes()

    async def main() -> float:
        async with ms.open_system() as system:
            ref = await system.spawn(counter)
            await ref.ask("warm-up")
            start = time.perf_counter()
            for i in range(n):
                await ref.ask(i)
            return n / (time.perf_counter() - start)

    return float(run_on(backend, main))


def ms_spawn(backend: str, n: int) -> dict[str, float]:
    import anyio

    import mainspring as ms

    counter, _ = _mainspring_classes()

    async def main() -> dict[str, float]:
        async with ms.open_system() as system:
            await anyio.lowlevel.checkpoint()
            gc.collect()
            base = _rss()
            start = time.perf_counter()
            refs = [await system.spawn(counter) for _ in range(n)]
            await anyio.wait_all_tasks_blocked()  # every actor is parked on its mailbox
            started = time.perf_counter()
            gc.collect()
            per_actor = (_rss() - base) / n
            stop_start = time.perf_counter()
            await system.shutdown()
            stopped = time.perf_counter()
            del refs
            return {
                "spawn_us": (started - start) / n * 1e6,
                "stop_us": (stopped - stop_start) / n * 1e6,
                "rss_bytes": per_actor,
            }

    result: dict[str, float] = run_on(backend, main)
    return result


def ms_cancel(backend: str, n: int) -> float:
    import anyio

    import mainspring as ms

    _, parent_cls = _mainspring_classes()

    async def main() -> float:
        async with ms.open_system() as system:
            parent = await system.spawn(parent_cls)
            await parent.ask(n)
            await anyio.wait_all_tasks_blocked()
            start = time.perf_counter()
            parent.cancel(ms.Cancel(detail="benchmark"))
            await parent.wait_stopped()
            return (time.perf_counter() - start) * 1e3

    return float(run_on(backend, main))


# -- raw anyio ----------------------------------------------------------------------------


def raw_tell(backend: str, n: int) -> float:
    import anyio

    async def main() -> float:
        send, receive = anyio.create_memory_object_stream[int](1000)

        async def consumer() -> None:
            async with receive:
                async for _ in receive:
                    pass

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer)
            async with send:
                for i in range(n):
                    await send.send(i)
        return n / (time.perf_counter() - start)

    return float(run_on(backend, main))


def raw_ask(backend: str, n: int) -> float:
    import anyio
    from anyio.streams.memory import MemoryObjectSendStream

    async def main() -> float:
        send, receive = anyio.create_memory_object_stream[tuple[int, Any]](1000)

        async def server() -> None:
            async for value, reply in receive:
                await reply.send(value)

        async with anyio.create_task_group() as tg:
            tg.start_soon(server)
            start = time.perf_counter()
            for i in range(n):
                reply_send: MemoryObjectSendStream[int]
                reply_send, reply_receive = anyio.create_memory_object_stream[int](1)
                await send.send((i, reply_send))
                await reply_receive.receive()
            elapsed = time.perf_counter() - start
            tg.cancel_scope.cancel()
        return n / elapsed

    return float(run_on(backend, main))


def raw_spawn(backend: str, n: int) -> dict[str, float]:
    import anyio

    async def hold(receive: Any) -> None:
        await receive.receive()

    async def main() -> dict[str, float]:
        await anyio.lowlevel.checkpoint()
        gc.collect()
        base = _rss()
        keep = []
        async with anyio.create_task_group() as tg:
            start = time.perf_counter()
            for _ in range(n):
                send, receive = anyio.create_memory_object_stream[int](16)
                keep.append(send)
                tg.start_soon(hold, receive)
            await anyio.wait_all_tasks_blocked()
            started = time.perf_counter()
            gc.collect()
            per_task = (_rss() - base) / n
            stop_start = time.perf_counter()
            tg.cancel_scope.cancel()
        stopped = time.perf_counter()
        return {
            "spawn_us": (started - start) / n * 1e6,
            "stop_us": (stopped - stop_start) / n * 1e6,
            "rss_bytes": per_task,
        }

    result: dict[str, float] = run_on(backend, main)
    return result


def raw_cancel(backend: str, n: int) -> float:
    import anyio

    async def main() -> float:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(anyio.sleep_forever)
            await anyio.wait_all_tasks_blocked()
            start = time.perf_counter()
            tg.cancel_scope.cancel()
        return (time.perf_counter() - start) * 1e3

    return float(run_on(backend, main))


# -- Pykka (threads) ----------------------------------------------------------------------


def pykka_tell(backend: str, n: int) -> float:
    import pykka

    class Counter(pykka.ThreadingActor):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def on_receive(self, message: Any) -> Any:
            self.count += 1
            return self.count

    ref = Counter.start()
    try:
        ref.ask("warm-up")
        start = time.perf_counter()
        for i in range(n):
            ref.tell(i)
        ref.ask("done")
        return n / (time.perf_counter() - start)
    finally:
        ref.stop()


def pykka_ask(backend: str, n: int) -> float:
    import pykka

    class Echo(pykka.ThreadingActor):  # type: ignore[misc]
        def on_receive(self, message: Any) -> Any:
            return message

    ref = Echo.start()
    try:
        ref.ask("warm-up")
        start = time.perf_counter()
        for i in range(n):
            ref.ask(i)
        return n / (time.perf_counter() - start)
    finally:
        ref.stop()


MEASURES: dict[str, Callable[[str, int], Any]] = {
    "ms_tell": ms_tell,
    "ms_ask": ms_ask,
    "ms_spawn": ms_spawn,
    "ms_cancel": ms_cancel,
    "raw_tell": raw_tell,
    "raw_ask": raw_ask,
    "raw_spawn": raw_spawn,
    "raw_cancel": raw_cancel,
    "pykka_tell": pykka_tell,
    "pykka_ask": pykka_ask,
}


def _sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"tell": 5_000, "ask": 2_000, "spawn": 2_000, "cancel": 1_000}
    return {"tell": 200_000, "ask": 50_000, "spawn": 100_000, "cancel": 10_000}


def _size_for(measure: str, sizes: dict[str, int]) -> int:
    return sizes[measure.split("_", 1)[1]]


def _fmt(value: float, unit: str) -> str:
    if unit in {"msg/s", "rt/s"}:
        return f"{value:,.0f}"
    if unit == "B":
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median taken)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated")
    parser.add_argument("--one", nargs=3, metavar=("MEASURE", "BACKEND", "N"), help="internal")
    args = parser.parse_args()

    if args.one:
        measure, backend, n = args.one
        print(json.dumps(MEASURES[measure](backend, int(n))))
        return

    sizes = _sizes(args.quick)
    backends = [b for b in args.backends.split(",") if b]
    plan = [(m, b) for b in backends for m in MEASURES if not m.startswith("pykka")]
    plan += [("pykka_tell", "threads"), ("pykka_ask", "threads")]
    samples: dict[tuple[str, str], list[Any]] = {key: [] for key in plan}
    started = time.perf_counter()
    for run in range(args.runs):
        for measure, backend in plan:
            samples[(measure, backend)].append(
                in_subprocess(__file__, measure, backend, _size_for(measure, sizes))
            )
        print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)

    def med(measure: str, backend: str, key: str | None = None) -> float:
        values = samples[(measure, backend)]
        return statistics.median(v[key] if key else v for v in values)

    pykka_tell_rate = med("pykka_tell", "threads")
    pykka_ask_rate = med("pykka_ask", "threads")
    rows: list[tuple[str, str, float, str, float, str, str]] = []
    for b in backends:
        tell, raw = med("ms_tell", b), med("raw_tell", b)
        rows.append(("tell (msg/s)", b, tell, "anyio stream", raw, f"{tell / raw:.2f}x", ">= 0.5x"))
        rows.append(
            ("tell (msg/s)", b, tell, "Pykka tell", pykka_tell_rate,
             f"{tell / pykka_tell_rate:.2f}x", "")
        )  # fmt: skip
        ask = med("ms_ask", b)
        rows.append(
            ("ask (rt/s)", b, ask, "Pykka ask", pykka_ask_rate, f"{ask / pykka_ask_rate:.1f}x",
             ">= 10x")
        )  # fmt: skip
        raw_ask_rate = med("raw_ask", b)
        rows.append(
            ("ask (rt/s)", b, ask, "anyio reply stream", raw_ask_rate,
             f"{ask / raw_ask_rate:.1f}x", "")
        )  # fmt: skip
        for key, label, goal in (
            ("spawn_us", "spawn (us/actor)", ""),
            ("stop_us", "stop (us/actor)", ""),
            ("rss_bytes", "idle RSS (B/actor)", "<= 2x"),
        ):
            mine, bare = med("ms_spawn", b, key), med("raw_spawn", b, key)
            rows.append((label, b, mine, "task + stream pair", bare, f"{mine / bare:.2f}x", goal))
        cancel, bare_cancel = med("ms_cancel", b), med("raw_cancel", b)
        rows.append(
            (f"cancel {sizes['cancel']:,} (ms)", b, cancel, "anyio task group", bare_cancel,
             f"{cancel / bare_cancel:.2f}x", "<= 3x")
        )  # fmt: skip

    print(
        f"\nmainspring kernel benchmarks: median of {args.runs} runs, "
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
        f"{time.perf_counter() - started:.0f} s in all\n"
    )
    print("| measure | backend | mainspring | peer | peer figure | ratio | goal |")
    print("|---|---|---:|---|---:|---:|---|")
    for label, b, mine, peer, theirs, ratio, goal in rows:
        unit = "B" if "B/" in label else ("msg/s" if "/s" in label else "x")
        print(
            f"| {label} | {b} | {_fmt(mine, unit)} | {peer} | {_fmt(theirs, unit)} "
            f"| {ratio} | {goal} |"
        )


if __name__ == "__main__":
    threading.stack_size(0)
    main()
