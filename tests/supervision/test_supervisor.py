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
