"""Subprocess for the memory crash test: an agent remembers, gets killed, is resumed.

    python _memory_worker.py start|resume <store> <execution id>

``start`` runs one agent that remembers two facts of one conflict group (the second
supersedes the first), prints ``ready`` once both are durable and waits to be killed.
``resume`` resumes that execution in a fresh process (retrying while the killed owner's
lease is live): the agent runs again, remembers the same two facts, and prints the ids it
got back and the run's status as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio

import mainspring as ms

LEASE_TTL = 1.0

_mode = ""


async def curator(ctx: ms.AgentContext, input: Any) -> list[str]:
    old = await ctx.memory.remember(
        "the build uses tox", scope="repository", conflict_group="build", confidence=0.5
    )
    new = await ctx.memory.remember(
        "the build uses nox",
        scope="repository",
        conflict_group="build",
        valid_until=time.time() + 3_600,  # from the clock: differs on the resume
    )
    if _mode == "start":
        print("ready", flush=True)  # both facts are durable: kill me
        await anyio.sleep_forever()
    return [old.id, new.id]


async def run(store: str, execution_id: str) -> None:
    async with ms.open_runtime(store=store, agents={"curator": curator}, lease_ttl=LEASE_TTL) as rt:
        if _mode == "start":
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="c", agent="curator"),))
            await (await rt.start("g", plan, execution_id=execution_id)).wait()
            sys.exit(2)  # never reached: killed while the agent waits
        with anyio.fail_after(30):
            while True:
                try:
                    handle = await rt.resume(execution_id)
                except ms.ExecutionBusy:
                    await anyio.sleep(0.05)  # the killed owner's lease has not lapsed yet
                    continue
                break
            result = await handle.wait()
        print(json.dumps({"status": result.status, "ids": result.outputs.get("c")}), flush=True)


def main() -> None:
    global _mode
    _mode, store, execution_id = sys.argv[1:4]
    anyio.run(run, store, execution_id)


if __name__ == "__main__":
    main()
