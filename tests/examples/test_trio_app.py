"""examples/trio_app.py: the runtime in a plain trio program."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trio")

ROOT = Path(__file__).resolve().parents[2]


def test_the_trio_example_starts_waits_pauses_resumes_and_finishes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "trio_app.py"), str(tmp_path / "t.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "  step fetch: succeeded (1/2)" in lines
    assert "waiting_for_clarification: Formal or casual?" in lines
    assert "paused" in lines
    assert lines[-1] == "completed: an article from 3 sources on tides, casual"
