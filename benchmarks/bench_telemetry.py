"""What tracing costs: 20-step plans with telemetry on (every span exported to an exporter
that drops it, metrics to an SDK meter provider) against off, interleaved in one process.

    PYTHONPATH=. python benchmarks/bench_telemetry.py [--runs 50] [--repeats 7] [--store memory]

Each repeat runs ``--runs`` 20-step linear plans of a trivial tool one after another, off
then on (alternating which goes first), in a runtime of its own, timing each with the wall
clock and with the process's CPU time (``time.process_time``: every thread of the process,
the store's writer included). It prints steps/s, median and range, for both; on / off as a
ratio, wall and CPU, the median of each repeat's pair: 1.10x means tracing made a run 10%
slower (the goal is under 1.10x); and the microseconds of CPU tracing adds per step (median
of the pairs' differences). On a shared machine the wall clock counts the time other
processes had the cores; CPU time counts only this process's work, so its ratio is the one
to read there. The load average is printed at the start and the end. ``--store`` is
``memory`` (the runtime alone, where tracing's share is largest) or ``sqlite`` (a durable
store, fsync per flush).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import mainspring as ms

STEPS = 20


class Dropped(SpanExporter):
    """An exporter that takes every span and keeps none (the no-op exporter)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _plan() -> ms.Plan:
    return ms.Plan(
        id="linear",
        goal="benchmark",
        steps=tuple(
            ms.PlanStep(
                id=f"s{i}",
                tool="trivial",
                input={"step": i},
                depends_on=(f"s{i - 1}",) if i else (),
            )
            for i in range(STEPS)
        ),
    )


async def _trivial(step: int) -> int:
    return step


async def _measure(traced: bool, runs: int, store: str, where: Path) -> tuple[float, float]:
    """Wall and CPU seconds for ``runs`` plans, one after another."""
    options: dict[str, Any] = {"telemetry": False}
    if traced:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
        options = {"tracer_provider": tracer_provider, "meter_provider": MeterProvider()}
    backend: Any = ms.testing.MemoryStore() if store == "memory" else str(where / "s.sqlite3")
    plan = _plan()
    async with ms.open_runtime(store=backend, tools={"trivial": _trivial}, **options) as rt:
        await (await rt.start("warm-up", plan)).wait()
        began, cpu = time.perf_counter(), time.process_time()
        for _ in range(runs):
            result = await (await rt.start("benchmark", plan)).wait()
            assert result.status == "completed"
        return time.perf_counter() - began, time.process_time() - cpu


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def main(runs: int, repeats: int, store: str) -> None:
    load_before = _load()
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    for repeat in range(repeats):
        order = (False, True) if repeat % 2 == 0 else (True, False)
        for traced in order:
            with tempfile.TemporaryDirectory() as scratch:
                seconds = await _measure(traced, runs, store, Path(scratch))
            (on if traced else off).append(seconds)
    load_after = _load()
    steps = runs * STEPS

    def rate(times: list[tuple[float, float]], which: int) -> str:
        rates = sorted(steps / t[which] for t in times)
        return f"{statistics.median(rates):,.0f} ({rates[0]:,.0f}-{rates[-1]:,.0f})"

    def ratio(which: int) -> float:
        return statistics.median(b[which] / a[which] for a, b in zip(off, on, strict=True))

    added = statistics.median((b[1] - a[1]) / steps * 1e6 for a, b in zip(off, on, strict=True))
    wall, cpu = ratio(0), ratio(1)
    print(f"{store} store, {runs} x {STEPS}-step plans, {repeats} repeats")
    print(f"load average (1, 5, 15 min): {load_before} at start, {load_after} at end")
    print(f"tracing off: {rate(off, 0)} steps/s wall, {rate(off, 1)} steps/s CPU")
    print(f"tracing on (no-op exporter): {rate(on, 0)} steps/s wall, {rate(on, 1)} steps/s CPU")
    print(
        f"on / off, wall: {wall:.2f}x  CPU: {cpu:.2f}x  goal < 1.10x (CPU): "
        f"{'met' if cpu < 1.10 else 'not met'}"
    )
    print(f"tracing adds {added:,.0f} us of CPU per step")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    args = parser.parse_args()
    anyio.run(main, args.runs, args.repeats, args.store)
