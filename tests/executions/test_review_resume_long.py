"""Review of storage v2 (issue 13) through the runtime: an agent with thousands of inner
steps paused and resumed mid-way, in the same runtime and in another one on the store."""

from __future__ import annotations

import decimal
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.storage._seam import unstructure
from tests.executions._kit import agent, plan_of

# Heavy on purpose, like tests/executions/test_scale.py: thousands of inner steps' records
# make a full garbage collection pass take 0.25-0.35 s of CPU (measured by the loop guard in
# CI), and one lands in some step.
pytestmark = [pytest.mark.anyio, pytest.mark.loop_guard(1.0)]


@pytest.fixture(params=["sqlite", "files"])
def store_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return tmp_path / ("store.sqlite3" if request.param == "sqlite" else "store.files")


def value(i: int) -> Any:
    # Values that compare equal across types: a replay must hand back the very type.
    kinds = [
        i,
        i % 2 == 0,
        float(i % 3),
        (i, "t"),
        {i % 4},
        frozenset({i % 4}),
        decimal.Decimal(f"{i % 3}.0"),
        b"b%d" % i,
        [i, [True, 1, 1.0]],
    ]
    return kinds[i % len(kinds)]


def typed(items: list[Any]) -> Any:
    return [unstructure(ms.storage.Observation(step_id="x", ok=True, output=v)) for v in items]


@pytest.mark.slow
async def test_an_agent_of_3000_inner_steps_paused_twice_mid_way_resumes_as_it_was(
    store_path: Path,
) -> None:
    n = 3_000
    calls: Counter[int] = Counter()
    runs: list[list[Any]] = []
    parks = {1_000: anyio.Event(), 2_200: anyio.Event()}
    parked = {at: anyio.Event() for at in parks}

    async def inner(i: int) -> Any:
        calls[i] += 1
        return value(i)

    def park(at: int) -> Any:
        async def wait() -> str:
            parked[at].set()
            await parks[at].wait()
            return "went on"

        return wait

    async def looper(ctx: ms.AgentContext, input: Any) -> int:
        got: list[Any] = []
        runs.append(got)
        for i in range(n):
            if i in parks:
                await ctx.step(f"park{i}", park(i))
            got.append(await ctx.step(f"i{i}", inner, i))
        return len(got)

    plan = plan_of(agent("a", "looper"))
    async with ms.open_runtime(store=store_path, agents={"looper": looper}) as rt:
        await rt.start("loop", plan, execution_id="ex")
        await parked[1_000].wait()
        await rt.pause("ex")
        parks[1_000].set()
        await rt.resume("ex")  # the same runtime
        await parked[2_200].wait()
        await rt.pause("ex")
        parks[2_200].set()
    async with ms.open_runtime(store=store_path, agents={"looper": looper}) as rt:
        result = await (await rt.resume("ex")).wait()  # another runtime on the store
        assert result.status == "completed", [o.error for o in result.observations]
        assert result.outputs["a"] == n
    assert len(runs) == 3
    assert [i for i in range(n) if calls[i] != 1] == []  # no inner step ran twice
    expected = typed([value(i) for i in range(n)])
    assert typed(runs[2]) == expected
    assert typed(runs[1]) == expected[: len(runs[1])]
    assert len(runs[1]) == 2_200


@pytest.mark.slow
async def test_an_agent_with_redacted_inner_steps_resumed_elsewhere_reruns_only_those(
    store_path: Path,
) -> None:
    n, at = 3_000, 1_500
    calls: Counter[int] = Counter()
    runs: list[list[Any]] = []
    gate, parked = anyio.Event(), anyio.Event()

    def secret(i: int) -> bool:
        return i % 600 == 7

    async def inner(i: int) -> Any:
        calls[i] += 1
        if secret(i):  # a credential's shape: stored masked, kept live in memory only
            return {"token": f"sk-{'A' * 40}{i}x{calls[i]}", "i": i}
        return value(i)

    async def wait() -> str:
        parked.set()
        await gate.wait()
        return "went on"

    async def looper(ctx: ms.AgentContext, input: Any) -> int:
        got: list[Any] = []
        runs.append(got)
        for i in range(n):
            if i == at:
                await ctx.step("park", wait)
            got.append(await ctx.step(f"i{i}", inner, i))
        return len(got)

    plan = plan_of(agent("a", "looper"))
    async with ms.open_runtime(store=store_path, agents={"looper": looper}) as rt:
        await rt.start("loop", plan, execution_id="ex")
        await parked.wait()
        await rt.pause("ex")
    gate.set()
    async with ms.open_runtime(store=store_path, agents={"looper": looper}) as rt:
        result = await (await rt.resume("ex")).wait()
        assert result.status == "completed", [o.error for o in result.observations]
    twice = sorted(i for i in range(n) if calls[i] == 2)
    assert twice == [i for i in range(at) if secret(i)]  # E10: only the masked ones again
    assert all(calls[i] == 1 for i in range(n) if i not in twice)
    final = runs[-1]
    for i in range(n):
        if secret(i):
            assert final[i] == {"token": f"sk-{'A' * 40}{i}x{calls[i]}", "i": i}
        else:
            assert typed([final[i]]) == typed([value(i)])
