"""An execution's entries read one by one (agent tasks, workers, worker tasks, the trail) as
read from a store: held as stored, each parsed once, when first looked at, into its record
or an ``Unreadable`` (E8), and written back as read whether it was looked at or not (E7).
For every reader they are the tuple of their records."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

import mainspring as ms
from mainspring.storage import Execution, Unreadable
from mainspring.storage._codec import canonical_json, structure, unstructure
from mainspring.storage._entries import Entries
from mainspring.storage._records import parse_agent_tasks
from mainspring.storage._seam import AppendOnly, Vector
from mainspring.storage._workers import parse_trail, parse_worker_tasks, parse_workers


def _task(task_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "id": task_id,
        "execution_id": "ex-1",
        "agent_id": "a",
        "step_id": f"s-{task_id}",
        "state": "completed",
        "created_at": 1.0,
        "updated_at": 2.0,
        "inner_completed": ["i0"],
        "inner_observations": [{"step_id": "i0", "tool": "t", "ok": True, "output": [1, 2.5]}],
        **extra,
    }


_GOOD_TASK = _task("t-1")
_BAD_TASK = _task("t-2", calls_used=1_000_001)  # E8: a counter out of range
_GOOD_WORKER = {
    "v": 1,
    "id": "w-1",
    "task_id": "t-1",
    "step_id": "s-t-1",
    "agent_id": "a",
    "status": "running",
    "created_at": 1.0,
    "updated_at": 2.0,
}
_BAD_WORKER = {**_GOOD_WORKER, "id": "w-2", "v": 2}  # E8: a version other than 1
_GOOD_WTASK = {"v": 1, "id": "t-1", "step_id": "s-t-1", "state": "running", "updated_at": 2.0}
_BAD_WTASK = {**_GOOD_WTASK, "id": "t-2", "bogus": True}  # E8: an unknown key
_GOOD_TRAIL = {
    "seq": 1,
    "at": 1.0,
    "worker_id": "w-1",
    "generation": 1,
    "event": "started",
    "status": "running",
}
_BAD_TRAIL = {**_GOOD_TRAIL, "seq": 2, "status": "sleeping"}  # E8: no such state
_PARTS: dict[str, list[dict[str, Any]]] = {
    "agent_tasks": [_GOOD_TASK, _BAD_TASK],
    "workers": [_GOOD_WORKER, _BAD_WORKER],
    "worker_tasks": [_GOOD_WTASK, _BAD_WTASK],
    "worker_trail": [_GOOD_TRAIL, _BAD_TRAIL],
}
_KINDS = {
    "agent_tasks": ms.storage.AgentTaskRecord,
    "workers": ms.storage.WorkerRecord,
    "worker_tasks": ms.storage.WorkerTask,
    "worker_trail": ms.storage.TrailEntry,
}
_STORES: dict[str, Callable[[Path], Any]] = {
    "file": lambda where: ms.storage.FileStore(where / "files"),
    "sqlite": lambda where: ms.storage.SqliteStore(where / "store.sqlite3"),
}


def _execution(**fields: Any) -> ms.storage.Execution:
    return ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=2.0, **fields)


def _stored(where: Path, backend: str) -> Any:
    store = _STORES[backend](where)
    assert store.create(_execution(**{k: tuple(v) for k, v in _PARTS.items()}))
    return _STORES[backend](where)  # a fresh store: nothing of the write is cached


def _held(execution: ms.storage.Execution) -> dict[str, Entries[Any]]:
    held = {field: getattr(execution, field) for field in _PARTS}
    assert all(type(entries) is Entries for entries in held.values())
    return held


@pytest.mark.parametrize("backend", list(_STORES))
def test_a_listing_parses_no_entry_until_one_is_looked_at(tmp_path: Path, backend: str) -> None:
    store = _stored(tmp_path, backend)
    listing = store.list()
    (execution,) = listing.executions
    held = _held(execution)
    # What a listing shows (status, goal, counts) parses nothing.
    assert execution.status == "planned"
    assert [len(entries) for entries in held.values()] == [2, 2, 2, 2]
    assert [entries.parsed() for entries in held.values()] == [0, 0, 0, 0]
    # Looking at one entry parses that one, once.
    first = execution.agent_tasks[0]
    assert type(first) is ms.storage.AgentTaskRecord
    assert held["agent_tasks"].parsed() == 1
    assert execution.agent_tasks[0] is first
    assert execution.agent_tasks[-2] is first
    assert held["agent_tasks"].parsed() == 1
    assert [entries.parsed() for entries in list(held.values())[1:]] == [0, 0, 0]


@pytest.mark.parametrize("backend", list(_STORES))
def test_E8_an_unreadable_entry_of_a_listed_execution_is_reported_and_counted(
    tmp_path: Path, backend: str
) -> None:
    store = _stored(tmp_path, backend)
    (execution,) = store.list().executions
    for field, kind in _KINDS.items():
        good, bad = getattr(execution, field)
        assert type(good) is kind
        assert type(bad) is Unreadable  # fails closed on its own, never coerced
        assert bad.raw == _PARTS[field][1]
        assert bad.reason
    assert [u.key for u in execution.unreadable_tasks] == ["t-2"]
    assert [t.id for t in execution.task_records] == ["t-1"]
    tasks, dropped = parse_agent_tasks(execution)
    assert ([t.id for t in tasks], dropped) == (["t-1"], 1)
    for parse, field in (
        (parse_workers, "workers"),
        (parse_worker_tasks, "worker_tasks"),
        (parse_trail, "worker_trail"),
    ):
        parsed, dropped = parse(getattr(execution, field))
        assert (len(parsed), dropped) == (1, 1)


@pytest.mark.parametrize("backend", list(_STORES))
def test_E7_entries_never_looked_at_are_written_back_byte_equal(
    tmp_path: Path, backend: str
) -> None:
    store = _stored(tmp_path, backend)
    execution = store.get("ex-1")
    assert execution is not None
    held = _held(execution)
    # A commit that changes the head only, and a copy of the whole run to another store:
    # neither parses an entry, and both write each one as it was read.
    assert store.edit("ex-1", lambda stored, now: attrs.evolve(stored, goal="g2")) is not None
    copy_store = _STORES[backend](tmp_path / "copy")
    assert copy_store.create(execution)
    assert [entries.parsed() for entries in held.values()] == [0, 0, 0, 0]
    for where in (_STORES[backend](tmp_path), _STORES[backend](tmp_path / "copy")):
        again = where.get("ex-1")
        assert again is not None
        plain = unstructure(again)
        for field, raws in _PARTS.items():
            assert canonical_json(plain[field]) == canonical_json(raws)
    # Looked at or not, an entry is written as read.
    assert execution.agent_tasks[1].raw == _BAD_TASK  # type: ignore[union-attr]
    assert canonical_json(unstructure(execution)["agent_tasks"]) == canonical_json(
        _PARTS["agent_tasks"]
    )


def test_an_evolved_execution_keeps_its_entries_unparsed() -> None:
    execution = _execution(**{k: tuple(v) for k, v in _PARTS.items()})
    held = _held(execution)
    evolved = attrs.evolve(execution, goal="g2", status="running")
    for field, entries in held.items():
        assert getattr(evolved, field) is entries
    assert [entries.parsed() for entries in held.values()] == [0, 0, 0, 0]
    # Records among stored objects (an execution built from both) are not held as read.
    mixed = _execution(agent_tasks=(execution.agent_tasks[0], _GOOD_TASK))
    assert type(mixed.agent_tasks) is tuple
    assert [type(t) for t in mixed.agent_tasks] == [ms.storage.AgentTaskRecord] * 2


def test_entries_read_as_the_tuple_of_their_records() -> None:
    execution = _execution(agent_tasks=(_GOOD_TASK, _BAD_TASK, _task("t-3")))
    entries = execution.agent_tasks
    assert type(entries) is Entries
    records = tuple(entries)
    assert len(records) == 3
    assert tuple(iter(entries)) == records
    assert all(a is b for a, b in zip(entries, records, strict=True))  # the same objects
    assert entries[1:] == records[1:]
    assert type(entries[1:]) is tuple
    assert entries[::-1] == records[::-1]
    assert tuple(reversed(entries)) == records[::-1]
    assert entries + (records[0],) == (*records, records[0])  # noqa: RUF005 (its __add__)
    assert (records[0], *entries) == (records[0], *records)
    assert () + entries == records  # noqa: RUF005 (its __radd__)
    assert entries * 2 == records * 2
    assert records[2] in entries
    assert entries.index(records[2]) == 2
    assert entries.count(records[1]) == 1
    assert repr(entries) == repr(records)
    assert bool(entries)
    with pytest.raises(IndexError):
        entries[3]
    assert pickle.loads(pickle.dumps(entries)) == records
    assert copy.copy(entries) is entries
    assert copy.deepcopy(entries) == records
    with pytest.raises(TypeError):
        hash(entries)  # as the tuple: the records' outputs are unhashable


def test_equality_and_hashing_are_the_tuples() -> None:
    plain = {**_GOOD_TASK, "inner_completed": [], "inner_observations": []}
    entries = _execution(agent_tasks=(plain,)).agent_tasks
    records = tuple(_execution(agent_tasks=(plain,)).agent_tasks)  # parsed apart
    assert type(entries) is Entries
    assert entries == records
    assert records == entries
    assert entries != list(records)
    assert (entries == list(records)) is False
    assert entries == Vector(records)
    assert Vector(records) == entries
    assert entries == AppendOnly(records)
    assert hash(entries) == hash(records)
    assert entries <= records
    assert not (entries < records)
    # Compared with another read of the same stored objects: equal, with records equal too.
    again = _execution(agent_tasks=(dict(plain),)).agent_tasks
    assert entries == again
    assert entries[0] == again[0]
    assert hash(entries[0]) == hash(again[0])
    assert entries != _execution(agent_tasks=({**plain, "attempt": 2},)).agent_tasks
    # A length that differs is unequal without parsing any entry.
    fresh = _execution(agent_tasks=(_GOOD_TASK, _BAD_TASK)).agent_tasks
    assert fresh != ()
    assert fresh != records
    assert fresh.parsed() == 0  # type: ignore[attr-defined]


def test_executions_read_back_equal_what_was_written(tmp_path: Path) -> None:
    written = _execution(**{k: tuple(v) for k, v in _PARTS.items()})
    as_records = attrs.evolve(
        written, **{field: tuple(getattr(written, field)) for field in _PARTS}
    )
    assert all(type(getattr(as_records, field)) is tuple for field in _PARTS)
    store = _stored(tmp_path, "sqlite")
    read = store.get("ex-1")
    assert read == as_records
    assert as_records == read
    assert read == written


def test_an_entry_parsed_by_two_readers_at_once_is_kept_once() -> None:
    """Two threads may parse the same entry at the same time: the first kept is the one both
    get, so an entry is one object whoever read it."""
    entries: Entries[object] | None = None
    kept = object()

    def read(raw: dict[str, Any]) -> object:
        assert entries is not None
        # Another reader finishes first while this one is parsing.
        assert entries._done.setdefault(0, kept) is kept
        return object()

    entries = Entries(({"n": 1},), read)
    assert entries[0] is kept
    assert next(iter(entries)) is kept
    assert entries.parsed() == 1


def test_E5_redaction_walks_entries_never_looked_at() -> None:
    secret = "hunter2-very-secret"
    task = _task("t-1", pending_question=f"the password is {secret}")
    execution = _execution(agent_tasks=(task,))
    masked = ms.storage.redact(execution, secrets=(secret,))
    (record,) = masked.agent_tasks
    assert type(record) is ms.storage.AgentTaskRecord
    assert secret not in (record.pending_question or "")
    assert record.pending_question != task["pending_question"]


def test_E8_an_item_that_is_not_an_object_fails_the_whole_record() -> None:
    with pytest.raises(ms.storage.RecordError, match=r"agent_tasks\[1\]"):
        structure({**unstructure(_execution()), "agent_tasks": [_GOOD_TASK, 5]}, Execution)
