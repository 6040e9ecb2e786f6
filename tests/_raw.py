"""Reaching behind a store's checks, for tests that must plant what the library would never
write: a record in an older format, a field out of range, bytes that are not a record.

Layout-aware (storage v2): a directory is a FileStore (``<id>.journal``), anything else a
SqliteStore database.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson

import mainspring as ms
from mainspring.storage._seam import encode_frame

_TABLES = (
    "plan_steps",
    "observations",
    "completed_steps",
    "agent_tasks",
    "inner_observations",
    "inner_completed",
)


def _store(path: Path) -> Any:
    if path.is_dir():
        return ms.storage.FileStore(path)
    return ms.storage.SqliteStore(path)


def read_raw(path: str | Path, execution_id: str) -> dict[str, Any]:
    """The execution as plain data (what ``write_raw`` takes back)."""
    store = _store(Path(path))
    try:
        execution = store.get(execution_id)
    finally:
        if isinstance(store, ms.storage.SqliteStore):
            store.close()
    assert execution is not None, execution_id
    raw: dict[str, Any] = ms.storage._seam.unstructure(execution)
    return raw


def _changes(raw: dict[str, Any]) -> list[Any]:
    head = {
        key: value
        for key, value in raw.items()
        if key not in ("observations", "completed_steps", "agent_tasks", "checkpoints")
    }
    plan = raw.get("plan")
    steps: list[Any] = []
    if isinstance(plan, dict):
        steps = plan.get("steps", [])
        head["plan"] = {key: value for key, value in plan.items() if key != "steps"}
    return [
        ["head", head],
        ["reset", "steps", [[str(step.get("id")), step] for step in steps]],
        ["reset", "obs", [[str(o.get("step_id")), o] for o in raw.get("observations", [])]],
        ["reset", "done", [[str(s), s] for s in raw.get("completed_steps", [])]],
        [
            "reset",
            "tasks",
            [[f"#{i}", {"whole": task}] for i, task in enumerate(raw.get("agent_tasks", []))],
        ],
        ["reset", "inner_obs", []],
        ["reset", "inner_done", []],
        ["ckpts", raw.get("checkpoints", [])],
    ]


def write_raw(path: str | Path, execution_id: str, raw: dict[str, Any]) -> None:
    """Store ``raw`` as execution ``execution_id``, unchecked, replacing what was there."""
    path = Path(path)
    changes = _changes(raw)
    if path.is_dir():
        payload = orjson.dumps({"seq": 1, "changes": changes, "events": []})
        (path / f"{execution_id}.journal").write_bytes(encode_frame(payload))
        return
    db = sqlite3.connect(path)
    try:
        for table in ("executions", *_TABLES):
            column = "id" if table == "executions" else "execution_id"
            db.execute(f"DELETE FROM {table} WHERE {column} = ?", (execution_id,))
        head = orjson.dumps(changes[0][1])
        db.execute(
            "INSERT INTO executions (id, seq, status, updated_at, head, checkpoints) "
            "VALUES (?, 1, ?, ?, ?, ?)",
            (
                execution_id,
                str(raw.get("status", "planned")),
                float(raw.get("updated_at", 0.0)),
                head,
                orjson.dumps(changes[-1][1]),
            ),
        )
        tables = {"steps": "plan_steps", "obs": "observations", "done": "completed_steps"}
        tables["tasks"] = "agent_tasks"
        for change in changes[1:5]:
            table = tables[change[1]]
            for pos, (key, value) in enumerate(change[2]):
                db.execute(
                    f"INSERT INTO {table} (execution_id, key, pos, body) VALUES (?, ?, ?, ?)",
                    (execution_id, key, pos, orjson.dumps(value)),
                )
        db.commit()
    finally:
        db.close()


def write_garbage(path: str | Path, execution_id: str, data: bytes) -> None:
    """Store ``data`` as the whole of execution ``execution_id``: a journal frame that is
    intact but holds ``data`` (files), a header row whose head is ``data`` (SQLite)."""
    path = Path(path)
    if path.is_dir():
        (path / f"{execution_id}.journal").write_bytes(encode_frame(data))
        return
    db = sqlite3.connect(path)
    try:
        db.execute(
            "INSERT OR REPLACE INTO executions (id, seq, status, updated_at, head, checkpoints) "
            "VALUES (?, 1, 'planned', 0, ?, '[]')",
            (execution_id, data),
        )
        db.commit()
    finally:
        db.close()


def stored_bytes(path: str | Path) -> bytes:
    """Every byte the store holds about its executions (to look for what must not be there)."""
    path = Path(path)
    if path.is_dir():
        return b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())
    db = sqlite3.connect(path)
    try:
        chunks = [bytes(row[0]) for row in db.execute("SELECT head FROM executions")]
        chunks += [bytes(row[0]) for row in db.execute("SELECT checkpoints FROM executions")]
        for table in (*_TABLES, "events"):
            chunks += [bytes(row[0]) for row in db.execute(f"SELECT body FROM {table}")]
    finally:
        db.close()
    return b"".join(chunks)
