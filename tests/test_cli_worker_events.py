"""``mainspring events`` shows worker transitions (#17): one line each with the worker, its
step and task, its generation, its status and the reason code; ``--json`` has the fields."""

from __future__ import annotations

import json
from pathlib import Path

import attrs

import mainspring as ms
from mainspring.storage import SqliteStore, WorkerRecord

from ._cli_kit import run_cli


def test_events_prints_worker_moves(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path)
    worker = WorkerRecord(
        id="w1", task_id="t1", step_id="s1", agent_id="coder", created_at=1.0, updated_at=1.0
    )
    raw = ms.storage._seam.unstructure(worker)
    assert store.create(
        ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0, workers=(raw,))
    )
    moved = ms.storage._seam.unstructure(attrs.evolve(worker, generation=2, reason="takeover"))
    assert store.edit("ex-1", lambda stored, now: attrs.evolve(stored, workers=(moved,)))
    store.close()
    code, out = run_cli("events", "ex-1", "--store", str(path))
    assert code == 0
    lines = [line for line in out.splitlines() if "  worker " in line]
    assert len(lines) == 2
    assert lines[0].split()[2:] == [
        "worker", "assigned", "worker", "w1", "step", "s1", "task", "t1", "generation", "1"
    ]  # fmt: skip
    assert lines[1].endswith("generation 2  reason takeover")
    code, out = run_cli("events", "ex-1", "--json", "--store", str(path))
    entries = [json.loads(line) for line in out.splitlines()]
    (last,) = [e for e in entries if e["kind"] == "worker" and e["generation"] == 2]
    assert last["worker_id"] == "w1"
    assert last["status"] == "assigned"
    assert last["reason"] == "takeover"
