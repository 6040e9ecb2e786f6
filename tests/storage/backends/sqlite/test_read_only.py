"""A SQLite store kept in a read-only directory (the database file itself readable): SQLite
in WAL mode reads through ``-wal`` and ``-shm`` files it cannot create there, yet a reader
still reads (E7, U6: and creates nothing); a writer is refused with the directory named;
a write-ahead log holding commits, which cannot be read without its ``-shm``, is refused
clearly, never read as if it were not there. The directory is made read-only for real
(``tests._read_only_dir``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mainspring.storage import Execution, SqliteStore, StorageError
from mainspring.storage._seam import FactFilter
from tests._read_only_dir import read_only_directory


def execution(id: str) -> Execution:
    return Execution(id=id, goal="g", created_at=1.0, updated_at=1.0)


def entries(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def make_store(directory: Path) -> Path:
    directory.mkdir()
    path = directory / "store.db"
    store = SqliteStore(path)
    try:
        store.create(execution("ex-1"))
    finally:
        store.close()
    assert sorted(p.name for p in directory.iterdir()) == ["store.db"]
    return path


def test_E7_U6_a_store_in_a_read_only_directory_is_read_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    path = make_store(tmp_path / "d")
    before = entries(path.parent)
    with read_only_directory(path.parent):
        store = SqliteStore(path, read_only=True)
        try:
            assert [e.id for e in store.list().executions] == ["ex-1"]
            got = store.get("ex-1")
            assert got is not None
            assert got.goal == "g"
            assert store.memory_list(FactFilter(), limit=10) == []
        finally:
            store.close()
        assert entries(path.parent) == before


def test_U6_a_log_holding_commits_in_a_read_only_directory_is_refused_clearly(
    tmp_path: Path,
) -> None:
    # A store whose last commits are still in its -wal (the writer had not closed it), moved
    # without its -shm: SQLite must build the -shm to read the log, and cannot here.
    source = tmp_path / "live"
    source.mkdir()
    writer = SqliteStore(source / "store.db")
    try:
        writer.create(execution("ex-1"))
        copy = tmp_path / "d"
        copy.mkdir()
        for name in ("store.db", "store.db-wal"):
            shutil.copy2(source / name, copy / name)
    finally:
        writer.close()
    assert (copy / "store.db-wal").stat().st_size > 0
    before = entries(copy)
    with read_only_directory(copy):
        with pytest.raises(StorageError, match="write-ahead log") as raised:
            SqliteStore(copy / "store.db", read_only=True)
        assert str(copy) in str(raised.value)
        assert entries(copy) == before


def test_U5_a_writer_in_a_read_only_directory_is_refused_naming_it(tmp_path: Path) -> None:
    path = make_store(tmp_path / "d")
    before = entries(path.parent)
    with read_only_directory(path.parent):
        with pytest.raises(StorageError, match="directory") as raised:
            SqliteStore(path)
        message = str(raised.value)
        assert f"{path.parent} is read-only" in message
        assert "not a usable SQLite database" not in message
        assert entries(path.parent) == before


def test_the_read_only_directory_used_here_refuses_new_files(tmp_path: Path) -> None:
    with read_only_directory(tmp_path), pytest.raises(PermissionError):
        os.close(os.open(tmp_path / "new", os.O_WRONLY | os.O_CREAT, 0o600))
    os.close(os.open(tmp_path / "new", os.O_WRONLY | os.O_CREAT, 0o600))
