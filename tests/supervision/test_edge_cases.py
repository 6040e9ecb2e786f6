"""Regression tests for edge cases found in review: each would hang or misbehave without its fix."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import Worker, recording_events, specs, starts

pytestmark = pytest.mark.anyio


async def test_a_restarted_instance_can_use_self_ref_in_init() -> None:
    paths: list[str] = []

    class UsesRef(ms.Actor):
        def __init__(self) -> None:
            paths.append(self.ref.path)

        async def receive(self, message: Any) -> Any:
            if message == "crash":
                raise RuntimeError("again")
            return message

    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system, [ms.supervision.ChildSpec(UsesRef, name="u")], name="sup"
        )
        child = sup.child("u")
        assert child is not None
        for _ in range(2):
            with pytest.raises(ms.ActorFailed):
                await child.ask("crash")
            assert await child.ask("ok") == "ok"
    assert paths == ["/sup/u"] * 3


async def test_a_stop_between_two_lives_wins_over_a_granted_restart() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system(shutdown_timeout=0.01) as system:
        sup = await ms.supervision.spawn_supervisor(
            system,
            specs(log, "w"),
            name="sup",
            backoff=ms.supervision.Backoff(initial=3600, maximum=3600),
        )
        w = sup.child("w")
        assert w is not None
        with pytest.raises(ms.ActorFailed):
            await w.ask("crash")
        await anyio.wait_all_tasks_blocked()  # the supervisor sleeps in its backoff
        cell = w._cell
        assert cell.awaiting_verdict
        assert cell.restart()  # granted, but the child's task has not run yet ...
        pause = ms.Pause(detail="operator")
        w.cancel(pause)  # ... and a stop from outside arrives first
        assert await w.wait_stopped() is pause
        assert cell.restarts == 0
    assert starts(log) == ["w"]


async def test_a_temporary_child_on_its_way_out_is_not_restarted_with_the_group() -> None:
    log: list[tuple[Any, ...]] = []
    release = anyio.Event()

    class SlowExit(Worker):
        async def on_stop(self, reason: ms.CancelReason) -> None:
            await release.wait()
            await super().on_stop(reason)

    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system,
            [
                ms.supervision.ChildSpec(SlowExit, log, "t", name="t", restart="temporary"),
                ms.supervision.ChildSpec(Worker, log, "a", name="a"),
            ],
            name="sup",
            strategy="one_for_all",
        )
        t, a = sup.child("t"), sup.child("a")
        assert t is not None
        assert a is not None
        await t.ask("exit")  # t stops itself; its on_stop is still running
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(ms.ActorFailed):
            await a.ask("crash")
        await anyio.wait_all_tasks_blocked()
        release.set()
        assert await t.wait_stopped() is not None
        with pytest.raises(ms.ActorDeadError):
            await t.ask("anyone?")
        assert await a.ask("get") == 0
    assert starts(log) == ["t", "a", "a"]


async def test_an_actor_stopping_itself_does_not_deadlock_with_a_child_asking_it() -> None:
    class Parent(ms.Actor):
        async def receive(self, message: Any) -> Any:
            if message == "go":
                child = await self.spawn(Asker, self.ref, name="asker")
                child.tell_nowait("ask-parent")
                await anyio.wait_all_tasks_blocked()
                await self.ref.stop()  # its child waits on an answer from us
            return "answer"

    class Asker(ms.Actor):
        def __init__(self, parent: ms.ActorRef) -> None:
            self.parent = parent

        async def receive(self, message: Any) -> Any:
            return await self.parent.ask("question")

    async with ms.open_system(stop_timeout=0.05) as system:
        parent = await system.spawn(Parent, name="p", restart="permanent")
        with anyio.fail_after(10):
            await parent.ask("go")
            assert await parent.ask("after") == "answer"  # restarted, not stuck


async def test_the_root_reports_a_child_it_gives_up_on_and_forgets_it() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system, recording_events(system) as events:
        ref = await system.spawn(Worker, log, "f", name="f", restart="permanent")
        for _ in range(4):
            with pytest.raises((ms.ActorFailed, ms.ActorDeadError)):
                await ref.ask("crash")
        await ref.wait_stopped()
        root = system._root
        assert root is not None
        assert not root._types
        assert not root._windows
    final = [e for e in events if isinstance(e, ms.supervision.ChildFailed) and not e.restarting]
    assert [e.child for e in final] == ["/f"]


async def test_restart_child_on_a_child_already_stopping_starts_a_new_one() -> None:
    log: list[tuple[Any, ...]] = []
    release = anyio.Event()

    class SlowStop(Worker):
        async def on_stop(self, reason: ms.CancelReason) -> None:
            await release.wait()

    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system, [ms.supervision.ChildSpec(SlowStop, log, "s", name="s")], name="sup"
        )
        s = sup.child("s")
        assert s is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.stop)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(sup.restart_child, "s")
            await anyio.wait_all_tasks_blocked()
            release.set()
        fresh = sup.child("s")
        assert fresh is not None
        assert fresh is not s
        assert await fresh.ask("get") == 0


async def test_a_constructor_that_raises_after_starting_a_timer_leaves_nothing_running() -> None:
    class Bad(ms.Actor):
        def __init__(self) -> None:
            self.send_every(0.001, "tick")
            raise ValueError("bad config")

        async def receive(self, message: Any) -> Any:
            return message

    with anyio.fail_after(10):
        async with ms.open_system() as system:
            inside = {task.id for task in anyio.get_running_tasks()}
            with pytest.raises(ValueError, match="bad config"):
                await system.spawn(Bad)
            await anyio.wait_all_tasks_blocked()
            assert {task.id for task in anyio.get_running_tasks()} == inside
