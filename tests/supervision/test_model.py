"""Property: random crash / exit / stop / start sequences against a reference model.

Hypothesis draws a supervisor (strategy, children with restart types, intensity) and a
sequence of operations; the real supervisor runs them one at a time, waiting until every task
is idle after each, and after each step its children (names, statuses, restart counts), the
order children start in and whether the supervisor is alive must match a small model of the
rules — permanent / transient / temporary, one_for_one / one_for_all / rest_for_one, and
"more than max_restarts restarts fails the supervisor".
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms

from ..strategies import restart_types, strategies, supervisor_ops
from ._kit import FakeClock, Worker, starts


@attrs.define
class ModelChild:
    name: str
    restart: str
    running: bool = True
    restarts: int = 0


@attrs.define
class Model:
    strategy: str
    max_restarts: int
    children: list[ModelChild]
    alive: bool = True
    restart_count: int = 0
    starts: list[str] = attrs.Factory(list)

    def restarts_after_end(self, child: ModelChild, *, crashed: bool) -> None:
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


@given(
    strategy=strategies,
    types=st.lists(restart_types, min_size=1, max_size=4),
    max_restarts=st.integers(min_value=0, max_value=4),
    ops=supervisor_ops,
)
@settings(max_examples=60, deadline=None)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_supervisor_matches_the_model(
    backend: str, strategy: str, types: list[str], max_restarts: int, ops: list[Any]
) -> None:
    log: list[tuple[Any, ...]] = []
    names = [f"c{i}" for i in range(len(types))]
    model = Model(
        strategy,
        max_restarts,
        [ModelChild(n, t) for n, t in zip(names, types, strict=True)],
        starts=list(names),
    )
    specs = [
        ms.ChildSpec(Worker, log, n, name=n, restart=t, shutdown=1.0)  # type: ignore[arg-type]
        for n, t in zip(names, types, strict=True)
    ]

    async def check(sup: ms.SupervisorRef) -> None:
        await anyio.wait_all_tasks_blocked()
        assert sup.is_alive == model.alive
        if model.alive:
            rows = [(c.name, c.status, c.restarts) for c in await sup.which_children()]
            expected = [
                (c.name, "running" if c.running else "stopped", c.restarts) for c in model.children
            ]
            assert rows == expected
        assert starts(log) == model.starts

    async def scenario() -> None:
        async with ms.open_system() as system:
            sup = await system.spawn_supervisor(
                specs, name="sup", strategy=strategy, max_restarts=max_restarts,
                period=60.0, clock=FakeClock(), restart="temporary",
            )  # fmt: skip
            fresh = 0
            await check(sup)
            for verb, arg in ops:
                if not model.alive:
                    break
                if verb == "start":
                    name = f"n{fresh}"
                    fresh += 1
                    await sup.start_child(
                        ms.ChildSpec(Worker, log, name, name=name, restart=arg, shutdown=1.0)
                    )
                    model.children.append(ModelChild(name, arg))
                    model.starts.append(name)
                    await check(sup)
                    continue
                if not model.children:
                    continue
                child = model.children[arg % len(model.children)]
                ref = sup.child(child.name)
                if verb == "terminate":
                    assert await sup.terminate_child(child.name) == child.running
                    if child.running:
                        model.end_for_good(child)
                elif verb == "restart_child":
                    await sup.restart_child(child.name)
                    if child.running:
                        child.restarts += 1
                    else:
                        child.running = True
                        child.restarts = 0  # a stopped child comes back as a new actor
                    model.starts.append(child.name)
                elif not child.running or ref is None:
                    pass
                elif verb == "crash":
                    with contextlib.suppress(ms.ActorFailed):
                        await ref.ask("crash")
                    model.restarts_after_end(child, crashed=True)
                elif verb == "exit":
                    await ref.ask("exit")
                    model.restarts_after_end(child, crashed=False)
                elif verb == "stop":
                    await ref.stop()
                    model.end_for_good(child)
                await check(sup)

    anyio.run(scenario, backend=backend)
