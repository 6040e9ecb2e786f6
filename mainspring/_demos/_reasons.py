"""``mainspring demo-reasons``: a small actor tree at work, cancelled midway with a reason.

An "execution" actor owns three "agent" actors; each agent owns a "tool" actor that works in
steps. Once enough steps have finished, the demo cancels the execution. Every actor then says,
in its own words, why it stopped: the tools are interrupted mid-step and see a ParentCancel
chain that leads back to the one reason the operator gave.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

import anyio

from ..actors import (
    Actor,
    Cancel,
    CancelReason,
    ParentCancel,
    Pause,
    Timeout,
    cancel_reason,
    open_system,
)
from ..supervision import RootSupervisor

REASONS: dict[str, Callable[[], CancelReason]] = {
    "cancel": lambda: Cancel(detail="the operator pressed cancel", source="demo"),
    "pause": lambda: Pause(detail="the operator paused the run", source="demo"),
    "timeout": lambda: Timeout(detail="the run's 2 s deadline passed", source="demo"),
}


class _Say:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.gone = False

    def __call__(self, who: str, text: str) -> None:
        # An actor's line that met a closed pipe (``| head``) crashed the actor, its
        # supervisor restarted it, again and again, and the demo never ended: once the
        # reader is gone, the actors' lines are dropped and the demo runs to its end.
        if self.gone:
            return
        try:
            print(f"  {who:<28} {text}", file=self.out, flush=True)
        except BrokenPipeError:
            self.gone = True


class Tool(Actor):
    """Works in steps; each step takes a while, so a cancel lands in the middle of one."""

    def __init__(self, say: _Say, progress: Callable[[], None]) -> None:
        self.say = say
        self.progress = progress
        self.steps = 0

    async def on_start(self) -> None:
        self.send_every(0.01, "step")

    async def receive(self, message: Any) -> Any:
        self.steps += 1
        try:
            await anyio.sleep(0.03)  # stands in for a tool call
        except anyio.get_cancelled_exc_class():
            seen = cancel_reason()
            root = seen.root.kind if seen is not None else "none"
            self.say(self.ref.path, f"interrupted during step {self.steps} (root reason: {root})")
            raise
        self.say(self.ref.path, f"finished step {self.steps}")
        self.progress()

    async def on_stop(self, reason: CancelReason) -> None:
        self.say(self.ref.path, f"stopped: {_view(reason)}")


class Agent(Actor):
    def __init__(self, say: _Say, progress: Callable[[], None]) -> None:
        self.say = say
        self.progress = progress

    async def on_start(self) -> None:
        await self.spawn(Tool, self.say, self.progress, name="tool")
        self.say(self.ref.path, "started with one tool")

    async def receive(self, message: Any) -> Any:
        return None

    async def on_stop(self, reason: CancelReason) -> None:
        self.say(self.ref.path, f"stopped: {_view(reason)}")


class Execution(Actor):
    def __init__(self, say: _Say, progress: Callable[[], None]) -> None:
        self.say = say
        self.progress = progress

    async def on_start(self) -> None:
        for name in ("planner", "researcher", "writer"):
            await self.spawn(Agent, self.say, self.progress, name=name)
        self.say(self.ref.path, "started three agents")

    async def receive(self, message: Any) -> Any:
        return None

    async def on_stop(self, reason: CancelReason) -> None:
        assert cancel_reason() is reason
        self.say(self.ref.path, f"stopped: {_view(reason)}")


def _view(reason: CancelReason) -> str:
    if isinstance(reason, ParentCancel):
        return f"{reason}\n  {'':<28} (root cause: {reason.root.kind}: {reason.root.detail})"
    return str(reason)


async def run_demo(out: TextIO, *, reason_name: str = "cancel", steps: int = 6) -> CancelReason:
    """Run the demo, writing to ``out``; return the reason the execution stopped with."""
    say = _Say(out)
    enough = anyio.Event()
    done = 0

    def progress() -> None:
        nonlocal done
        done += 1
        if done >= steps:
            enough.set()

    print(
        "mainspring demo: an execution with three agents, each driving a tool.\n"
        f"After {steps} tool steps the operator stops it; each actor then says why it stopped.\n",
        file=out,
    )
    async with open_system("demo", root=RootSupervisor) as system:
        execution = await system.spawn(Execution, say, progress, name="execution")
        await enough.wait()
        reason = REASONS[reason_name]()
        print(f"\n  >>> cancelling /execution: {reason}\n", file=out, flush=True)
        execution.cancel(reason)
        final = await execution.wait_stopped()
    print("\nEvery actor saw the same root reason; nothing was left running.", file=out)
    return final
