"""``--log-level``: the command prints the library's log on stderr when asked (one line a
record, or one JSON object with its fields under ``--json``), redacted like everything it
prints; without it nothing is configured and nothing is printed (O1)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

import mainspring as ms

from .._cli_kit import run_cli

SECRET = "ghp_" + "Z" * 36


def _waiting(path: Path, execution_id: str) -> Path:
    """A store holding one run that waits for an approval, nobody holding its lease."""
    now = time.time()
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="t", input={}),))
    store = ms.storage.SqliteStore(path)
    try:
        assert store.create(
            ms.storage.Execution(
                id=execution_id,
                goal=f"uses {SECRET}",
                status="waiting_for_approval",
                plan=plan,
                plan_version=1,
                created_at=now,
                updated_at=now,
            )
        )
    finally:
        store.close()
    return path


def test_O1_log_level_prints_the_librarys_records_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _waiting(tmp_path / "s.sqlite3", "w1")
    code, out = run_cli("--store", str(store), "--log-level", "info", "pause", "w1")
    assert code == 0
    assert out.startswith("w1: ")
    err = capsys.readouterr().err
    assert SECRET not in err
    lines = err.splitlines()
    assert lines == [
        "INFO mainspring.executions: execution w1: pause issued (through the store)",
        "INFO mainspring.executions: execution w1 paused (reason=pause, requeued=0)",
    ]
    # Configured for the command only: afterwards the library is silent again.
    top = logging.getLogger("mainspring")
    assert all(isinstance(h, logging.NullHandler) for h in top.handlers)
    assert top.level == logging.NOTSET


def test_O1_log_level_with_json_prints_one_object_a_record_with_its_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _waiting(tmp_path / "s.sqlite3", "w2")
    code, out = run_cli("--store", str(store), "cancel", "w2", "--json", "--log-level", "debug")
    assert code == 0
    assert json.loads(out)["status"] == "cancelled"
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    issued, cancelled, ended = (
        r for r in records if r["logger"] in ("mainspring.executions", "mainspring.cli")
    )
    assert (issued["log"], issued["control"], issued["execution_id"]) == ("INFO", "cancel", "w2")
    assert issued["live"] is False
    assert (cancelled["status"], cancelled["reason"]) == ("cancelled", "cancel")
    assert cancelled["message"] == "execution w2 cancelled (reason=cancel, cancelled_tasks=0)"
    assert isinstance(cancelled["at"], float)
    assert (ended["logger"], ended["log"]) == ("mainspring.cli", "DEBUG")
    assert (ended["command"], ended["exit_code"]) == ("cancel", 0)


def test_O1_without_log_level_the_command_prints_no_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _waiting(tmp_path / "s.sqlite3", "w3")
    code, _ = run_cli("--store", str(store), "pause", "w3")
    assert code == 0
    assert capsys.readouterr().err == ""


def test_a_log_level_that_is_not_one_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run_cli("--store", str(tmp_path / "s.sqlite3"), "--log-level", "loud", "ls")
    assert code == 2
    assert "invalid choice: 'loud'" in capsys.readouterr().err
