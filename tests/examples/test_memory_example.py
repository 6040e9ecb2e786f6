"""examples/memory.py: one run's agent remembers, a later run's agent finds the current fact
(the superseded one is not shown), and the command lists both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .._cli_kit import run_cli

ROOT = Path(__file__).resolve().parents[2]


def test_a_later_run_finds_what_an_earlier_run_remembered(tmp_path: Path) -> None:
    store = tmp_path / "memory.sqlite3"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "memory.py"), str(store)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "first run completed: 4 facts remembered"
    assert lines[1] == "searched 'how do we deploy?', ranked by bm25:"
    assert lines[2].endswith("[project/ops] deploys now use canary releases, 5% of traffic first")
    assert "blue-green" not in done.stdout  # superseded: not what a search shows
    assert lines[-2].startswith("second run completed: the best answer is 'deploys now use")
    code, out = run_cli("memory", "ls", "--all", "--json", "--store", str(store))
    assert code == 0
    facts = {fact["text"]: fact for fact in json.loads(out)}
    assert len(facts) == 4
    superseded = facts["deploys go out through blue-green rollouts"]["superseded_by"]
    assert facts["deploys now use canary releases, 5% of traffic first"]["id"] == superseded
    assert all(fact["execution_id"] for fact in facts.values())  # remembered by an agent
