"""open_system / shutdown: nothing left behind, reasons on the way out, exceptions unwrapped."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import Forever, Recorder, wait_blocked

pytestmark = pytest.mark.anyio


class Sleeper(ms.Actor):
    """Owns a child, a periodic timer and a long handler: all must be gone after exit."""

    def __init__(self, log: list[tuple[str, ms.CancelReason]], depth: int = 1) -> None:
        self.log = log
        self.depth = depth

    async def on_start(self) -> None:
        if self.depth:
            await self.spawn(Sleeper, self.log, self.depth - 1, name="child")
        self.send_every(3600, "tick")  # a live timer task to clean up

    async def receive(self, message: Any) -> Any:
        if message == "sleep":
            await anyio.sleep_forever()

    async def on_stop(self, reason: ms.CancelReason) -> None:
        self.log.append((self.ref.path, reason))


async def test_leaving_open_system_stops_every_actor_with_shutdown_and_no_task_remains() -> None:
    before = {task.id for task in anyio.get_running_tasks()}
    log: list[tuple[str, ms.CancelReason]] = []
    async with ms.open_system(shutdown_timeout=0.05) as system:
        for i in range(5):
            ref = await system.spawn(Sleeper, log, name=f"s{i}")
            ref.tell_nowait("sleep")  # busy: only the cancel after the timeout ends them
        await wait_blocked()
        assert len(anyio.get_running_tasks()) > len(before) + 10
    assert {task.id for task in anyio.get_running_tasks()} == before
    assert len(log) == 10
    for path, reason in log:
        root = reason.root
        assert isinstance(root, ms.Shutdown)
        assert root.detail == "the open_system block ended"
        if path.endswith("/child"):
            assert isinstance(reason, ms.ParentCancel)
        else:
            assert reason is root


async def test_an_exception_in_the_body_propagates_unwrapped_after_cleanup() -> None:
    log: list[tuple[str, ms.CancelReason]] = []

    async def body() -> None:
        async with ms.open_system() as system:
            await system.spawn(Sleeper, log, 0, name="a")
            raise ValueError("body failed")

    with pytest.raises(ValueError, match="body failed"):
        await body()
    assert [path for path, _ in log] == ["/a"]
    reason = log[0][1]
    assert isinstance(reason, ms.Shutdown)
    assert reason.detail == "the open_system block raised ValueError"


@pytest.mark.parametrize("exit_with", [SystemExit(3), KeyboardInterrupt()])
async def test_a_base_exception_in_the_body_propagates_unwrapped_too(
    exit_with: BaseException,
) -> None:
    log: list[tuple[str, ms.CancelReason]] = []

    async def body() -> None:
        async with ms.open_system() as system:
            await system.spawn(Sleeper, log, 0, name="a")
            raise exit_with

    with pytest.raises(type(exit_with)) as raised:  # not a BaseExceptionGroup around it
        await body()
    assert raised.value is exit_with
    reason = log[0][1]
    assert isinstance(reason, ms.Shutdown)
    assert reason.detail == f"the open_system block raised {type(exit_with).__name__}"


async def test_cancelling_the_enclosing_scope_still_gives_actors_a_reason() -> None:
    report: dict[str, Any] = {"entered": anyio.Event()}
    with anyio.CancelScope() as outer:
        async with ms.open_system(shutdown_timeout=0.01) as system:
            ref = await system.spawn(Forever, report)
            ref.tell_nowait("work")
            await report["entered"].wait()
            outer.cancel()
            await anyio.sleep_forever()
    assert outer.cancelled_caught
    reason = report["handler_saw"]
    assert isinstance(reason, ms.Shutdown)
    assert reason.detail == "the open_system block was cancelled"
    assert report["on_stop_saw"] is reason


async def test_shutdown_is_graceful_first_and_refuses_new_spawns() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate)
        ref.tell_nowait("current")
        await wait_blocked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(system.shutdown)
            await wait_blocked()
            with pytest.raises(ms.MainspringError, match="shutting down"):
                await system.spawn(Recorder)
            gate.set()
        actor = ref._cell.actor
        assert isinstance(actor, Recorder)
        assert actor.seen == ["current"]  # the current message finished
        assert isinstance(actor.stopped_with, ms.Shutdown)
        await system.shutdown()  # again: harmless


async def test_systems_nest_and_are_independent() -> None:
    async with ms.open_system("outer") as outer, ms.open_system("inner") as inner:
        a = await outer.spawn(Recorder, name="x")
        b = await inner.spawn(Recorder, name="x")
        assert outer.lookup("/x") is a
        assert inner.lookup("/x") is b
        assert "outer" in repr(outer)
    assert not a.is_alive
    assert not b.is_alive


async def test_an_actor_can_shut_its_own_system_down_without_deadlock() -> None:
    class Closer(ms.Actor):
        def __init__(self, system: ms.ActorSystem) -> None:
            self.system = system

        async def receive(self, message: Any) -> Any:
            await self.system.shutdown(ms.Shutdown(detail="closer asked"))
            return "requested"

    async with ms.open_system(shutdown_timeout=3600) as system:
        closer = await system.spawn(Closer, system)
        other = await system.spawn(Recorder)
        assert await closer.ask("close") == "requested"
        for ref in (closer, other):
            reason = await ref.wait_stopped()
            assert isinstance(reason, ms.Shutdown)
            assert reason.detail == "closer asked"


async def test_a_failing_factory_raises_to_the_spawner_and_registers_nothing() -> None:
    class Broken(ms.Actor):
        def __init__(self) -> None:
            raise LookupError("no such model")

        async def receive(self, message: Any) -> Any:
            return message

    async with ms.open_system() as system:
        with pytest.raises(LookupError):
            await system.spawn(Broken, name="b")
        assert system.lookup("/b") is None
        ok = await system.spawn(Recorder, name="b")  # the name was never taken
        assert await ok.ask(1) == 1
