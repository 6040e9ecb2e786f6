"""The durable history (V2): a follower (``history(after=last)`` again and again) sees every
entry once in order across compactions, deletes, re-creations of the same id and torn tails;
entries written before the timeline's kinds existed still parse, the new kinds and fields parse,
and a field of the wrong type fails closed."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import FileStore, RecordError
from mainspring.storage._backends.file import store as file_module
from mainspring.storage._seam import parse_event


def execution(id: str, **changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id=id, **(fields | changes))


@pytest.mark.parametrize("seed", range(6))
def test_V2_a_follower_sees_every_entry_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(file_module, "_COMPACT_AT", 1_200)
    compactions: list[str] = []
    compact = FileStore._compact

    def counted(self: FileStore, execution_id: str) -> None:
        compactions.append(execution_id)
        compact(self, execution_id)

    monkeypatch.setattr(FileStore, "_compact", counted)
    rng = random.Random(seed)
    root = tmp_path / "store"
    writer = FileStore(root)
    follower = FileStore(root)
    ids = ["ex-1", "ex-2", "ex-3"]
    live: dict[str, int] = {}
    seen: list[ms.storage.HistoryEvent] = []
    deleted: set[tuple[int, str]] = set()

    def follow() -> None:
        after = seen[-1].seq if seen else 0
        limit = rng.choice([1, 2, 3, 10_000])
        seen.extend(follower.history(after=after, limit=limit))

    for _ in range(250):
        name = rng.choice(ids)
        action = rng.random()
        if name not in live:
            assert writer.create(execution(name, status="running"))
            live[name] = 0
        elif action < 0.1:
            writer.edit(name, lambda s, now: ms.storage.Execution(
                **{**{f: getattr(s, f) for f in ("id", "goal", "created_at")},
                   "updated_at": s.updated_at, "status": "completed"}))  # fmt: skip
            for event in writer.history(name, limit=10_000):
                deleted.add((event.seq, name))
            assert writer.delete(name)
            del live[name]
        elif action < 0.15:
            with open(root / f"{name}.journal", "ab") as handle:
                handle.write(b"MSJ1\x07")  # a torn tail, as a crash mid-append leaves
        else:
            live[name] += 1
            status = rng.choice(["running", "waiting_for_budget"])
            writer.edit(
                name,
                lambda s, now, n=live[name], st=status: ms.storage.Execution(
                    id=s.id, goal=s.goal, created_at=s.created_at, updated_at=1.0 + n,
                    status=st, calls_used=n,
                ),
            )  # fmt: skip
        if rng.random() < 0.5:
            follow()
    for _ in range(200):
        before = len(seen)
        follow()
        if len(seen) == before:
            break
    assert compactions  # the journals were compacted under the follower
    seqs = [event.seq for event in seen]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    everything = FileStore(root).history(limit=10_000)
    got = {event.seq for event in seen}
    missing = [event for event in everything if event.seq not in got]
    assert missing == []
    # What the follower saw is what was committed: live entries, or entries of deleted runs.
    final = {event.seq for event in everything}
    assert all(e.seq in final or (e.seq, e.execution_id) in deleted for e in seen)


def test_V2_an_entry_written_before_the_timeline_kinds_reads_as_it_was() -> None:
    old = {
        "execution_id": "ex-1",
        "kind": "status",
        "at": 12,
        "status": "running",
        "was": "planned",
    }
    event = parse_event(7, 3, old)
    assert (event.kind, event.status, event.was, event.at) == ("status", "running", "planned", 12.0)
    assert event.owner is None
    assert event.previous_owner is None
    assert event.attempt is None
    assert event.delay is None


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "takeover", "owner": "h:2:b", "previous_owner": "h:1:a", "reason": "owner-gone"},
        {"kind": "takeover", "owner": "h:2:b", "previous_owner": None, "reason": "after-pause"},
        {"kind": "crash", "owner": "h:1:a", "last_seen": 10, "lapsed_at": 20.5},
        {"kind": "lapse", "owner": "h:1:a", "lapsed_at": 20.5, "last_seen": None},
        {"kind": "shutdown", "owner": "h:1:a", "status": "running"},
        {"kind": "retry", "step_id": "s1", "attempt": 1, "max_attempts": 3, "delay": 0.5},
    ],
)
def test_V2_the_timeline_kinds_parse(raw: dict[str, object]) -> None:
    event = parse_event(1, 1, {"execution_id": "ex-1", "at": 1.5, **raw})
    assert event.kind == raw["kind"]
    for name, value in raw.items():
        assert getattr(event, name) == value


@pytest.mark.parametrize(
    "bad",
    [
        {"owner": 3},
        {"previous_owner": ["h:1:a"]},
        {"attempt": 1.5},
        {"max_attempts": "3"},
        {"delay": "soon"},
        {"last_seen": True},
        {"lapsed_at": {}},
        {"kind": "reboot"},
    ],
)
def test_V2_a_timeline_field_of_the_wrong_type_fails_closed(bad: dict[str, object]) -> None:
    raw = {"execution_id": "ex-1", "at": 1.0, "kind": "takeover", **bad}
    with pytest.raises(RecordError):
        parse_event(1, 1, raw)
