"""Worker transitions in the durable history (#17, V1, V2): a worker whose status or
generation moved is one ``worker`` entry (ids, states, counts, a reason code), a change that
moves neither (a lease renewed) is none, a reason that is not a short code is left out, and
workers rewritten whole (a record that does not parse among them, E7) miss no move."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.storage import FileStore, SqliteStore, WorkerRecord
from mainspring.storage._seam import CommitOutcome
from tests._examples import examples
from tests.executions._kit import Gate, agent, plan_of

Factory = Callable[[], Any]


@pytest.fixture(params=["file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "file":
        yield FileStore(tmp_path / "store")
        return
    made = SqliteStore(tmp_path / "store.sqlite3")
    yield made
    made.close()


def _execution(*workers: dict[str, Any]) -> ms.storage.Execution:
    return ms.storage.Execution(
        id="ex-1", goal="g", created_at=1.0, updated_at=1.0, workers=workers
    )


def _worker(worker_id: str = "w1", **changes: Any) -> dict[str, Any]:
    record = WorkerRecord(
        id=worker_id, task_id="t1", step_id="s1", agent_id="coder", created_at=1.0, updated_at=1.0
    )
    raw: dict[str, Any] = ms.storage._seam.unstructure(attrs.evolve(record, **changes))
    return raw


def _set(store: Any, *workers: dict[str, Any]) -> None:
    assert store.edit("ex-1", lambda stored, now: attrs.evolve(stored, workers=workers))


def _moves(store: Any, after: int = 0) -> list[tuple[Any, ...]]:
    return [
        (e.worker_id, e.task_id, e.step_id, e.generation, e.status, e.reason)
        for e in store.history("ex-1", after=after)
        if e.kind == "worker"
    ]


def test_a_move_is_an_entry_and_a_renewed_lease_is_none(store: Any) -> None:
    assert store.create(_execution(_worker()))
    assert _moves(store) == [("w1", "t1", "s1", 1, "assigned", None)]
    mark = store.history("ex-1")[-1].seq
    _set(store, _worker(status="running", lease_expires_at=50.0))
    _set(store, _worker(status="running", lease_expires_at=80.0))  # a heartbeat: no move
    _set(store, _worker(status="stopped", reason="native-process-exited"))
    _set(store, _worker(generation=2, status="stopped", reason="takeover"))  # generation moved
    _set(store, _worker(generation=2, status="assigned", reason="takeover"), _worker("w2"))
    assert _moves(store, mark) == [
        ("w1", "t1", "s1", 1, "running", None),
        ("w1", "t1", "s1", 1, "stopped", "native-process-exited"),
        ("w1", "t1", "s1", 2, "stopped", "takeover"),
        ("w1", "t1", "s1", 2, "assigned", "takeover"),
        ("w2", "t1", "s1", 1, "assigned", None),
    ]


def test_a_reason_that_is_not_a_short_code_is_left_out(store: Any) -> None:
    planted = "Traceback: secret-token-4f1d9a in /home/user"
    assert store.create(_execution(_worker(status="blocked", reason=planted)))
    _set(store, _worker(status="stopped", reason="no-progress:lint"))
    _set(store, _worker(status="blocked", reason="x" * 65))
    assert [move[-1] for move in _moves(store)] == [None, "no-progress:lint", None]
    dumped = orjson.dumps([attrs.asdict(e) for e in store.history("ex-1")])
    assert b"secret-token-4f1d9a" not in dumped


def test_E7_workers_rewritten_whole_miss_no_move(store: Any) -> None:
    broken = {"id": "w9", "status": {"not": "a status"}, "generation": "one"}
    assert store.create(_execution(_worker(), broken))
    mark = store.history("ex-1")[-1].seq
    # A record without an id: the part is stored by position, rewritten whole each time.
    nameless = {"status": "running", "generation": 1}
    _set(store, _worker(status="starting"), broken, nameless)
    _set(store, _worker(status="starting", lease_expires_at=5.0), broken, nameless)
    _set(store, _worker(status="running"), broken, nameless)
    assert [(m[0], m[4]) for m in _moves(store, mark)] == [("w1", "starting"), ("w1", "running")]
    fresh = store.get("ex-1")
    assert fresh is not None
    kept = fresh.workers[1:]  # kept as they are (E7)
    assert all(type(w) is ms.storage.Unreadable for w in kept)
    assert [w.raw for w in kept] == [broken, nameless]  # type: ignore[union-attr]


def test_E7_text_where_an_id_or_a_status_belongs_never_reaches_the_history(store: Any) -> None:
    planted = "planted text 6e2b90 from a worker"
    text_status = _worker("w2") | {"status": planted}
    text_ids = _worker("w3") | {"task_id": planted, "step_id": planted}
    text_id = _worker() | {"id": planted}
    assert store.create(_execution(text_status, text_ids, text_id))
    _set(store, text_status, text_ids | {"status": "running"}, text_id | {"status": "running"})
    assert [(m[0], m[1], m[2], m[4]) for m in _moves(store)] == [
        ("w3", None, None, "assigned"),
        ("w3", None, None, "running"),
    ]
    dumped = orjson.dumps([attrs.asdict(e) for e in store.history("ex-1")])
    assert b"6e2b90" not in dumped


def test_a_store_opened_again_knows_what_each_worker_was(tmp_path: Path) -> None:
    """The base a store rebuilds from disk holds the workers as stored: a commit after a
    restart finds a move (or none) as the first process would have."""
    first = SqliteStore(tmp_path / "s.sqlite3")
    assert first.create(_execution(_worker(), _worker("w2")))
    first.close()
    again = SqliteStore(tmp_path / "s.sqlite3")
    try:
        mark = again.history("ex-1")[-1].seq
        _set(again, _worker(lease_expires_at=9.0), _worker("w2", status="starting"))
        assert [(m[0], m[4]) for m in _moves(again, mark)] == [("w2", "starting")]
    finally:
        again.close()


STATUSES = ("assigned", "starting", "running", "idle", "stopped", "delivered")
# One commit: for each of three workers, what it becomes (None: left as it is); a lease
# renewed moves nothing; an unparsable record may ride along (E7: rewritten whole).
_VERSIONS = st.tuples(
    st.tuples(*[st.none() | st.tuples(st.sampled_from(STATUSES), st.integers(1, 3))] * 3),
    st.booleans(),
)


@given(
    commits=st.lists(_VERSIONS, min_size=1, max_size=8), kind=st.sampled_from(["file", "sqlite"])
)
@settings(max_examples=examples(60), deadline=None)
def test_the_history_has_every_move_and_no_other(
    commits: list[Any], kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    where = tmp_path_factory.mktemp("moves")
    store: Any = FileStore(where / "f") if kind == "file" else SqliteStore(where / "s.sqlite3")
    try:
        state = {f"w{i}": ("assigned", 1) for i in range(3)}
        lease = 0.0
        assert store.create(_execution(*(_worker(w) for w in state)))
        mark = store.history("ex-1")[-1].seq
        expected: list[tuple[str, int, str]] = []
        for moves, broken in commits:
            lease += 1.0
            for worker_id, move in zip(state, moves, strict=True):
                if move is not None and move != state[worker_id]:
                    expected.append((worker_id, move[1], move[0]))
                if move is not None:
                    state[worker_id] = move
            workers = [
                _worker(w, status=s, generation=g, lease_expires_at=lease)
                for w, (s, g) in state.items()
            ]
            _set(store, *workers, *([{"id": "bad", "generation": "x"}] if broken else []))
        assert [(m[0], m[3], m[4]) for m in _moves(store, mark)] == expected
    finally:
        if kind == "sqlite":
            store.close()


# ----------------------------------------------------------------------
# Task transitions derived when tasks are rewritten whole
# (``_journal._task_events``) with an agent task record that does not parse (kept as it is,
# E7) whose id is not even a string.

Factory_tasks = Callable[..., Any]

UNPARSED = [
    pytest.param({"id": ["t0"], "state": "running"}, id="list-id"),
    pytest.param({"id": {"t": 0}, "state": "running"}, id="object-id"),
]


@pytest.fixture(params=["file", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory_tasks]:
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
    make_store: Factory_tasks, unparsed: dict[str, Any]
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
    make_store: Factory_tasks, unparsed: dict[str, Any]
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


# -- retries: one entry per failed attempt a policy tries again (V1, V2) -------------------


def _attempt_obs(number: int, *, retrying: bool, **extra: Any) -> ms.storage.Observation:
    attempts = [
        {"attempt": n, "error": "secret text the tool wrote", "at": 10.0 + n, "timed_out": False}
        | extra
        for n in range(1, number + 1)
    ]
    data: dict[str, Any] = {"attempts": attempts, "max_attempts": 3}
    if retrying:
        data |= {"retrying": True, "delay": 0.5 * number}
    return ms.storage.Observation(step_id="s1", tool="t", ok=False, error="boom", data=data)


def test_V2_each_retried_attempt_is_one_retry_entry_and_giving_up_is_none(store: Any) -> None:
    store.create(ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0))
    for number, retrying in ((1, True), (2, True), (3, False)):
        extra = {"error_type": "ConnectionError"} if number == 1 else {"timed_out": True}
        observation = _attempt_obs(number, retrying=retrying, **extra)
        assert store.edit(
            "ex-1", lambda stored, now, o=observation: attrs.evolve(stored, observations=(o,))
        )
    retries = [e for e in store.history("ex-1") if e.kind == "retry"]
    assert [(e.step_id, e.attempt, e.max_attempts, e.reason, e.delay, e.at) for e in retries] == [
        ("s1", 1, 3, "ConnectionError", 0.5, 11.0),
        ("s1", 2, 3, "timeout", 1.0, 12.0),
    ]
    assert b"secret text" not in orjson.dumps([attrs.asdict(e) for e in retries])


def test_V1_a_failure_kind_that_is_not_a_class_name_is_left_out(store: Any) -> None:
    store.create(ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0))
    observation = _attempt_obs(1, retrying=True, error_type="not a name: see /etc/passwd")
    assert store.edit("ex-1", lambda stored, now: attrs.evolve(stored, observations=(observation,)))
    (retry,) = [e for e in store.history("ex-1") if e.kind == "retry"]
    assert (retry.attempt, retry.reason) == (1, None)
