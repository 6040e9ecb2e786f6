"""The run's choice of temporary directory (tests/conftest.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests import conftest


def test_a_relative_MAINSPRING_TEST_TMPDIR_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rel").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(conftest._DISK_TEMP)
    monkeypatch.setenv("MAINSPRING_TEST_TMPDIR", "rel")
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", tempfile.gettempdir()))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    conftest._temp_in_memory()
    assert os.environ["TMPDIR"] == str(tmp_path / "rel")
