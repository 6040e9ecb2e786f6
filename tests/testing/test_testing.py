"""mainspring.testing: the public test doubles (a store in memory, a manual clock; the
scripted worker host is tested with the workers, tests/executions/workers/test_scripted.py).
The in-memory store also runs the store contract suite (tests/storage/backends/test_contract.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage._seam import new_owner_id
from mainspring.testing import ManualClock, MemoryStore, ScriptedHost


def execution(id: str = "ex-1", **changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id=id, **(fields | changes))


# -- ManualClock --------------------------------------------------------------------------


def test_a_manual_clock_moves_only_when_told_and_never_backwards() -> None:
    clock = ManualClock()
    assert clock() == clock.now == 1_000.0
    assert clock.advance(2.5) == 1_002.5
    assert clock() == 1_002.5
    clock.set(2_000)
    assert clock() == 2_000.0
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(1_999)
    with pytest.raises(ValueError, match="finite"):
        clock.advance(math.inf)
    with pytest.raises(TypeError, match="number of seconds"):
        clock.advance(True)  # type: ignore[arg-type]
    assert repr(ManualClock(5)) == "ManualClock(now=5.0)"


def test_L1_a_manual_clock_lapses_a_lease_without_a_sleep() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    assert store.create(execution())
    first, second = new_owner_id(), new_owner_id()
    assert store.acquire("ex-1", first, 30.0).acquired
    assert not store.acquire("ex-1", second, 30.0).acquired
    clock.advance(31)
    taken = store.acquire("ex-1", second, 30.0)
    assert taken.acquired
    assert not store.heartbeat("ex-1", first, 30.0)


# -- MemoryStore --------------------------------------------------------------------------


def test_the_memory_store_is_bounded_in_executions_and_history() -> None:
    store = MemoryStore(max_executions=2, max_history=3)
    assert store.create(execution("a"))
    assert store.create(execution("b"))
    with pytest.raises(ms.StorageError, match="max_executions"):
        store.create(execution("c"))
    assert [e.id for e in store.list().executions] == ["a", "b"]
    for status in ("running", "completed"):
        assert store.replace(execution("a", status=status), "me") or status == "completed"
    entries = store.history(limit=100)
    assert len(entries) <= 3  # the newest three: older ones were dropped
    assert [e.seq for e in entries] == sorted(e.seq for e in entries)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="positive whole number"):
            MemoryStore(max_history=bad)


def test_the_memory_store_keeps_no_memory_and_no_evidence() -> None:
    # What it says: the runtime then offers no memory and seals no evidence on it (the
    # stores that hold memory and evidence forward to them; this one holds neither).
    store = MemoryStore()
    assert not isinstance(store, ms.storage._seam.MemoryBackend)
    assert not isinstance(store, ms.storage._seam.EvidenceStore)


def test_E5_X2_a_part_that_no_store_could_keep_is_refused_and_nothing_is_written() -> None:
    store = MemoryStore(max_bytes=1_024)
    with pytest.raises(ms.storage.TooLarge):
        store.create(execution(goal="x" * 4_096))
    assert store.get("ex-1") is None
    assert store.history() == ()
    with pytest.raises(ms.storage.InvalidId):
        store.get("../etc")


def test_delete_removes_a_finished_execution_and_its_history_only() -> None:
    store = MemoryStore()
    assert store.create(execution("a"))
    assert store.create(execution("b"))
    assert not store.delete("a")  # not finished
    assert store.replace(execution("a", status="completed"), "me")
    assert store.delete("a")
    assert store.get("a") is None
    assert {e.execution_id for e in store.history()} == {"b"}
    assert [e.id for e in store.unfinished().executions] == ["b"]
    assert store.unfinished(skip={"b"}).executions == ()


@pytest.mark.anyio
async def test_a_runtime_runs_a_plan_on_the_memory_store_and_its_history_replays() -> None:
    def inc(x: int) -> int:
        return x + 1

    plan = ms.Plan(
        id="p",
        goal="count",
        steps=(
            ms.PlanStep(id="s0", tool="inc", input={"x": 1}),
            ms.PlanStep(id="s1", tool="inc", input={"x": 2}, depends_on=("s0",)),
        ),
    )
    store = MemoryStore()
    async with ms.open_runtime(store=store, tools={"inc": inc}) as rt:
        handle = await rt.start("count", plan=plan, execution_id="ex-m")
        result = await handle.wait()
    assert result.status == "completed"
    stored = store.get("ex-m")
    assert stored is not None
    assert stored.completed_steps == ("s0", "s1")
    kinds = [e.kind for e in store.history("ex-m")]
    assert kinds[0] == "created"
    assert kinds.count("step") >= 2


def test_the_scripted_host_is_a_worker_host() -> None:
    host = ScriptedHost([[{"type": "result", "output": 1}]])
    assert isinstance(host, ms.executions.WorkerHost)
    assert "mainspring.testing" in ms.testing.__name__
