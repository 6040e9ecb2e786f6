"""A BaseException that is not cancellation (SystemExit, KeyboardInterrupt) raised in an actor's
own code ends the program: the actor crashes for good, the system shuts down, and the exception
comes out of ``open_system`` unwrapped — never a hang, never a restart."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import mainspring as ms

pytestmark = pytest.mark.anyio

ERRORS = [SystemExit, KeyboardInterrupt]


def _raise(error: type[BaseException]) -> BaseException:
    return error(3) if error is SystemExit else error()


@pytest.mark.parametrize("error", ERRORS)
async def test_a_supervised_child_that_raises_it_is_not_restarted(
    error: type[BaseException],
) -> None:
    built: list[int] = []

    class Boom(ms.Actor):
        def __init__(self) -> None:
            built.append(1)

        async def receive(self, message: Any) -> None:
            raise _raise(error)

    with pytest.raises(error) as caught:  # noqa: PT012
        async with ms.open_system(shutdown_timeout=0.5) as system:
            sup = await ms.supervision.spawn_supervisor(
                system, [ms.supervision.ChildSpec(Boom, name="b", restart="permanent")], name="sup"
            )
            child = sup.child("b")
            assert child is not None
            await child.tell("go")
            await anyio.sleep_forever()
    assert type(caught.value) is error
    assert built == [1]
    assert not child.is_alive
    reason = await child.wait_stopped()
    assert isinstance(reason, ms.Crash)
    assert reason.error_type == error.__qualname__


@pytest.mark.parametrize("error", ERRORS)
async def test_a_permanent_top_level_actor_raising_it_in_on_start_is_not_restarted(
    error: type[BaseException],
) -> None:
    built: list[int] = []

    class Boom(ms.Actor):
        def __init__(self) -> None:
            built.append(1)

        async def on_start(self) -> None:
            raise _raise(error)

        async def receive(self, message: Any) -> None:  # pragma: no cover - never runs
            pass

    with pytest.raises(error):  # noqa: PT012
        async with ms.open_system(shutdown_timeout=0.5) as system:
            ref = await system.spawn(Boom, restart="permanent")
            await anyio.sleep_forever()
    assert built == [1]
    assert not ref.is_alive


@pytest.mark.parametrize("error", ERRORS)
async def test_an_asker_gets_the_exception_itself_out_of_open_system(
    error: type[BaseException],
) -> None:
    class Boom(ms.Actor):
        async def receive(self, message: Any) -> None:
            raise _raise(error)

    with pytest.raises(error) as caught:  # noqa: PT012
        async with ms.open_system(shutdown_timeout=0.5) as system:
            ref = await system.spawn(Boom)
            await ref.ask("go")  # not ActorDeadError: the program is ending
    assert type(caught.value) is error


@pytest.mark.parametrize("error", ERRORS)
async def test_on_stop_raising_it_ends_the_block_too(error: type[BaseException]) -> None:
    others: list[ms.CancelReason] = []

    class Boom(ms.Actor):
        async def receive(self, message: Any) -> None:
            self.stop_self(ms.Stop(detail="done"))

        async def on_stop(self, reason: ms.CancelReason) -> None:
            raise _raise(error)

    class Other(ms.Actor):
        async def receive(self, message: Any) -> None:
            await anyio.sleep_forever()

        async def on_stop(self, reason: ms.CancelReason) -> None:
            others.append(reason)

    with pytest.raises(error):  # noqa: PT012
        async with ms.open_system(shutdown_timeout=0.5) as system:
            other = await system.spawn(Other)
            await other.tell("park")
            ref = await system.spawn(Boom)
            await ref.tell("go")
            await anyio.sleep_forever()
    assert not ref.is_alive
    assert not other.is_alive
    (seen,) = others
    assert isinstance(seen, ms.Shutdown)
    assert "raised" in seen.detail


async def test_an_exception_of_the_block_is_kept_as_the_context() -> None:
    class Boom(ms.Actor):
        async def receive(self, message: Any) -> None:
            raise SystemExit(4)

    with pytest.raises(SystemExit) as caught:  # noqa: PT012
        async with ms.open_system(shutdown_timeout=0.5) as system:
            ref = await system.spawn(Boom)
            try:
                await ref.ask("go")
            finally:
                raise ValueError("the block's own")
    assert caught.value.code == 4
    assert isinstance(caught.value.__context__, ValueError)


@pytest.mark.timeout(30)  # it hung on asyncio: a failure, not a stalled run
async def test_O2_an_actor_raising_an_unasked_cancellation_crashes_once_and_the_system_lives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """asyncio's CancelledError raised by an actor's own code (an awaited future another
    party cancelled, say), with nobody cancelling the actor: its scope is shielded and was
    not cancelled, so this is no cancellation of it (on trio, a plain BaseException). The
    actor crashed: it ends with a Crash, logged once, and the system lives on; it neither
    hangs its watchers nor ends the program."""
    import asyncio
    import logging

    class Odd(ms.Actor):
        async def receive(self, message: Any) -> Any:
            if message == "raise":
                raise asyncio.CancelledError("raised by the actor's own code")
            return message

    class Echo(ms.Actor):
        async def receive(self, message: Any) -> Any:
            return message

    caplog.set_level(logging.ERROR, logger="mainspring")
    with anyio.fail_after(10):
        async with ms.open_system() as system:
            odd = await system.spawn(Odd, name="odd")
            await odd.tell("raise")
            reason = await odd.wait_stopped()
            echo = await system.spawn(Echo, name="echo")
            assert await echo.ask("still here?") == "still here?"  # the system lives on
    assert isinstance(reason, ms.Crash)
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.name == "mainspring.actors"
    assert record.getMessage().startswith("actor /odd crashed")
    assert "CancelledError" in record.getMessage()
