"""Review of issue 13 (storage v2) from the command: ``prune`` where nothing has run yet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mainspring.cli import EXIT_OK

from ._cli_kit import run_cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$MAINSPRING_HOME`` where no run has ever been made (not even the directory)."""
    path = tmp_path / "home"
    monkeypatch.setenv("MAINSPRING_HOME", str(path))
    return path


@pytest.mark.parametrize("dry_run", [False, True])
def test_prune_where_nothing_has_run_yet_deletes_nothing_and_says_so(
    home: Path, dry_run: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: where nothing has run yet the command says so, nothing is created, and with
    --json every outcome is JSON. Today ``prune`` there raises AttributeError ('Namespace'
    object has no attribute 'id', cli/_reads.py nothing_here_yet builds "no execution
    {args.id}") and Python prints a traceback: no JSON, exit 1."""
    argv = ["prune", "--older-than", "1d", "--json", *(["--dry-run"] if dry_run else [])]
    try:
        code, out = run_cli(*argv)
    except AttributeError as exc:  # what happens today
        pytest.fail(f"mainspring prune crashed where nothing has run yet: {exc!r}")
    assert code == EXIT_OK, capsys.readouterr().err
    report = json.loads(out)
    assert report["deleted"] == []
    assert not home.exists()  # nothing created
