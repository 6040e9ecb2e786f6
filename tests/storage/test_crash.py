"""kill -9 of a writer at random moments (appends and compactions alike; on PostgreSQL
inside transactions and during COMMIT): every record parses and holds an acknowledged
version, whole, and no acknowledged commit is lost (slow)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

pytestmark = pytest.mark.slow

WRITER = Path(__file__).with_name("_crash_writer.py")
TRIALS = int(os.environ.get("MAINSPRING_CRASH_TRIALS", "120"))
#: A PostgreSQL trial starts a process that connects to the server: fewer, to stay well inside
#: the per-test timeout on a loaded machine.
PG_TRIALS = int(os.environ.get("MAINSPRING_PG_CRASH_TRIALS", "25"))


@pytest.mark.parametrize(
    "backend", ["file", "sqlite", pytest.param("postgresql", marks=pytest.mark.timeout(300))]
)
def test_kill_9_at_random_points_loses_no_acknowledged_commit(tmp_path: Path, backend: str) -> None:
    if backend != "postgresql":
        _trials(tmp_path, backend, TRIALS)
        return
    server = require_server()
    schemas: list[str] = []

    def url() -> str:  # a schema of each trial's own
        schemas.append(fresh_schema())
        return with_schema(server, schemas[-1])

    try:
        _trials(tmp_path, backend, PG_TRIALS, url)
    finally:
        for schema in schemas:
            drop_schema(schema)


def _trials(tmp_path: Path, backend: str, trials: int, url: Any = None) -> None:
    rng = random.Random(20261129)
    owner = "crash:1:test"
    checked = 0
    for trial in range(trials):
        where = tmp_path / f"t{trial}"
        where.mkdir()
        path: Path | str
        store: Any
        if backend == "postgresql":
            path = url()
            store = ms.storage.PostgresStore(path)
        else:
            path = where / "store" if backend == "file" else where / "store.db"
            store = (
                ms.storage.FileStore(path) if backend == "file" else ms.storage.SqliteStore(path)
            )
        store.create(ms.storage.Execution(id="victim", goal="g", created_at=1.0, updated_at=0.0))
        assert store.acquire("victim", owner, ttl=3600).acquired
        store.create(ms.storage.Execution(id="bystander", goal="g", created_at=1.0, updated_at=0.0))
        ledger = where / "ledger"
        child = subprocess.Popen(
            [sys.executable, str(WRITER), backend, str(path), str(ledger), owner],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(Path(ms.__file__).parent.parent)},
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, 0.15))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        acked = [int(line) for line in ledger.read_text().split()] if ledger.exists() else []
        stored = store.get("victim")  # parses, or this raises
        assert stored is not None
        last = acked[-1] if acked else 0
        # Everything acknowledged is durable; at most the one in flight made it further.
        assert last <= stored.calls_used <= last + 1, (trial, last, stored.calls_used)
        # One version whole, never a mix of two: its parts agree with its head.
        assert len(stored.observations) == stored.calls_used
        assert stored.completed_steps == tuple(f"s{n + 1}" for n in range(stored.calls_used))
        listing = store.list()
        assert [e.id for e in listing.executions] == ["bystander", "victim"]
        assert listing.problems == ()
        if isinstance(store, ms.storage.SqliteStore | ms.storage.PostgresStore):
            store.close()
        checked += 1
    assert checked == trials
