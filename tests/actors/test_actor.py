"""``Actor.stop_self``: an actor stops itself for good, after the message it is handling."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import mainspring as ms

pytestmark = pytest.mark.anyio


class Quitter(ms.Actor):
    """On ("quit", reason[, gate]), waits for the gate if any, stops itself (with the reason)
    and still answers."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    async def on_start(self) -> None:
        self.log.append("start")

    async def receive(self, message: Any) -> Any:
        if isinstance(message, tuple) and message[0] == "quit":
            if len(message) > 2:
                await message[2].wait()
            self.stop_self(message[1])
            self.log.append("handler went on")
            return "bye"
        return message

    async def on_stop(self, reason: ms.CancelReason) -> None:
        self.log.append(reason)


async def test_the_handler_finishes_then_the_actor_stops_with_the_reason() -> None:
    log: list[Any] = []
    async with ms.open_system() as system:
        ref = await system.spawn(Quitter, log)
        why = ms.BudgetExhausted(detail="out of calls")
        assert await ref.ask(("quit", why)) == "bye"
        assert await ref.wait_stopped() is why
    assert log == ["start", "handler went on", why]


async def test_from_the_call_on_nothing_more_is_accepted_and_queued_askers_are_told() -> None:
    log: list[Any] = []
    async with ms.open_system() as system:
        ref = await system.spawn(Quitter, log)
        results: dict[str, Any] = {}

        async def ask(key: str, message: Any) -> None:
            try:
                results[key] = await ref.ask(message)
            except ms.ActorDeadError as exc:
                results[key] = exc

        gate = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "quit", ("quit", None, gate))
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(ask, "queued", "queued")  # waits in the mailbox behind the quit
            await anyio.wait_all_tasks_blocked()
            gate.set()
        assert results["quit"] == "bye"
        assert isinstance(results["queued"], ms.ActorDeadError)
        assert not ref.is_alive
        with pytest.raises(ms.ActorDeadError):
            ref.tell_nowait("late")
        reason = await ref.wait_stopped()
    assert isinstance(reason, ms.Stop)
    assert reason.source == ref.path  # the default reason says who stopped it


@pytest.mark.parametrize("restart", ["permanent", "transient"])
async def test_no_supervisor_restarts_an_actor_that_stopped_itself(restart: Any) -> None:
    log: list[Any] = []
    async with ms.open_system() as system:
        top = await system.spawn(Quitter, log, name="top", restart=restart)
        sup = await ms.supervision.spawn_supervisor(
            system,
            [ms.supervision.ChildSpec(Quitter, log, name="child", restart=restart)],
            name="sup",
        )
        child = sup.child("child")
        assert child is not None
        for ref in (top, child):
            await ref.ask(("quit", ms.Stop(detail="done")))
            assert isinstance(await ref.wait_stopped(), ms.Stop)
        assert [info.status for info in await sup.which_children()] == ["stopped"]
    assert log.count("start") == 2  # one each, never restarted


async def test_stop_self_wants_a_cancel_reason() -> None:
    log: list[Any] = []
    async with ms.open_system() as system:
        ref = await system.spawn(Quitter, log)
        with pytest.raises(ms.ActorFailed) as info:
            await ref.ask(("quit", "not a reason"))
        assert isinstance(info.value.__cause__, TypeError)
        assert "CancelReason" in str(info.value.__cause__)


def test_stop_self_outside_a_system_says_so() -> None:
    with pytest.raises(RuntimeError, match="not running in an actor system"):
        Quitter([]).stop_self()
