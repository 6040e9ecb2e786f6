"""What one commit of a run costs the store does not grow with the run: a long run's
commit compares and encodes what changed, as a short run's does (issue 29's lean step)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

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
