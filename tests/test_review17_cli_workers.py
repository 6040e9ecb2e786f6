"""Review #17: ``mainspring workers ID`` printed a worker's process host (free text a host
reports, up to 256 characters) as it was stored: control characters in it reached the
reader's terminal. It is now clamped like every other stored text (escapes shown, redacted)."""

from __future__ import annotations

import time
from pathlib import Path

from mainspring.cli import EXIT_OK
from mainspring.storage import Execution, SqliteStore, WorkerRecord
from mainspring.storage._seam import ProcessIdentity, unstructure

from ._cli_kit import run_cli

SECRET = "ghp_" + "c" * 36


def test_a_process_host_with_control_characters_is_escaped(tmp_path: Path) -> None:
    now = time.time()
    worker = WorkerRecord(
        id="w1",
        task_id="ex-w:t1",
        step_id="s1",
        agent_id="coder",
        status="running",
        process=ProcessIdentity(host=f"box\x1b]0;owned\x07\x1b[2J {SECRET}", pid=42, group=42),
        created_at=now,
        updated_at=now,
    )
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path)
    store.create(
        Execution(
            id="ex-w",
            goal="g",
            status="running",
            workers=(unstructure(worker),),
            created_at=now,
            updated_at=now,
        )
    )
    store.close()
    code, out = run_cli("--store", str(path), "workers", "ex-w")
    assert code == EXIT_OK
    assert "pid 42" in out
    assert "\x1b" not in out  # shown as escapes, not obeyed
    assert "\x07" not in out
    assert "\\x1b" in out
    assert SECRET not in out  # E5
