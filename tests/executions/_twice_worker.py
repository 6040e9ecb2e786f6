"""Subprocess for review 14's twice-resumed run (E10): no tests here.

    python -m tests.executions._twice_worker start|resume|finish <store> <execution id>

``start`` and ``resume`` run until the agent's inner work is durable, print ``ready`` and wait
to be killed; ``finish`` resumes to the end. In every process the agent and the tool ``echo``
print whether what they were handed equals the live values (``same ...``); an inner step that
runs again after ``start`` exits 4.
"""

from __future__ import annotations

import datetime as dt
import decimal
import sys
import uuid
from typing import Any

import anyio

import mainspring as ms
from tests._exact import same

VALUES: list[Any] = [
    dt.datetime(2024, 1, 2, 3, 4, 5),
    dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    dt.date(2024, 2, 29),
    dt.timedelta(days=1, microseconds=5),
    b"\x00\xff",
    {"a", "b", "c", "d"},  # string hashing differs per process
    frozenset({("x", 1), ("y", 2)}),
    {(1, 2): "pair", "k": {"z", "w"}},
    (1, (2, "3")),
    decimal.Decimal("1.10"),
    uuid.UUID(int=7),
    2**70,
    {"$ms": "set", "v": [1]},
]

_mode = ""


def produce() -> list[Any]:
    return VALUES


def echo(values: list[Any]) -> list[Any]:
    print("same echo", same(values, VALUES), flush=True)
    return values


def _inner() -> list[Any]:
    if _mode != "start":
        print("inner step ran again", flush=True)
        sys.exit(4)
    return VALUES


async def _park() -> str:
    if _mode != "finish":
        print("ready", flush=True)
        await anyio.sleep_forever()
    return "parked"


async def keep(ctx: ms.AgentContext, input: dict[str, Any]) -> list[Any]:
    got = await ctx.step("v", _inner)
    print("same inner", same(got, VALUES), flush=True)
    print("same input", same(input["values"], VALUES), flush=True)
    await ctx.step("park", _park)
    return got


PLAN = ms.Plan(
    id="twice",
    goal="resume twice",
    steps=(
        ms.PlanStep(id="produce", tool="produce"),
        ms.PlanStep(id="keep", agent="keep", input={"values": VALUES}, depends_on=("produce",)),
        ms.PlanStep(id="echo", tool="echo", input={"values": VALUES}, depends_on=("keep",)),
    ),
)


async def run(store: str, execution_id: str) -> None:
    async with ms.open_runtime(
        store=store, tools={"produce": produce, "echo": echo}, agents={"keep": keep}, lease_ttl=1.0
    ) as rt:
        if _mode == "start":
            await (await rt.start("resume twice", PLAN, execution_id=execution_id)).wait()
            sys.exit(2)
        with anyio.fail_after(30):
            while True:
                try:
                    handle = await rt.resume(execution_id)
                except ms.ExecutionBusy:
                    await anyio.sleep(0.05)
                    continue
                break
            result = await handle.wait()
    print("status", result.status, flush=True)
    for step_id in ("produce", "keep", "echo"):
        print(f"same output {step_id}", same(result.outputs.get(step_id), VALUES), flush=True)


if __name__ == "__main__":
    _mode = sys.argv[1]
    anyio.run(run, sys.argv[2], sys.argv[3])
