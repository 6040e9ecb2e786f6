"""Tools and agents both processes of a cross-process test load from one module, so their
declarations hash the same (a tool defined elsewhere would count as drift, R6)."""

from __future__ import annotations

import os
from typing import Any

import anyio

import mainspring as ms


async def block(**_: Any) -> str:
    """Parks forever in the first process (MAINSPRING_TEST_BLOCK=1); returns at once in others."""
    if os.environ.get("MAINSPRING_TEST_BLOCK") != "1":
        return "not blocked"
    print("entered", flush=True)
    try:
        await anyio.sleep_forever()
    except BaseException:
        reason = ms.cancel_reason()
        print("reason", type(reason).__name__, flush=True)
        root = reason.root if reason is not None else None
        if root is not None:  # V3: what the control said, and who issued it
            print("root", type(root).__name__, root.source, "|", root.detail, flush=True)
        raise
    return "unreachable"  # pragma: no cover


async def inc(x: int = 0) -> int:
    return x + 1


async def blocker(ctx: ms.AgentContext, input: Any) -> str:
    await ctx.step("first", lambda: 1)
    result = await ctx.step("wait", block)
    return str(result)


async def asker(ctx: ms.AgentContext, input: Any) -> str:
    answer = await ctx.ask("which city?")
    print("answered", answer, flush=True)
    return answer


TOOLS = {"block": block, "inc": inc}
AGENTS = {"blocker": blocker, "asker": asker}

PLAN = ms.Plan(
    id="cross",
    goal="cross-process",
    steps=(
        ms.PlanStep(id="a", agent="blocker"),
        ms.PlanStep(id="after", tool="inc", input={"x": 1}, depends_on=("a",)),
        ms.PlanStep(id="free", tool="inc", input={"x": 2}),
    ),
)

#: A question asked while another step keeps the run live: the answer must reach the run.
ASKING = ms.Plan(
    id="asking",
    goal="answer while it runs",
    steps=(
        ms.PlanStep(id="ask", agent="asker"),
        ms.PlanStep(id="busy", tool="block"),
    ),
)

OPTIONS: dict[str, Any] = {"lease_ttl": 5.0, "heartbeat_interval": 0.1}


#: Hosts on a store that notifies (PostgreSQL): a heartbeat so long that a control which
#: arrives within seconds can only have come through the notice (LISTEN/NOTIFY).
SLOW_HEARTBEAT: dict[str, Any] = {"lease_ttl": 120.0, "heartbeat_interval": 60.0}


async def main(
    store: str, execution_id: str, options: str = "default", plan: str = "cross"
) -> None:
    chosen = SLOW_HEARTBEAT if options == "slow-heartbeat" else OPTIONS
    # "other-host": A's lease names another host, whose death no runtime here can see (L7):
    # its lease is free only once it lapses.
    owner = "other-host:4242:0123abcd:1.abc.1" if options == "other-host" else None
    async with ms.open_runtime(
        store=store, tools=TOOLS, agents=AGENTS, owner=owner, **chosen
    ) as rt:
        run = ASKING if plan == "asking" else PLAN
        handle = await rt.start("cross-process", run, execution_id=execution_id)
        result = await handle.wait()
        stopped = type(result.stopped_by).__name__ if result.stopped_by else "None"
        print("ended", result.status, stopped, flush=True)
