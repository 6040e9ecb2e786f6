"""Subprocess for test_workers_stopping.py:

    python _orphan_child.py <store> <worker script> <pid dir>

starts one run of one worker-backed step on a SqliteStore, prints ``ready`` once its
worker runs (its identity is stored) and wrote its pids (its SIGTERM handlers are set), and
waits to be killed (SIGKILL: its worker is left orphaned).
"""

from __future__ import annotations

import sys

import anyio

import mainspring as ms
from mainspring.executions import WorkerAgent

EXECUTION = "ex-orphan"


def agents(script: str, pids: str) -> dict[str, WorkerAgent]:
    return {"coder": WorkerAgent([sys.executable, script, pids], grace=0.2, lease=3.0)}


async def run(store: str, script: str, pids: str) -> None:
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="coder"),))
    async with ms.open_runtime(store=store, agents=agents(script, pids), lease_ttl=1.0) as rt:
        await rt.start("g", plan, execution_id=EXECUTION)
        with anyio.fail_after(60):
            while True:
                seen = await rt.workers(EXECUTION)
                running = any(w.status == "running" for w in seen.workers)
                written = anyio.Path(pids, "pids")
                if (
                    running
                    and await written.exists()
                    and len((await written.read_text()).split()) == 2
                ):
                    break
                await anyio.sleep(0.02)  # polls the store and the file: no event for them
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(run, *sys.argv[1:4])
