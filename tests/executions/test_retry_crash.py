"""kill -9 between two attempts of a retried step, then a fresh process resumes it (slow).

B1: attempts are durable; a crash does not reset the count. The first process makes
attempt 1, commits it and waits a day for attempt 2; it is killed. The next process
recovers the run and makes attempts 2 and 3 only: three calls in all, and the step's
observation lists attempts 1, 2 and 3 before the policy gives up.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

import mainspring as ms

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_retry_worker.py")


def _spawn(mode: str, where: Path, backend: str) -> subprocess.Popen[bytes]:
    store, ledger = str(where / "store.sqlite3"), str(where / "ledger")
    with (where / f"{mode}.err").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, WORKER, mode, store, ledger, backend],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


def _line(child: subprocess.Popen[bytes], where: Path, mode: str) -> bytes:
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 60.0)
    line = child.stdout.readline().strip() if readable else b"timed out"
    if not line or line == b"timed out":
        child.kill()
        child.communicate(timeout=10)
        pytest.fail(f"{mode}: {line!r}\n{(where / f'{mode}.err').read_text()[-3000:]}")
    return line


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_B1_a_kill_between_attempts_keeps_the_attempt_count(tmp_path: Path, backend: str) -> None:
    start = _spawn("start", tmp_path, backend)
    assert _line(start, tmp_path, "start") == b"retrying"
    start.kill()  # SIGKILL: no shutdown, no release; the lease lapses by itself
    start.communicate(timeout=10)
    assert (tmp_path / "ledger").read_text().splitlines() == ["call"]
    resume = _spawn("resume", tmp_path, backend)
    assert _line(resume, tmp_path, "resume") == b"failed"
    resume.communicate(timeout=30)
    assert resume.returncode == 0
    assert (tmp_path / "ledger").read_text().splitlines() == ["call"] * 3
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    try:
        record = store.get("ex-retry")
    finally:
        store.close()
    assert record is not None
    (observation,) = record.observations
    assert [a["attempt"] for a in observation.data["attempts"]] == [1, 2, 3]
    assert "gave up after 3 attempts" in (observation.error or "")
