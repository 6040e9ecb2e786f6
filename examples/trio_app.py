"""mainspring in a plain trio program: a nursery watches the runtime's events while the main
task starts a run, pauses it, resumes it and answers its question.

Run it with ``python examples/trio_app.py [STORE]`` (needs the ``trio`` extra). The runtime
is the same one the FastAPI example uses; only the event loop differs.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

import mainspring as ms


async def fetch(topic: str) -> str:
    await trio.sleep(0.01)  # the tool's own work
    return f"3 sources on {topic}"


async def writer(ctx: ms.AgentContext, input: dict[str, Any]) -> str:
    sources = await ctx.step("fetch", fetch, input["topic"])
    tone = await ctx.ask("Formal or casual?")
    return f"an article from {sources}, {tone}"


PLAN = ms.Plan(
    id="article",
    goal="write an article",
    steps=(
        ms.PlanStep(id="fetch", tool="fetch", input={"topic": "tides"}),
        ms.PlanStep(id="write", agent="writer", input={"topic": "tides"}, depends_on=("fetch",)),
    ),
)


async def watch(rt: ms.Runtime, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Print every step and agent task as it ends (events carry ids and states only)."""
    async with contextlib.aclosing(rt.events()) as events:
        task_status.started()
        async for event in events:
            if isinstance(event, ms.events.StepFinished):
                print(f"  step {event.step_id}: {event.state} ({event.done}/{event.total})")
            elif isinstance(event, ms.events.AgentTaskWaiting):
                print(f"  task {event.task_id} asks a question")


async def main(store: str) -> list[str]:
    statuses = []
    async with (
        ms.open_runtime(store=store, tools={"fetch": fetch}, agents={"writer": writer}) as rt,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(watch, rt)
        run = await rt.start("write an article about tides", PLAN)
        first = await run.wait()
        statuses.append(first.status)
        print(f"{first.status}: {first.pending.question if first.pending else ''}")
        paused = await rt.pause(first.execution_id, reason="lunch break")
        statuses.append(paused.status)
        print(f"{paused.status}")
        done = await (await rt.resume(first.execution_id, answer="casual")).wait()
        statuses.append(done.status)
        print(f"{done.status}: {done.outputs['write']}")
        nursery.cancel_scope.cancel()
    return statuses


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "trio.sqlite3")
    trio.run(main, where)
