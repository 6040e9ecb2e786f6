"""Property: whatever a run does to its workers, worker tasks and trail (records replaced,
appended, removed, the oldest trail entries dropped, ids repeated, records that do not
parse), the changes ``diff`` makes read back exactly what was committed, both as a journal
replays them (files) and as rows ordered by position (SQLite, PostgreSQL)."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.storage._journal.fold import Folded, fold
from mainspring.storage._journal.model import PARTS, Base, diff, snapshot_changes
from mainspring.storage._stored_form import stored_raw
from tests._examples import examples


class Rows:
    """Part rows as the SQL backends keep them: key -> (pos, body), read in pos order."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.window: list[Any] = []
        self.parts: dict[str, dict[str, tuple[int, Any]]] = {p: {} for p in PARTS}

    def apply(self, changes: list[Any]) -> None:
        for change in changes:
            op = change[0]
            if op == "head":
                self.head = change[1]
            elif op == "put":
                _, part, key, pos, value = change
                rows = self.parts[part]
                rows[key] = (rows[key][0] if key in rows else pos, value)
            elif op == "reset":
                self.parts[change[1]] = {k: (i, v) for i, (k, v) in enumerate(change[2])}
            elif op == "drop":
                for key in change[2]:
                    del self.parts[change[1]][key]
            elif op == "ckpts":
                self.window = change[1]

    def read(self) -> ms.storage.Execution:
        folded = Folded(head=self.head, checkpoints=self.window)
        for part, rows in self.parts.items():
            ordered = sorted(rows.items(), key=lambda item: item[1][0])
            folded.parts[part] = {key: value for key, (_, value) in ordered}
        return fold(folded, kind="test")


def worker(n: int, status: str = "assigned") -> dict[str, Any]:
    return {
        "v": 1,
        "id": f"w-{n}",
        "task_id": "t",
        "step_id": "s",
        "agent_id": "a",
        "status": status,
        "created_at": 1.0,
        "updated_at": 1.0,
    }


def entry(seq: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "at": 1.0,
        "worker_id": "w-1",
        "generation": 1,
        "event": "beat",
        "status": "running",
        "detail": "",
    }


step = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 6)),
    st.tuples(st.just("touch"), st.integers(0, 6), st.sampled_from(["running", 1, True])),
    st.tuples(st.just("remove"), st.integers(0, 6)),
    st.tuples(st.just("bad"), st.integers(0, 6)),
    st.tuples(st.just("trail"), st.integers(1, 9), st.integers(3, 12)),
    st.tuples(st.just("task"), st.integers(0, 3)),
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.lists(step, min_size=1, max_size=4), min_size=1, max_size=12))
def test_diffs_of_worker_parts_read_back_exactly(commits: list[list[Any]]) -> None:
    version = ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)
    base = Base.of(version, 1, window=[])
    rows = Rows()
    rows.apply(snapshot_changes(version))
    journal = Folded()
    journal.apply(snapshot_changes(version), kind="test")
    seq = 0
    for ops in commits:
        # As stored: each entry's stored form (a record's, or what did not parse).
        workers = [stored_raw(w) for w in version.workers]
        trail = [stored_raw(e) for e in version.worker_trail]
        tasks = [stored_raw(t) for t in version.worker_tasks]
        for op in ops:
            if op[0] == "add":
                workers.append(worker(op[1]))  # may repeat an id
            elif op[0] == "touch" and workers:
                index = op[1] % len(workers)
                workers[index] = {**workers[index], "status": op[2]}
            elif op[0] == "remove" and workers:
                del workers[op[1] % len(workers)]
            elif op[0] == "bad":
                workers.insert(min(op[1], len(workers)), {"no": "id"})
            elif op[0] == "trail":
                for _ in range(op[1]):
                    seq += 1
                    trail.append(entry(seq))
                trail = trail[-op[2] :]
            elif op[0] == "task":
                tasks.append({"v": 1, "id": f"t-{op[1]}", "step_id": "s", "updated_at": 1.0})
        new = attrs.evolve(
            version, workers=tuple(workers), worker_tasks=tuple(tasks), worker_trail=tuple(trail)
        )
        changes = diff(base, new)
        rows.apply(changes)
        journal.apply(changes, kind="test")
        base.advance(new, changes)
        for got in (rows.read(), fold(journal, kind="test")):
            assert got.workers == new.workers
            assert got.worker_tasks == new.worker_tasks
            assert got.worker_trail == new.worker_trail
            # types too (True is not 1): as stored
            assert [list(map(type, stored_raw(w).values())) for w in got.workers] == [
                list(map(type, stored_raw(w).values())) for w in new.workers
            ]
        version = new
