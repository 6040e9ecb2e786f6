"""E10 across a kill -9: any value a step may return equals itself after a crash and a
resume in a fresh process (slow: two subprocesses per example).

Hypothesis draws a batch of values from everything the typed encoding supports, nested. A
worker process stores them as a tool's output, as an agent's ``ctx.step`` results (one step
each) and as a later step's input, and is killed with SIGKILL once they are durable; a fresh
process resumes the run. ``ctx.step`` must replay each value (running one again fails the
worker), and every output of the run must equal the originals: same types, ``==``, NaN for
NaN, the same time zones and folds.
"""

from __future__ import annotations

import datetime as dt
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mainspring as ms

from .._exact import same
from ..strategies import exact_values

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_replay_worker.py")
REPO = Path(ms.__file__).parent.parent
EXECUTION = "replay-ex"
#: The values the issue found coerced, as a first example.
ISSUE = [dt.datetime(2024, 1, 2, 3, 4, 5), b"\x00\xff", {1, 2, 3}, {(1, 2): "pair"}, (1, 2)]


def _spawn(mode: str, store: Path, where: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, WORKER, mode, store, where / "values.pickle", where / "out.pickle",
         EXECUTION],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def _crash_and_resume(kind: str, values: list[Any], where: Path) -> dict[str, Any]:
    store = where / ("store.sqlite3" if kind == "sqlite" else "store")
    (where / "values.pickle").write_bytes(pickle.dumps(values))
    child = _spawn("start", store, where)
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 60.0)
    line = child.stdout.readline().strip() if readable else b"timed out"
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=30)
    assert line == b"ready", (line, err.decode()[-3000:])
    if kind == "sqlite":
        reader = ms.storage.SqliteStore(store)
        at_kill = reader.get(EXECUTION)
        reader.close()
    else:
        at_kill = ms.storage.FileStore(store).get(EXECUTION)
    assert at_kill is not None
    assert at_kill.status == "running"  # killed mid-run, with produce and keep's steps durable
    assert at_kill.completed_steps == ("produce",)
    child = _spawn("resume", store, where)
    out, err = child.communicate(timeout=90)
    assert child.returncode == 0, (out.decode(), err.decode()[-3000:])
    result: dict[str, Any] = pickle.loads((where / "out.pickle").read_bytes())
    return result


@pytest.mark.parametrize("kind", ["sqlite", "file"])
@given(values=st.lists(exact_values, min_size=1, max_size=25))
@example(values=ISSUE)
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_E10_values_replay_exactly_after_a_kill_and_a_resume_in_a_fresh_process(
    kind: str, values: list[Any]
) -> None:
    with tempfile.TemporaryDirectory() as where:
        result = _crash_and_resume(kind, values, Path(where))
    assert result["status"] == "completed"
    assert result["redacted"] == ()
    for index, (original, replayed) in enumerate(zip(values, result["replayed"], strict=True)):
        assert same(replayed, original), (index, original, replayed)
    outputs = result["outputs"]
    assert same(outputs["produce"], values)  # a tool's output, read back from disk
    assert same(outputs["keep"], values)
    assert same(outputs["echo"], {"values": values})  # a step input, read back from disk
