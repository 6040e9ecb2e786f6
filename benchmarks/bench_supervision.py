"""Supervision benchmarks: restart latency, and a supervisor with 10,000 children.

Run ``python benchmarks/bench_supervision.py``. Each figure comes from a fresh subprocess;
the 10,000-children figures are medians of ``--runs`` runs (default 5).

- restart latency: from the moment a child's handler raises until its next instance has
  finished ``on_start`` (one_for_one, no backoff), over 2,000 restarts: p50 and p99.
- start 10,000: ``spawn_supervisor`` with 10,000 child specs, until every child has started
  (a supervisor starts children one after the other, each after the previous is ready).
- one_for_all 10,000: one child crashes; until all 10,000 have been stopped (newest first) and
  started again (oldest first).

No peer runs here: none of the Python actor libraries measured in ANCHORS.md (Pykka, Ray) has
supervisors with restart strategies to compare with.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from typing import Any

from _harness import in_subprocess, run_on

BACKENDS = ["asyncio", "trio"]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 10.0  # every restart alone in its intensity window
        return self.now


def restart_latency(backend: str, n: int) -> dict[str, float]:
    import logging

    import mainspring as ms

    logging.disable(logging.CRITICAL)
    marks: dict[str, float] = {}
    samples: list[float] = []

    class Child(ms.Actor):
        async def on_start(self) -> None:
            if "crash" in marks:
                samples.append(time.perf_counter() - marks.pop("crash"))

        async def receive(self, message: Any) -> Any:
            if message == "crash":
                marks["crash"] = time.perf_counter()
                raise RuntimeError("benchmark")
            return message

    async def main() -> dict[str, float]:
        async with ms.open_system() as system:
            sup = await ms.supervision.spawn_supervisor(
                system, [ms.supervision.ChildSpec(Child, name="c")], name="sup", clock=_Clock()
            )
            child = sup.child("c")
            assert child is not None
            for _ in range(n):
                with contextlib.suppress(ms.ActorFailed):
                    await child.ask("crash")
                await child.ask("ready?")
        ordered = sorted(samples)
        return {
            "p50_us": ordered[len(ordered) // 2] * 1e6,
            "p99_us": ordered[int(len(ordered) * 0.99)] * 1e6,
        }

    result: dict[str, float] = run_on(backend, main)
    return result


def many_children(backend: str, n: int) -> dict[str, float]:
    import logging

    import anyio

    import mainspring as ms

    logging.disable(logging.CRITICAL)

    class Child(ms.Actor):
        async def receive(self, message: Any) -> Any:
            if message == "crash":
                raise RuntimeError("benchmark")
            return message

    async def main() -> dict[str, float]:
        async with ms.open_system() as system:
            specs = [ms.supervision.ChildSpec(Child, name=f"c{i}") for i in range(n)]
            start = time.perf_counter()
            sup = await ms.supervision.spawn_supervisor(
                system, specs, name="sup", strategy="one_for_all", clock=_Clock()
            )
            started = time.perf_counter() - start
            restarted = 0
            done = anyio.Event()
            stream = system.events(buffer=n * 2)

            async def count() -> None:
                nonlocal restarted
                async for event in stream:
                    if isinstance(event, ms.supervision.ChildRestarted):
                        restarted += 1
                        if restarted == n:
                            done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(count)
                await anyio.wait_all_tasks_blocked()
                first = sup.child("c0")
                assert first is not None
                start = time.perf_counter()
                with contextlib.suppress(ms.ActorFailed):
                    await first.ask("crash")
                await done.wait()
                restart_all = time.perf_counter() - start
                tg.cancel_scope.cancel()
        return {"start_ms": started * 1e3, "one_for_all_ms": restart_all * 1e3}

    result: dict[str, float] = run_on(backend, main)
    return result


MEASURES = {"restart_latency": restart_latency, "many_children": many_children}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--one", nargs=3, metavar=("MEASURE", "BACKEND", "N"), help="internal")
    args = parser.parse_args()
    if args.one:
        measure, backend, n = args.one
        print(json.dumps(MEASURES[measure](backend, int(n))))
        return
    restarts, children = (200, 500) if args.quick else (2_000, 10_000)
    rows = []
    for backend in BACKENDS:
        latency = [
            in_subprocess(__file__, "restart_latency", backend, restarts) for _ in range(args.runs)
        ]
        many = [
            in_subprocess(__file__, "many_children", backend, children) for _ in range(args.runs)
        ]
        rows.append(
            (
                backend,
                statistics.median(r["p50_us"] for r in latency),
                statistics.median(r["p99_us"] for r in latency),
                statistics.median(r["start_ms"] for r in many),
                statistics.median(r["one_for_all_ms"] for r in many),
            )
        )
    print(
        f"\nmainspring supervision benchmarks: median of {args.runs} runs, "
        f"{restarts:,} restarts for latency, {children:,} children\n"
    )
    print(
        f"| backend | restart p50 (us) | restart p99 (us) | start {children:,} children (ms) "
        f"| one_for_all restart of {children:,} (ms) |"
    )
    print("|---|---:|---:|---:|---:|")
    for backend, p50, p99, start_ms, all_ms in rows:
        print(f"| {backend} | {p50:,.0f} | {p99:,.0f} | {start_ms:,.0f} | {all_ms:,.0f} |")


if __name__ == "__main__":
    main()
