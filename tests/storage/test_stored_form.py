"""Entries read one by one (agent tasks; workers, worker tasks, the trail): parsed once, when
first looked at, into their record or an ``Unreadable`` holding what was stored (E8),
and written back exactly as read (E7). The stored bytes are those of before: a store written
by an earlier version reads back and is written back byte-equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.storage import Unreadable
from mainspring.storage._backends.file.frames import encode_frame
from mainspring.storage._codec import canonical_json, encode, structure, unstructure
from mainspring.storage._journal.model import snapshot_changes
from mainspring.storage._seam import AppendOnly, AppendOnlyList
from mainspring.storage._stored_form import stored_raw
from tests import strategies as strat
from tests._examples import SHRINKING, examples

_FIELDS = {
    "agent_tasks": (strat.agent_tasks, ms.storage.AgentTaskRecord),
    "workers": (strat.worker_records, ms.storage.WorkerRecord),
    "worker_tasks": (strat.worker_task_records, ms.storage.WorkerTask),
    "worker_trail": (strat.trail_records, ms.storage.TrailEntry),
}


def _execution(**fields: Any) -> ms.storage.Execution:
    return ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=2.0, **fields)


_SLOW_DRAWS = [HealthCheck.too_slow]  # records with plans and findings, on a loaded machine


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@pytest.mark.parametrize("field", list(_FIELDS))
@settings(max_examples=examples(60), deadline=None, suppress_health_check=_SLOW_DRAWS)
@given(data=st.data())
def test_E8_each_entry_is_its_record_or_kept_unreadable_and_round_trips(
    field: str, data: st.DataObject
) -> None:
    records, kind = _FIELDS[field]
    raws = data.draw(strat.entries(records))
    execution = _execution(**{field: raws})
    entries = getattr(execution, field)
    assert len(entries) == len(raws)  # E7: none dropped, none taken for absent
    for entry, raw in zip(entries, raws, strict=True):
        assert type(entry) in (kind, Unreadable)
        if type(entry) is Unreadable:
            assert entry.raw is raw  # kept as it was read, not a copy, not repaired
            assert entry.reason
        assert canonical_json(stored_raw(entry)) == canonical_json(raw)
    # Written as it was read; read back into the same entries; written again byte-equal.
    plain = unstructure(execution)
    assert canonical_json(plain.get(field, [])) == canonical_json(list(raws))
    again = structure(orjson.loads(encode(execution)), ms.storage.Execution)
    assert again == execution
    assert encode(again) == encode(execution)


@pytest.mark.timeout(SHRINKING)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=_SLOW_DRAWS)
@given(task=strat.agent_tasks, other=strat.unreadable_of(strat.agent_tasks))
def test_an_unreadable_compares_as_stored(task: Any, other: dict[str, Any]) -> None:
    [entry] = _execution(agent_tasks=(other,)).agent_tasks
    assert entry == Unreadable(raw=dict(other), key=entry.key, reason=entry.reason)
    assert entry != task


def test_an_unreadable_keeps_its_key_and_a_bounded_reason() -> None:
    raw = {"v": 1, "id": "t-1", "bogus": "x" * 5_000}
    [entry] = _execution(agent_tasks=(raw,)).agent_tasks
    assert type(entry) is Unreadable
    assert entry.key == "t-1"
    assert len(entry.reason) <= ms.storage._unreadable.MAX_REASON
    [trail] = _execution(worker_trail=({"seq": 7},)).worker_trail
    assert type(trail) is Unreadable
    assert trail.key == "7"
    [nameless] = _execution(workers=({"id": "../x"},)).workers
    assert type(nameless) is Unreadable
    assert nameless.key is None


def test_a_task_grown_by_an_inner_step_is_stored_from_the_form_before() -> None:
    """A save costs what it added: the stored form of a task whose inner steps grew from
    the version stored before shares that version's list (no copy, no walk)."""
    first = structure(
        unstructure(
            ms.storage.AgentTaskRecord(
                id="t-1",
                agent_id="a",
                step_id="s",
                execution_id="ex-1",
                created_at=1.0,
                updated_at=1.0,
            )
        ),
        ms.storage.AgentTaskRecord,
    )
    obs = ms.storage.Observation(step_id="i0", ok=True, output=1)
    v1 = attrs.evolve(
        first, inner_completed=AppendOnly(["i0"]), inner_observations=AppendOnly([obs])
    )
    raw1 = stored_raw(v1)
    assert raw1["inner_completed"] == ["i0"]
    obs2 = ms.storage.Observation(step_id="i1", ok=True, output=2)
    v2 = attrs.evolve(
        v1,
        inner_completed=v1.inner_completed.appended("i1"),
        inner_observations=v1.inner_observations.appended(obs2),
    )
    raw2 = stored_raw(v2, v1)
    assert type(raw2["inner_completed"]) is AppendOnlyList
    assert list(raw2["inner_completed"]) == ["i0", "i1"]
    assert canonical_json(raw2) == canonical_json(unstructure(v2))
    assert stored_raw(v2) is raw2  # made once
    # A version from the disk (its form as read) is no base: the next is made afresh.
    read = structure(orjson.loads(canonical_json(raw2)), ms.storage.AgentTaskRecord)
    assert stored_raw(read) is not raw2


# -- a store written before this version -----------------------------------------------------

_GOOD_TASK_HEAD = {
    "v": 1,
    "id": "t-1",
    "agent_id": "a",
    "step_id": "s1",
    "state": "running",
    "created_at": 1.0,
    "updated_at": 1.5,
    "execution_id": "ex-1",
    "calls_used": 2,
}
_INNER_OBS = {"step_id": "i0", "ok": True, "output": 3, "calls_used": 0}
#: A task that does not parse (a counter written as text), with its inner steps.
_BAD_TASK = {
    "v": 1,
    "id": "t-2",
    "agent_id": "a",
    "step_id": "s2",
    "state": "queued",
    "created_at": 1.0,
    "updated_at": 1.0,
    "execution_id": "ex-1",
    "calls_used": "7",
    "inner_observations": [],
    "inner_completed": [],
}
_GOOD_WORKER = {
    "v": 1,
    "id": "w-1",
    "task_id": "t-1",
    "step_id": "s1",
    "agent_id": "a",
    "status": "running",
    "created_at": 1.0,
    "updated_at": 1.0,
}
_BAD_WORKER = {**_GOOD_WORKER, "id": "w-2", "status": "sleeping"}
_GOOD_WTASK = {"v": 1, "id": "t-1", "step_id": "s1", "state": "running", "updated_at": 1.0}
_BAD_WTASK = {"v": 1, "id": "t-2", "step_id": "s2", "state": "running", "updated_at": 1.0, "x": 1}
_GOOD_TRAIL = {
    "seq": 1,
    "at": 1.0,
    "worker_id": "w-1",
    "generation": 1,
    "event": "starting",
    "status": "starting",
    "detail": "",
}
_BAD_TRAIL = {**_GOOD_TRAIL, "seq": 2, "generation": 0}


def _journal_before() -> dict[str, Any]:
    """One commit as the version before this one wrote it (raw JSON, not made by today's
    code): a head, and every part, the tasks split from their inner steps."""
    head = {
        "v": 1,
        "id": "ex-1",
        "goal": "g",
        "status": "paused",
        "plan": None,
        "plan_version": 0,
        "pending": None,
        "lease": None,
        "calls_used": 2,
        "max_calls": None,
        "replans": 0,
        "usage": {"input_tokens": 0, "output_tokens": 0, "cost": "0"},
        "max_tokens": None,
        "max_cost": None,
        "agent_tasks_dropped": 0,
        "controls": [],
        "approvals": [],
        "stop_requests": [],
        "answer_requests": [],
        "masked_inputs": [],
        "created_at": 1.0,
        "updated_at": 2.0,
    }
    bad_head = {
        k: v for k, v in _BAD_TASK.items() if k not in ("inner_observations", "inner_completed")
    }
    changes = [
        ["head", head],
        ["reset", "steps", []],
        ["reset", "obs", []],
        ["reset", "done", []],
        ["reset", "tasks", [["t-1", {"split": _GOOD_TASK_HEAD}], ["t-2", {"split": bad_head}]]],
        ["reset", "inner_obs", [["t-1/i0", _INNER_OBS]]],
        ["reset", "inner_done", [["t-1/i0", "i0"]]],
        ["reset", "workers", [["w-1", _GOOD_WORKER], ["w-2", _BAD_WORKER]]],
        ["reset", "worker_tasks", [["t-1", _GOOD_WTASK], ["t-2", _BAD_WTASK]]],
        ["reset", "worker_trail", [["1", _GOOD_TRAIL], ["2", _BAD_TRAIL]]],
        ["ckpts", []],
    ]
    return {"seq": 1, "changes": changes, "events": []}


def _expected_parts() -> dict[str, list[Any]]:
    good_task = {**_GOOD_TASK_HEAD, "inner_observations": [_INNER_OBS], "inner_completed": ["i0"]}
    return {
        "agent_tasks": [good_task, _BAD_TASK],
        "workers": [_GOOD_WORKER, _BAD_WORKER],
        "worker_tasks": [_GOOD_WTASK, _BAD_WTASK],
        "worker_trail": [_GOOD_TRAIL, _BAD_TRAIL],
    }


def test_E7_a_store_written_before_reads_back_and_round_trips_byte_equal(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    folder.mkdir(mode=0o700)
    (folder / "ex-1.journal").write_bytes(encode_frame(orjson.dumps(_journal_before())))
    store = ms.storage.FileStore(folder)
    execution = store.get("ex-1")
    assert execution is not None
    kinds = {
        "agent_tasks": ms.storage.AgentTaskRecord,
        "workers": ms.storage.WorkerRecord,
        "worker_tasks": ms.storage.WorkerTask,
        "worker_trail": ms.storage.TrailEntry,
    }
    expected = _expected_parts()
    for field, kind in kinds.items():
        good, bad = getattr(execution, field)
        assert type(good) is kind  # parsed once, when first looked at
        assert type(bad) is Unreadable  # E8: fails closed on its own, kept (E7)
        assert bad.raw == expected[field][1]
        # Written back as it was read: the same bytes as before.
        assert canonical_json(unstructure(execution)[field]) == canonical_json(expected[field])
    assert execution.task_records[0].calls_used == 2
    assert [u.key for u in execution.unreadable_tasks] == ["t-2"]
    # A store that writes it whole (a snapshot) writes those very bytes.
    snapshot = {change[1]: change[2] for change in snapshot_changes(execution) if len(change) == 3}
    before = {change[1]: change[2] for change in _journal_before()["changes"] if len(change) == 3}
    for part in ("tasks", "inner_obs", "inner_done", "workers", "worker_tasks", "worker_trail"):
        assert canonical_json(snapshot[part]) == canonical_json(before[part]), part
    # A commit that changes the head only writes the head: the entries stay as stored.
    store.edit("ex-1", lambda stored, now: attrs.evolve(stored, goal="g2", updated_at=now))
    again = store.get("ex-1")
    assert again is not None
    assert again.goal == "g2"
    for field in kinds:
        assert canonical_json(unstructure(again)[field]) == canonical_json(expected[field])
    reopened = ms.storage.FileStore(folder).get("ex-1")
    assert reopened is not None
    assert encode(attrs.evolve(reopened, goal="g")) == encode(
        attrs.evolve(execution, updated_at=reopened.updated_at)
    )


def test_E7_a_view_made_by_unstructure_cannot_change_what_a_record_is_written_as(
    tmp_path: Path,
) -> None:
    """``unstructure(execution)`` (the codec's way to the stored form, which the command's
    JSON output shows) gives plain data a caller may change (a JSON view slimmed or
    annotated): the frozen records it was made of must still be written as what they hold,
    not as the caller's edited copy."""
    task = {
        "v": 1,
        "id": "ex-1:t1",
        "execution_id": "ex-1",
        "agent_id": "a",
        "step_id": "s",
        "state": "waiting_for_clarification",
        "pending_question": "which city?",
        "created_at": 1.0,
        "updated_at": 1.0,
    }
    source = ms.storage.SqliteStore(tmp_path / "a.sqlite3")
    assert source.create(_execution(agent_tasks=(task,)))
    read = source.get("ex-1")
    assert read is not None
    view = ms.storage._seam.unstructure(read)
    view["agent_tasks"][0]["pending_question"] = "edited in a view"
    view["agent_tasks"][0]["links"] = {"self": "/tasks/ex-1:t1"}
    (record,) = read.agent_tasks
    assert type(record) is ms.storage.AgentTaskRecord
    assert record.pending_question == "which city?"
    # A copy of the run (another store, a backup) writes the records as they are.
    copy = ms.storage.FileStore(tmp_path / "copy")
    assert copy.create(read)
    (written,) = copy.get("ex-1").agent_tasks  # type: ignore[union-attr]
    assert type(written) is ms.storage.AgentTaskRecord, written
    assert written.pending_question == "which city?"
