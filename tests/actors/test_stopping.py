"""stop / cancel with reasons, subtree cancellation, control under a full mailbox."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import Forever, Recorder, wait_blocked

pytestmark = pytest.mark.anyio


def _report() -> dict[str, Any]:
    return {"entered": anyio.Event()}


async def test_stop_lets_the_current_message_finish_and_drops_the_rest() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate)
        ref.tell_nowait("current")
        await wait_blocked()
        ref.tell_nowait("queued")
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.stop, ms.Pause(detail="maintenance"))
            await wait_blocked()
            assert not ref.is_alive  # no new messages accepted while stopping
            with pytest.raises(ms.ActorDeadError):
                ref.tell_nowait("late")
            gate.set()
        actor = ref._cell.actor
        assert isinstance(actor, Recorder)
        assert actor.seen == ["current"]  # finished; "queued" was dropped
        assert isinstance(actor.stopped_with, ms.Pause)
        assert actor.stopped_with.detail == "maintenance"


async def test_stop_without_reason_is_a_normal_stop() -> None:
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder)
        reason = await ref.stop()
        assert isinstance(reason, ms.Stop)
        assert await ref.wait_stopped() is reason


async def test_cancel_interrupts_the_handler_which_sees_the_reason() -> None:
    report = _report()
    async with ms.open_system() as system:
        ref = await system.spawn(Forever, report)
        ref.tell_nowait("work")
        await report["entered"].wait()
        reason = ms.Pause(detail="user pressed pause")
        ref.cancel(reason)
        assert await ref.wait_stopped() is reason
    assert report["handler_saw"] is reason
    assert report["on_stop_saw"] is reason
    assert report["on_stop_cancel_reason"] is reason


async def test_first_reason_wins_and_cancelling_twice_is_harmless() -> None:
    report = _report()
    async with ms.open_system() as system:
        ref = await system.spawn(Forever, report)
        ref.tell_nowait("work")
        await report["entered"].wait()
        first = ms.LeaseLost("host-b:42:abc", detail="heartbeat refused")
        ref.cancel(first)
        ref.cancel(ms.Cancel(detail="second"))
        assert await ref.wait_stopped() is first
        ref.cancel(ms.Cancel(detail="after the end"))
        assert await ref.wait_stopped() is first
    assert report["handler_saw"] is first


async def test_cancel_reason_reaches_tasks_started_inside_the_handler() -> None:
    seen: list[ms.CancelReason | None] = []
    entered = anyio.Event()

    class Fanout(ms.Actor):
        async def receive(self, message: Any) -> Any:
            async def worker() -> None:
                try:
                    entered.set()
                    await anyio.sleep_forever()
                finally:
                    seen.append(ms.cancel_reason())

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(worker)

    async with ms.open_system() as system:
        ref = await system.spawn(Fanout)
        ref.tell_nowait("go")
        await entered.wait()
        await wait_blocked()
        reason = ms.Timeout(detail="deadline")
        ref.cancel(reason)
        await ref.wait_stopped()
    assert seen == [reason, reason, reason]


async def test_cancel_reason_is_none_outside_actors_and_in_healthy_ones() -> None:
    assert ms.cancel_reason() is None

    class Asker(ms.Actor):
        async def receive(self, message: Any) -> Any:
            return ms.cancel_reason(), ms.current_actor()

    async with ms.open_system() as system:
        ref = await system.spawn(Asker)
        assert await ref.ask("?") == (None, ref)
        assert ms.cancel_reason() is None
        assert ms.current_actor() is None


class TreeNode(ms.Actor):
    """Spawns ``fanout`` children per level down to ``depth``; records its end in ``log``."""

    def __init__(self, depth: int, fanout: int, log: dict[str, Any], ready: Any) -> None:
        self.depth = depth
        self.fanout = fanout
        self.log = log
        self.ready = ready

    async def on_start(self) -> None:
        if self.depth > 0:
            for i in range(self.fanout):
                await self.spawn(
                    TreeNode, self.depth - 1, self.fanout, self.log, self.ready, name=f"n{i}"
                )
        self.ready()

    async def receive(self, message: Any) -> Any:
        await anyio.sleep_forever()

    async def on_stop(self, reason: ms.CancelReason) -> None:
        self.log[self.ref.path] = (reason, ms.cancel_reason())


async def _build_tree(
    system: ms.ActorSystem, depth: int, fanout: int, log: dict[str, Any]
) -> tuple[ms.ActorRef, int]:
    expected = sum(fanout**level for level in range(depth + 1))
    started = 0
    all_ready = anyio.Event()

    def ready() -> None:
        nonlocal started
        started += 1
        if started == expected:
            all_ready.set()

    root = await system.spawn(TreeNode, depth, fanout, log, ready, name="root")
    await all_ready.wait()
    return root, expected


async def test_cancelling_an_actor_cancels_its_whole_subtree_with_parent_cancel() -> None:
    # 6 levels (depth 5 below the root), fanout 4: 1 + 4 + 16 + 64 + 256 + 1024 = 1365 actors.
    log: dict[str, Any] = {}
    async with ms.open_system() as system:
        root, count = await _build_tree(system, depth=5, fanout=4, log=log)
        assert count >= 1000
        leaf = system.lookup("/root/n0/n1/n2/n3/n0")
        assert leaf is not None
        leaf.tell_nowait("block")  # a leaf busy in a handler is interrupted too
        await wait_blocked()
        origin = ms.Cancel(detail="user cancelled the run", source="test")
        root.cancel(origin)
        assert await root.wait_stopped() is origin
        assert system.lookup("/root") is None
    assert len(log) == count
    for path, (reason, seen_inside) in log.items():
        assert seen_inside is reason
        depth = path.count("/") - 1
        if depth == 0:
            assert reason is origin
            continue
        assert isinstance(reason, ms.ParentCancel)
        assert reason.root is origin
        # One ParentCancel link per level, each naming the parent it came from.
        links = 0
        link: ms.CancelReason = reason
        parent_path = path
        while isinstance(link, ms.ParentCancel):
            parent_path = parent_path.rsplit("/", 1)[0]
            assert link.source == parent_path
            link = link.cause
            links += 1
        assert links == depth


async def test_stopping_a_parent_stops_children_first_with_parent_cancel() -> None:
    order: list[str] = []

    class Child(ms.Actor):
        async def receive(self, message: Any) -> Any:
            return message

        async def on_stop(self, reason: ms.CancelReason) -> None:
            assert isinstance(reason, ms.ParentCancel)
            order.append(f"child:{reason.root.kind}")

    class Parent(ms.Actor):
        async def on_start(self) -> None:
            await self.spawn(Child, name="a")
            await self.spawn(Child, name="b")

        async def receive(self, message: Any) -> Any:
            return message

        async def on_stop(self, reason: ms.CancelReason) -> None:
            order.append(f"parent:{reason.kind}")

    async with ms.open_system() as system:
        ref = await system.spawn(Parent)
        await ref.ask("started?")
        await ref.stop(ms.Pause())
    assert order == ["child:pause", "child:pause", "parent:pause"]


async def test_a_crashing_parent_cancels_its_children_with_the_crash_as_root() -> None:
    report = _report()

    class Parent(ms.Actor):
        async def receive(self, message: Any) -> Any:
            if message == "spawn":
                child = await self.spawn(Forever, report, name="busy")
                child.tell_nowait("work")
                return child
            raise RuntimeError("parent bug")

    async with ms.open_system() as system:
        parent = await system.spawn(Parent)
        child = await parent.ask("spawn")
        await report["entered"].wait()
        with pytest.raises(ms.ActorFailed):
            await parent.ask("crash")
        child_reason = await child.wait_stopped()
    assert isinstance(child_reason, ms.ParentCancel)
    assert isinstance(child_reason.root, ms.Crash)
    assert report["handler_saw"] is child_reason


async def test_control_takes_effect_with_a_full_mailbox() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        # stop: the current message finishes, then the actor stops, despite the full queue.
        stopper = await system.spawn(Recorder, gate, mailbox_size=2)
        stopper.tell_nowait("current")
        await wait_blocked()
        stopper.tell_nowait("q1")
        stopper.tell_nowait("q2")
        with pytest.raises(ms.MailboxFull):
            stopper.tell_nowait("overflow")
        async with anyio.create_task_group() as tg:
            tg.start_soon(stopper.stop, ms.Pause())
            await wait_blocked()
            gate.set()
        assert isinstance(await stopper.wait_stopped(), ms.Pause)

        # cancel: immediate, even with senders blocked on the full mailbox; they are told.
        report = _report()
        cancelled = await system.spawn(Forever, report, mailbox_size=1)
        cancelled.tell_nowait("work")
        await report["entered"].wait()
        cancelled.tell_nowait("queued")
        refused: list[BaseException] = []

        async def blocked_sender() -> None:
            try:
                await cancelled.tell("blocked")
            except ms.ActorDeadError as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_sender)
            await wait_blocked()
            cancelled.cancel(ms.Cancel(detail="now"))
        assert isinstance(await cancelled.wait_stopped(), ms.Cancel)
        assert len(refused) == 1


async def test_an_actor_can_stop_itself_without_deadlock() -> None:
    class Quitter(ms.Actor):
        async def receive(self, message: Any) -> Any:
            reason = await self.ref.stop(ms.BudgetExhausted(detail="no calls left"))
            return reason.kind

    async with ms.open_system() as system:
        ref = await system.spawn(Quitter)
        assert await ref.ask("quit") == "budget-exhausted"
        assert isinstance(await ref.wait_stopped(), ms.BudgetExhausted)


async def test_a_child_can_stop_its_parent_without_deadlock() -> None:
    class Child(ms.Actor):
        async def receive(self, message: Any) -> Any:
            parent = message
            await parent.stop(ms.Cancel(detail="child asked"))
            return "requested"

    class Parent(ms.Actor):
        async def receive(self, message: Any) -> Any:
            child = await self.spawn(Child, name="c")
            child.tell_nowait(self.ref)

    async with ms.open_system() as system:
        parent = await system.spawn(Parent)
        parent.tell_nowait("go")
        reason = await parent.wait_stopped()
        assert isinstance(reason, ms.Cancel)
        assert reason.detail == "child asked"


async def test_cancel_requires_a_reason() -> None:
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder)
        with pytest.raises(TypeError, match="CancelReason"):
            ref.cancel("because")  # type: ignore[arg-type]


async def test_on_stop_exceptions_are_logged_and_do_not_change_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class BadStop(ms.Actor):
        async def receive(self, message: Any) -> Any:
            return message

        async def on_stop(self, reason: ms.CancelReason) -> None:
            raise OSError("cleanup failed")

    async with ms.open_system() as system:
        ref = await system.spawn(BadStop, name="bad")
        reason = await ref.stop(ms.Pause())
        assert isinstance(reason, ms.Pause)
    assert "actor /bad: on_stop raised" in caplog.text


async def test_on_start_failure_crashes_the_actor_and_on_stop_still_runs() -> None:
    stopped: list[ms.CancelReason] = []

    class BadStart(ms.Actor):
        async def on_start(self) -> None:
            raise KeyError("missing config")

        async def receive(self, message: Any) -> Any:
            return message

        async def on_stop(self, reason: ms.CancelReason) -> None:
            stopped.append(reason)

    async with ms.open_system() as system:
        ref = await system.spawn(BadStart)
        reason = await ref.wait_stopped()
        assert isinstance(reason, ms.Crash)
        assert "KeyError" in reason.error
        with pytest.raises(ms.ActorDeadError):
            await ref.ask("hello")
    assert stopped == [reason]


async def test_on_stop_is_bounded_by_stop_timeout_and_cancel_interrupts_it() -> None:
    class SlowStop(ms.Actor):
        async def receive(self, message: Any) -> Any:
            return message

        async def on_stop(self, reason: ms.CancelReason) -> None:
            try:
                await anyio.sleep_forever()
            finally:
                self.unwound = True

    async with ms.open_system(stop_timeout=0.05) as system:
        ref = await system.spawn(SlowStop)
        reason = await ref.stop()
        assert isinstance(reason, ms.Stop)
        actor = ref._cell.actor
        assert getattr(actor, "unwound", False)

    async with ms.open_system(stop_timeout=3600) as system:  # only cancel can end on_stop
        second = await system.spawn(SlowStop)
        async with anyio.create_task_group() as tg:
            tg.start_soon(second.stop)
            await wait_blocked()
            second.cancel(ms.Cancel(detail="impatient"))
        assert isinstance(await second.wait_stopped(), ms.Stop)  # the first reason wins
