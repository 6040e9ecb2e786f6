"""tell / ask / mailbox semantics of the kernel, on asyncio and trio."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import Recorder, wait_blocked

pytestmark = pytest.mark.anyio


class Doubler(ms.Actor):
    async def receive(self, message: Any) -> Any:
        if message == "boom":
            raise ValueError("boom")
        return message * 2


async def test_ask_returns_the_handlers_value() -> None:
    async with ms.open_system() as system:
        ref = await system.spawn(Doubler)
        assert await ref.ask(21) == 42
        assert await ref.ask("ab") == "abab"


async def test_one_message_at_a_time_even_when_handlers_await() -> None:
    class Exclusive(ms.Actor):
        def __init__(self) -> None:
            self.inside = 0
            self.most_inside = 0

        async def receive(self, message: Any) -> Any:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
            self.inside -= 1
            return self.most_inside

    async with ms.open_system() as system:
        ref = await system.spawn(Exclusive)
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(ref.ask, i)
                tg.start_soon(ref.tell, i)
        assert await ref.ask("last") == 1


async def test_fifo_per_sender_with_many_concurrent_senders() -> None:
    log: list[tuple[int, int]] = []
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, None, log, mailbox_size=3)

        async def sender(who: int) -> None:
            for seq in range(200):
                await ref.tell((who, seq))

        async with anyio.create_task_group() as tg:
            for who in range(5):
                tg.start_soon(sender, who)
        await ref.ask("flush")
    per_sender: dict[int, list[int]] = {}
    for who, seq in log[:-1]:
        per_sender.setdefault(who, []).append(seq)
    assert per_sender == {who: list(range(200)) for who in range(5)}


async def test_tell_waits_while_the_mailbox_is_full_backpressure() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate, mailbox_size=2)
        ref.tell_nowait("busy")  # taken by the handler, which blocks on the gate
        await wait_blocked()
        ref.tell_nowait("q1")
        ref.tell_nowait("q2")
        delivered = anyio.Event()

        async def blocked_sender() -> None:
            await ref.tell("q3")
            delivered.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_sender)
            await wait_blocked()
            assert not delivered.is_set()  # still waiting for room
            gate.set()
            await delivered.wait()
        assert await ref.ask("end") == "end"
        actor = ref._cell.actor
        assert isinstance(actor, Recorder)
        assert actor.seen == ["busy", "q1", "q2", "q3", "end"]


async def test_tell_nowait_raises_mailbox_full_and_delivers_nothing() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate, mailbox_size=1)
        ref.tell_nowait("busy")
        await wait_blocked()
        ref.tell_nowait("queued")
        with pytest.raises(ms.MailboxFull) as info:
            ref.tell_nowait("refused")
        assert info.value.ref is ref
        assert info.value.capacity == 1
        gate.set()
        await ref.ask("end")
        actor = ref._cell.actor
        assert isinstance(actor, Recorder)
        assert actor.seen == ["busy", "queued", "end"]


async def test_a_sender_cancelled_while_waiting_did_not_deliver() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate, mailbox_size=1)
        ref.tell_nowait("busy")
        await wait_blocked()
        ref.tell_nowait("queued")
        scope = anyio.CancelScope()

        async def cancelled_sender() -> None:
            with scope:
                await ref.tell("cancelled")

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancelled_sender)  # first in line for a slot ...
            await wait_blocked()
            tg.start_soon(ref.tell, "after-cancelled")  # ... this one waits behind it
            await wait_blocked()
            scope.cancel()
            await wait_blocked()
            gate.set()
        await ref.ask("end")
        actor = ref._cell.actor
        assert isinstance(actor, Recorder)
        assert "cancelled" not in actor.seen
        assert actor.seen == ["busy", "queued", "after-cancelled", "end"]


@pytest.mark.parametrize("order", ["cancel-then-grant", "grant-then-cancel"])
async def test_a_blocked_sender_either_delivers_or_sees_cancelled_never_both(order: str) -> None:
    # Mailbox level: a slot frees for sender A in the same instant A is cancelled. Whichever
    # wins, A's outcome is exact (delivered and not cancelled, or cancelled and not
    # delivered) and its reservation never leaks: B still gets in.
    from mainspring.actors._mailbox import Mailbox

    mailbox = Mailbox(1)
    assert mailbox.put_nowait("first")
    outcome: dict[str, str] = {}
    scope_a = anyio.CancelScope()

    async def sender_a() -> None:
        with scope_a:
            try:
                await mailbox.put("a")
            except anyio.get_cancelled_exc_class():
                outcome["a"] = "cancelled"
                raise
            outcome["a"] = "delivered"

    async def sender_b() -> None:
        await mailbox.put("b")
        outcome["b"] = "delivered"

    drained: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender_a)
        await wait_blocked()
        tg.start_soon(sender_b)
        await wait_blocked()
        assert mailbox.waiting_senders == 2
        if order == "cancel-then-grant":
            scope_a.cancel()
            drained.append(mailbox.pop())
        else:
            drained.append(mailbox.pop())
            scope_a.cancel()
        await wait_blocked()
        while "b" not in outcome:
            drained.append(mailbox.pop())
            await wait_blocked()
    drained.extend(mailbox.pop() for _ in range(len(mailbox)))
    assert outcome["b"] == "delivered"
    assert ("a" in drained) == (outcome["a"] == "delivered")
    if order == "cancel-then-grant":
        assert outcome["a"] == "cancelled"
    assert drained.count("b") == 1
    assert mailbox._reserved == 0


async def test_handler_exception_gives_actor_failed_with_cause_and_crashes() -> None:
    async with ms.open_system() as system:
        ref = await system.spawn(Doubler)
        with pytest.raises(ms.ActorFailed) as info:
            await ref.ask("boom")
        assert isinstance(info.value.__cause__, ValueError)
        assert info.value.ref is ref
        reason = await ref.wait_stopped()
        assert isinstance(reason, ms.Crash)
        assert reason.error == "ValueError: boom"
        assert (reason.error_type, reason.module) == ("ValueError", "builtins")  # matchable
        assert not ref.is_alive


async def test_asking_a_dead_actor_raises_at_once() -> None:
    async with ms.open_system() as system:
        ref = await system.spawn(Doubler)
        await ref.stop()
        with pytest.raises(ms.ActorDeadError) as info:
            await ref.ask(1)
        assert isinstance(info.value.reason, ms.Stop)
        with pytest.raises(ms.ActorDeadError):
            await ref.tell(1)
        with pytest.raises(ms.ActorDeadError):
            ref.tell_nowait(1)


async def test_askers_of_an_actor_that_dies_before_answering_get_actor_dead() -> None:
    gate = anyio.Event()
    outcomes: list[object] = []
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate)

        async def asker(message: str) -> None:
            try:
                await ref.ask(message)
            except ms.ActorDeadError as exc:
                outcomes.append((message, exc.reason))

        async with anyio.create_task_group() as tg:
            tg.start_soon(asker, "in-flight")
            await wait_blocked()
            tg.start_soon(asker, "queued")
            await wait_blocked()
            reason = ms.Cancel(detail="test")
            ref.cancel(reason)
    assert sorted(outcomes, key=str) == [("in-flight", reason), ("queued", reason)]


async def test_ask_timeout_raises_and_the_late_answer_is_dropped() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate)
        with pytest.raises(ms.AskTimeout) as info:
            await ref.ask("slow", timeout=0.01)
        assert isinstance(info.value, TimeoutError)
        assert info.value.timeout == 0.01
        gate.set()
        # The late answer ("slow") went nowhere; the next ask gets its own answer.
        assert await ref.ask("next", timeout=30) == "next"
        assert ref.is_alive


async def test_cancelled_asker_leaves_the_actor_healthy() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate)
        with anyio.move_on_after(0.01):
            await ref.ask("abandoned")
        gate.set()
        assert await ref.ask("next") == "next"


async def test_name_taken_among_siblings_and_freed_after_stop() -> None:
    async with ms.open_system() as system:
        ref = await system.spawn(Doubler, name="d")
        with pytest.raises(ms.NameTaken) as info:
            await system.spawn(Doubler, name="d")
        assert info.value.name == "d"
        assert system.lookup("/d") is ref
        await ref.stop()
        assert system.lookup("/d") is None
        again = await system.spawn(Doubler, name="d")
        assert again is not ref
        assert await again.ask(1) == 2


@pytest.mark.parametrize("bad", ["", "a/b", "x" * 257, "sp ace", "$auto", ".", ".."])
async def test_invalid_names_are_refused(bad: str) -> None:
    async with ms.open_system() as system:
        with pytest.raises(ValueError, match="actor names must match") as info:
            await system.spawn(Doubler, name=bad)
        assert "neither '.' nor '..'" in str(info.value)  # the package's one id rule (X1)


async def test_actor_names_follow_the_same_rule_as_stored_ids() -> None:
    from mainspring.storage._seam import check_id

    async with ms.open_system() as system:
        for name in ("a.b", "x" * 256, "ex-1:step_2", "..."):
            assert check_id(name) == name
            ref = await system.spawn(Doubler, name=name)
            assert ref.name == name
        for name in (".", ".."):
            with pytest.raises(ms.storage.InvalidId):
                check_id(name)
        import enum

        class Role(enum.StrEnum):
            LEAD = "lead"

        ref = await system.spawn(Doubler, name=Role.LEAD)  # a str subclass, checked by its text
        assert ref.path == "/lead"


async def test_factory_must_return_an_actor() -> None:
    async with ms.open_system() as system:
        with pytest.raises(TypeError, match="not an Actor"):
            await system.spawn(lambda: object())  # type: ignore[arg-type, return-value]


async def test_ref_is_available_in_init_and_paths_nest() -> None:
    class Parent(ms.Actor):
        def __init__(self) -> None:
            self.path_in_init = self.ref.path

        async def receive(self, message: Any) -> Any:
            if message == "spawn":
                child = await self.spawn(Doubler, name="child")
                return child.path
            return self.path_in_init

    async with ms.open_system() as system:
        ref = await system.spawn(Parent, name="p")
        assert await ref.ask("init") == "/p"
        assert await ref.ask("spawn") == "/p/child"
        child = system.lookup("/p/child")
        assert child is not None
        assert await child.ask(2) == 4
        assert system.lookup("/p/nope") is None
        assert system.lookup("/") is None


async def test_mailbox_size_must_be_positive() -> None:
    async with ms.open_system() as system:
        with pytest.raises(ValueError, match="at least 1"):
            await system.spawn(Doubler, mailbox_size=0)


async def test_ask_timeout_covers_waiting_for_mailbox_room() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Recorder, gate, mailbox_size=1)
        ref.tell_nowait("busy")
        await wait_blocked()
        ref.tell_nowait("queued")
        with pytest.raises(ms.AskTimeout):
            await ref.ask("never-delivered", timeout=0.01)
        gate.set()
        await ref.ask("end")
        actor = ref._cell.actor
        assert isinstance(actor, Recorder)
        assert actor.seen == ["busy", "queued", "end"]


class Counter(ms.Actor):
    """On "count": how many messages wait behind this one; "hold" waits on its gate first."""

    def __init__(self, gate: anyio.Event) -> None:
        self.gate = gate

    async def receive(self, message: Any) -> Any:
        if message == "hold":
            await self.gate.wait()
            return None
        if message == "count":
            return self.messages_waiting()
        return None


async def test_messages_waiting_counts_the_queue_and_senders_waiting_for_room() -> None:
    gate = anyio.Event()
    async with ms.open_system() as system:
        ref = await system.spawn(Counter, gate, mailbox_size=3)
        assert await ref.ask("count") == 0  # nothing behind the one being handled
        async with anyio.create_task_group() as tg:
            await ref.tell("hold")
            await anyio.wait_all_tasks_blocked()  # the actor holds it; the mailbox is empty
            answer: list[Any] = []

            async def ask_count() -> None:
                answer.append(await ref.ask("count"))

            tg.start_soon(ask_count)
            await anyio.wait_all_tasks_blocked()
            await ref.tell("x")
            await ref.tell("y")  # the mailbox is full now (count, x, y)
            tg.start_soon(ref.tell, "z")  # waits for room: on its way
            await anyio.wait_all_tasks_blocked()
            gate.set()
        assert answer == [3]  # x and y queued behind "count", z waiting for room
