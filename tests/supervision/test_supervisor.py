"""Supervisors on asyncio and trio: restart types, strategies, intensity, shutdown, API."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest

import mainspring as ms

from ._kit import FakeClock, Worker, recording_events, specs, starts, stops

pytestmark = pytest.mark.anyio


async def _child(sup: ms.supervision.SupervisorRef, name: str) -> ms.ActorRef:
    ref = sup.child(name)
    assert ref is not None
    return ref


# -- restart types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "message", "restarted"),
    [
        ("permanent", "crash", True),
        ("permanent", "exit", True),
        ("transient", "crash", True),
        ("transient", "exit", False),
        ("temporary", "crash", False),
        ("temporary", "exit", False),
    ],
)
async def test_restart_types_permanent_transient_temporary(
    restart: str, message: str, restarted: bool
) -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system, specs(log, "w", restart=restart), name="sup", max_restarts=10
        )
        worker = await _child(sup, "w")
        if message == "crash":
            with pytest.raises(ms.ActorFailed):
                await worker.ask("crash")
        else:
            await worker.ask("exit")
        if restarted:
            assert await worker.ask("incr") == 1  # the same ref, a fresh instance
            assert starts(log) == ["w", "w"]
            [info] = await sup.which_children()
            assert (info.status, info.restarts) == ("running", 1)
        else:
            await worker.wait_stopped()
            assert starts(log) == ["w"]
            assert not worker.is_alive
            children = await sup.which_children()
            if restart == "temporary":
                assert children == []  # a temporary child's spec goes with it
            else:
                assert [(c.name, c.status) for c in children] == [("w", "stopped")]


async def test_stop_through_the_ref_is_final_even_for_permanent_children() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(system, specs(log, "w"), name="sup")
        worker = await _child(sup, "w")
        reason = await worker.stop(ms.Pause(detail="operator"))
        assert isinstance(reason, ms.Pause)
        await worker.wait_stopped()
        assert starts(log) == ["w"]
        [info] = await sup.which_children()
        assert info.status == "stopped"


# -- a restart keeps the ref and the mailbox -------------------------------------------------


async def test_ref_and_queued_messages_survive_a_restart_only_the_crashing_one_is_lost() -> None:
    log: list[tuple[Any, ...]] = []
    gate = anyio.Event()

    class Gated(Worker):
        async def receive(self, message: Any) -> Any:
            if message == "crash-after-gate":
                await gate.wait()
                raise RuntimeError("boom")
            return await super().receive(message)

    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system, [ms.supervision.ChildSpec(Gated, log, "g", name="g")], name="sup"
        )
        worker = await _child(sup, "g")
        results: dict[str, Any] = {}

        async def ask(key: str, message: str) -> None:
            try:
                results[key] = await worker.ask(message)
            except ms.ActorFailed as exc:
                results[key] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "crashing", "crash-after-gate")
            await anyio.wait_all_tasks_blocked()
            for i in range(3):
                tg.start_soon(ask, f"queued{i}", "incr")
                await anyio.wait_all_tasks_blocked()
            gate.set()
        assert isinstance(results["crashing"], ms.ActorFailed)
        assert isinstance(results["crashing"].__cause__, RuntimeError)
        # The three queued messages were handled, in order, by the fresh instance.
        assert [results[f"queued{i}"] for i in range(3)] == [1, 2, 3]
        assert sup.child("g") is worker
        assert starts(log) == ["g", "g"]


# -- strategies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "stopped", "started_again"),
    [
        ("one_for_one", ["b"], ["b"]),
        ("one_for_all", ["b", "d", "c", "a"], ["a", "b", "c", "d"]),
        ("rest_for_one", ["b", "d", "c"], ["b", "c", "d"]),
    ],
)
async def test_strategies_one_for_one_one_for_all_rest_for_one(
    strategy: str, stopped: list[str], started_again: list[str]
) -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system, specs(log, "a", "b", "c", "d"), name="sup", strategy=strategy
        )
        assert starts(log) == ["a", "b", "c", "d"]
        b = await _child(sup, "b")
        with pytest.raises(ms.ActorFailed):
            await b.ask("crash")
        for name in "abcd":
            assert await (await _child(sup, name)).ask("get") == 0  # everyone is up again
        # The crashed child first, then the others in reverse start order; restarts in
        # start order.
        assert stops(log) == stopped
        assert starts(log)[4:] == started_again
        for entry in log:
            if entry[0] == "stop" and entry[1] != "b":
                assert isinstance(entry[2], ms.Shutdown)
                assert entry[2].source == "/sup"
        restarts = {info.name: info.restarts for info in await sup.which_children()}
        assert restarts == {name: int(name in started_again) for name in "abcd"}


# -- intensity and escalation ----------------------------------------------------------------


async def test_restart_intensity_exceeded_stops_children_and_fails_the_supervisor() -> None:
    log: list[tuple[Any, ...]] = []
    clock = FakeClock()
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system, specs(log, "a", "b"), name="sup", max_restarts=2, period=10.0, clock=clock,
            restart="temporary",
        )  # fmt: skip
        b = await _child(sup, "b")
        for _ in range(2):  # two restarts within the period are allowed
            with pytest.raises(ms.ActorFailed):
                await b.ask("crash")
            clock.now += 1
            assert await b.ask("get") == 0
        with pytest.raises(ms.ActorFailed):
            await b.ask("crash")  # the third within 10 s is one too many
        reason = await sup.wait_stopped()
        assert isinstance(reason, ms.Crash)
        assert "RestartIntensityExceeded" in reason.error
        assert stops(log)[-2:] == ["b", "a"]  # children stopped, newest first
        assert not b.is_alive


async def test_restarts_outside_the_period_do_not_count() -> None:
    log: list[tuple[Any, ...]] = []
    clock = FakeClock()
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system, specs(log, "w"), name="sup", max_restarts=1, period=5.0, clock=clock
        )
        w = await _child(sup, "w")
        for _ in range(5):
            with pytest.raises(ms.ActorFailed):
                await w.ask("crash")
            assert await w.ask("get") == 0
            clock.now += 6  # each restart is alone in its window
        assert sup.is_alive
        [info] = await sup.which_children()
        assert info.restarts == 5


async def test_three_level_escalation_chain() -> None:
    log: list[tuple[Any, ...]] = []
    clock = FakeClock()
    leaf = specs(log, "leaf")
    mid = ms.supervision.ChildSpec(
        ms.supervision.Supervisor, leaf, name="mid", shutdown=10.0
    )  # default intensity: 3 restarts in 5 s
    async with ms.open_system() as system:
        async with recording_events(system) as events:
            top = await ms.supervision.spawn_supervisor(
                system, [mid], name="top", max_restarts=1, period=60.0, clock=clock,
                restart="temporary",
            )  # fmt: skip
            # Crash the leaf until mid gives up, twice; top allows one restart of mid.
            while top.is_alive:
                mid_ref = top.child("mid")
                leaf_ref = mid_ref._cell.child("leaf") if mid_ref is not None else None
                if leaf_ref is None or not leaf_ref.accepting:
                    await anyio.wait_all_tasks_blocked()
                    continue
                with contextlib.suppress(ms.ActorFailed, ms.ActorDeadError):
                    await leaf_ref.ref.ask("crash")
                await anyio.wait_all_tasks_blocked()
            reason = await top.wait_stopped()
        assert isinstance(reason, ms.Crash)
        assert "RestartIntensityExceeded" in reason.error
    escalations = [(e.supervisor, e.to) for e in events if isinstance(e, ms.supervision.Escalated)]
    assert escalations == [("/top/mid", "/top"), ("/top/mid", "/top"), ("/top", "/")]
    exceeded = [e.supervisor for e in events if isinstance(e, ms.supervision.IntensityExceeded)]
    assert exceeded == ["/top/mid", "/top/mid", "/top"]
    root_failures = [
        e for e in events if isinstance(e, ms.supervision.ChildFailed) and e.supervisor == "/"
    ]
    assert [(e.child, e.restarting) for e in root_failures] == [("/top", False)]
    mid_restarts = [
        e for e in events if isinstance(e, ms.supervision.ChildRestarted) and e.child == "/top/mid"
    ]
    assert len(mid_restarts) == 1


# -- shutdown -------------------------------------------------------------------------------


async def test_shutdown_stops_children_in_reverse_order_with_the_supervisors_reason() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(system, specs(log, "a", "b", "c"), name="sup")
        reason = ms.Shutdown(detail="deploy", source="ops")
        await sup.stop(reason)
    assert stops(log) == ["c", "b", "a"]
    assert all(entry[2] is reason for entry in log if entry[0] == "stop")


async def test_a_child_that_ignores_stop_is_cancelled_after_its_shutdown_seconds() -> None:
    log: list[tuple[Any, ...]] = []
    entered = anyio.Event()
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system,
            [ms.supervision.ChildSpec(Worker, log, "slow", name="slow", shutdown=0.05)],
            name="sup",
        )
        slow = await _child(sup, "slow")
        slow.tell_nowait(("block", entered))
        await entered.wait()
        reason = ms.Shutdown(detail="now")
        started = anyio.current_time()
        await sup.stop(reason)
        assert anyio.current_time() - started >= 0.05
    assert [entry[2] for entry in log if entry[0] == "stop"] == [reason]


# -- the SupervisorRef API ------------------------------------------------------------------


async def test_start_terminate_restart_and_which_children() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(system, specs(log, "a"), name="sup")
        b = await sup.start_child(
            ms.supervision.ChildSpec(Worker, log, "b", name="b", restart="transient")
        )
        assert sup.child("b") is b
        assert await b.ask("incr") == 1
        with pytest.raises(ms.NameTaken):
            await sup.start_child(ms.supervision.ChildSpec(Worker, log, "b", name="b"))
        assert await sup.terminate_child("b") is True
        assert await sup.terminate_child("b") is False
        assert not b.is_alive
        rows = [(c.name, c.restart, c.status, c.restarts) for c in await sup.which_children()]
        assert rows == [("a", "permanent", "running", 0), ("b", "transient", "stopped", 0)]
        b2 = await sup.restart_child("b")  # a stopped child starts again, as a new actor
        assert b2 is not b
        assert await b2.ask("incr") == 1
        a = await _child(sup, "a")
        assert await a.ask("incr") == 1
        a_again = await sup.restart_child("a")  # a running child gets a fresh instance
        assert a_again is a
        assert await a.ask("get") == 0
        with pytest.raises(ms.supervision.NoSuchChild):
            await sup.terminate_child("nope")
        assert sup.is_alive  # mistakes do not crash the supervisor
        assert starts(log) == ["a", "b", "b", "a"]


async def test_invalid_supervisor_arguments_are_refused() -> None:
    async with ms.open_system() as system:
        with pytest.raises(ValueError, match="strategy"):
            await ms.supervision.spawn_supervisor(system, [], name="s", strategy="one_for_some")
        with pytest.raises(ValueError, match="unique"):
            await ms.supervision.spawn_supervisor(
                system, [ms.supervision.ChildSpec(Worker, [], "x", name="x")] * 2, name="s2"
            )
    with pytest.raises(ValueError, match="restart"):
        ms.supervision.ChildSpec(Worker, name="x", restart="sometimes")  # type: ignore[arg-type]


async def test_a_supervisor_inside_an_actor_stops_with_it() -> None:
    log: list[tuple[Any, ...]] = []

    class Owner(ms.Actor):
        async def on_start(self) -> None:
            self.sup = await ms.supervision.spawn_supervisor(
                self, specs(log, "x", "y"), name="team"
            )

        async def receive(self, message: Any) -> Any:
            return self.sup

    async with ms.open_system() as system:
        owner = await system.spawn(Owner, name="owner")
        sup = await owner.ask("sup?")
        assert isinstance(sup, ms.supervision.SupervisorRef)
        assert sup.path == "/owner/team"
        await owner.stop(ms.Pause())
        assert stops(log) == ["y", "x"]
        assert all(isinstance(entry[2].root, ms.Pause) for entry in log if entry[0] == "stop")


# -- the system's root supervisor -----------------------------------------------------------


async def test_top_level_restart_types_under_the_root_supervisor() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system:
        async with recording_events(system) as events:
            transient = await system.spawn(Worker, log, "t", name="t", restart="transient")
            temporary = await system.spawn(Worker, log, "tmp", name="tmp")
            for ref in (transient, temporary):
                with pytest.raises(ms.ActorFailed):
                    await ref.ask("crash")
            assert await transient.ask("get") == 0  # restarted in place
            await temporary.wait_stopped()  # reported, not restarted
        with pytest.raises(ValueError, match="restart"):
            await system.spawn(Worker, log, "x", restart="always")  # type: ignore[arg-type]
    failed = [(e.child, e.restarting) for e in events if isinstance(e, ms.supervision.ChildFailed)]
    assert sorted(failed) == [("/t", True), ("/tmp", False)]
    assert all(
        e.supervisor == "/" for e in events if isinstance(e, ms.supervision.SupervisionEvent)
    )
    assert sorted(starts(log)) == ["t", "t", "tmp"]


async def test_a_top_level_actor_that_keeps_crashing_is_stopped_for_good() -> None:
    log: list[tuple[Any, ...]] = []
    async with ms.open_system() as system:
        ref = await system.spawn(Worker, log, "flaky", name="flaky", restart="permanent")
        for _ in range(4):
            with pytest.raises((ms.ActorFailed, ms.ActorDeadError)):
                await ref.ask("crash")
        reason = await ref.wait_stopped()
        assert isinstance(reason, ms.Crash)
        assert starts(log) == ["flaky"] * 4  # 3 restarts allowed within 5 s, not a 4th


async def test_cancel_from_outside_is_final_cancel_from_inside_is_a_normal_exit() -> None:
    log: list[tuple[Any, ...]] = []

    class SelfCancel(Worker):
        async def receive(self, message: Any) -> Any:
            if message == "self-cancel":
                self.ref.cancel(ms.BudgetExhausted(detail="out of calls"))
                await anyio.sleep_forever()
            return await super().receive(message)

    async with ms.open_system() as system:
        sup = await ms.supervision.spawn_supervisor(
            system,
            [
                ms.supervision.ChildSpec(SelfCancel, log, "inner", name="inner"),
                ms.supervision.ChildSpec(SelfCancel, log, "outer", name="outer"),
            ],
            name="sup",
        )
        inner = await _child(sup, "inner")
        with pytest.raises(ms.ActorDeadError):
            await inner.ask("self-cancel")
        assert await inner.ask("get") == 0  # permanent: restarted after its own cancel
        outer = await _child(sup, "outer")
        outer.cancel(ms.Cancel(detail="operator"))
        assert isinstance(await outer.wait_stopped(), ms.Cancel)  # from outside: final
    assert starts(log) == ["inner", "outer", "inner"]


# ----------------------------------------------------------------------
# Regression tests for edge cases found in review: each would hang or misbehave without its fix.


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
