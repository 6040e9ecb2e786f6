"""Host A of the network-cut test, and the tool both hosts run (imported by both, so its
declaration hashes alike):

    python -c "...; anyio.run(_cut_worker.main, url, execution_id, owner)"

A runs a chain of ``STEPS`` steps; each appends ``<host> <step>`` to the ledger
(``MAINSPRING_TEST_LEDGER``) and prints it, then sleeps a little. At the end A prints
``ended <status> <stopped by> | <error>``.
"""

from __future__ import annotations

import os
import sys

import anyio

import mainspring as ms

STEPS = 30
LEASE_TTL = 3.0
#: Set by each host: host A from its environment, host B (the test) directly.
LEDGER = os.environ.get("MAINSPRING_TEST_LEDGER", "")
HOST = os.environ.get("MAINSPRING_TEST_HOST", "B")


async def mark(step: str) -> str:
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{HOST} {step}\n".encode())
    finally:
        os.close(fd)
    if HOST == "A":
        print("step", step, flush=True)
    await anyio.sleep(0.15)  # a step's own length: the cut lands while the run goes on
    return step


TOOLS = {"mark": mark}

PLAN = ms.Plan(
    id="cut",
    goal="network cut",
    steps=tuple(
        ms.PlanStep(
            id=f"s{k:02d}",
            tool="mark",
            input={"step": f"s{k:02d}"},
            depends_on=(f"s{k - 1:02d}",) if k else (),
        )
        for k in range(STEPS)
    ),
)


async def main(url: str, execution_id: str, owner: str) -> None:
    async with ms.open_runtime(store=url, tools=TOOLS, lease_ttl=LEASE_TTL, owner=owner) as rt:
        handle = await rt.start("network cut", PLAN, execution_id=execution_id)
        result = await handle.wait()
        stopped = type(result.stopped_by).__name__ if result.stopped_by else "None"
        print("ended", result.status, stopped, "|", result.error, flush=True)
    sys.stdout.flush()
