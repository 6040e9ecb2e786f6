"""Fault injection into FileStore's every system call: EIO and ENOSPC, once and persistently.

Whatever fails, nothing is acknowledged that is not durable, the stored record is always a
complete version (the previous one, or — only after the rename itself succeeded — the one being
written), and no temp file is left behind.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import _file

CALLS = ["open", "write", "fsync", "replace", "mkstemp", "open-dir", "fsync-dir"]
AFTER_RENAME = {"open-dir", "fsync-dir"}  # the new version is in place, its durability unknown


def execution(**changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"id": "ex-1", "goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(**(fields | changes))


def _inject(monkeypatch: pytest.MonkeyPatch, call: str, code: int, times: int) -> list[int]:
    failures = [0]

    def fail() -> None:
        if times < 0 or failures[0] < times:
            failures[0] += 1
            raise OSError(code, os.strerror(code))

    def wrap(name: str, original: Callable[..., Any], when: Callable[..., bool]) -> None:
        def patched(*args: Any, **kwargs: Any) -> Any:
            if when(*args, **kwargs):
                fail()
            return original(*args, **kwargs)

        monkeypatch.setattr(_file.os if name != "mkstemp" else _file.tempfile, name, patched)

    real_open = os.open
    if call == "open":  # reading the stored record
        wrap("open", real_open, lambda path, *a, **k: str(path).endswith("ex-1.json"))
    elif call == "open-dir":  # opening the directory to fsync it, after the rename
        wrap("open", real_open, lambda path, flags, *a, **k: bool(flags & os.O_DIRECTORY))
    elif call == "write":
        wrap("write", os.write, lambda *a, **k: True)
    elif call == "fsync":
        first = [True]

        def file_fsync(*a: Any, **k: Any) -> bool:  # the temp file's fsync comes first
            hit = first[0]
            first[0] = False
            return hit

        wrap("fsync", os.fsync, file_fsync)
    elif call == "fsync-dir":
        seen = [0]

        def dir_fsync(*a: Any, **k: Any) -> bool:  # the directory's fsync comes second
            seen[0] += 1
            return seen[0] % 2 == 0

        wrap("fsync", os.fsync, dir_fsync)
    elif call == "replace":
        wrap("replace", os.replace, lambda *a, **k: True)
    elif call == "mkstemp":
        wrap("mkstemp", _file.tempfile.mkstemp, lambda *a, **k: True)
    return failures


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
@pytest.mark.parametrize("times", [1, -1], ids=["once", "persistent"])
def test_a_failing_syscall_never_acknowledges_and_never_leaves_a_mix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, code: int, times: int
) -> None:
    store = ms.storage.FileStore(tmp_path / "store")
    store.create(execution())
    store.acquire("ex-1", "a:1:x", ttl=3600)
    before = store.get("ex-1")
    assert before is not None
    attempted = execution(status="running", calls_used=5)
    store._generation = -1  # forget what this store wrote: the read must go to the disk
    failures = _inject(monkeypatch, call, code, times)
    with pytest.raises(OSError, match=os.strerror(code)) as info:
        store.commit_progress(attempted, "a:1:x")
    assert info.value.errno == code
    assert failures[0] >= 1
    monkeypatch.undo()
    after = store.get("ex-1")
    assert after is not None
    if call in AFTER_RENAME:
        assert after.calls_used in (0, 5)
    else:
        assert after == before  # the previous version, intact
    assert not [p for p in (tmp_path / "store").iterdir() if p.name.startswith(".tmp-")]
    # And the store still works once the fault is gone.
    assert store.commit_progress(attempted, "a:1:x").ok


class _FailingConnection:
    """Stands in for SqliteStore's connection; fails the chosen statement with an I/O error."""

    def __init__(self, real: Any, statement: str, times: int) -> None:
        self.real = real
        self.statement = statement
        self.times = times
        self.failures = 0

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith(self.statement) and (self.times < 0 or self.failures < self.times):
            self.failures += 1
            raise sqlite3.OperationalError("disk I/O error")
        return self.real.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("statement", ["BEGIN", "SELECT", "INSERT", "COMMIT"])
@pytest.mark.parametrize("times", [1, -1], ids=["once", "persistent"])
def test_sqlite_a_failing_statement_never_acknowledges(
    tmp_path: Path, statement: str, times: int
) -> None:
    store = ms.storage.SqliteStore(tmp_path / "store.db")
    try:
        store.create(execution())
        store.acquire("ex-1", "a:1:x", ttl=3600)
        before = store.get("ex-1")
        real = store._db
        store._data_version = None  # forget what this store wrote: the SELECT must run
        store._db = _FailingConnection(real, statement, times)  # type: ignore[assignment]
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            store.commit_progress(execution(status="running", calls_used=5), "a:1:x")
        store._db = real
        assert not real.in_transaction  # rolled back, nothing half-open
        assert store.get("ex-1") == before  # the previous version, intact
        assert store.commit_progress(execution(calls_used=6), "a:1:x").ok  # and it recovers
        after = store.get("ex-1")
        assert after is not None
        assert after.calls_used == 6
    finally:
        store.close()
