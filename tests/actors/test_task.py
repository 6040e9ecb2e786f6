"""Tasks an actor starts (``Actor.start_task``): bound to the actor like a child actor, with
a reason of their own that their code reads with ``cancel_reason()``, and their end (with
what they returned) delivered to the actor as a ``TaskEnded``."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
import pytest

import mainspring as ms
from mainspring.actors import ActorTask, TaskEnded

from ._kit import wait_blocked

pytestmark = pytest.mark.anyio


class Starter(ms.Actor):
    """Starts ``fn`` as a task on "start"; keeps every TaskEnded it hears."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.task: ActorTask | None = None
        self.ended: list[TaskEnded] = []
        self.heard = anyio.Event()

    async def receive(self, message: Any) -> Any:
        if message == "start":
            self.task = self.start_task(self.fn)
            return self.task
        if isinstance(message, TaskEnded):
            self.ended.append(message)
            self.heard.set()
        return None


async def test_a_task_s_value_reaches_its_actor_with_its_end() -> None:
    async def work() -> str:
        return "done"

    actor = Starter(work)
    async with ms.open_system() as system:
        ref = await system.spawn(lambda: actor)
        task = await ref.ask("start")
        await actor.heard.wait()
        assert await task.wait_stopped() is None
    [ended] = actor.ended
    assert ended.task is task
    assert ended.value == "done"
    assert isinstance(ended.reason, ms.Stop)


async def test_a_task_cancelled_with_a_reason_reads_it_in_its_thread_too() -> None:
    seen: list[object] = []
    started = anyio.Event()

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            seen.append(ms.cancel_reason())
            with anyio.CancelScope(shield=True):  # cleanup that awaits (STYLE 5)
                seen.append(await anyio.to_thread.run_sync(ms.cancel_reason))

    actor = Starter(work)
    async with ms.open_system() as system:
        ref = await system.spawn(lambda: actor)
        task = await ref.ask("start")
        await started.wait()
        assert ms.cancel_reason() is None
        pause = ms.Pause(detail="maintenance")
        task.cancel(pause)
        task.cancel(ms.Cancel(detail="later"))  # the first reason wins
        await actor.heard.wait()
    assert seen == [pause, pause]
    assert actor.ended[0].reason is pause
    assert actor.ended[0].value is None


async def test_cancelling_the_actor_cancels_its_tasks_with_a_parent_cancel() -> None:
    seen: list[object] = []
    started = anyio.Event()

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            seen.append(ms.cancel_reason())

    actor = Starter(work)
    async with ms.open_system() as system:
        ref = await system.spawn(lambda: actor)
        await ref.ask("start")
        await started.wait()
        cancel = ms.Cancel(detail="shutdown of this one")
        ref.cancel(cancel)
        await ref.wait_stopped()
    [reason] = seen
    assert isinstance(reason, ms.ParentCancel)
    assert reason.root is cancel


async def test_an_actor_does_not_finish_before_its_tasks_have() -> None:
    order: list[str] = []
    release = anyio.Event()

    async def work() -> None:
        with anyio.CancelScope(shield=True):
            await release.wait()
        order.append("task ended")

    class Stopping(Starter):
        async def on_stop(self, reason: ms.CancelReason) -> None:
            order.append("on_stop")

    actor = Stopping(work)
    async with ms.open_system() as system:
        ref = await system.spawn(lambda: actor)
        await ref.ask("start")
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.stop)
            await wait_blocked()
            assert order == []  # stopped, but waiting for its task
            release.set()
        await ref.wait_stopped()
    assert order == ["task ended", "on_stop"]


async def test_a_task_that_raises_ends_with_a_crash_its_actor_hears() -> None:
    async def work() -> None:
        raise ValueError("broken")

    actor = Starter(work)
    async with ms.open_system() as system:
        ref = await system.spawn(lambda: actor)
        await ref.ask("start")
        await actor.heard.wait()
    [ended] = actor.ended
    assert isinstance(ended.reason, ms.Crash)
    assert ended.value is None


async def test_a_stopping_actor_starts_no_task() -> None:
    class Late(ms.Actor):
        async def receive(self, message: Any) -> Any:
            self.stop_self()

            async def work() -> None:
                pass

            with pytest.raises(ms.ActorDeadError):
                self.start_task(work)
            return "refused"

    async with ms.open_system() as system:
        ref = await system.spawn(Late)
        assert await ref.ask("go") == "refused"


def test_tasks_are_made_by_the_runtime_only() -> None:
    with pytest.raises(TypeError):
        ActorTask(None, None, ())  # type: ignore[arg-type]


async def test_a_task_cancelled_by_its_host_reads_the_shutdown_like_a_child_actor() -> None:
    # Cancelling the scope around open_system (a server's lifespan cancelled) stops every
    # actor with Shutdown, and each descendant reads a reason whose root is it; a task of an
    # actor is no exception: it never ends with no reason, nor as if it had finished (Stop).
    seen: list[ms.CancelReason | None] = []
    started = anyio.Event()

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            seen.append(ms.cancel_reason())

    actor = Starter(work)
    with anyio.CancelScope() as host:
        async with ms.open_system() as system:
            ref = await system.spawn(lambda: actor)
            await ref.ask("start")
            await started.wait()
            host.cancel()
            await anyio.sleep_forever()
    [reason] = seen
    assert reason is not None
    assert isinstance(reason.root, ms.Shutdown)
    assert not any(isinstance(ended.reason, ms.Stop) for ended in actor.ended)


async def test_a_task_that_raises_generator_exit_crashes_and_the_system_lives() -> None:
    # A task's own GeneratorExit is not a generator being closed: it ended because it raised
    # (TaskEnded: "a Crash if it raised"), and it must not fail the whole system with an
    # exception group out of open_system (which lets out only what the block raised, or
    # SystemExit / KeyboardInterrupt unwrapped).
    async def work() -> None:
        raise GeneratorExit

    actor = Starter(work)
    with anyio.fail_after(10):
        async with ms.open_system() as system:
            ref = await system.spawn(lambda: actor)
            await ref.ask("start")
            await actor.heard.wait()
            assert await ref.ask("still here?") is None  # the actor lives on
    [ended] = actor.ended
    assert isinstance(ended.reason, ms.Crash)


async def test_a_task_raising_an_unasked_cancellation_crashes_and_the_system_lives() -> None:
    # asyncio's CancelledError raised by a task's own code, with no cancel of the task: on
    # asyncio it is no cancellation of anything (the task's scope is shielded and was not
    # cancelled), on trio a plain BaseException. Either way the task crashed (TaskEnded with
    # a Crash), and neither ends the system nor leaks out of open_system.
    import asyncio

    async def work() -> None:
        raise asyncio.CancelledError("raised by the task's own code")

    actor = Starter(work)
    after = []
    with anyio.fail_after(10):
        async with ms.open_system() as system:
            ref = await system.spawn(lambda: actor)
            await ref.ask("start")
            await actor.heard.wait()
            assert await ref.ask("still here?") is None  # the actor lives on
            after.append("the block went on")
    assert after == ["the block went on"]
    [ended] = actor.ended
    assert isinstance(ended.reason, ms.Crash)
