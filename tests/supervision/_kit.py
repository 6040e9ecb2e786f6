"""Fake children for the supervision tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio

import mainspring as ms


class Worker(ms.Actor):
    """Logs its life to a shared list; messages make it crash, stop itself, block or count."""

    def __init__(self, log: list[tuple[Any, ...]], name: str) -> None:
        self.log = log
        self.name = name
        self.count = 0

    async def on_start(self) -> None:
        self.log.append(("start", self.name))

    async def receive(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError(f"{self.name} crashed on purpose")
        if message == "exit":
            await self.ref.stop()  # a normal exit the actor chose itself
            return None
        if isinstance(message, tuple) and message[0] == "block":
            message[1].set()
            await anyio.sleep_forever()
        if message == "incr":
            self.count += 1
        return self.count

    async def on_stop(self, reason: ms.CancelReason) -> None:
        self.log.append(("stop", self.name, reason))


def specs(
    log: list[tuple[Any, ...]], *names: str, **options: Any
) -> list[ms.supervision.ChildSpec]:
    return [ms.supervision.ChildSpec(Worker, log, name, name=name, **options) for name in names]


def starts(log: list[tuple[Any, ...]]) -> list[str]:
    return [entry[1] for entry in log if entry[0] == "start"]


def stops(log: list[tuple[Any, ...]]) -> list[str]:
    return [entry[1] for entry in log if entry[0] == "stop"]


class FakeClock:
    """An injectable monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def recording_events(system: ms.ActorSystem) -> AsyncIterator[list[object]]:
    """Collect ``system.events()`` into a list while the block runs; shut the system down at
    the end, which ends the stream, so the list is complete once the block is left."""
    events: list[object] = []

    async def collect() -> None:
        async for event in system.events():
            events.append(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect)
        await anyio.wait_all_tasks_blocked()  # subscribed before anything happens
        yield events
        await system.shutdown()
