"""The overseer contract (``mainspring.actors``), exercised with a fake root and fake overseers.

No supervision package here: each system gets its root through ``open_system(root=...)``, and
children overseen by a fake come from ``spawn_supervised``. This pins down what the kernel
promises an overseer (when it asks, how often it reports an end, what a verdict does) and what
the hooks declared on ``Actor`` do.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import mainspring as ms
import mainspring.actors as kernel
from mainspring.actors._seam import RestartType, RootOverseerFactory
from mainspring.actors._system import _KernelRoot

from ._kit import Recorder

pytestmark = pytest.mark.anyio


class Flaky(ms.Actor):
    """Crashes on "crash"; otherwise records what it got (per instance) and answers it."""

    def __init__(self, log: list[Any] | None = None) -> None:
        self.seen: list[Any] = []
        self.log = log

    async def receive(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError("on purpose")
        if message == "seen":
            return list(self.seen)
        self.seen.append(message)
        if self.log is not None:
            self.log.append(message)
        return message


class FakeOverseer:
    """Records what the kernel tells it; restarts by restart type only when told to."""

    def __init__(self, restart: RestartType = "permanent") -> None:
        self.restart = restart
        self.calls: list[tuple[Any, ...]] = []
        self.pending: list[kernel.Supervised] = []
        self.ended = anyio.Event()

    def may_restart(self, child: kernel.Supervised, reason: ms.CancelReason, crashed: bool) -> bool:
        self.calls.append(("may_restart", child.path, crashed))
        return self.restart == "permanent" or (self.restart == "transient" and crashed)

    def child_ended(
        self, child: kernel.Supervised, reason: ms.CancelReason, crashed: bool, final: bool
    ) -> None:
        self.calls.append(("ended", child.path, crashed, final))
        if not final:
            self.pending.append(child)  # the test gives the verdict
        self.ended.set()
        self.ended = anyio.Event()

    def ends(self) -> list[tuple[Any, ...]]:
        return [call for call in self.calls if call[0] == "ended"]


class FakeRoot(FakeOverseer):
    """A RootOverseer: every top-level actor is treated by its own restart type."""

    def __init__(self, system: ms.ActorSystem) -> None:
        super().__init__()
        self.system = system
        self.types: dict[kernel.Supervised, RestartType] = {}

    def adopt(self, child: kernel.Supervised, restart: RestartType) -> None:
        self.calls.append(("adopt", child.path, restart))
        self.types[child] = restart

    def may_restart(self, child: kernel.Supervised, reason: ms.CancelReason, crashed: bool) -> bool:
        self.restart = self.types.get(child, "temporary")
        return super().may_restart(child, reason, crashed)


def fake_root(holder: list[FakeRoot]) -> RootOverseerFactory:
    def make(system: ms.ActorSystem) -> FakeRoot:
        holder.append(FakeRoot(system))
        return holder[-1]

    return make


async def test_a_non_final_end_waits_in_restarting_for_the_overseers_verdict() -> None:
    roots: list[FakeRoot] = []
    async with ms.open_system(root=fake_root(roots)) as system:
        (root,) = roots
        ref = await system.spawn(Flaky, name="w", restart="permanent")
        assert root.calls == [("adopt", "/w", "permanent")]
        ended = root.ended
        with pytest.raises(ms.ActorFailed):
            await ref.ask("crash")
        await ended.wait()
        (child,) = root.pending
        assert child.ref is ref
        assert child.state is kernel._seam.ActorState.RESTARTING
        assert child.awaiting_verdict
        assert child.crashed_last
        assert isinstance(child.final_reason(), ms.Crash)
        ref.tell_nowait("kept")  # the mailbox lives on between two lives
        assert child.restart()
        assert not child.restart()  # one verdict per end
        assert await child.wait_started()
        assert child.restarts == 1
        assert await ref.ask("seen") == ["kept"]  # a fresh instance got the kept message
    assert root.ends()[0] == ("ended", "/w", True, False)


async def test_finish_ends_it_for_good_with_exactly_one_final_notice() -> None:
    roots: list[FakeRoot] = []
    async with ms.open_system(root=fake_root(roots)) as system:
        (root,) = roots
        ref = await system.spawn(Flaky, name="w", restart="transient")
        ended = root.ended
        with pytest.raises(ms.ActorFailed):
            await ref.ask("crash")
        await ended.wait()
        (child,) = root.pending
        assert child.finish()
        assert isinstance(await ref.wait_stopped(), ms.Crash)
        assert child.state is kernel._seam.ActorState.STOPPED
        assert child.ending_for_good
        assert not child.finish()
        assert root.ends() == [("ended", "/w", True, False), ("ended", "/w", True, True)]


async def test_the_overseer_is_not_asked_after_a_stop_from_outside() -> None:
    roots: list[FakeRoot] = []
    async with ms.open_system(root=fake_root(roots)) as system:
        (root,) = roots
        ref = await system.spawn(Flaky, name="w", restart="permanent")
        assert await ref.ask("hi") == "hi"
        await ref.stop(ms.Pause())
        assert root.calls == [("adopt", "/w", "permanent"), ("ended", "/w", False, True)]


async def test_a_child_is_not_restarted_while_its_parent_is_stopping() -> None:
    overseer = FakeOverseer("permanent")

    class Parent(ms.Actor):
        _mainspring_orders_children = True

        async def on_start(self) -> None:
            kernel._seam.spawn_supervised(
                self, Flaky, (), name="c", mailbox_size=10, overseer=overseer
            )

        async def receive(self, message: Any) -> Any:
            return message

        async def _mainspring_stop_children(self, reason: ms.CancelReason) -> None:
            child = kernel._seam.find_child(self.ref, "c")
            assert child is not None
            with pytest.raises(ms.ActorFailed):
                await child.ask("crash")  # crashes while its parent is stopping
            await child.wait_stopped()

    async with ms.open_system() as system:
        parent = await system.spawn(Parent, name="p")
        assert await parent.ask("hi") == "hi"
        with anyio.fail_after(30):  # a restart here would leave the parent waiting for ever
            await parent.stop()
    assert overseer.calls == [("ended", "/p/c", True, True)]  # never asked may_restart


async def test_spawn_supervised_uses_the_ref_class_and_find_child_finds_it() -> None:
    class TeamRef(ms.ActorRef):
        __slots__ = ()

    overseer = FakeOverseer("temporary")
    children: list[kernel.Supervised] = []

    class Parent(ms.Actor):
        async def receive(self, message: Any) -> Any:
            child = kernel._seam.spawn_supervised(
                self, Flaky, (), name="c", mailbox_size=10, overseer=overseer, ref_class=TeamRef
            )
            children.append(child)
            return child.ref

    async with ms.open_system() as system:
        parent = await system.spawn(Parent, name="p")
        ref = await parent.ask("spawn")
        assert type(ref) is TeamRef
        assert ref.path == "/p/c" == children[0].path
        assert kernel._seam.find_child(parent, "c") is ref
        assert kernel._seam.find_child(parent, "nobody") is None
        assert await children[0].wait_started()
        with pytest.raises(ms.ActorFailed):
            await ref.ask("crash")
        assert isinstance(await children[0].wait_stopped(), ms.Crash)
    assert overseer.ends() == [("ended", "/p/c", True, True)]


async def test_deliver_control_goes_ahead_of_queued_messages() -> None:
    order: list[Any] = []

    class Busy(ms.Actor):
        async def receive(self, message: Any) -> Any:
            order.append(message)
            if message == "go":
                self.ref.tell_nowait("a")
                self.ref.tell_nowait("b")
                kernel._seam.deliver_control(self, "urgent")
            return message

    async with ms.open_system() as system:
        ref = await system.spawn(Busy)
        await ref.ask("go")
        await ref.ask("last")
    assert order == ["go", "urgent", "a", "b", "last"]


async def test_publish_event_reaches_every_subscriber() -> None:
    class Announcer(ms.Actor):
        async def receive(self, message: Any) -> Any:
            kernel._seam.publish_event(self, ("announced", message))
            return message

    seen: list[object] = []
    async with ms.open_system() as system:

        async def collect() -> None:
            async for event in system.events():
                seen.append(event)

        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            await anyio.wait_all_tasks_blocked()
            ref = await system.spawn(Announcer)
            await ref.ask(1)
            await system.shutdown()
    assert seen == [("announced", 1)]


async def test_the_kernels_own_root_restarts_nothing() -> None:
    async with ms.open_system(root=_KernelRoot) as system:
        with pytest.raises(ms.MainspringError, match="nothing would restart a permanent"):
            await system.spawn(Flaky, name="w", restart="permanent")  # refused, not downgraded
        assert system.lookup("/w") is None
        ref = await system.spawn(Flaky, name="w")
        with pytest.raises(ms.ActorFailed):
            await ref.ask("crash")
        assert isinstance(await ref.wait_stopped(), ms.Crash)
        # A top-level supervisor is an actor like any: refused unless temporary here.
        with pytest.raises(ms.MainspringError, match="nothing would restart a permanent"):
            await ms.supervision.spawn_supervisor(system, [], name="sup")
        assert system.lookup("/sup") is None
        sup = await ms.supervision.spawn_supervisor(system, [], name="sup", restart="temporary")
        assert await sup.which_children() == []


def test_starting_a_supervisor_is_not_the_kernels() -> None:
    # The kernel keeps the generic hook (spawn_started); supervisors start from supervision.
    assert not hasattr(ms.Actor, "spawn_supervisor")
    assert not hasattr(ms.ActorSystem, "spawn_supervisor")
    assert not hasattr(kernel, "SupervisorOptions")
    assert "spawn_started" not in kernel.__all__  # internal: kernel._seam.spawn_started
    assert kernel._seam.spawn_started is not None
    assert "spawn_supervisor" in ms.supervision.__all__


async def test_the_kernels_open_system_has_no_global_root_to_plug_into() -> None:
    # Without root=..., the kernel's own policy; mainspring.open_system passes supervision's.
    async with kernel.open_system() as system:
        assert type(system._root).__name__ == "_KernelRoot"
    async with ms.open_system() as system:
        assert type(system._root).__name__ == "RootSupervisor"
    roots: list[FakeRoot] = []
    async with ms.open_system(root=fake_root(roots)) as system:
        await system.spawn(Recorder, name="r")
    assert roots[0].calls[0] == ("adopt", "/r", "temporary")


# -- the hooks declared on Actor ------------------------------------------------------------


class Child(ms.Actor):
    def __init__(self, log: list[tuple[str, ms.CancelReason]]) -> None:
        self.log = log

    async def receive(self, message: Any) -> Any:
        return message

    async def on_stop(self, reason: ms.CancelReason) -> None:
        self.log.append((self.ref.name, reason))


def test_the_hooks_are_declared_on_actor_with_the_kernels_defaults() -> None:
    assert ms.Actor._mainspring_orders_children is False
    assert ms.Actor._mainspring_passes_reason is False
    assert ms.Actor._mainspring_stop_children.__doc__


async def test_a_parent_that_orders_its_children_stops_them_itself() -> None:
    log: list[tuple[str, ms.CancelReason]] = []
    hook: list[ms.CancelReason] = []

    class Ordered(ms.Actor):
        _mainspring_orders_children = True
        _mainspring_passes_reason = True

        async def on_start(self) -> None:
            for name in ("first", "second", "third"):
                await self.spawn(Child, log, name=name)

        async def receive(self, message: Any) -> Any:
            return message

        async def _mainspring_stop_children(self, reason: ms.CancelReason) -> None:
            hook.append(reason)
            for name in ("second", "first", "third"):
                child = kernel._seam.find_child(self.ref, name)
                assert child is not None
                await child.stop(reason)

    async with ms.open_system() as system:
        ref = await system.spawn(Ordered, name="o")
        assert await ref.ask("hi") == "hi"
        why = ms.Pause(detail="lunch")
        await ref.stop(why)
    assert hook == [why]
    assert [name for name, _ in log] == ["second", "first", "third"]
    assert all(reason is why for _, reason in log)


async def test_children_see_the_parents_own_reason_only_if_it_passes_it_on() -> None:
    log: list[tuple[str, ms.CancelReason]] = []

    class Plain(ms.Actor):
        async def on_start(self) -> None:
            await self.spawn(Child, log, name="plain-child")

        async def receive(self, message: Any) -> Any:
            return message

    class Passes(Plain):
        _mainspring_passes_reason = True

        async def on_start(self) -> None:
            await self.spawn(Child, log, name="passed-child")

    async with ms.open_system() as system:
        why = ms.Cancel(detail="operator")
        for factory in (Plain, Passes):
            ref = await system.spawn(factory)
            await ref.ask("hi")
            ref.cancel(why)
            await ref.wait_stopped()
    reasons = dict(log)
    assert isinstance(reasons["plain-child"], ms.ParentCancel)
    assert reasons["plain-child"].root is why
    assert reasons["passed-child"] is why
