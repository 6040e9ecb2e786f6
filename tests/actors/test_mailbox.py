"""Property: per-sender FIFO and no loss, for any senders, counts and mailbox size."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given, settings

import mainspring as ms
from tests._examples import examples

from ..strategies import sender_plans


class Log(ms.Actor):
    def __init__(self) -> None:
        self.log: list[Any] = []

    async def receive(self, message: Any) -> Any:
        if message == "flush":
            return list(self.log)
        self.log.append(message)
        if len(self.log) % 3 == 0:
            await anyio.lowlevel.checkpoint()  # handlers that yield interleave with senders
        return None


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=examples(40), deadline=None)
@given(plan=sender_plans)
def test_every_message_arrives_once_in_per_sender_order(
    backend: str, plan: tuple[list[int], int]
) -> None:
    counts, mailbox_size = plan

    async def scenario() -> list[Any]:
        async with ms.open_system() as system:
            ref = await system.spawn(Log, mailbox_size=mailbox_size)

            async def sender(who: int, count: int) -> None:
                for seq in range(count):
                    if seq % 2:
                        await ref.tell((who, seq))
                    else:
                        await ref.ask((who, seq))

            async with anyio.create_task_group() as tg:
                for who, count in enumerate(counts):
                    tg.start_soon(sender, who, count)
            result: list[Any] = await ref.ask("flush")
            return result

    log = anyio.run(scenario, backend=backend)
    assert len(log) == sum(counts)
    for who, count in enumerate(counts):
        assert [seq for sender, seq in log if sender == who] == list(range(count))
