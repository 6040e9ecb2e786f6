"""Crash trials for worker-backed steps (#17): a runtime whose steps are served by
subprocess workers (each appending ``<task> <pid> <generation>`` lines to a ledger) is
SIGKILLed at a random moment; a fresh process resumes the run. Per task, writers never
interleave: once a new writer appears, no older one writes again (takeover only after the
old process was confirmed dead, a SIGTERM-ignoring one KILLed first)."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mainspring as ms

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CHILD = str(Path(__file__).with_name("_workers_crash_child.py"))
EXECUTION = "ex-workers-crash"
#: Trials per batch; five batches (>= 50 trials in all), each well within a test's timeout.
TRIALS = int(os.environ.get("MAINSPRING_WORKER_CRASH_TRIALS", "10"))
BATCHES = 5
SEED = 1717


def _spawn(mode: str, where: Path, seed: int) -> subprocess.Popen[bytes]:
    with (where / f"{mode}.err").open("ab") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                CHILD,
                mode,
                str(where / "store.sqlite3"),
                str(where / "ledger"),
                EXECUTION,
                str(seed),
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


def _stderr(where: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(where.glob("*.err")))


def _check_writers(ledger: Path, about: str) -> dict[str, list[int]]:
    """Per task, the writers in the order they first wrote; no older writer after a newer."""
    order: dict[str, list[int]] = {}
    for line in ledger.read_text().splitlines():
        task, pid_text, _generation = line.split(" ")
        pid = int(pid_text)
        writers = order.setdefault(task, [])
        if pid not in writers:
            writers.append(pid)
        assert writers[-1] == pid, f"{about}: task {task}: writer {pid} wrote after {writers[-1]}"
    return order


def _alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for a PID 1 that may not reap)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] != b"Z"


@pytest.mark.parametrize("batch", range(BATCHES))
def test_kill_9_while_workers_write_never_leaves_two_writers(tmp_path: Path, batch: int) -> None:
    rng = random.Random(f"{SEED}:{batch}")
    outcomes: dict[str, int] = {}
    takeovers = 0
    for trial in range(TRIALS):
        where = tmp_path / f"t{trial}"
        where.mkdir()
        seed = rng.randrange(2**31)
        delay = rng.uniform(0.0, 0.5)
        about = f"trial {trial} (seed {seed}, kill after {delay * 1000:.0f} ms) in {where}"
        child = _spawn("start", where, seed)
        assert child.stdout is not None
        readable, _, _ = select.select([child.stdout], [], [], 30.0)
        line = child.stdout.readline().strip() if readable else b""
        assert line == b"ready", f"{about}: {line!r}\n{_stderr(where)}"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        child.stdout.close()

        resume = _spawn("resume", where, seed)
        try:
            out, _ = resume.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            resume.kill()
            resume.communicate()
            pytest.fail(f"{about}: the resume hung\n{_stderr(where)}")
        assert resume.returncode == 0, f"{about}: {out!r}\n{_stderr(where)}"
        status = out.decode().strip().splitlines()[-1]
        outcomes[status] = outcomes.get(status, 0) + 1

        ledger = where / "ledger"
        order = _check_writers(ledger, about) if ledger.exists() else {}
        stored = ms.storage.SqliteStore(where / "store.sqlite3").get(EXECUTION)
        assert stored is not None
        workers, dropped = ms.storage._seam.parse_workers(stored.workers)
        assert dropped == 0
        assert not any(w.active for w in workers), f"{about}: {workers}"
        takeovers += sum(1 for w in workers if w.generation > 1)
        if status == "completed":
            for pids in order.values():  # every writer of a completed run is dead now
                assert not any(_alive(pid) for pid in pids[:-1]), about
        # A run may fail only by refusing a takeover it cannot make safely (a start whose
        # process was never recorded), never by two writers.
        if status != "completed":
            tasks, _ = ms.storage._seam.parse_agent_tasks(stored)
            codes = {t.failure.code for t in tasks if t.failure is not None}
            assert codes <= {"worker-unconfirmed"}, f"{about}: {status} {codes}"
    assert outcomes.get("completed", 0) >= TRIALS // 2, outcomes
    assert takeovers > 0, outcomes  # the trials did exercise takeover
