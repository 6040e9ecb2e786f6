"""Hypothesis stateful test: random crash / exit / stop / start sequences against a model.

The machine draws a supervisor (strategy, children and their restart types, intensity) and
then random operations. Each operation runs against a real supervisor — the actor system
lives in an anyio blocking portal, on asyncio or on trio — and after each one, once every task
is idle, the supervisor's children (names, statuses, restart counts), the order children
started in and whether the supervisor is alive must match a small model of the rules:
permanent / transient / temporary, one_for_one / one_for_all / rest_for_one, and "more than
max_restarts restarts fails the supervisor".
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import anyio.from_thread
import attrs
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import mainspring as ms
from tests._examples import examples

from ..strategies import restart_types, strategies
from ._kit import FakeClock, Worker, starts


@attrs.define
class ModelChild:
    name: str
    restart: str
    running: bool = True
    restarts: int = 0


@attrs.define
class Model:
    """The rules, with no event loop: what the supervisor must look like after each step."""

    strategy: str
    max_restarts: int
    children: list[ModelChild]
    alive: bool = True
    restart_count: int = 0
    starts: list[str] = attrs.Factory(list)

    def ended(self, child: ModelChild, *, crashed: bool) -> None:
        """The child ended on its own (a crash, or stopping itself)."""
        wants = child.restart == "permanent" or (child.restart == "transient" and crashed)
        if not wants:
            self.end_for_good(child)
            return
        self.restart_count += 1
        if self.restart_count > self.max_restarts:
            self.alive = False
            for c in self.children:
                c.running = False
            return
        running = [c for c in self.children if c.running]
        if self.strategy == "one_for_one":
            group = [child]
        elif self.strategy == "one_for_all":
            group = running
        else:
            group = running[running.index(child) :]
        for c in group:
            c.restarts += 1
            self.starts.append(c.name)

    def end_for_good(self, child: ModelChild) -> None:
        child.running = False
        if child.restart == "temporary":
            self.children.remove(child)


class SupervisorMachine(RuleBasedStateMachine):
    backend = "asyncio"

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[Any, ...]] = []
        self.exits = contextlib.ExitStack()
        self.fresh = 0

    @initialize(
        strategy=strategies,
        types=st.lists(restart_types, min_size=1, max_size=4),
        max_restarts=st.integers(min_value=0, max_value=4),
    )
    def start_supervisor(self, strategy: str, types: list[str], max_restarts: int) -> None:
        names = [f"c{i}" for i in range(len(types))]
        self.model = Model(
            strategy,
            max_restarts,
            [ModelChild(n, t) for n, t in zip(names, types, strict=True)],
            starts=list(names),
        )
        self.portal = self.exits.enter_context(
            anyio.from_thread.start_blocking_portal(self.backend)
        )
        system = self.exits.enter_context(self.portal.wrap_async_context_manager(ms.open_system()))
        specs = [self._spec(n, t) for n, t in zip(names, types, strict=True)]

        async def spawn() -> ms.supervision.SupervisorRef:
            sup: ms.supervision.SupervisorRef = await ms.supervision.spawn_supervisor(
                system, specs, name="sup", strategy=strategy, max_restarts=max_restarts,
                period=60.0, clock=FakeClock(), restart="temporary",
            )  # fmt: skip
            return sup

        self.sup = self.portal.call(spawn)

    def _spec(self, name: str, restart: str) -> ms.supervision.ChildSpec:
        return ms.supervision.ChildSpec(
            Worker, self.log, name, name=name, restart=restart, shutdown=1.0
        )  # type: ignore[arg-type]

    def _pick(self, index: int) -> ModelChild:
        return self.model.children[index % len(self.model.children)]

    def _live(self) -> bool:
        return self.model.alive and bool(self.model.children)

    # -- operations -------------------------------------------------------------------------

    @precondition(_live)
    @rule(index=st.integers(min_value=0, max_value=7))
    def crash(self, index: int) -> None:
        child = self._pick(index)
        ref = self.sup.child(child.name)
        if not child.running or ref is None:
            return

        async def crash() -> None:
            with contextlib.suppress(ms.ActorFailed):
                await ref.ask("crash")

        self.portal.call(crash)
        self.model.ended(child, crashed=True)

    @precondition(_live)
    @rule(index=st.integers(min_value=0, max_value=7))
    def exit_normally(self, index: int) -> None:
        child = self._pick(index)
        ref = self.sup.child(child.name)
        if not child.running or ref is None:
            return
        self.portal.call(ref.ask, "exit")
        self.model.ended(child, crashed=False)

    @precondition(_live)
    @rule(index=st.integers(min_value=0, max_value=7))
    def stop_from_outside(self, index: int) -> None:
        child = self._pick(index)
        ref = self.sup.child(child.name)
        if not child.running or ref is None:
            return
        self.portal.call(ref.stop)
        self.model.end_for_good(child)

    @precondition(_live)
    @rule(index=st.integers(min_value=0, max_value=7))
    def terminate_child(self, index: int) -> None:
        child = self._pick(index)
        was_running = child.running
        assert self.portal.call(self.sup.terminate_child, child.name) is was_running
        if was_running:
            self.model.end_for_good(child)

    @precondition(_live)
    @rule(index=st.integers(min_value=0, max_value=7))
    def restart_child(self, index: int) -> None:
        child = self._pick(index)
        self.portal.call(self.sup.restart_child, child.name)
        if child.running:
            child.restarts += 1
        else:
            child.running = True
            child.restarts = 0  # a stopped child comes back as a new actor
        self.model.starts.append(child.name)

    @precondition(lambda self: self.model.alive)
    @rule(restart=restart_types)
    def start_child(self, restart: str) -> None:
        name = f"n{self.fresh}"
        self.fresh += 1
        self.portal.call(self.sup.start_child, self._spec(name, restart))
        self.model.children.append(ModelChild(name, restart))
        self.model.starts.append(name)

    @rule()
    def let_time_pass(self) -> None:
        """Always possible, so a run goes on (a no-op) after the supervisor gave up."""

    # -- what must hold after every step ---------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        self.portal.call(anyio.wait_all_tasks_blocked)
        assert self.sup.is_alive == self.model.alive
        if self.model.alive:
            rows = [
                (c.name, c.status, c.restarts) for c in self.portal.call(self.sup.which_children)
            ]
            expected = [
                (c.name, "running" if c.running else "stopped", c.restarts)
                for c in self.model.children
            ]
            assert rows == expected
        assert starts(self.log) == self.model.starts

    def teardown(self) -> None:
        self.exits.close()


class TrioSupervisorMachine(SupervisorMachine):
    backend = "trio"


_settings = settings(max_examples=examples(80), stateful_step_count=15, deadline=None)
TestSupervisorModelAsyncio = SupervisorMachine.TestCase
TestSupervisorModelAsyncio.settings = _settings
TestSupervisorModelTrio = TrioSupervisorMachine.TestCase
TestSupervisorModelTrio.settings = _settings
