"""How long a run whose process was killed (``kill -9``) waits before it goes on elsewhere.

Run ``python benchmarks/bench_recovery.py [--samples N]``. For each store (SQLite in a temp
dir; PostgreSQL at ``$MAINSPRING_TEST_POSTGRES``, default the local server) and each case:

- **same host**: a process (the "old server") starts a run parked in a tool and is killed
  with SIGKILL; a new process is started at once (the restart under systemd, Kubernetes or
  ``--reload``) and opens a runtime, calling nothing else. Its lease (15 s) is still live,
  but its owner is a process of this host that is gone: the new runtime takes it over.
- **another host**: the same, but the killed process's lease owner names another host (its
  owner id is given, as a process on another machine would have written it); the new
  runtime must wait for the lease to lapse (5 s ttl, renewed every third of it).

Each row gives the time from the kill to the run's tool being called in the new process
(both read the same clock), and from the new process opening its runtime to that call: the
first includes starting Python and importing mainspring. Prints the median and worst of
``--samples`` kills per row.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DSN = os.environ.get("MAINSPRING_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "mainspring_bench_recovery"
#: An owner id of the form mainspring writes, of a host that is not this one.
FOREIGN = "another-host:4242:0123abcd:1.abc.1"
TTL = {"same host": 15.0, "another host": 5.0}
_MODE = "worker"


async def park() -> str:
    """Parks in the killed process; in the new one, says when it was called and returns."""
    import anyio

    if _MODE == "worker":
        print("ready", flush=True)
        await anyio.sleep_forever()
    print(f"resumed {time.time():.6f}", flush=True)
    return "done"


def _plan() -> Any:
    import mainspring as ms

    return ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="park", tool="park"),))


def worker(store: str, execution_id: str, owner: str, ttl: float) -> None:
    import anyio

    import mainspring as ms

    async def main() -> None:
        async with ms.open_runtime(
            store=store,
            tools={"park": park},
            lease_ttl=ttl,
            owner=None if owner == "-" else owner,
        ) as rt:
            await rt.start("g", _plan(), execution_id=execution_id)
            await anyio.sleep_forever()

    anyio.run(main)


def restart(store: str, execution_id: str, ttl: float) -> None:
    global _MODE
    _MODE = "restart"
    import anyio

    import mainspring as ms

    async def main() -> None:
        print(f"open {time.time():.6f}", flush=True)
        async with ms.open_runtime(store=store, tools={"park": park}, lease_ttl=ttl) as rt:
            print(f"entered {time.time():.6f}", flush=True)
            with anyio.fail_after(120):
                while True:  # until the run is done here (the bench's own loop, not a test)
                    stored = await rt.get(execution_id)
                    if stored is not None and stored.terminal:
                        break
                    await anyio.sleep(0.05)

    anyio.run(main)


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, env=env)


def _line(child: subprocess.Popen[bytes], prefix: str, timeout: float = 120.0) -> str:
    assert child.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        readable, _, _ = select.select([child.stdout], [], [], deadline - time.monotonic())
        if not readable:
            break
        line = child.stdout.readline().decode().strip()
        if not line:
            break
        if line.startswith(prefix):
            return line
    child.kill()
    raise RuntimeError(f"no {prefix!r} line from {child.args!r}")


def one(store: str, case: str, n: int) -> tuple[float, float, float]:
    """One kill and restart, seconds: kill -> the run goes on, ``open_runtime`` called ->
    it goes on, ``open_runtime`` returned -> it goes on."""
    execution_id = f"ex-{case.replace(' ', '-')}-{n}"
    owner = "-" if case == "same host" else FOREIGN
    ttl = TTL[case]
    old = _spawn("worker", store, execution_id, owner, str(ttl))
    _line(old, "ready")
    old.send_signal(signal.SIGKILL)
    killed = time.time()
    old.wait()
    new = _spawn("restart", store, execution_id, str(ttl))
    opened = float(_line(new, "open").split()[1])
    entered = float(_line(new, "entered").split()[1])
    resumed = float(_line(new, "resumed").split()[1])
    new.wait(timeout=120)
    return resumed - killed, resumed - opened, max(0.0, resumed - entered)


def _stores(tmp: Path) -> list[tuple[str, str, Any]]:
    stores: list[tuple[str, str, Any]] = [("SQLite", str(tmp / "bench.sqlite3"), None)]
    try:
        import psycopg

        with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    except Exception as exc:
        print(f"(PostgreSQL skipped: {type(exc).__name__})", file=sys.stderr)
        return stores

    def drop() -> None:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")

    url = f"{DSN}{'&' if '?' in DSN else '?'}schema={SCHEMA}"
    stores.append(("PostgreSQL", url, drop))
    return stores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    began = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, store, drop in _stores(Path(tmp)):
            try:
                for case in ("same host", "another host"):
                    runs = [one(store, case, n) for n in range(args.samples)]
                    rows.append((name, case, TTL[case], *zip(*runs, strict=True)))
            finally:
                if drop is not None:
                    drop()
    print(f"{args.samples} kills per row, {time.monotonic() - began:.0f} s in all\n")
    print("| store | owner | lease ttl | from the kill (s) | from open_runtime called (s) "
          "| from open_runtime returned (s) |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|")
    for name, case, ttl, *columns in rows:
        cells = " | ".join(f"{statistics.median(c):.2f} ({max(c):.2f})" for c in columns)
        print(f"| {name} | {case} | {ttl:g} s | {cells} |")
    print("\nEach cell: median (worst).")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif len(sys.argv) > 1 and sys.argv[1] == "restart":
        restart(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        main()
