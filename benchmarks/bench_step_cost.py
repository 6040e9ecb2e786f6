"""A durable step's cost in this tree beside another checkout's, interleaved in one run.

Run ``python benchmarks/bench_step_cost.py --old PATH`` where PATH is a checkout of the
commit to compare with (e.g. ``git worktree add --detach ../old 7e837a3``, the tree before
issue #28). For each store (SqliteStore, FileStore), event loop and plan length (20 and
1,000 steps by default, ``--sizes``), it runs a linear plan of trivial tool steps in a
fresh process after a 2-step warm-up (this file's ``--child``), with one tree's code first on
``PYTHONPATH``, ``--repeats`` times (default 11),
alternating old and new so that machine drift hits both alike.

Prints, per step, the wall time and the CPU time of the measuring process (all its threads)
in microseconds, median and best, for both trees, and new / old: above 1.00x the new tree is
slower. The CPU figure is the code's own cost; the wall figure adds the fsyncs and waits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
STORES = {"sqlite": "SqliteStore", "file": "FileStore"}


def child(store: str, backend: str, steps: int, scratch: str) -> None:
    """In the measuring process (``tree`` first on ``PYTHONPATH``): a 2-step warm-up on a store
    of its own, then one ``steps``-step plan; prints wall and CPU seconds of the run."""
    import anyio

    import mainspring as ms

    def trivial(step: Any) -> Any:
        return step

    def plan(n: int) -> Any:
        return ms.Plan(
            id="linear",
            goal="benchmark",
            steps=tuple(
                ms.PlanStep(
                    id=f"s{i}",
                    tool="trivial",
                    input={"step": f"s{i}"},
                    depends_on=(f"s{i - 1}",) if i > 1 else (),
                )
                for i in range(1, n + 1)
            ),
        )

    async def once(where: Path, n: int) -> tuple[float, float]:
        path = where / ("store.sqlite3" if store == "sqlite" else "store")
        async with ms.open_runtime(store=path, tools={"trivial": trivial}) as rt:
            wall, cpu = time.perf_counter(), time.process_time()
            result = await (await rt.start("cost", plan(n))).wait()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert result.status == "completed", result.status
        return wall, cpu

    async def main() -> tuple[float, float]:
        await once(Path(scratch) / "warm-up", 2)
        return await once(Path(scratch) / "run", steps)

    for where in ("warm-up", "run"):
        (Path(scratch) / where).mkdir()
    wall, cpu = anyio.run(main, backend=backend)
    print(json.dumps({"wall": wall, "cpu": cpu}))


def one(tree: Path, store: str, backend: str, steps: int) -> tuple[float, float]:
    """Wall and CPU (all threads) microseconds per step of one ``steps``-step plan run by
    ``tree``'s code in a fresh process."""
    scratch = Path(tempfile.mkdtemp(prefix="mainspring-step-cost-"))
    try:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        argv = [sys.executable, __file__, "--child", store, backend, str(steps), str(scratch)]
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, check=False, timeout=900
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tree} {store} {backend} {steps}:\n{done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        return 1e6 * got["wall"] / steps, 1e6 * got["cpu"] / steps
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="a checkout of the commit to compare with")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--sizes", default="20,1000", help="plan lengths, comma-separated")
    parser.add_argument("--backends", default="asyncio,trio", help="comma-separated")
    parser.add_argument(
        "--child", nargs=4, metavar=("STORE", "BACKEND", "N", "DIR"), help="internal"
    )
    args = parser.parse_args()
    if args.child:
        store, backend, n, scratch = args.child
        child(store, backend, int(n), scratch)
        return
    if not args.old:
        parser.error("--old PATH is required")
    old, new = Path(args.old).resolve(), HERE
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = [b for b in args.backends.split(",") if b]
    began = time.monotonic()
    load = os.getloadavg()
    rows = []
    for steps in sizes:
        for store in STORES:
            for backend in backends:
                figures: dict[Path, list[tuple[float, float]]] = {old: [], new: []}
                for _ in range(args.repeats):
                    for tree in (old, new):
                        figures[tree].append(one(tree, store, backend, steps))
                rows.append((steps, store, backend, figures[old], figures[new]))
                print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    end_load = os.getloadavg()
    print(
        f"{args.repeats} runs per cell, interleaved, {time.monotonic() - began:.0f} s in all; "
        f"load average (1 min) {load[0]:.1f} at the start, {end_load[0]:.1f} at the end, "
        f"{os.cpu_count()} cores; old = {old}\n"
    )
    print(
        "| steps | store | loop | old wall us/step | new wall us/step | new / old "
        "| old CPU us/step | new CPU us/step | new / old |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for steps, store, backend, before, after in rows:
        old_wall, old_cpu = (list(c) for c in zip(*before, strict=True))
        new_wall, new_cpu = (list(c) for c in zip(*after, strict=True))
        wall = statistics.median(new_wall) / statistics.median(old_wall)
        cpu = statistics.median(new_cpu) / statistics.median(old_cpu)
        print(
            f"| {steps:,} | {STORES[store]} | {backend} | {_cell(old_wall)} | {_cell(new_wall)} "
            f"| {wall:.2f}x | {_cell(old_cpu)} | {_cell(new_cpu)} | {cpu:.2f}x |"
        )
    print(
        "\nEach cell: median (best) microseconds per step; new / old is the medians' ratio, above "
        "1.00x the new tree is slower. CPU is the measuring process's, all threads "
        "(time.process_time()): on a shared machine it moves far less than wall time."
    )


if __name__ == "__main__":
    main()
