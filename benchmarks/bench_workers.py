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

import mainspring as ms
from mainspring.executions import SubprocessHost, WorkerAgent, WorkerSpec

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


# A worker that delivers at once, in sh (a Python worker would mostly measure Python's start).
_DELIVER = ("sh", "-c", 'echo \'{"type": "result", "output": 1}\'')
# A worker that says when it started (pid, generation, time) and then works until stopped.
_LONG = (
    "sh",
    "-c",
    'echo "$$ $MAINSPRING_WORKER_GENERATION $(date +%s.%N)" >> "$LEDGER"; '
    'echo \'{"type": "busy"}\'; exec sleep 60',
)


async def _python_agent(ctx: Any, *_: Any, **__: Any) -> int:
    return 1


def _plan(n: int, agent: str) -> ms.Plan:
    steps = tuple(ms.PlanStep(id=f"s{i}", agent=agent) for i in range(n))
    return ms.Plan(id="p", goal="bench", steps=steps)


async def _steps_per_second(store: str, n: int, agent: str, parallel: int) -> float:
    agents = {"worker": WorkerAgent(_DELIVER, grace=1.0), "python": _python_agent}
    async with ms.open_runtime(
        store=store, agents=agents, max_parallel_steps=parallel, max_calls=100 * n
    ) as rt:
        started = time.perf_counter()
        handle = await rt.start("bench", _plan(n, agent))
        result = await handle.wait()
        elapsed = time.perf_counter() - started
    if result.status != "completed":
        raise RuntimeError(f"{agent} x {n}: {result.status} {result.error}")
    return n / elapsed


async def _takeover(store: str, ledger: str, kills: int) -> list[float]:
    """Seconds from SIGKILL of a running worker to its next generation's start."""
    os.environ["LEDGER"] = ledger
    agents = {"worker": WorkerAgent(_LONG, grace=1.0, max_starts=kills + 2)}
    latencies: list[float] = []
    async with ms.open_runtime(store=store, agents=agents) as rt:
        handle = await rt.start("bench", _plan(1, "worker"))
        for generation in range(1, kills + 1):
            line = await _ledger_line(ledger, generation)
            killed = time.time()
            os.kill(int(line[0]), signal.SIGKILL)
            line = await _ledger_line(ledger, generation + 1)
            latencies.append(float(line[2]) - killed)
        await rt.cancel(handle.execution_id)
    return latencies


async def _ledger_line(ledger: str, generation: int) -> list[str]:
    with anyio.fail_after(60):
        while True:  # the worker's own line is the event: polled, as a reader of a file would
            try:
                text = await anyio.Path(ledger).read_text()
            except FileNotFoundError:
                text = ""
            for line in map(str.split, text.splitlines()):
                if len(line) == 3 and line[1] == str(generation):
                    return line
            await anyio.sleep(0.001)


async def _runtime_rows(sizes: tuple[int, ...], parallel: int, kills: int) -> list[str]:
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            for width in (1, parallel):
                rate = {}
                for agent in ("python", "worker"):
                    store = f"{tmp}/{agent}-{n}-{width}.sqlite3"
                    rate[agent] = await _steps_per_second(store, n, agent, width)
                rows.append(
                    f"| {n:,} | {width} | {rate['worker']:,.0f} | {rate['python']:,.0f} | "
                    f"{rate['worker'] / rate['python']:.2f}x |"
                )
        latencies = await _takeover(f"{tmp}/takeover.sqlite3", f"{tmp}/ledger", kills)
    rows.append("")
    rows.append(
        f"takeover after SIGKILL of the worker, {kills} kills: median "
        f"{statistics.median(latencies) * 1e3:.1f} ms, max {max(latencies) * 1e3:.1f} ms"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="workers per row and width")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--sizes", default="20,200,1000", help="worker steps per run")
    parser.add_argument("--takeovers", type=int, default=20)
    args = parser.parse_args()
    sizes = tuple(int(n) for n in args.sizes.split(","))
    print(
        f"workers started and stopped, {args.runs} per row, interleaved; in flight 1 and "
        f"{args.concurrency}"
    )
    print("| backend | how | in flight | workers/s | ms per worker | cost vs hand-rolled |")
    print("|---|---|---:|---:|---:|---:|")
    for backend in BACKENDS:
        samples = anyio.run(_measure, args.runs, args.concurrency, backend=backend)
        _table(backend, samples)
    print()
    print("worker-backed agent steps (sh worker, delivered through the handoff) beside Python")
    print("agent steps, one run of N independent steps, SqliteStore")
    for backend in BACKENDS:
        print(f"\n{backend}:")
        print("| steps | in flight | worker steps/s | Python agent steps/s | worker vs Python |")
        print("|---:|---:|---:|---:|---:|")
        for row in anyio.run(
            _runtime_rows, sizes, args.concurrency, args.takeovers, backend=backend
        ):
            print(row)


if __name__ == "__main__":
    main()
