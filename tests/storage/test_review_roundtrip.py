"""Review of issue 13 (storage v2): a fresh store on the same path reads back exactly the
execution that was committed, whatever sequence of edits made it (the diff/fold model)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.storage import Execution, FileStore, Observation, PlanStep, SqliteStore
from mainspring.storage._backends.file import store as file_module
from mainspring.storage._seam import Checkpoint
from mainspring.storage._stored_form import stored_raw
from tests._examples import SHRINKING, examples

IDS = ["a", "b", "c", "d", "e", "f"]


def _open(kind: str, root: Path) -> Any:
    if kind == "file":
        return FileStore(root / "store")
    return SqliteStore(root / "store" / "mainspring.db")


def _close(store: Any) -> None:
    if isinstance(store, SqliteStore):
        store.close()


def _fresh_read(kind: str, root: Path, execution_id: str) -> Execution | None:
    store = _open(kind, root)
    try:
        return store.get(execution_id)
    finally:
        _close(store)


def _step(step_id: str, status: str = "pending") -> PlanStep:
    return PlanStep(id=step_id, tool="t", status=status)  # type: ignore[arg-type]


def _obs(step_id: str, n: int = 0) -> Observation:
    return Observation(step_id=step_id, tool="t", ok=True, output=n)


def _task(task_id: Any, n_inner: int = 0, state: str = "running") -> dict[str, Any]:
    return {
        "v": 1,
        "id": task_id,
        "state": state,
        "inner_observations": [
            {"step_id": f"i{k}", "ok": True, "output": k} for k in range(n_inner)
        ],
        "inner_completed": [f"i{k}" for k in range(n_inner)],
    }


def _ckpt(at: float, done: tuple[str, ...]) -> Checkpoint:
    return Checkpoint(at=at, plan_version=1, completed_steps=done)


# Each edit takes the last committed execution and a draw, and returns the next one; it
# reuses the objects it does not touch, as the runtime does.
Edit = Callable[[Execution, Any], Execution]


def e_step_replace(ex: Execution, d: Any) -> Execution:
    steps = list(ex.plan.steps)  # type: ignore[union-attr]
    if not steps:
        return ex
    i = d.draw(st.integers(0, len(steps) - 1))
    steps[i] = attrs.evolve(steps[i], status=d.draw(st.sampled_from(["running", "succeeded"])))
    return attrs.evolve(ex, plan=attrs.evolve(ex.plan, steps=tuple(steps)))


def e_step_append(ex: Execution, d: Any) -> Execution:
    known = {s.id for s in ex.plan.steps}  # type: ignore[union-attr]
    free = [i for i in IDS if i not in known]
    if not free:
        return ex
    new = _step(d.draw(st.sampled_from(free)))
    return attrs.evolve(ex, plan=attrs.evolve(ex.plan, steps=(*ex.plan.steps, new)))  # type: ignore[union-attr]


def e_step_remove_or_reorder(ex: Execution, d: Any) -> Execution:
    steps = list(ex.plan.steps)  # type: ignore[union-attr]
    if d.draw(st.booleans()) and steps:
        del steps[d.draw(st.integers(0, len(steps) - 1))]
    else:
        steps = d.draw(st.permutations(steps))
    return attrs.evolve(ex, plan=attrs.evolve(ex.plan, steps=tuple(steps)))


def e_replan(ex: Execution, d: Any) -> Execution:
    ids = d.draw(st.lists(st.sampled_from(IDS), unique=True, max_size=5))
    plan = attrs.evolve(ex.plan, steps=tuple(_step(i) for i in ids), version=ex.plan.version + 1)  # type: ignore[union-attr]
    return attrs.evolve(ex, plan=plan, plan_version=ex.plan_version + 1)


def e_obs(ex: Execution, d: Any) -> Execution:
    obs = list(ex.observations)
    what = d.draw(st.sampled_from(["append", "replace", "remove", "reorder"]))
    if what == "append":
        known = {o.step_id for o in obs}
        free = [i for i in IDS if i not in known]
        if free:
            obs.append(_obs(d.draw(st.sampled_from(free)), d.draw(st.integers(0, 9))))
    elif what == "replace" and obs:
        i = d.draw(st.integers(0, len(obs) - 1))
        obs[i] = attrs.evolve(obs[i], output=d.draw(st.integers(10, 99)))
    elif what == "remove" and obs:
        del obs[d.draw(st.integers(0, len(obs) - 1))]
    else:
        obs = d.draw(st.permutations(obs))
    return attrs.evolve(ex, observations=tuple(obs))


def e_done(ex: Execution, d: Any) -> Execution:
    done = list(ex.completed_steps)
    what = d.draw(st.sampled_from(["append", "remove", "reorder"]))
    if what == "append":
        free = [i for i in IDS if i not in done]
        if free:
            done.append(d.draw(st.sampled_from(free)))
    elif what == "remove" and done:
        del done[d.draw(st.integers(0, len(done) - 1))]
    else:
        done = d.draw(st.permutations(done))
    return attrs.evolve(ex, completed_steps=tuple(done))


def e_tasks(ex: Execution, d: Any) -> Execution:
    tasks = [stored_raw(t) for t in ex.agent_tasks]
    what = d.draw(
        st.sampled_from(
            [
                "append",
                "append_bad",
                "head",
                "grow",
                "rewrite",
                "remove",
                "reorder",
                "fix",
                "spoil",
                "twin",
            ]
        )
    )
    ids = {t.get("id") for t in tasks}
    if what == "append":
        free = [f"t{i}" for i in range(4) if f"t{i}" not in ids]
        if free:
            tasks.append(_task(d.draw(st.sampled_from(free)), d.draw(st.integers(0, 3))))
    elif what == "append_bad":
        # Records that do not parse: a bad id, an id of another type, inner steps that
        # repeat, inner steps that are not lists.
        bad = d.draw(
            st.sampled_from(
                [
                    _task("bad id"),
                    _task(7),
                    {**_task("tb", 1), "inner_completed": ["x", "x"]},
                    {**_task("tc"), "inner_observations": None},
                ]
            )
        )
        tasks.append(bad)
    elif what == "spoil" and tasks:
        # A task replaced in place by one that can no longer be stored split.
        i = d.draw(st.integers(0, len(tasks) - 1))
        raw = tasks[i]
        tasks[i] = d.draw(
            st.sampled_from(
                [
                    {**raw, "inner_completed": ["z", "z"]},
                    {**raw, "inner_observations": [1, 2]},
                    {**raw, "inner_observations": [{"step_id": "bad id"}]},
                    {k: v for k, v in raw.items() if k != "id"},
                ]
            )
        )
    elif what == "twin" and tasks:
        tasks.append(dict(tasks[d.draw(st.integers(0, len(tasks) - 1))]))  # a repeated id
    elif what == "fix" and tasks:
        i = d.draw(st.integers(0, len(tasks) - 1))
        del tasks[i]
    elif tasks and what in ("head", "grow", "rewrite"):
        i = d.draw(st.integers(0, len(tasks) - 1))
        raw = tasks[i]
        if what == "head":
            tasks[i] = {**raw, "state": d.draw(st.sampled_from(["queued", "completed"]))}
        elif what == "grow" and type(raw.get("inner_observations")) is list:
            n = len(raw["inner_observations"])
            k = d.draw(st.integers(1, 2))
            tasks[i] = {
                **raw,
                "inner_observations": [
                    *raw["inner_observations"],
                    *({"step_id": f"j{n + m}", "ok": True} for m in range(k)),
                ],
                "inner_completed": [*raw["inner_completed"], *(f"j{n + m}" for m in range(k))],
            }
        elif what == "rewrite" and type(raw.get("inner_observations")) is list:
            inner = list(raw["inner_observations"])
            inner = d.draw(st.permutations(inner))
            if inner and type(inner[0]) is dict and d.draw(st.booleans()):
                # (a spoilt task's inner steps may not be records: those are kept as they are)
                inner[0] = {**inner[0], "output": "rewritten"}
            if inner and d.draw(st.booleans()):
                inner.pop()
            tasks[i] = {**raw, "inner_observations": list(inner)}
    elif what == "remove" and tasks:
        del tasks[d.draw(st.integers(0, len(tasks) - 1))]
    else:
        tasks = d.draw(st.permutations(tasks))
    return attrs.evolve(ex, agent_tasks=tuple(tasks))


def e_ckpt(ex: Execution, d: Any) -> Execution:
    same = d.draw(st.booleans())
    done = ex.completed_steps if same else tuple(d.draw(st.permutations(ex.completed_steps)))
    window = (*ex.checkpoints, _ckpt(float(d.draw(st.integers(0, 10**6))), done))[-5:]
    if d.draw(st.integers(0, 5)) == 0:
        window = window[1:]  # the window can also shrink
    return attrs.evolve(ex, checkpoints=window)


def e_head(ex: Execution, d: Any) -> Execution:
    return attrs.evolve(ex, calls_used=ex.calls_used + 1, updated_at=ex.updated_at + 1)


EDITS: list[Edit] = [
    e_step_replace,
    e_step_append,
    e_step_remove_or_reorder,
    e_replan,
    e_obs,
    e_done,
    e_tasks,
    e_ckpt,
    e_head,
]


def _start() -> Execution:
    plan = ms.storage.Plan(id="p", goal="g", steps=(_step("a"), _step("b")))
    return Execution(
        id="ex-1",
        goal="g",
        status="running",
        plan=plan,
        plan_version=1,
        created_at=1.0,
        updated_at=1.0,
    )


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@pytest.mark.parametrize("kind", ["file", "sqlite"])
@pytest.mark.parametrize("compact_at", [None, 600])
@settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_fresh_store_reads_back_every_committed_version(
    kind: str, compact_at: int | None, data: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compact_at is not None:
        if kind == "sqlite":
            return
        monkeypatch.setattr(file_module, "_COMPACT_AT", compact_at)
        monkeypatch.setattr(file_module, "_CHUNK", 300)  # snapshots of many frames
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        writers = [_open(kind, root), _open(kind, root)]  # two store objects, one path
        try:
            ex = _start()
            assert writers[0].create(ex)
            assert _fresh_read(kind, root, ex.id) == ex
            for _ in range(data.draw(st.integers(1, 25))):
                edit = data.draw(st.sampled_from(EDITS))
                target = edit(ex, data)
                writer = writers[data.draw(st.integers(0, 1))]
                written = writer.edit(ex.id, lambda stored, now, target=target: target)
                assert written is not None
                ex = written
                assert _fresh_read(kind, root, ex.id) == ex, edit.__name__
        finally:
            for writer in writers:
                _close(writer)
