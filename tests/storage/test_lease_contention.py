"""Four processes contend for one execution's lease, with random kills: never two live
holders, and every stale commit is refused (L1, E2; slow)."""

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

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_lease_worker.py")
ACQUISITIONS = int(os.environ.get("MAINSPRING_LEASE_ACQUISITIONS", "2000"))


def _start(backend: str, path: Path, ledger: Path, n: int) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, str(WORKER), backend, str(path), str(ledger), f"w{n}:{n}:x", str(n)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(ms.__file__).parent.parent)},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"ready"
    return child


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_L1_never_two_live_holders_and_stale_commits_refused(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "store" if backend == "file" else tmp_path / "store.db"
    store: Any = ms.storage.FileStore(path) if backend == "file" else ms.storage.SqliteStore(path)
    store.create(ms.storage.Execution(id="contended", goal="g", created_at=1.0, updated_at=0.0))
    ledger = tmp_path / "ledger"
    ledger.touch()
    rng = random.Random(7)
    started = 0
    workers = []
    for _ in range(4):
        workers.append(_start(backend, path, ledger, started))
        started += 1
    kills = 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.05, 0.2))
            victim = rng.randrange(len(workers))
            workers[victim].send_signal(rng.choice([signal.SIGKILL, signal.SIGTERM]))
            workers[victim].wait()
            if workers[victim].stdout is not None:
                workers[victim].stdout.close()
            kills += 1
            workers[victim] = _start(backend, path, ledger, started)
            started += 1
            if ledger.read_text().count("acq ") >= ACQUISITIONS:
                break
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()

    acquisitions: dict[int, tuple[str, float, float, float]] = {}
    releases: dict[int, float] = {}
    commits: list[tuple[str, int, float, float, str, float]] = []
    for line in ledger.read_text().splitlines():
        kind, owner, epoch, *rest = line.split()
        if kind == "acq":
            tb, ta, expires = map(float, rest)
            known = acquisitions.get(int(epoch))
            if known is not None:  # the holder acquiring again extends its own tenure
                assert known[0] == owner, f"two owners share epoch {epoch}"
                acquisitions[int(epoch)] = (owner, known[1], known[2], max(known[3], expires))
            else:
                acquisitions[int(epoch)] = (owner, tb, ta, expires)
        elif kind == "rel":
            releases[int(epoch)] = float(rest[0])
        else:
            tb, ta = float(rest[0]), float(rest[1])
            commits.append((owner, int(epoch), tb, ta, rest[2], float(rest[3])))
    acquired = ledger.read_text().count("acq ")
    assert acquired >= ACQUISITIONS
    assert len(acquisitions) > ACQUISITIONS // 2  # distinct tenures, most after a handover
    assert kills > 10

    # Never two live holders: the next tenure began only once this one could have ended.
    for epoch, (_, _, _, expires) in acquisitions.items():
        following = acquisitions.get(epoch + 1)
        if following is None:
            continue
        ended_by = min(expires, releases.get(epoch, float("inf")))
        assert following[2] >= ended_by, f"epoch {epoch + 1} overlapped epoch {epoch}"

    # Stale commits refused: an OK commit started before the lease expired and before the
    # next tenure had surely begun.
    stale = 0
    for owner, epoch, tb, _, outcome, expires in commits:
        following = acquisitions.get(epoch + 1)
        late = tb >= expires or (following is not None and tb >= following[2])
        if late:
            stale += 1
            assert outcome != "ok", f"a stale commit by {owner} (epoch {epoch}) was written"
    assert stale > 0  # the workers did try stale commits
    try:
        assert store.get("contended") is not None  # and the record still parses
    finally:
        if isinstance(store, ms.storage.SqliteStore):
            store.close()
