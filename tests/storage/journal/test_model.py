"""What one commit of a run costs the store does not grow with the run: a long run's
commit compares and encodes what changed, as a short run's does (issue 29's lean step)."""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

import mainspring as ms
from mainspring.storage import (
    Execution,
    FileStore,
    Observation,
    Plan,
    PlanStep,
    SqliteStore,
    _codec,
)
from mainspring.storage._seam import Checkpoint

OWNER = "host-a:1:x"


@pytest.fixture(params=["file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: Any = (
        FileStore(tmp_path / "store")
        if request.param == "file"
        else SqliteStore(tmp_path / "mainspring.db")
    )
    yield made
    if isinstance(made, SqliteStore):
        made.close()


def _run(store: Any, steps: int) -> Iterator[Execution]:
    """The commits a linear plan of ``steps`` tool steps makes, one per step: its plan step
    marked done, its observation and id appended, a checkpoint that names the completed
    steps. Yields each after it is committed."""
    plan = Plan(
        id="linear",
        goal="g",
        steps=tuple(PlanStep(id=f"s{i}", tool="t", input={"i": i}) for i in range(steps)),
    )
    store.create(Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0))
    lease = store.acquire("ex-1", OWNER, 600.0).lease
    execution = attrs.evolve(store.get("ex-1"), status="running", plan=plan, plan_version=1)
    assert store.commit_runs([(execution, OWNER)]) == ("ok",)
    marked = list(plan.steps)
    for index, step in enumerate(plan.steps):
        marked[index] = attrs.evolve(step, status="succeeded")
        done = (*execution.completed_steps, step.id)
        checkpoint = Checkpoint(at=float(index), plan_version=1, completed_steps=done)
        execution = attrs.evolve(
            execution,
            plan=attrs.evolve(plan, steps=tuple(marked)),
            observations=(*execution.observations, Observation(step_id=step.id, ok=True)),
            completed_steps=done,
            checkpoints=(*execution.checkpoints, checkpoint)[-5:],
            lease=lease,
        )
        assert store.commit_runs([(execution, OWNER)]) == ("ok",)
        yield execution


def _counted(monkeypatch: pytest.MonkeyPatch, cls: type[Any], name: str) -> list[int]:
    calls = [0]
    original = getattr(cls, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(cls, name, counting)
    return calls


def test_a_long_runs_commit_compares_one_plan_step_as_a_short_runs_does(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marking one plan step done among 600 compares that step's record once (the diff
    looks where the last commit changed one first); it used to search by halves, comparing
    a record at every level (about log2 of the plan's length per commit)."""
    compared = _counted(monkeypatch, PlanStep, "__eq__")
    in_commits = [0]
    commit_runs = store.commit_runs

    def counting_commits(commits: Any) -> Any:
        before = compared[0]
        try:
            return commit_runs(commits)
        finally:
            in_commits[0] += compared[0] - before

    store.commit_runs = counting_commits
    run = _run(store, 600)
    for _ in range(500):
        next(run)
    in_commits[0] = 0
    for _ in range(50):
        next(run)
    assert in_commits[0] <= 50  # at most one per commit


def test_a_checkpoint_naming_the_runs_completed_steps_encodes_none_of_them(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint whose completed steps are the execution's own is stored as a reference
    to them (E6): its commit walks no list of the run's length to make it."""
    run = _run(store, 400)
    for _ in range(300):
        next(run)
    sizes: list[int] = []
    unstructure = _codec.converter.unstructure

    def measuring(value: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(value, Checkpoint):
            sizes.append(len(value.completed_steps))
        return unstructure(value, *args, **kwargs)

    monkeypatch.setattr(_codec.converter, "unstructure", measuring)
    for _ in range(20):
        last = next(run)
    assert len(sizes) == 20  # one checkpoint encoded per commit
    assert max(sizes) == 0  # ... without its completed steps (a reference to ``done``)
    monkeypatch.undo()
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.checkpoints == last.checkpoints


# ----------------------------------------------------------------------
# What a commit writes, as a fresh store reads it back.
#
# Each test commits through the public store API (``create`` / ``edit``) and reads the
# execution back from a *fresh* store on the same path, comparing the stored encoding (the
# typed encoding of E10), not ``==``: ``1 == True == 1.0`` in Python, but they are different
# values to the user code that gets them back.

Factory = Callable[..., Any]


@pytest.fixture(params=["file", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    made: list[Any] = []

    def make(where: str = "store", **options: Any) -> Any:
        if request.param == "file":
            store: Any = FileStore(tmp_path / where, **options)
        else:
            store = SqliteStore(tmp_path / where / "mainspring.db", **options)
        made.append(store)
        return store

    make.kind = request.param  # type: ignore[attr-defined]
    yield make
    for store in made:
        if isinstance(store, SqliteStore):
            store.close()


def execution(id: str = "ex-1", **changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id=id, **(fields | changes))


def encoded(value: Any) -> bytes:
    return orjson.dumps(ms.storage._seam.unstructure(value), option=orjson.OPT_SORT_KEYS)


def obs(step_id: str, output: Any) -> ms.storage.Observation:
    return ms.storage.Observation(step_id=step_id, ok=True, output=output)


# -- equal-but-different values are not written --------------------------------------------

# Pairs that compare equal in Python but are different values in the typed encoding (E10).
EQUAL_BUT_DIFFERENT = [
    pytest.param(1, True, id="int-then-bool"),
    pytest.param(1, 1.0, id="int-then-float"),
    pytest.param(0.0, -0.0, id="zero-then-negative-zero"),
    pytest.param(decimal.Decimal("1.0"), decimal.Decimal("1.00"), id="decimal-exponent"),
    pytest.param({1, 2}, frozenset({1, 2}), id="set-then-frozenset"),
]


@pytest.mark.parametrize(("before", "after"), EQUAL_BUT_DIFFERENT)
def test_E10_a_replaced_observation_output_reads_back_as_committed(
    make_store: Factory, before: Any, after: Any
) -> None:
    store = make_store()
    assert store.create(execution(observations=(obs("a", before), obs("b", "x"))))
    written = store.edit(
        "ex-1",
        lambda stored, now: attrs.evolve(
            stored, observations=(obs("a", after), stored.observations[1]), updated_at=2.0
        ),
    )
    assert written is not None
    fresh = make_store().get("ex-1")
    assert fresh is not None
    # The head (updated_at) was written, so the commit did land:
    assert fresh.updated_at == 2.0
    assert encoded(fresh.observations) == encoded(written.observations)
    assert type(fresh.observations[0].output) is type(after)


@pytest.mark.parametrize(("before", "after"), EQUAL_BUT_DIFFERENT)
def test_E10_a_replanned_step_input_reads_back_as_committed(
    make_store: Factory, before: Any, after: Any
) -> None:
    def plan(value: Any, version: int) -> ms.storage.Plan:
        step = ms.storage.PlanStep(id="s1", tool="inc", input={"n": value})
        return ms.storage.Plan(id="p", goal="g", version=version, steps=(step,))

    store = make_store()
    assert store.create(execution(plan=plan(before, 1), plan_version=1))
    written = store.edit(
        "ex-1",
        lambda stored, now: attrs.evolve(stored, plan=plan(after, 2), plan_version=2),
    )
    assert written is not None
    fresh = make_store().get("ex-1")
    assert fresh is not None
    assert fresh.plan is not None
    assert fresh.plan.version == 2
    assert encoded(fresh.plan.steps) == encoded(written.plan.steps)  # type: ignore[union-attr]
    assert type(fresh.plan.steps[0].input["n"]) is type(after)


def test_E10_an_agent_inner_output_reads_back_as_committed(make_store: Factory) -> None:
    def task(output: Any) -> dict[str, Any]:
        record = ms.storage.AgentTaskRecord(
            id="t1",
            agent_id="agent",
            step_id="s1",
            execution_id="ex-1",
            created_at=1.0,
            updated_at=1.0,
            inner_completed=("i1",),
            inner_observations=(obs("i1", output),),
        )
        raw: dict[str, Any] = ms.storage._seam.unstructure(record)
        return raw

    store = make_store()
    assert store.create(execution(agent_tasks=(task(1),)))
    written = store.edit(
        "ex-1", lambda stored, now: attrs.evolve(stored, agent_tasks=(task(True),))
    )
    assert written is not None
    fresh = make_store().get("ex-1")
    assert fresh is not None
    assert encoded(fresh.agent_tasks) == encoded(written.agent_tasks)
    (parsed,) = ms.storage._seam.parse_agent_tasks(fresh)[0]
    assert parsed.inner_observations[0].output is True


# -- max_record_bytes refuses records that fit ----------------------------------------------


def test_X2_a_commit_that_shrinks_a_big_record_is_not_refused(make_store: Factory) -> None:
    """X2 bounds what is read back: a commit whose result is smaller than what is stored
    (and well under the bound) must be accepted."""
    limit = 100_000
    store = make_store(max_record_bytes=limit)
    assert store.create(execution(observations=(obs("a", "x" * 60_000),)))
    # The result holds 40,000 bytes of output where 60,000 were: it fits, with room to spare.
    written = store.edit(
        "ex-1",
        lambda stored, now: attrs.evolve(stored, observations=(obs("a", "y" * 40_000),)),
    )
    assert written is not None
    fresh = make_store(max_record_bytes=limit).get("ex-1")
    assert fresh is not None
    assert fresh.observations[0].output == "y" * 40_000


# -- a task record that does not parse is kept as it is (E7), also when it replaces one -----


def test_E7_a_task_replaced_by_a_record_without_its_inner_fields_reads_back_as_it_is(
    make_store: Factory,
) -> None:
    record = ms.storage.AgentTaskRecord(
        id="t1",
        agent_id="agent",
        step_id="s1",
        execution_id="ex-1",
        created_at=1.0,
        updated_at=1.0,
        inner_completed=("i1",),
        inner_observations=(obs("i1", "out"),),
    )
    full: dict[str, Any] = ms.storage._seam.unstructure(record)
    store = make_store()
    assert store.create(execution(agent_tasks=(full,)))
    # The same task, as another version (or a hand edit) left it: no inner fields at all.
    bare = {k: v for k, v in full.items() if k not in ("inner_observations", "inner_completed")}
    written = store.edit("ex-1", lambda stored, now: attrs.evolve(stored, agent_tasks=(bare,)))
    assert written is not None
    fresh = make_store().get("ex-1")
    assert fresh is not None
    # Kept as it was written (E7), not with inner_observations=[] and inner_completed=[] added.
    assert ms.storage._seam.unstructure(fresh)["agent_tasks"] == [bare]


# -- an inner step replaced in place costs what changed --------------------------------------


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
def test_D1_replacing_one_inner_step_of_a_long_agent_costs_what_one_inner_step_does(
    tmp_path: Path,
) -> None:
    """The journal's module doc: "some items replaced in place, some appended" is the fast
    path. For an agent task's inner steps, one replaced (an inner step re-run on resume)
    rewrites every inner step of the task: 3,000 of them here, ~140 KB for one step."""
    n = 3_000
    record = ms.storage.AgentTaskRecord(
        id="t1",
        agent_id="agent",
        step_id="s1",
        execution_id="ex-1",
        created_at=1.0,
        updated_at=1.0,
        inner_completed=tuple(f"i{i}" for i in range(n)),
        inner_observations=tuple(obs(f"i{i}", f"out{i}") for i in range(n)),
    )
    raw: dict[str, Any] = ms.storage._seam.unstructure(record)
    store = FileStore(tmp_path / "store")
    assert store.create(execution(agent_tasks=(raw,)))
    journal = tmp_path / "store" / "ex-1.journal"

    def commit(new: dict[str, Any]) -> int:
        before = journal.stat().st_size
        store.edit("ex-1", lambda stored, now: attrs.evolve(stored, agent_tasks=(new,)))
        return journal.stat().st_size - before

    appended = dict(raw)
    appended["inner_observations"] = [
        *raw["inner_observations"],
        ms.storage._seam.unstructure(obs("x", "o")),
    ]
    appended["inner_completed"] = [*raw["inner_completed"], "x"]
    one_appended = commit(appended)
    replaced = dict(appended)
    inner = list(appended["inner_observations"])
    inner[5] = ms.storage._seam.unstructure(obs("i5", "ran again"))
    replaced["inner_observations"] = inner
    one_replaced = commit(replaced)
    assert one_replaced < 4 * one_appended, (one_appended, one_replaced)
    fresh = FileStore(tmp_path / "store").get("ex-1")
    assert fresh is not None
    assert encoded(fresh.agent_tasks) == encoded((replaced,))
