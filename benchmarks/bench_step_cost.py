"""A durable step's cost in this tree beside another checkout's, interleaved in one run.

Run ``python benchmarks/bench_step_cost.py --old PATH`` where PATH is a checkout of the
commit to compare with (e.g. ``git worktree add --detach ../old 7e837a3``, the tree before
issue #28). For each store (SqliteStore, FileStore), event loop and plan length (20 and
1,000 steps by default, ``--sizes``), it runs ``bench_executions.py --one scale-plan-...``
from each tree, with that tree first on ``PYTHONPATH``, ``--repeats`` times (default 11),
alternating old and new so that machine drift hits both alike. Each run is one linear plan
of trivial tool steps in a fresh process after a 2-step warm-up (see ``_scaling.py``).

Prints steps/s (median and best) and the median cost of one step in microseconds for both
trees, and new/old: below 1.00x the new tree is slower.
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

HERE = Path(__file__).resolve().parent.parent
STORES = {"sqlite": "SqliteStore", "file": "FileStore"}


def one(tree: Path, store: str, backend: str, steps: int) -> float:
    """steps/s of one ``steps``-step plan run by ``tree``'s code in a fresh process."""
    scratch = Path(tempfile.mkdtemp(prefix="mainspring-step-cost-"))
    try:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run(
            [
                sys.executable,
                str(tree / "benchmarks" / "bench_executions.py"),
                "--one",
                f"scale-plan-{store}",
                backend,
                str(steps),
                "--scratch",
                str(scratch),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tree} {store} {backend} {steps}:\n{done.stderr[-2000:]}")
        return float(json.loads(done.stdout.strip().splitlines()[-1])["steps_per_s"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="a checkout of the commit to compare with")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--sizes", default="20,1000", help="plan lengths, comma-separated")
    parser.add_argument("--backends", default="asyncio,trio", help="comma-separated")
    args = parser.parse_args()
    old, new = Path(args.old).resolve(), HERE
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = [b for b in args.backends.split(",") if b]
    began = time.monotonic()
    load = os.getloadavg()
    rows = []
    for steps in sizes:
        for store in STORES:
            for backend in backends:
                figures: dict[Path, list[float]] = {old: [], new: []}
                for _ in range(args.repeats):
                    for tree in (old, new):
                        figures[tree].append(one(tree, store, backend, steps))
                rows.append((steps, store, backend, figures[old], figures[new]))
                print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    end_load = os.getloadavg()
    print(
        f"{args.repeats} runs per cell, interleaved, {time.monotonic() - began:.0f} s in all; "
        f"load average {load[0]:.1f} at the start, {end_load[0]:.1f} at the end; "
        f"old = {old}\n"
    )
    print(
        "| steps | store | loop | old steps/s | new steps/s | old us/step | new us/step "
        "| new / old (medians) | new / old (bests) |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for steps, store, backend, before, after in rows:
        b, a = statistics.median(before), statistics.median(after)
        print(
            f"| {steps:,} | {STORES[store]} | {backend} | {b:,.0f} ({max(before):,.0f}) "
            f"| {a:,.0f} ({max(after):,.0f}) | {1e6 / b:,.0f} | {1e6 / a:,.0f} | {a / b:.2f}x "
            f"| {max(after) / max(before):.2f}x |"
        )
    print(
        "\nsteps/s: median (best); us/step from the medians. new / old: below 1.00x, new is "
        "slower. On a shared machine the best run is the steadier estimate of the code's own cost."
    )


if __name__ == "__main__":
    main()
