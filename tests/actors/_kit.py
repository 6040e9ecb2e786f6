"""Small fake actors shared by the kernel tests (fakes, not mocks)."""

from __future__ import annotations

from typing import Any

import anyio

import mainspring as ms


class Recorder(ms.Actor):
    """Records every message; answers asks with the message. ``gate`` pauses handling."""

    def __init__(self, gate: anyio.Event | None = None, log: list[Any] | None = None) -> None:
        self.gate = gate
        self.seen: list[Any] = [] if log is None else log
        self.entered = anyio.Event()
        self.stopped_with: ms.CancelReason | None = None

    async def receive(self, message: Any) -> Any:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        self.seen.append(message)
        return message

    async def on_stop(self, reason: ms.CancelReason) -> None:
        self.stopped_with = reason


class Forever(ms.Actor):
    """Its handler never returns on its own; it records what it saw when interrupted."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report

    async def receive(self, message: Any) -> Any:
        self.report["entered"].set()
        try:
            await anyio.sleep_forever()
        finally:
            self.report["handler_saw"] = ms.cancel_reason()

    async def on_stop(self, reason: ms.CancelReason) -> None:
        self.report["on_stop_saw"] = reason
        self.report["on_stop_cancel_reason"] = ms.cancel_reason()


async def wait_blocked() -> None:
    """Let every other task run until all are blocked: deterministic, no sleeping."""
    await anyio.wait_all_tasks_blocked()
