"""Review of agent memory (#16): an agent's ``remember`` across a kill -9 and a resume in a
fresh process stores each fact once, superseded once, with its provenance (slow: two
subprocesses per backend)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import mainspring as ms
from mainspring.storage import Fact, Scope
from mainspring.storage._seam import FactFilter

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_review16_memory_worker.py")
REPO = Path(ms.__file__).parent.parent
EXECUTION = "memory-crash"


def _spawn(mode: str, store: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, WORKER, mode, str(store), EXECUTION],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _facts(kind: str, store: Path) -> list[Fact]:
    backend = ms.storage.SqliteStore(store) if kind == "sqlite" else ms.storage.FileStore(store)
    try:
        return backend.memory_list(FactFilter(include_hidden=True), limit=100)
    finally:
        backend.close()


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_remembered_facts_are_stored_once_across_a_kill_and_a_resume(
    kind: str, tmp_path: Path
) -> None:
    store = tmp_path / ("store.sqlite3" if kind == "sqlite" else "store")
    child = _spawn("start", store)
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 60.0)
    line = child.stdout.readline().strip() if readable else b"timed out"
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=30)
    assert line == b"ready", (line, err.decode()[-3000:])
    at_kill = {fact.id: fact for fact in _facts(kind, store)}
    assert len(at_kill) == 2

    child = _spawn("resume", store)
    out, err = child.communicate(timeout=90)
    assert child.returncode == 0, (out.decode(), err.decode()[-3000:])
    answer = json.loads(out.decode().strip().splitlines()[-1])
    assert answer["status"] == "completed"
    facts = {fact.id: fact for fact in _facts(kind, store)}
    assert facts == at_kill  # one fact each, not two, and nothing changed on the replay
    old_id, new_id = answer["ids"]
    assert set(facts) == {old_id, new_id}
    old, new = facts[old_id], facts[new_id]
    assert old.superseded_by == new_id
    assert new.superseded_by is None
    assert (old.text, old.scope, old.confidence) == ("the build uses tox", Scope.REPOSITORY, 0.5)
    for fact in (old, new):
        assert fact.execution_id == EXECUTION
        assert fact.step_id == "c"
        assert fact.task_id is not None
        assert fact.task_id.startswith(EXECUTION)
