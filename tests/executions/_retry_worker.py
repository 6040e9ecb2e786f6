"""Subprocess for the kill-during-retries trial (tests/executions/run/test_children.py).

    python _retry_worker.py start|resume <store> <ledger> asyncio|trio

Both run one execution (``ex-retry``) of one tool step whose tool always fails; every call
appends ``call`` to the ledger (O_APPEND, unbuffered: it survives ``kill -9``). ``start``
retries with a day's backoff, prints ``retrying`` once attempt 1 is durable, and waits (to
be killed); ``resume`` recovers the run with a tiny backoff (retrying while the killed
process's lease lapses) and prints how it ended.
"""

from __future__ import annotations

import os
import sys

import anyio

import mainspring as ms
from mainspring.storage import RetryPolicy

EXECUTION = "ex-retry"
LEASE_TTL = 1.0


async def main(mode: str, store: str, ledger: str) -> None:
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    async def flaky() -> None:
        os.write(fd, b"call\n")
        raise ConnectionError("the service is down")

    delay = 86_400.0 if mode == "start" else 0.001
    policy = RetryPolicy(max_attempts=3, base_delay=delay, max_delay=delay)
    async with ms.open_runtime(
        store=store,
        tools={"flaky": flaky},
        retries={"tool": policy},
        lease_ttl=LEASE_TTL,
    ) as rt:
        if mode == "start":
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="flaky"),))

            async def announce() -> None:
                async for event in rt.events():
                    if isinstance(event, ms.events.StepRetrying):
                        print("retrying", flush=True)  # attempt 1 is durable (B1)

            async with anyio.create_task_group() as tg:
                before = rt._bus.subscribers
                tg.start_soon(announce)
                while rt._bus.subscribers == before:  # subscribed: nothing is missed
                    await anyio.lowlevel.checkpoint()
                await rt.start("g", plan, execution_id=EXECUTION)
                await anyio.sleep_forever()  # until killed
        with anyio.fail_after(60):
            while True:
                try:
                    handle = await rt.resume(EXECUTION)
                    break
                except ms.ExecutionBusy:
                    await anyio.sleep(0.1)  # the killed process's lease has not lapsed yet
            result = await handle.wait()
        print(result.status, flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4], backend=sys.argv[4])
