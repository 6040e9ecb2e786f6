"""What tracing costs: 20-step plans with telemetry on (every span exported to an exporter
that drops it, metrics to an SDK meter provider) against off, interleaved in one process.

    PYTHONPATH=. python benchmarks/bench_telemetry.py [--runs 50] [--repeats 7] [--store memory]

Each repeat runs ``--runs`` 20-step linear plans of a trivial tool one after another, off
then on (alternating which goes first), in a runtime of its own; prints steps/s, median and
range, for both, and on / off as a time ratio: 1.10x means tracing made a run 10% slower
(the goal is under 1.10x). ``--store`` is ``memory`` (the runtime alone, where tracing's
share is largest) or ``sqlite`` (a durable store, fsync per flush).
"""

from __future__ import annotations

import argparse
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


async def _measure(traced: bool, runs: int, store: str, where: Path) -> float:
    """Seconds for ``runs`` plans, one after another."""
    options: dict[str, Any] = {"telemetry": False}
    if traced:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
        options = {"tracer_provider": tracer_provider, "meter_provider": MeterProvider()}
    backend: Any = ms.testing.MemoryStore() if store == "memory" else str(where / "s.sqlite3")
    plan = _plan()
    async with ms.open_runtime(store=backend, tools={"trivial": _trivial}, **options) as rt:
        await (await rt.start("warm-up", plan)).wait()
        began = time.perf_counter()
        for _ in range(runs):
            result = await (await rt.start("benchmark", plan)).wait()
            assert result.status == "completed"
        return time.perf_counter() - began


async def main(runs: int, repeats: int, store: str) -> None:
    off: list[float] = []
    on: list[float] = []
    for repeat in range(repeats):
        order = (False, True) if repeat % 2 == 0 else (True, False)
        for traced in order:
            with tempfile.TemporaryDirectory() as scratch:
                seconds = await _measure(traced, runs, store, Path(scratch))
            (on if traced else off).append(seconds)
    steps = runs * STEPS

    def rate(times: list[float]) -> str:
        rates = sorted(steps / t for t in times)
        return f"{statistics.median(rates):,.0f} ({rates[0]:,.0f}-{rates[-1]:,.0f})"

    ratio = statistics.median(on) / statistics.median(off)
    print(f"{store} store, {runs} x {STEPS}-step plans, {repeats} repeats")
    print(f"tracing off: {rate(off)} steps/s")
    print(f"tracing on (no-op exporter): {rate(on)} steps/s")
    print(f"on / off (time): {ratio:.2f}x  goal < 1.10x: {'met' if ratio < 1.10 else 'not met'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    args = parser.parse_args()
    anyio.run(main, args.runs, args.repeats, args.store)
