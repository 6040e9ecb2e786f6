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


def test_a_TMPDIR_the_user_set_is_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(conftest._DISK_TEMP)
    monkeypatch.delenv("MAINSPRING_TEST_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    conftest._temp_in_memory()
    assert os.environ["TMPDIR"] == str(tmp_path)
    assert os.environ[conftest._DISK_TEMP] == str(tmp_path)


def test_a_MAINSPRING_TEST_TMPDIR_that_is_not_a_directory_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(conftest._DISK_TEMP)
    monkeypatch.setenv("MAINSPRING_TEST_TMPDIR", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", tempfile.gettempdir()))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    with pytest.raises(pytest.UsageError, match="not a directory"):
        conftest._temp_in_memory()
