"""O1: a runtime's metrics: steps started, succeeded and failed, step and commit latency,
flush batch sizes, runs by status, leases held and recoveries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from .._kit import Gate, plan_of, tool
from ._otel import Otel

pytestmark = pytest.mark.anyio


async def _inc(x: int = 0) -> int:
    return x + 1


async def _fail(**_: Any) -> None:
    raise RuntimeError("no")


async def test_O1_steps_commits_flushes_and_runs_are_counted() -> None:
    otel = Otel()
    plan = plan_of(tool("a", "inc"), tool("b", "inc", "a"), tool("c", "fail"))
    async with otel.runtime(tools={"inc": _inc, "fail": _fail}) as rt:
        result = await (await rt.start("g", plan)).wait()
    assert result.status == "failed"
    assert otel.total("mainspring.steps.started", **{"mainspring.step.kind": "tool"}) == 3
    assert otel.total("mainspring.steps.succeeded") == 2
    assert otel.total("mainspring.steps.failed") == 1
    assert sum(p.count for p in otel.points("mainspring.step.duration")) == 3
    assert sum(p.count for p in otel.points("mainspring.commit.duration")) >= 4
    flushes = otel.points("mainspring.flush.batch_size")
    assert sum(p.count for p in flushes) >= 1
    assert sum(p.sum for p in flushes) >= 4  # every commit of the run, in some flush
    assert otel.total("mainspring.runs") == 0  # none live any more
    assert otel.total("mainspring.runs.ended", **{"mainspring.execution.status": "failed"}) == 1
    assert otel.total("mainspring.leases.held") == 0


async def test_O1_a_live_run_is_counted_running_and_holding_its_lease() -> None:
    otel = Otel()
    gate = Gate()
    async with otel.runtime(tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "gate")))
        with anyio.fail_after(30):
            await gate.entered.wait()
        assert otel.total("mainspring.runs", **{"mainspring.execution.status": "running"}) == 1
        assert otel.total("mainspring.leases.held") == 1
        await rt.pause(handle.execution_id)
    assert otel.total("mainspring.runs") == 0
    assert otel.total("mainspring.runs.ended", **{"mainspring.execution.status": "paused"}) == 1


async def test_O1_a_run_taken_over_counts_as_a_recovery(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    gate = Gate()
    gate.__qualname__ = "gate"  # type: ignore[attr-defined]
    async with Otel().runtime(store=store, tools={"gate": gate}, recover=False) as rt:
        handle = await rt.start("g", plan_of(tool("a", "gate")), execution_id="ex-orphan")
        with anyio.fail_after(30):
            await gate.entered.wait()
    # The runtime closed: the run is left running, its lease released (a shutdown).
    gate.opened.set()
    otel = Otel()
    async with otel.runtime(store=store, tools={"gate": gate}, recover=False) as rt:
        report = await rt.recover()
        assert [h.execution_id for h in report] == [handle.execution_id]
        await report[0].wait()
    assert otel.total("mainspring.recoveries") == 1


async def test_O1_runtimes_on_one_provider_add_up_their_counts() -> None:
    # The counts are tallies per meter provider, reported when a reader collects: a second
    # runtime on the same provider adds to them (as a counter would), it does not start over
    # or go unreported.
    otel = Otel()
    for _ in range(2):
        async with otel.runtime(tools={"inc": _inc}) as rt:
            result = await (await rt.start("g", plan_of(tool("a", "inc")))).wait()
        assert result.status == "completed"
    assert otel.total("mainspring.steps.started", **{"mainspring.step.kind": "tool"}) == 2
    assert otel.total("mainspring.steps.succeeded") == 2
    assert otel.total("mainspring.runs.ended", **{"mainspring.execution.status": "completed"}) == 2
    assert otel.total("mainspring.leases.held") == 0
    assert sum(p.count for p in otel.points("mainspring.step.duration")) == 2
