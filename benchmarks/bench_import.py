"""What ``import mainspring`` costs, beside its four dependencies' own import, in one run.

Each figure is the median wall time of a fresh interpreter doing only that import, minus an
interpreter that imports nothing (so Python's own start-up is not counted). Runs interleave,
so a busy machine slows every row alike. The goal (issue 11): ``import mainspring`` at most
1.3x what its dependencies cost (``anyio``, ``attrs``, ``cattrs``, ``orjson``).

    python benchmarks/bench_import.py [--runs 21]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROWS = {
    "python, nothing imported": "pass",
    "dependencies: anyio, attrs, cattrs, orjson": "import anyio, attrs, cattrs, orjson",
    "import mainspring": "import mainspring",
    "mainspring + the durable layer (ms.Runtime)": "import mainspring as m; m.Runtime",
    "the command's reads (mainspring.cli)": "import mainspring.cli",
}


def _once(code: str, path: str | None = None) -> float:
    env = {**os.environ, "PYTHONPATH": path} if path else None
    started = time.perf_counter()
    # From a neutral directory: `python -c` puts the working directory first on sys.path.
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tempfile.gettempdir())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument(
        "--compare", metavar="CHECKOUT", help="also time `import mainspring` from another checkout"
    )
    args = parser.parse_args()
    rows = dict(ROWS)
    if args.compare:
        rows[f"import mainspring from {args.compare}"] = "import mainspring"
    samples: dict[str, list[float]] = {row: [] for row in rows}
    for _ in range(args.runs):
        for row, code in rows.items():
            path = args.compare if row.endswith(f"from {args.compare}") else None
            samples[row].append(_once(code, path))
    base = statistics.median(samples["python, nothing imported"])
    cost = {row: statistics.median(values) - base for row, values in samples.items()}
    deps = cost["dependencies: anyio, attrs, cattrs, orjson"]
    print(f"median of {args.runs} fresh interpreters each, start-up ({base * 1e3:.0f} ms) "
          "subtracted")  # fmt: skip
    print("| what | ms | vs dependencies |\n|---|---:|---:|")
    for row in rows:
        if row == "python, nothing imported":
            continue
        print(f"| {row} | {cost[row] * 1e3:.0f} | {cost[row] / deps:.2f}x |")


if __name__ == "__main__":
    main()
