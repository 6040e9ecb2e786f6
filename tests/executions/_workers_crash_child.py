"""Subprocess for the worker crash trials (test_workers_crash.py):

    python _workers_crash_child.py start|resume <store> <ledger> <execution id> <seed>

runs (``start``) or resumes one execution of three worker-backed steps on a SqliteStore.
Each step's worker is ``_workers_crash_writer.py`` under the SubprocessHost: it appends
``<task> <pid> <generation>`` lines to the ledger; step ``c``'s worker ignores SIGTERM.
``resume`` retries while the killed process's lease is live and prints how the run ended.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

import mainspring as ms
from mainspring.executions import WorkerAgent

LEASE_TTL = 1.0
DEADLINE = 60.0
WRITER = str(Path(__file__).with_name("_workers_crash_writer.py"))


def plan() -> ms.Plan:
    steps = tuple(
        ms.PlanStep(id=name, agent=f"w{name}", input={"step": name, "lines": 25})
        for name in ("a", "b", "c")
    )
    return ms.Plan(id="p", goal="survive kill -9", steps=steps)


async def run(mode: str, store: str, ledger: str, execution_id: str) -> int:
    agents = {
        f"w{name}": WorkerAgent(
            [sys.executable, WRITER, ledger, "stubborn" if name == "c" else "plain"],
            grace=0.2,
            lease=3.0,
            max_starts=20,
        )
        for name in ("a", "b", "c")
    }
    async with ms.open_runtime(store=store, agents=agents, lease_ttl=LEASE_TTL) as rt:
        with anyio.move_on_after(DEADLINE):
            if mode == "start":
                handle = await rt.start("g", plan(), execution_id=execution_id)
                print("ready", flush=True)
                result = await handle.wait()
                print(result.status, flush=True)
                return 0
            while True:
                stored = await rt.get(execution_id)
                assert stored is not None
                if stored.terminal:
                    print(stored.status, flush=True)
                    return 0
                try:
                    handle = await rt.resume(execution_id)
                except ms.ExecutionBusy:
                    await anyio.sleep(0.05)
                    continue
                result = await handle.wait()
    print("deadline", flush=True)
    return 3


def main() -> None:
    mode, store, ledger, execution_id, seed = sys.argv[1:6]
    backend = ("asyncio", "trio")[(int(seed) + (mode == "resume")) % 2]
    sys.exit(anyio.run(run, mode, store, ledger, execution_id, backend=backend))


if __name__ == "__main__":
    main()
