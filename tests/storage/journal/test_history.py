"""Reading history entries (V2): entries written before the timeline's kinds existed still
parse, the new kinds and fields parse, and a field of the wrong type fails closed."""

from __future__ import annotations

import pytest

from mainspring.storage import RecordError
from mainspring.storage._seam import parse_event


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
