"""Processes contend for one execution's lease, with random kills: never two live holders,
and every stale commit is refused (L1, L4, E2; slow).

Four processes share a FileStore or a SqliteStore; eight, each with a PostgresStore of its own
and its own owner id (hosts, as far as the store can tell), share a PostgreSQL schema. The
ledger's times are the workers' wall clock; PostgreSQL decides on the server's clock, which is
the same clock here (the test server runs on this machine): every decision the server makes
in a call is read after the call's ``tb`` and before its ``ta``, so the bounds below hold on
it as they do on the files' clock.
"""

from __future__ import annotations

import os
import random
import select
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

WORKER = Path(__file__).with_name("_lease_worker.py")
ACQUISITIONS = int(os.environ.get("MAINSPRING_LEASE_ACQUISITIONS", "2000"))
PROCESSES = {"file": 4, "sqlite": 4, "postgresql": 8}
#: The lease's ttl, the longest pause between a worker's attempts while another holds it, and
#: how often a holder sleeps (up to 1.5 ttl) before a commit. On PostgreSQL, eight workers on
#: a loaded machine: a call takes milliseconds to tens of them, and every attempt locks the
#: one row, so the ttl is longer than the files' and the workers poll less (the worker also
#: skips asking while it can see a live lease), or the holder's commits would queue behind
#: their attempts past its ttl and no commit but the stale would be tried.
TIMING = {"file": (0.05, 0.01, 0.2), "sqlite": (0.05, 0.01, 0.2), "postgresql": (0.15, 0.05, 0.1)}


def _spawn(backend: str, path: Path | str, ledger: Path, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, str(WORKER), backend, str(path), str(ledger), _owner(n), str(n),
            *map(str, TIMING[backend]),
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(ms.__file__).parent.parent)},
    )  # fmt: skip


def _owner(n: int) -> str:
    return f"w{n}:{n}:x"


def _ready(child: subprocess.Popen[bytes]) -> None:
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 60.0)
    assert readable, "a worker did not start within 60 s"
    assert child.stdout.readline().strip() == b"ready"


@pytest.mark.parametrize(
    "backend",
    # Eight processes, each call a durable transaction: on a loaded 2-core machine (load 10)
    # 2,000 acquisitions took four minutes.
    ["file", "sqlite", pytest.param("postgresql", marks=pytest.mark.timeout(600))],
)
def test_L1_never_two_live_holders_and_stale_commits_refused(tmp_path: Path, backend: str) -> None:
    if backend != "postgresql":
        _contend(tmp_path, backend)
        return
    schema = fresh_schema()
    try:
        _contend(tmp_path, backend, with_schema(require_server(), schema))
    finally:
        drop_schema(schema)


def _contend(tmp_path: Path, backend: str, url: str = "") -> None:
    path: Path | str
    store: Any
    if backend == "postgresql":
        path = url
        store = ms.storage.PostgresStore(url)
    else:
        path = tmp_path / "store" if backend == "file" else tmp_path / "store.db"
        store = ms.storage.FileStore(path) if backend == "file" else ms.storage.SqliteStore(path)
    store.create(ms.storage.Execution(id="contended", goal="g", created_at=1.0, updated_at=0.0))
    ledger = tmp_path / "ledger"
    ledger.touch()
    rng = random.Random(7)
    started = PROCESSES[backend]
    workers = [_spawn(backend, path, ledger, n) for n in range(started)]  # started at once
    owners = [_owner(n) for n in range(started)]
    # PostgreSQL: hosts die by SIGKILL, and half the kills hit the holder mid-tenure.
    signals = [signal.SIGKILL] if backend == "postgresql" else [signal.SIGKILL, signal.SIGTERM]
    at_holder = 0.5 if backend == "postgresql" else 0.0
    kills = 0
    deadline = time.monotonic() + (540 if backend == "postgresql" else 240)
    try:
        for worker in workers:
            _ready(worker)
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.05, 0.2))
            victim = rng.randrange(len(workers))
            if at_holder and rng.random() < at_holder:
                seen = store.get("contended")
                holder = seen.lease.owner if seen is not None and seen.lease is not None else ""
                victim = owners.index(holder) if holder in owners else victim
            workers[victim].send_signal(rng.choice(signals))
            workers[victim].wait()
            if workers[victim].stdout is not None:
                workers[victim].stdout.close()
            kills += 1
            workers[victim] = _spawn(backend, path, ledger, started)
            owners[victim] = _owner(started)
            _ready(workers[victim])
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
    assert any(outcome == "ok" for *_, outcome, _ in commits)  # and live ones were written
    try:
        assert store.get("contended") is not None  # and the record still parses
    finally:
        if isinstance(store, ms.storage.SqliteStore | ms.storage.PostgresStore):
            store.close()
