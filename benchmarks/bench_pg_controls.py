"""How long a control issued on one host takes to reach a run on another (PostgreSQL).

Run ``python benchmarks/bench_pg_controls.py`` against ``$MAINSPRING_TEST_POSTGRES``
(default the local server). Host A is a process of its own with its own runtime and owner
id, with a 60 s heartbeat: it runs executions one after another, each parked in a tool.
Host B (this process) pauses each (``rt.pause``) and A's tool notes when it was cancelled.
The latency is from just before B's call to A's tool seeing the cancellation (both
processes read the same clock). Without the store's notices (LISTEN/NOTIFY) it would be up
to a heartbeat: 60 s. Prints the median, 90th percentile and worst of ``--samples`` pauses.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DSN = os.environ.get("MAINSPRING_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "mainspring_bench_controls"
OPTIONS: dict[str, Any] = {"lease_ttl": 120.0, "heartbeat_interval": 60.0}


def _url() -> str:
    return f"{DSN}{'&' if '?' in DSN else '?'}schema={SCHEMA}"


async def park() -> str:
    """A's tool: parks until cancelled, then says when."""
    import anyio

    print("entered", flush=True)
    try:
        await anyio.sleep_forever()
    finally:
        print(f"cancelled {time.time():.6f}", flush=True)
    return "unreachable"  # pragma: no cover


def _plan() -> Any:
    import mainspring as ms

    return ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="park", tool="park"),))


def host_a(samples: int) -> None:
    import anyio

    import mainspring as ms

    async def main() -> None:
        async with ms.open_runtime(store=_url(), tools={"park": park}, **OPTIONS) as rt:
            for n in range(samples):
                handle = await rt.start("g", _plan(), execution_id=f"ex-{n}")
                await handle.wait()

    anyio.run(main)


def host_b(samples: int, backend: str) -> list[float]:
    import anyio

    import mainspring as ms

    script = Path(__file__).resolve()
    child = subprocess.Popen(
        [sys.executable, str(script), "--host-a", str(samples)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=script.parent,
    )
    assert child.stdout is not None
    out = child.stdout

    async def main() -> list[float]:
        latencies = []
        async with ms.open_runtime(store=_url(), tools={"park": park}, **OPTIONS) as rt:
            for n in range(samples):
                line = await anyio.to_thread.run_sync(out.readline)
                assert line.strip() == "entered", line
                await anyio.sleep(0.05)  # A's run is parked, its first commits are done
                asked = time.time()
                await rt.pause(f"ex-{n}")
                line = await anyio.to_thread.run_sync(out.readline)
                kind, at = line.split()
                assert kind == "cancelled", line
                latencies.append(float(at) - asked)
        return latencies

    try:
        return list(anyio.run(main, backend=backend))
    finally:
        child.wait(timeout=60)
        out.close()


def _reset() -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--host-a", type=int, default=None, help="internal")
    args = parser.parse_args()
    if args.host_a is not None:
        host_a(args.host_a)
        return
    print("| backend | pauses | median (ms) | p90 (ms) | worst (ms) | heartbeat |")
    print("|---|---:|---:|---:|---:|---:|")
    for backend in ("asyncio", "trio"):
        _reset()
        try:
            got = sorted(host_b(args.samples, backend))
        finally:
            _reset()
        p90 = got[min(len(got) - 1, int(0.9 * len(got)))]
        print(
            f"| {backend} | {len(got)} | {statistics.median(got) * 1000:.1f} | "
            f"{p90 * 1000:.1f} | {got[-1] * 1000:.1f} | 60 s |"
        )


if __name__ == "__main__":
    main()
