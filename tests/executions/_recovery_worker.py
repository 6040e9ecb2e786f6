"""Subprocess for the recovery tests: start one run whose only step never returns here, say
``ready`` once it is under way, and wait to be killed.

    python _recovery_worker.py <store> <execution id> <owner or -> <lease ttl>

``owner`` ``-`` is the runtime's own (this process, this host); any other value is used as
the lease owner as given (the tests pass one of another host).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

import mainspring as ms


async def main(store: str, execution_id: str, owner: str, ttl: float) -> None:
    async def gate(**_: Any) -> int:
        print("ready", flush=True)
        await anyio.sleep_forever()
        return 0

    gate.__qualname__ = "gate"  # the tests' tool of that name: a resume there is no drift
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="gate", input={}),))
    async with ms.open_runtime(
        store=store,
        tools={"gate": gate},
        lease_ttl=ttl,
        owner=None if owner == "-" else owner,
        recover=False,
    ) as rt:
        await rt.start("g", plan, execution_id=execution_id)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
