"""What running a program through mainspring's helper costs beside anyio's own, in one run.

Each row is spawn-to-exit of ``true``: ``anyio.run_process(["true"])`` (no session, output
collected whole); the same in a session of its own (``start_new_session=True``), to show
what the session costs by itself; and mainspring's ``run_program(["true"])`` (its own
session, stdout and stderr read concurrently under a cap, the timeout scope, stdin from
/dev/null; ``AgentContext.run`` is the same without the dict). Runs interleave the rows,
so a busy machine slows every row alike; the figures are the median and the 90th
percentile of N runs per backend, and the ratio of each to anyio's own.

    python benchmarks/bench_subprocess.py [--runs 300]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from mainspring.executions import run_program

ROWS: dict[str, Callable[[], Awaitable[Any]]] = {
    'anyio.run_process(["true"])': lambda: anyio.run_process(["true"]),
    "anyio.run_process, own session": lambda: anyio.run_process(["true"], start_new_session=True),
    'run_program(["true"])': lambda: run_program(["true"]),
}
BACKENDS = ("asyncio", "trio")


async def _measure(runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {row: [] for row in ROWS}
    for row, fn in ROWS.items():  # warm up: first spawns pay for imports and caches
        for _ in range(5):
            await fn()
        samples[row].clear()
    for _ in range(runs):
        for row, fn in ROWS.items():
            started = time.perf_counter()
            await fn()
            samples[row].append(time.perf_counter() - started)
    return samples


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    print(f"spawn-to-exit of `true`, {args.runs} runs per row and backend, interleaved")
    print("| backend | how | median ms | p90 ms | median vs anyio | p90 vs anyio |")
    print("|---|---|---:|---:|---:|---:|")
    for backend in BACKENDS:
        samples = anyio.run(_measure, args.runs, backend=backend)
        base = next(iter(samples.values()))
        base_median, base_p90 = statistics.median(base), _p90(base)
        for row, values in samples.items():
            median, p90 = statistics.median(values), _p90(values)
            print(
                f"| {backend} | `{row}` | {median * 1e3:.2f} | {p90 * 1e3:.2f} | "
                f"{median / base_median:.2f}x | {p90 / base_p90:.2f}x |"
            )


if __name__ == "__main__":
    main()
