"""Subprocess for the crash-and-resume trials: run one durable execution, ledger every side
effect.

    python _crash_worker.py start|resume <store> <ledger> <execution id> <seed>

``start`` stores and runs a fixed 30-step plan (27 tool steps and 3 agent steps, a DAG with
chains, fan-out and fan-in); ``resume`` continues it after the ``start`` process was killed.
Either way the worker keeps going until the execution is completed: when the run stops
waiting for the one question an agent asks, it resumes with the answer ``yes``; while the
killed process's lease is still live, resume raises ``ExecutionBusy`` and is retried.

Every tool call and every inner step of an agent appends ``<kind> <name> begin`` before its
work and ``<kind> <name> end`` after it (agents add ``agent <step> begin|end`` around their
whole run, and the asking agent ``answer <step> <answer>``). Lines are written with O_APPEND
and no buffering, so they are in the kernel, and survive ``kill -9``, before the work goes on.

Timings are seeded from ``<seed>`` (and the step's name), so one trial behaves the same in
every process it runs in; the anyio backend, asyncio or trio, is chosen by the seed and
``mode`` so that a run is often resumed on the other backend.
"""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Any

import anyio

import mainspring as ms

#: Short, so a resume waits little for the killed process's lease to lapse; heartbeats renew
#: it every third of that, which a lightly loaded machine keeps up with easily.
LEASE_TTL = float(os.environ.get("MAINSPRING_CRASH_LEASE_TTL", "1.0"))
#: The whole worker gives up (exit 3) after this long: a hang fails the trial, never CI.
DEADLINE = 60.0
ANSWER = "yes"
#: Which agent step asks its question, and after which of its inner steps.
ASKER = "g2"

_ledger_fd = -1
_seed = 0


def ledger(kind: str, name: str, phase: str) -> None:
    os.write(_ledger_fd, f"{kind} {name} {phase}\n".encode())


async def pause_for(name: str) -> None:
    """0-5 ms, the same for ``name`` in every process of a trial."""
    await anyio.sleep(random.Random(f"{_seed}:{name}").uniform(0.0, 0.005))


# -- tools and agents ------------------------------------------------------------------------


async def work(step: str) -> dict[str, Any]:
    ledger("tool", step, "begin")
    await pause_for(step)
    ledger("tool", step, "end")
    return {"step": step}


def inner(name: str) -> Any:
    async def run() -> str:
        ledger("inner", name, "begin")
        await pause_for(name)
        ledger("inner", name, "end")
        return name

    return run


async def researcher(ctx: ms.AgentContext, input: dict[str, Any]) -> dict[str, Any]:
    """``input["inner"]`` durable inner steps; the asker asks once, after the second."""
    step = ctx.step_id
    ledger("agent", step, "begin")
    done = []
    answer = None
    for i in range(input["inner"]):
        name = f"{step}.i{i}"
        done.append(await ctx.step(f"i{i}", inner(name)))
        if input.get("ask") and i == 1:
            answer = await ctx.ask(f"may {step} go on?")
            ledger("answer", step, answer)
    ledger("agent", step, "end")
    return {"inner": done, "answer": answer}


# -- the plan --------------------------------------------------------------------------------


def build_plan() -> ms.Plan:
    """30 steps: a root; three 6-step chains from it; an agent off each chain (the middle one
    asks); each chain and its agent fan in; then a fan-in, a fan-out and a last fan-in."""
    steps: list[ms.PlanStep] = []

    def tool(sid: str, *deps: str) -> None:
        steps.append(ms.PlanStep(id=sid, tool="work", input={"step": sid}, depends_on=deps))

    def agent(sid: str, dep: str, inner: int, ask: bool = False) -> None:
        steps.append(
            ms.PlanStep(
                id=sid,
                agent="researcher",
                input={"name": sid, "inner": inner, "ask": ask},
                depends_on=(dep,),
            )
        )

    tool("t01")
    for first, last, branch in ((2, 7, "g1"), (8, 13, "g2"), (14, 19, "g3")):
        for n in range(first, last + 1):
            tool(f"t{n:02d}", f"t{n - 1:02d}" if n > first else "t01")
        agent(branch, f"t{first + 1:02d}", inner=3 if branch == "g1" else 4, ask=branch == ASKER)
    tool("t20", "t07", "g1")
    tool("t21", "t13", "g2")
    tool("t22", "t19", "g3")
    tool("t23", "t20", "t21", "t22")
    for sid in ("t24", "t25", "t26"):
        tool(sid, "t23")
    tool("t27", "t24", "t25", "t26")
    assert len(steps) == 30
    return ms.Plan(id="crash-plan", goal="survive kill -9", steps=tuple(steps))


# -- the run ---------------------------------------------------------------------------------


async def run(mode: str, store: str, execution_id: str) -> int:
    async with ms.open_runtime(
        store=store,
        tools={"work": work},
        agents={"researcher": researcher},
        lease_ttl=LEASE_TTL,
    ) as rt:
        with anyio.move_on_after(DEADLINE):
            if mode == "start":
                handle = await rt.start("survive kill -9", build_plan(), execution_id=execution_id)
                print("ready", flush=True)
                result = await handle.wait()
                if result.status == "completed":
                    print("completed", flush=True)
                    return 0
            for _ in range(1000):
                stored = await rt.get(execution_id)
                assert stored is not None
                if stored.status == "completed":
                    print("completed", flush=True)
                    return 0
                if stored.terminal:
                    print(f"ended {stored.status}", flush=True)
                    return 2
                pending = stored.pending
                answer = ANSWER if pending is not None and pending.kind == "clarification" else None
                try:
                    handle = await rt.resume(execution_id, answer=answer)
                except ms.ExecutionBusy:
                    await anyio.sleep(0.05)  # the killed process's lease has not lapsed yet
                    continue
                result = await handle.wait()
                print(f"resumed: {result.status}", flush=True)
            print("gave up", flush=True)
            return 2
    print("deadline", flush=True)
    return 3


def main() -> None:
    global _ledger_fd, _seed
    mode, store, ledger_path, execution_id, seed = sys.argv[1:6]
    assert mode in ("start", "resume")
    _seed = int(seed)
    _ledger_fd = os.open(ledger_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    backend = ("asyncio", "trio")[(_seed + (mode == "resume")) % 2]
    started = time.monotonic()
    code = anyio.run(run, mode, store, execution_id, backend=backend)
    print(f"took {time.monotonic() - started:.3f}", flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
