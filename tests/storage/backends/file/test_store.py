"""Fault injection into FileStore's every system call: EIO and ENOSPC, once and persistently.

Whatever fails, nothing is acknowledged that is not durable, the stored record is always a
complete version (the previous one: a failed append is cut off again), and no temp file is
left behind. A compaction that fails leaves the journal intact and the commit, which was
durable before it began, acknowledged.
"""

from __future__ import annotations

import errno
import itertools
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage._backends.file import frames as _frames
from mainspring.storage._backends.file import store as _file

#: Every call of an append (a commit): the journal opened, positioned, written, synced.
APPEND = ["open", "lseek", "write", "fsync"]
#: Every call of a compaction: temp file, its write and sync, the rename, the directory sync.
COMPACT = ["mkstemp", "write", "fsync", "replace", "fsync-dir"]


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

        target = _frames.tempfile if name == "mkstemp" else _frames.os
        monkeypatch.setattr(target, name, patched)

    if call == "open":  # opening the journal to append
        wrap("open", os.open, lambda path, flags, *a, **k: bool(flags & os.O_WRONLY))
    elif call == "fsync-dir":
        real_open = os.open
        directories: set[int] = set()

        def opening(path: Any, flags: int, *a: Any, **k: Any) -> int:
            fd = real_open(path, flags, *a, **k)
            if flags & os.O_DIRECTORY:
                directories.add(fd)
            return fd

        monkeypatch.setattr(_frames.os, "open", opening)
        wrap("fsync", os.fsync, lambda fd, *a, **k: fd in directories)
    elif call == "mkstemp":
        wrap("mkstemp", _frames.tempfile.mkstemp, lambda *a, **k: True)
    else:
        wrap(call, getattr(os, call), lambda *a, **k: True)
    return failures


def _journal_store(tmp_path: Path) -> tuple[ms.storage.FileStore, ms.storage.Execution]:
    store = ms.storage.FileStore(tmp_path / "store")
    store.create(execution())
    store.acquire("ex-1", "a:1:x", ttl=3600)
    before = store.get("ex-1")
    assert before is not None
    return store, before


@pytest.mark.parametrize("call", APPEND)
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
@pytest.mark.parametrize("times", [1, -1], ids=["once", "persistent"])
def test_a_failing_append_never_acknowledges_and_never_leaves_a_mix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, code: int, times: int
) -> None:
    store, before = _journal_store(tmp_path)
    attempted = attrs_evolve(before, status="running", calls_used=5)
    failures = _inject(monkeypatch, call, code, times)
    with pytest.raises(OSError, match=os.strerror(code)) as info:
        store.commit_run(attempted, "a:1:x")
    assert info.value.errno == code
    assert failures[0] >= 1
    monkeypatch.undo()
    assert ms.storage.FileStore(store.path).get("ex-1") == before  # intact, seen by others too
    assert store.get("ex-1") == before
    assert not [p for p in store.path.iterdir() if p.name.startswith(".tmp-")]
    # And the store still works once the fault is gone.
    assert store.commit_run(attempted, "a:1:x").ok
    after = ms.storage.FileStore(store.path).get("ex-1")
    assert after is not None
    assert after.calls_used == 5


@pytest.mark.parametrize("call", COMPACT)
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_a_failing_compaction_keeps_the_journal_and_the_durable_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, code: int
) -> None:
    store, before = _journal_store(tmp_path)
    monkeypatch.setattr(_file, "_COMPACT_AT", 0)  # every commit compacts
    journal = store.path / "ex-1.journal"
    size = journal.stat().st_size
    attempted = attrs_evolve(before, status="running", calls_used=5)
    failures = [0]
    temp: set[int] = set()
    real_mkstemp = _frames.tempfile.mkstemp

    def fail() -> None:
        failures[0] += 1
        raise OSError(code, os.strerror(code))

    def mkstemp(*args: Any, **kwargs: Any) -> Any:
        if call == "mkstemp":
            fail()
        fd, name = real_mkstemp(*args, **kwargs)
        temp.add(fd)
        return fd, name

    def on(name: str, when: Callable[..., bool]) -> None:
        original = getattr(os, name)

        def patched(*args: Any, **kwargs: Any) -> Any:
            if when(*args, **kwargs):
                fail()
            return original(*args, **kwargs)

        monkeypatch.setattr(_frames.os, name, patched)

    monkeypatch.setattr(_frames.tempfile, "mkstemp", mkstemp)
    if call in ("write", "fsync"):  # the temp file's, not the journal's append
        on(call, lambda fd, *a, **k: fd in temp)
    elif call == "replace":
        on("replace", lambda *a, **k: True)
    elif call == "fsync-dir":
        real_open = os.open
        directories: set[int] = set()

        def opening(path: Any, flags: int, *a: Any, **k: Any) -> int:
            fd = real_open(path, flags, *a, **k)
            if flags & os.O_DIRECTORY:
                directories.add(fd)
            return fd

        monkeypatch.setattr(_frames.os, "open", opening)
        on("fsync", lambda fd, *a, **k: fd in directories)
    assert store.commit_run(attempted, "a:1:x").ok  # durable before compaction began
    assert failures[0] >= 1
    monkeypatch.undo()
    if call != "fsync-dir":  # the rename is in place once only the directory sync failed
        assert journal.stat().st_size > size  # not compacted: the appended journal, intact
    after = ms.storage.FileStore(store.path).get("ex-1")
    assert after is not None
    assert after.calls_used == 5
    assert not [p for p in store.path.iterdir() if p.name.startswith(".tmp-")]


def test_compaction_keeps_every_version_readable_and_shrinks_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_file, "_COMPACT_AT", 4096)
    store, before = _journal_store(tmp_path)
    journal = store.path / "ex-1.journal"
    sizes = []
    for n in range(300):
        assert store.commit_run(attrs_evolve(before, calls_used=n), "a:1:x").ok
        sizes.append(journal.stat().st_size)
        got = ms.storage.FileStore(store.path).get("ex-1")
        assert got is not None
        assert got.calls_used == n
    assert max(sizes) < 3 * 4096 + 2048  # compacted, again and again
    assert any(later < earlier for earlier, later in itertools.pairwise(sizes))
    history = ms.storage.FileStore(store.path).history("ex-1")
    assert [event.kind for event in history][:1] == ["created"]  # history survives compaction


def attrs_evolve(record: ms.storage.Execution, **changes: Any) -> ms.storage.Execution:
    import attrs

    return attrs.evolve(record, **changes)


class _FailingConnection:
    """Stands in for SqliteStore's connection; fails the chosen statement with an I/O error."""

    def __init__(self, real: Any, statement: str, times: int) -> None:
        self.real = real
        self.statement = statement
        self.times = times
        self.failures = 0

    def _check(self, sql: str) -> None:
        if sql.startswith(self.statement) and (self.times < 0 or self.failures < self.times):
            self.failures += 1
            raise sqlite3.OperationalError("disk I/O error")

    def execute(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self.real.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self.real.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("statement", ["BEGIN", "SELECT", "UPDATE", "INSERT", "COMMIT"])
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
            store.commit_run(execution(status="running", calls_used=5), "a:1:x")
        store._db = real
        assert not real.in_transaction  # rolled back, nothing half-open
        assert store.get("ex-1") == before  # the previous version, intact
        assert store.commit_run(execution(calls_used=6), "a:1:x").ok  # and it recovers
        after = store.get("ex-1")
        assert after is not None
        assert after.calls_used == 6
    finally:
        store.close()


def test_X2_following_the_history_asks_for_no_more_memory_than_the_journal_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A follower reads the journal again and again (events --follow, the web view's stream):
    # each read asked for the whole bound (the record's size limit) and so reserved it.
    store = ms.storage.FileStore(tmp_path / "files")
    assert store.create(execution(id="ex-1"))
    journal = tmp_path / "files" / "executions" / "ex-1.journal"
    if not journal.exists():
        (journal,) = (tmp_path / "files").rglob("ex-1*")
    size = journal.stat().st_size
    real_fdopen = os.fdopen
    reads: list[int] = []

    class Spy:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def seek(self, offset: int) -> int:
            return int(self.handle.seek(offset))

        def read(self, n: int) -> bytes:
            reads.append(n)
            return bytes(self.handle.read(n))

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: Spy(real_fdopen(*a, **k)))
    assert [e.kind for e in store.history("ex-1")] == ["created"]
    assert reads
    assert max(reads) <= size + 1
