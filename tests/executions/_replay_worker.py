"""Subprocess for the exact-replay crash test (E10): store values, get killed, replay them.

    python _replay_worker.py start|resume <store> <values.pickle> <out.pickle> <execution id>

``start`` runs a plan of three steps over the pickled list of values: tool ``produce``
returns them all; agent ``keep`` returns each from its own ``ctx.step`` and, once the last
one is durable, prints ``ready`` and waits to be killed; tool ``echo`` (never reached here)
gets them as its input. ``resume`` resumes that execution in a fresh process (retrying while
the killed owner's lease is live): ``keep``'s inner steps must replay (running one again
exits 4), ``echo`` runs with its input read from disk. It pickles what ``ctx.step`` handed
back and the run's outputs to ``<out.pickle>`` for the test to compare with the originals.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import anyio

import mainspring as ms

LEASE_TTL = 1.0  # the shortest a lease may be: a resume waits little for it to lapse

_mode = ""
_values: list[Any] = []
_replayed: list[Any] = []


def produce() -> list[Any]:
    return _values


def echo(values: list[Any]) -> dict[str, Any]:
    return {"values": values}


def _inner(index: int) -> Any:
    def run() -> Any:
        if _mode == "resume":
            print(f"inner step v{index} ran again", flush=True)
            sys.exit(4)
        return _values[index]

    return run


async def keep(ctx: ms.AgentContext, input: dict[str, Any]) -> list[Any]:
    got = [await ctx.step(f"v{i}", _inner(i)) for i in range(input["n"])]
    if _mode == "start":
        print("ready", flush=True)  # every inner step is durable now: kill me
        await anyio.sleep_forever()
    _replayed.extend(got)
    return got


async def run(store: str, execution_id: str) -> dict[str, Any]:
    async with ms.open_runtime(
        store=store,
        tools={"produce": produce, "echo": echo},
        agents={"keep": keep},
        lease_ttl=LEASE_TTL,
    ) as rt:
        if _mode == "start":
            plan = ms.Plan(
                id="replay",
                goal="replay exactly",
                steps=(
                    ms.PlanStep(id="produce", tool="produce"),
                    ms.PlanStep(
                        id="keep", agent="keep", input={"n": len(_values)}, depends_on=("produce",)
                    ),
                    ms.PlanStep(
                        id="echo", tool="echo", input={"values": _values}, depends_on=("keep",)
                    ),
                ),
            )
            await (await rt.start("replay exactly", plan, execution_id=execution_id)).wait()
            sys.exit(2)  # never reached: killed while keep waits
        with anyio.fail_after(30):
            while True:
                try:
                    handle = await rt.resume(execution_id)
                except ms.ExecutionBusy:
                    await anyio.sleep(0.05)  # the killed owner's lease has not lapsed yet
                    continue
                break
            result = await handle.wait()
    return {
        "status": result.status,
        "replayed": _replayed,
        "outputs": dict(result.outputs),
        "redacted": result.redacted,
    }


def main() -> None:
    global _mode, _values
    _mode, store, values, out, execution_id = sys.argv[1:6]
    with open(values, "rb") as file:
        _values = pickle.load(file)
    result = anyio.run(run, store, execution_id)
    with open(out, "wb") as file:
        pickle.dump(result, file)


if __name__ == "__main__":
    main()
