"""A statement the PostgreSQL server refuses (a full disk, say), at every point of a commit,
once and persistently: nothing is acknowledged that was not committed, nothing is half
written, and the store works again once the server does (E2, V2)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import psycopg
import pytest

import mainspring as ms
from tests._postgres import postgres_url

__all__ = ["postgres_url"]  # a fixture

OWNER = "host-a:1:x"
#: How each statement of a commit begins (BEGIN, the row locks, the header, a part row,
#: the history entries, COMMIT). A commit of upserts alone writes its part rows in its
#: header's statement: "INSERT INTO" refuses that statement then (see ``_refusing``).
STATEMENTS = [
    "BEGIN",
    "WITH locked",
    "WITH header",
    "INSERT INTO",
    "WITH counter",
    "COMMIT",
]


@pytest.fixture
def store(postgres_url: str) -> Iterator[ms.storage.PostgresStore]:
    made = ms.storage.PostgresStore(postgres_url, reconnect_timeout=1.0)
    yield made
    made.close()


def _refusing(monkeypatch: pytest.MonkeyPatch, prefix: str, times: int) -> list[int]:
    """Make the store's statements starting with ``prefix`` fail as a full disk would,
    ``times`` times (-1: always). Returns the count of refusals made."""
    made = [0]
    original = psycopg.Connection.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else ""
        writes_a_part = prefix == "INSERT INTO" and text.startswith("WITH header")
        refused = text.lstrip().startswith(prefix) or (writes_a_part and prefix in text)
        if refused and (times < 0 or made[0] < times):
            made[0] += 1
            raise psycopg.errors.DiskFull("could not extend file: No space left on device")
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return made


def _version(record: ms.storage.Execution, n: int) -> ms.storage.Execution:
    line = ms.storage._seam.Control(action="pause", by="op", at=float(n), reason=f"v{n}")
    seen = ms.storage.Observation(step_id=f"s{n}", ok=True, output=n)
    return attrs.evolve(
        record,
        calls_used=n,
        controls=(*record.controls, line),
        observations=(*record.observations, seen),  # a part row of its own
    )


@pytest.mark.parametrize("statement", STATEMENTS)
@pytest.mark.parametrize("times", [1, -1], ids=["once", "persistent"])
def test_a_refused_statement_never_acknowledges_and_never_leaves_a_mix(
    store: ms.storage.PostgresStore,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    statement: str,
    times: int,
) -> None:
    created = ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)
    assert store.create(created)
    assert store.acquire("ex-1", OWNER, 60.0).acquired
    live = store.get("ex-1")
    assert live is not None
    first = _version(live, 1)
    assert store.commit_runs([(first, OWNER)]) == (ms.storage._seam.CommitOutcome.OK,)
    made = _refusing(monkeypatch, statement, times)
    second = _version(first, 2)
    try:
        answered: Any = store.commit_runs([(second, OWNER)])
    except ms.StorageError as exc:
        answered = exc
    monkeypatch.undo()
    assert made[0] >= 1  # the fault was met
    fresh = ms.storage.PostgresStore(postgres_url)
    try:
        stored = fresh.get("ex-1")
        history = fresh.history("ex-1")
    finally:
        fresh.close()
    assert stored is not None
    if isinstance(answered, Exception):
        assert stored.calls_used == 1  # not acknowledged, and not written
        assert stored == attrs.evolve(first, lease=stored.lease)
    else:
        assert answered == (ms.storage._seam.CommitOutcome.OK,)
        assert stored.calls_used == 2  # acknowledged: durable
    controls = [e for e in history if e.kind == "control"]
    assert len(controls) == stored.calls_used  # each durable commit's entries, none else
    # The store works again (it trusts nothing it cached from the failed transaction).
    third = _version(stored, 3)
    assert store.commit_runs([(third, OWNER)]) == (ms.storage._seam.CommitOutcome.OK,)
    again = store.get("ex-1")
    assert again is not None
    assert again.calls_used == 3
