"""Review of issue 13 (storage v2): one record SQLite cannot store stops the persistence
actor for every run in the process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import Observation, SqliteStore
from mainspring.storage._seam import CommitOutcome, open_committer

pytestmark = pytest.mark.anyio

OWNER = "host:1:aaaa"


def execution(id: str, **changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(id=id, **(fields | changes))


async def test_a_record_sqlite_cannot_store_fails_only_its_own_commit(tmp_path: Path) -> None:
    # An execution with two observations of one step (the Execution record allows it)
    # makes SqliteStore raise sqlite3.IntegrityError from commit_runs: the whole flush
    # fails, the actor marks itself broken, and every later commit of every run is refused
    # with PersistenceFailed. The contract: "a bad record (too large, unstorable) fails only
    # its own commit and writes nothing of it".
    store = SqliteStore(tmp_path / "store.db")
    try:
        for name in ("bad", "good"):
            store.create(execution(name))
            assert store.acquire(name, OWNER, ttl=3600).acquired
        twice = (Observation(step_id="a", ok=False), Observation(step_id="a", ok=True))
        async with ms.open_system() as system:
            committer = await open_committer(system, store)
            # Stored as it is (a part whose keys repeat is kept by position) ...
            assert (await committer.submit(execution("bad", observations=twice), OWNER)).ok
            outcome = await committer.submit(execution("good", calls_used=1), OWNER)
            assert outcome is CommitOutcome.OK  # ... and the writer goes on for everyone
        again = SqliteStore(tmp_path / "store.db")
        try:
            stored = again.get("bad")
            assert stored is not None
            assert stored.observations == twice
        finally:
            again.close()
    finally:
        store.close()
