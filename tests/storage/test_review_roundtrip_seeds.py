"""Review of storage v2 (issue 13): random edits (repeated keys, parts switching between
positional and keyed, tasks split and whole, inner steps appended, re-run, cut) through two
store objects on one path; a fresh store reads back what was committed, compared by its
encoding. (Held up, apart from what review13_journal.py shows, excluded here.)"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

import mainspring as ms
from mainspring.storage import FileStore, SqliteStore
from mainspring.storage._backends.file import store as file_module
from mainspring.storage._stored_form import stored_raw

S = ms.storage._seam  # every storage name, the internal ones included


def enc(value: Any) -> bytes:
    return orjson.dumps(S.unstructure(value), option=orjson.OPT_SORT_KEYS)


def obs(rng: random.Random, step: str) -> Any:
    return S.Observation(step_id=step, ok=True, output=f"o{rng.randrange(10**9)}")


def task(rng: random.Random, tid: Any, inner: list[str], done: list[str]) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.1:
        return {"id": tid, "state": "running"}  # does not parse
    record = S.AgentTaskRecord(
        id=tid if type(tid) is str else "t", agent_id="ag", step_id="s1", execution_id="ex-1",
        created_at=1.0, updated_at=float(rng.randrange(100)),
        inner_completed=tuple(done),
        inner_observations=tuple(obs(rng, n) for n in inner),
        state=rng.choice(["created", "running", "completed"]),
    )  # fmt: skip
    raw: dict[str, Any] = S.unstructure(record)
    if type(tid) is not str:
        raw["id"] = tid
    return raw


def edit(rng: random.Random, ex: Any) -> Any:
    names = [f"s{i}" for i in range(6)]
    choice = rng.randrange(12)
    if choice in (9, 10, 11) and ex.agent_tasks:
        tasks = [stored_raw(t) for t in ex.agent_tasks]
        i = rng.randrange(len(tasks))
        raw = dict(tasks[i])
        if choice == 9 and raw.get("inner_observations"):  # an inner step re-run in place
            inner = list(raw["inner_observations"])
            j = rng.randrange(len(inner))
            inner[j] = S.unstructure(obs(rng, inner[j]["step_id"]))
            raw["inner_observations"] = inner
        # (choice 10, a task replaced by a record without its inner fields: see
        # review13_journal.py; it reads back with them added, so it is left out here)
        else:  # inner steps cut short
            for field in ("inner_observations", "inner_completed"):
                if field in raw:
                    raw[field] = raw[field][: rng.randrange(len(raw[field]) + 1)]
        tasks[i] = raw
        return attrs.evolve(ex, agent_tasks=tuple(tasks))
    choice = min(choice, 8)
    if choice == 0:  # append an observation (maybe repeating a key)
        return attrs.evolve(ex, observations=(*ex.observations, obs(rng, rng.choice(names))))
    if choice == 1:  # replace one in place
        if not ex.observations:
            return ex
        items = list(ex.observations)
        i = rng.randrange(len(items))
        items[i] = obs(rng, items[i].step_id)
        return attrs.evolve(ex, observations=tuple(items))
    if choice == 2:  # drop / reorder
        items = list(ex.observations)
        rng.shuffle(items)
        return attrs.evolve(ex, observations=tuple(items[: rng.randrange(len(items) + 1)]))
    if choice == 3:  # completed steps: append, maybe repeat, or cut
        done = list(ex.completed_steps)
        if rng.random() < 0.3:
            done = done[: rng.randrange(len(done) + 1)]
        else:
            done.append(rng.choice(names))
        return attrs.evolve(ex, completed_steps=tuple(done))
    if choice == 4:  # a checkpoint, often of the completed steps
        steps = ex.completed_steps if rng.random() < 0.7 else tuple(rng.sample(names, 2))
        ck = S.Checkpoint(at=float(rng.randrange(1000)), plan_version=1, completed_steps=steps)
        return attrs.evolve(ex, checkpoints=(*ex.checkpoints, ck)[-5:])
    if choice == 5:  # a task appended / an id repeated / not a string id (str only here)
        tid = rng.choice(["t1", "t2", "t3"])
        raw = task(
            rng, tid, rng.sample(names, rng.randrange(3)), rng.sample(names, rng.randrange(3))
        )
        return attrs.evolve(ex, agent_tasks=(*ex.agent_tasks, raw))
    if choice == 6:  # an inner step appended to a task
        if not ex.agent_tasks:
            return ex
        tasks = [stored_raw(t) for t in ex.agent_tasks]
        i = rng.randrange(len(tasks))
        raw = dict(tasks[i])
        if "inner_observations" in raw:
            name = rng.choice([*names, "x1", "x2", "x3"])
            raw["inner_observations"] = [*raw["inner_observations"], S.unstructure(obs(rng, name))]
            raw["inner_completed"] = [*raw["inner_completed"], name]
            raw["updated_at"] = float(rng.randrange(1000))
        tasks[i] = raw
        return attrs.evolve(ex, agent_tasks=tuple(tasks))
    if choice == 7:  # tasks dropped or reordered
        tasks = [stored_raw(t) for t in ex.agent_tasks]
        rng.shuffle(tasks)
        return attrs.evolve(ex, agent_tasks=tuple(tasks[: rng.randrange(len(tasks) + 1)]))
    # a plan replaced
    steps = tuple(
        S.PlanStep(
            id=n,
            tool="t",
            input={"k": rng.randrange(3)},
            status=rng.choice(["pending", "succeeded"]),
        )
        for n in rng.sample(names, rng.randrange(1, 5))
    )
    return attrs.evolve(ex, plan=S.Plan(id="p", goal="g", steps=steps), plan_version=1)


@pytest.mark.parametrize("kind", ["file", "sqlite"])
@pytest.mark.parametrize("seed", range(12))
def test_random_edits_read_back_as_committed(
    kind: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_module, "_COMPACT_AT", 3_000)
    monkeypatch.setattr(file_module, "_CHUNK", 400)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def open_() -> Any:
            return FileStore(root / "s") if kind == "file" else SqliteStore(root / "s" / "db")

        writers = [open_(), open_()]
        ex = S.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)
        assert writers[0].create(ex)
        for n in range(60):
            target = edit(rng, ex)
            target = attrs.evolve(target, updated_at=float(n + 2))
            written = rng.choice(writers).edit("ex-1", lambda s, now, t=target: t)
            assert written is not None
            ex = written
            fresh = open_()
            got = fresh.get("ex-1")
            if isinstance(fresh, SqliteStore):
                fresh.close()
            assert got is not None
            assert enc(got) == enc(ex), n
        for w in writers:
            if isinstance(w, SqliteStore):
                w.close()
