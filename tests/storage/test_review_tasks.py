"""Review of storage v2 (issue 13): task transitions derived when tasks are rewritten whole
(``_journal._task_events``) with an agent task record that does not parse (kept as it is,
E7) whose id is not even a string."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.storage import FileStore, SqliteStore
from mainspring.storage._seam import CommitOutcome
from tests.executions._kit import Gate, agent, plan_of

Factory = Callable[..., Any]

UNPARSED = [
    pytest.param({"id": ["t0"], "state": "running"}, id="list-id"),
    pytest.param({"id": {"t": 0}, "state": "running"}, id="object-id"),
]


@pytest.fixture(params=["file", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    made: list[Any] = []

    def make() -> Any:
        if request.param == "file":
            store: Any = FileStore(tmp_path / "store")
        else:
            store = SqliteStore(tmp_path / "store" / "mainspring.db")
        made.append(store)
        return store

    yield make
    for store in made:
        if isinstance(store, SqliteStore):
            store.close()


def execution(id: str = "ex-1", **changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id=id, **(fields | changes))


@pytest.mark.parametrize("unparsed", UNPARSED)
def test_E7_a_task_record_with_an_id_that_is_not_a_string_does_not_break_the_next_commit(
    make_store: Factory, unparsed: dict[str, Any]
) -> None:
    store = make_store()
    assert store.create(execution(agent_tasks=(unparsed,)))
    added = {"id": "t1", "state": "created"}
    written = store.edit(
        "ex-1", lambda stored, now: attrs.evolve(stored, agent_tasks=(*stored.agent_tasks, added))
    )
    assert written is not None
    fresh = make_store().get("ex-1")
    assert fresh is not None
    assert ms.storage._seam.unstructure(fresh)["agent_tasks"] == [unparsed, added]
    assert all(type(task) is ms.storage.Unreadable for task in fresh.agent_tasks)


@pytest.mark.parametrize("unparsed", UNPARSED)
def test_E7_such_a_record_fails_at_most_its_own_commit_in_a_batch(
    make_store: Factory, unparsed: dict[str, Any]
) -> None:
    store = make_store()
    owner = "a:1:x"
    leases = {}
    for name, tasks in (("bad", (unparsed,)), ("good", ())):
        assert store.create(execution(name, status="running", agent_tasks=tasks))
        leases[name] = store.acquire(name, owner, ttl=600).lease
    bad = execution(
        "bad", status="running", lease=leases["bad"], agent_tasks=(unparsed, {"id": "t1"})
    )
    good = execution("good", status="running", lease=leases["good"], calls_used=3)
    results = store.commit_runs([(bad, owner), (good, owner)])  # one group commit
    assert results[1] is CommitOutcome.OK
    stored = make_store().get("good")
    assert stored is not None
    assert stored.calls_used == 3


@pytest.mark.anyio
@pytest.mark.parametrize("suffix", [".sqlite3", ".files"])
async def test_E7_a_run_with_such_a_record_resumes_and_completes(
    tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"store{suffix}"
    gate = Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", gate)
        return "ok"

    async with ms.open_runtime(store=path, agents={"worker": worker}) as rt:
        await rt.start("g", plan_of(agent("a", "worker")), execution_id="ex")
        await gate.entered.wait()
        await rt.pause("ex")
    unparsed = {"id": ["x"], "state": "running"}  # e.g. written by another version

    def plant() -> None:  # the store's own blocking calls: off the loop its guard watches
        store: Any = SqliteStore(path) if suffix == ".sqlite3" else FileStore(path)
        store.edit("ex", lambda s, now: attrs.evolve(s, agent_tasks=(*s.agent_tasks, unparsed)))
        if isinstance(store, SqliteStore):
            store.close()

    await anyio.to_thread.run_sync(plant)
    gate.opened.set()
    async with ms.open_runtime(store=path, agents={"worker": worker}) as rt:
        with anyio.fail_after(30):
            result = await (await rt.resume("ex")).wait()
        assert result.status == "completed"
        stored = await anyio.to_thread.run_sync(rt.store.get, "ex")
        assert stored is not None
        assert unparsed in ms.storage._seam.unstructure(stored)["agent_tasks"]


@pytest.mark.anyio
async def test_E7_such_a_record_does_not_stop_the_writer_for_the_other_runs(tmp_path: Path) -> None:
    """The persistence actor stops writing for good after a write that raised: one record
    kept as it is (E7) must not take every other run of the runtime down with it."""
    path = tmp_path / "store.sqlite3"
    first, second = Gate(), Gate()

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", first)
        return "ok"

    async def other(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("park", second)
        return "ok"

    agents = {"worker": worker, "other": other}
    async with ms.open_runtime(store=path, agents=agents) as rt:
        await rt.start("g", plan_of(agent("a", "worker")), execution_id="ex")
        await first.entered.wait()
        await rt.pause("ex")
    store = SqliteStore(path)
    unparsed = {"id": ["x"], "state": "running"}
    store.edit("ex", lambda s, now: attrs.evolve(s, agent_tasks=(*s.agent_tasks, unparsed)))
    store.close()
    first.opened.set()
    async with ms.open_runtime(store=path, agents=agents) as rt:
        handle = await rt.start("g", plan_of(agent("b", "other")), execution_id="fine")
        await second.entered.wait()
        with anyio.fail_after(30):
            await (await rt.resume("ex")).wait()  # whatever becomes of this one
        second.opened.set()
        with anyio.fail_after(30):
            result = await handle.wait()
        assert result.status == "completed"
