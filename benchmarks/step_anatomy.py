"""Where the microseconds of one durable step go, by layer, in one run.

Run ``PYTHONPATH=. python benchmarks/step_anatomy.py [--store memory|sqlite|postgres]
[--in-flight K]`` from the repository's root. In a fresh process it runs executions of a
linear plan of 20 trivial tool steps (``K`` at a time; one at a time by default) three times
after a warm-up:

1. untouched, for the figures per step: the wall time, the CPU time of the event loop's
   thread and the CPU time of every other thread of the process (the store's worker thread);
   the wall time left over is waiting (fsync, the network, the server);
2. under ``cProfile`` timed by the loop thread's CPU clock (time idle in ``epoll`` is
   waiting, not work), for the shares: each function's own time goes
   to a layer by the module it is in (a built-in's to the layers of its callers, in the
   proportion the profile saw), and the shares are applied to the untouched run's loop CPU.
   The profiler inflates many small calls more than a few large ones, so read the layers as
   an estimate of the order, not to the microsecond;
3. the call counts a step makes per layer (from the same profile).

The in-memory store (``profile_runtime.MemoryStore``) never blocks, so its run is the runtime
alone. PostgreSQL is the server of ``$MAINSPRING_TEST_POSTGRES``, in a fresh database.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STEPS = 20

#: (layer, what a path contains): the first match names the layer of a function.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the tool (user code) and the benchmark", ("step_anatomy.py", "_harness.py")),
    ("the in-memory store (runs on the loop)", ("profile_runtime.py",)),
    (
        "the store's code on the loop",
        (
            "storage/_backends/",
            "storage/_journal/model",
            "storage/_journal/keys",
            "storage/_journal/fold",
        ),
    ),
    ("persistence actor (commit queue, flush, tickets)", ("storage/_persistence",)),
    ("redaction", ("storage/_redact",)),
    (
        "encoding (values, codec, orjson)",
        ("storage/_values", "storage/_codec", "storage/_record_codec", "orjson"),
    ),
    (
        "records: construction, evolve, validators",
        (
            "storage/_records",
            "storage/_validators",
            "storage/_ids",
            "mainspring/_ids",
            "storage/_append_only",
            "storage/_vector",
            "storage/_plain",
            "storage/_carried",
            "storage/_usage",
            "/attr/",
            "<attrs generated",
        ),
    ),
    ("scheduler and rules (executions/_rules)", ("executions/_rules/",)),
    ("running a step (executions/_steps)", ("executions/_steps/",)),
    ("the execution actor (executions/_run)", ("executions/_run/",)),
    (
        "facade, handles, events (executions/_facade)",
        ("executions/_facade/", "storage/_journal/commit_events"),
    ),
    (
        "actor kernel (mainspring.actors, supervision)",
        ("mainspring/actors/", "mainspring/supervision/"),
    ),
    ("logging (stdlib)", ("logging/",)),
    (
        "event loop, anyio, tasks, threads",
        (
            "asyncio/",
            "/trio/",
            "/anyio/",
            "selectors",
            "threading",
            "_contextvars",
            "outcome/",
            "sniffio",
            "queue.py",
        ),
    ),
)
OTHER = "other"


def layer_of(func: tuple[str, int, str]) -> str | None:
    """The layer of a profiled function, or None for a built-in (its callers decide)."""
    filename, _, name = func
    if filename == "~":  # a built-in: {method 'run' of '_contextvars.Context' objects} ...
        for layer, marks in LAYERS:
            if any(mark in name for mark in marks):
                return layer
        return None
    for layer, marks in LAYERS:
        if any(mark in filename or mark in name for mark in marks):
            return layer
    return OTHER


def shares(stats: pstats.Stats) -> tuple[dict[str, float], dict[str, int]]:
    """Own time and calls per layer; a built-in's own time split over its callers' layers."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    seconds: dict[str, float] = {}
    calls: dict[str, int] = {}
    for func, (_, ncalls, own, _, callers) in table.items():
        layer = layer_of(func)
        if layer is not None:
            seconds[layer] = seconds.get(layer, 0.0) + own
            calls[layer] = calls.get(layer, 0) + ncalls
            continue
        edges = {caller: edge[2] for caller, edge in callers.items()}
        total = sum(edges.values())
        for caller, edge_own in edges.items():
            owner = layer_of(caller) or OTHER
            part = own * (edge_own / total) if total else own / max(1, len(edges))
            seconds[owner] = seconds.get(owner, 0.0) + part
        for caller, edge in callers.items():
            owner = layer_of(caller) or OTHER
            calls[owner] = calls.get(owner, 0) + edge[1]
    return seconds, calls


# -- the measuring process ----------------------------------------------------------------------


def _store(kind: str, where: Path) -> Any:
    if kind == "memory":
        from profile_runtime import MemoryStore

        return MemoryStore()
    if kind == "sqlite":
        return where / "store.sqlite3"
    import psycopg

    dsn = os.environ.get("MAINSPRING_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    name = "mainspring_anatomy"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    from urllib.parse import urlsplit

    return urlsplit(dsn)._replace(path=f"/{name}").geturl()


def child(kind: str, in_flight: int, executions: int, backend: str) -> dict[str, Any]:
    import anyio
    from _harness import linear_plan, run_on

    import mainspring as ms

    def trivial(step: Any) -> Any:
        return step

    with tempfile.TemporaryDirectory(prefix="mainspring-anatomy-") as tmp:
        store = _store(kind, Path(tmp))

        async def main() -> dict[str, Any]:
            plan = linear_plan("trivial", STEPS)
            async with ms.open_runtime(store=store, tools={"trivial": trivial}) as rt:

                async def batch(n: int) -> None:
                    limiter = anyio.CapacityLimiter(in_flight)

                    async def one() -> None:
                        async with limiter:
                            handle = await rt.start("anatomy", plan)
                            result = await handle.wait()
                        if result.status != "completed":
                            raise SystemExit(f"not completed: {result.summary}")

                    async with anyio.create_task_group() as tg:
                        for _ in range(n):
                            tg.start_soon(one)

                await batch(max(2, in_flight))  # warm-up: imports, caches, the store's tables
                wall0, cpu0, loop0 = time.perf_counter(), time.process_time(), time.thread_time()
                await batch(executions)
                wall = time.perf_counter() - wall0
                cpu, loop = time.process_time() - cpu0, time.thread_time() - loop0
                # The loop thread's CPU, not the wall: time idle in epoll is waiting, not a layer's.
                profile = cProfile.Profile(time.thread_time)
                profile.enable()
                await batch(executions)
                profile.disable()
            steps = executions * STEPS
            seconds, calls = shares(pstats.Stats(profile))
            return {
                "steps": steps,
                "wall_us": wall / steps * 1e6,
                "loop_us": loop / steps * 1e6,
                "threads_us": max(0.0, cpu - loop) / steps * 1e6,
                "seconds": seconds,
                "calls": {layer: n / steps for layer, n in calls.items()},
                "threads": threading.active_count(),
            }

        return dict(run_on(backend, main))


def render(kind: str, in_flight: int, got: dict[str, Any]) -> str:
    loop_us, wall_us, threads_us = got["loop_us"], got["wall_us"], got["threads_us"]
    total = sum(got["seconds"].values()) or 1.0
    lines = [
        f"### {kind} store, {in_flight} in flight: {wall_us:,.0f} us a step of wall time "
        f"({1e6 / wall_us:,.0f} steps/s)",
        "",
        "| where | us a step | share | calls a step |",
        "|---|---:|---:|---:|",
    ]
    order = sorted(got["seconds"].items(), key=lambda item: -item[1])
    for layer, own in order:
        us = loop_us * own / total
        calls = got["calls"].get(layer, 0.0)
        lines.append(f"| {layer} | {us:,.1f} | {own / total:.0%} | {calls:,.0f} |")
    lines.append(
        f"| **the event loop's thread, in all** | **{loop_us:,.1f}** | | "
        f"{sum(got['calls'].values()):,.0f} |"
    )
    lines.append(f"| other threads (the store's worker thread, psycopg) | {threads_us:,.1f} | | |")
    # One at a time, the loop and the worker thread take turns: what is left is waiting.
    waiting = wall_us - loop_us - (threads_us if in_flight == 1 else 0.0)
    lines.append(
        f"| waiting (fsync, network, server; one at a time only) | {max(0.0, waiting):,.1f} | | |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default="memory", choices=["memory", "sqlite", "postgres"])
    parser.add_argument("--in-flight", type=int, default=1)
    parser.add_argument("--executions", type=int, default=50)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        got = child(args.store, args.in_flight, args.executions, args.backend)
        print(json.dumps(got))
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--store",
            args.store,
            "--in-flight",
            str(args.in_flight),
            "--executions",
            str(args.executions),
            "--backend",
            args.backend,
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    got = json.loads(done.stdout.strip().splitlines()[-1])
    print(render(args.store, args.in_flight, got))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
