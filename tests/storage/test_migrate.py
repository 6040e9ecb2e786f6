"""``migrate_store``: 0.1 stores (made by the 0.1 code itself, and small committed fixtures
made the same way) and storage v2 stores (committed fixtures made by the v2 code, on every
backend) become v3 stores that read back exactly what the old code read (v2's values in
v3's spelling, history included); the old store is kept as a backup until the new one is
durable; a crash at each step leaves something a rerun finishes or restarts; a current store
is left alone; unreadable records are reported."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

import mainspring as ms
from mainspring.storage import (
    Execution,
    FileStore,
    HistoryEvent,
    MigrationError,
    SqliteStore,
    StoreInUse,
    StoreNeedsMigration,
    migrate_store,
)
from mainspring.storage._seam import encode, read_v1, unstructure
from tests._read_only_dir import read_only_directory

from . import _v1_app

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")
V1_COMMIT = "0168b12"
NAMES = {"sqlite": "v1.sqlite3", "files": "v1-files"}


# -- helpers -------------------------------------------------------------------------------


def open_v2(path: Path, kind: str) -> Any:
    return SqliteStore(path) if kind == "sqlite" else FileStore(path)


def new_view(path: Path, kind: str) -> dict[str, Any]:
    """Every execution as the current code reads it, as plain JSON data."""
    store = open_v2(path, kind)
    try:
        listing = store.list()
        assert listing.problems == ()
        return {e.id: orjson.loads(orjson.dumps(unstructure(e))) for e in listing.executions}
    finally:
        if kind == "sqlite":
            store.close()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the store at ``root`` (a directory; or a file and its sidecars) with
    its bytes, named relative to the store."""
    if root.is_file():
        files = [root.with_name(root.name + suffix) for suffix in ("", "-wal", "-shm")]
        return {p.name[len(root.name) :]: p.read_bytes() for p in files if p.exists()}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def copy_fixture(source: Path, kind: str, target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    store = target / NAMES[kind]
    if kind == "sqlite":
        shutil.copy2(source / NAMES[kind], store)
    else:
        shutil.copytree(source / NAMES[kind], store)
    return store


def execution(id: str, **changes: Any) -> Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return Execution(id=id, **(fields | changes))


def make_v1_sqlite(path: Path, rows: list[tuple[Any, bytes]]) -> None:
    """A store in the 0.1 SQLite layout (its one table, WAL, as 0.1 made it)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE executions (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
    db.executemany("INSERT INTO executions (id, body) VALUES (?, ?)", rows)
    db.close()


def make_v1_files(path: Path, files: dict[str, bytes]) -> None:
    path.mkdir(mode=0o700)
    (path / ".lock").write_bytes(b"")
    for name, body in files.items():
        (path / name).write_bytes(body)


def make_v1(kind: str, tmp_path: Path, ids: tuple[str, ...] = ("ex-1", "ex-2")) -> Path:
    if kind == "sqlite":
        path = tmp_path / "store.sqlite3"
        make_v1_sqlite(path, [(i, encode(execution(i))) for i in ids])
    else:
        path = tmp_path / "store"
        make_v1_files(path, {f"{i}.json": encode(execution(i)) for i in ids})
    return path


# -- the 0.1 code, in a worktree of its own ------------------------------------------------


@pytest.fixture(scope="session")
def v1_stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stores made by the 0.1 code (commit 0168b12) running in a process of its own."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: cannot check out the 0.1 code")
    found = subprocess.run(
        [git, "-C", str(REPO), "cat-file", "-e", f"{V1_COMMIT}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip(f"commit {V1_COMMIT} (mainspring 0.1) is not in this repository")
    base = tmp_path_factory.mktemp("v1")
    tree = base / "mainspring-0.1"
    out = base / "stores"
    out.mkdir()
    subprocess.run(
        [git, "-C", str(REPO), "worktree", "add", "--detach", str(tree), V1_COMMIT],
        capture_output=True,
        check=True,
    )
    try:
        env = {**os.environ, "PYTHONPATH": str(tree), "MAINSPRING_V1_ROOT": str(tree)}
        subprocess.run(
            [sys.executable, str(Path(__file__).with_name("_v1_writer.py")), str(out)],
            env=env,
            cwd=base,
            check=True,
            timeout=120,
        )
    finally:
        subprocess.run(
            [git, "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
            check=False,
        )
    return out


SOURCES = ["generated", "committed"]


@pytest.fixture(params=SOURCES)
def v1_source(request: pytest.FixtureRequest) -> Path:
    if request.param == "committed":
        return DATA
    path: Path = request.getfixturevalue("v1_stores")
    return path


# -- migrating what 0.1 wrote --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_migrates_a_store_made_by_0_1_and_reads_back_what_0_1_read(
    v1_source: Path, kind: str, tmp_path: Path
) -> None:
    store = copy_fixture(v1_source, kind, tmp_path)
    before = snapshot(store)
    with pytest.raises(StoreNeedsMigration, match="mainspring migrate --store"):
        open_v2(store, kind)
    report = migrate_store(store)
    expected = orjson.loads((v1_source / f"v1-{kind}-view.json").read_bytes())
    assert (report.migrated, report.problems, report.already_current) == (3, (), False)
    assert report.backup_path == store.with_name(store.name + ".v1-backup")
    assert new_view(store, kind) == as_v2(expected)  # leases, plans, tasks raw, checkpoints...
    assert {e["status"] for e in expected.values()} == {
        "completed",
        "paused",
        "waiting_for_clarification",
    }
    # The old store is kept as it was, whole.
    assert snapshot(report.backup_path) == before
    assert read_v1(report.backup_path).executions == read_v1_expected(expected)


def as_v2(view: dict[str, Any]) -> dict[str, Any]:
    """What 0.1 read, as this version reads it: no answer requests (0.1 had none), no
    tokens or cost used and no limits on them (B3: 0.1 kept none)."""
    unused = {"input_tokens": 0, "output_tokens": 0, "cost": "0"}
    added = {"answer_requests": [], "usage": unused, "max_tokens": None, "max_cost": None}
    return {k: v | added for k, v in view.items()}


def read_v1_expected(view: dict[str, Any]) -> tuple[Execution, ...]:
    return tuple(ms.storage._seam.structure(view[k], Execution) for k in sorted(view))


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["sqlite", "files"])
async def test_a_migrated_0_1_run_resumes_and_completes_with_the_current_runtime(
    v1_source: Path, kind: str, tmp_path: Path
) -> None:
    store = copy_fixture(v1_source, kind, tmp_path)
    migrate_store(store)
    async with ms.open_runtime(store=store, tools=_v1_app.TOOLS, agents=_v1_app.AGENTS) as rt:
        paused = await (await rt.resume("ex-paused")).wait()
        waiting = await (await rt.resume("ex-waiting", answer="Lisbon")).wait()
        done = await rt.get("ex-done")
    assert paused.status == "completed", paused
    assert waiting.status == "completed", waiting
    assert done is not None
    assert done.status == "completed"
    # Completed steps were kept: the agent steps finished under 0.1 did not run again.
    records, _ = ms.storage._seam.parse_agent_tasks(stored(store, kind, "ex-paused"))
    tasks = {t.step_id: t for t in records}
    assert tasks["a"].attempt == 1
    assert tasks["a"].findings[0].claim == "the notes are 19 characters long"


def stored(store: Path, kind: str, execution_id: str) -> Execution:
    opened = open_v2(store, kind)
    try:
        found = opened.get(execution_id)
        assert found is not None
        return found  # type: ignore[no-any-return]
    finally:
        if kind == "sqlite":
            opened.close()


# -- crash safety --------------------------------------------------------------------------


class Crash(BaseException):
    """A simulated crash: nothing catches it, nothing is cleaned up."""


def crash_at(monkeypatch: pytest.MonkeyPatch, name: str, call: int) -> None:
    real = getattr(os, name)
    calls = [0]

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == call:
            raise Crash(f"crash at {name} call {call}")
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, failing)


@pytest.mark.parametrize("kind", ["sqlite", "files"])
@pytest.mark.parametrize("call", [1, 2])
def test_a_crash_at_either_rename_is_finished_or_restarted_by_running_again(
    kind: str, call: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = copy_fixture(DATA, kind, tmp_path)
    before = snapshot(store)
    expected = orjson.loads((DATA / f"v1-{kind}-view.json").read_bytes())
    with monkeypatch.context() as patch:
        crash_at(patch, "rename", call)
        with pytest.raises(Crash):
            migrate_store(store)
    backup = store.with_name(store.name + ".v1-backup")
    if call == 1:  # the old store is still in place, the new one built beside it
        assert snapshot(store) == before
        assert not backup.exists()
    else:  # the old store is the backup; the new one waits beside the path
        assert not store.exists()
        assert snapshot(backup) == before
    report = migrate_store(store)
    assert (report.migrated, report.problems, report.backup_path) == (3, (), backup)
    assert new_view(store, kind) == as_v2(expected)
    assert snapshot(backup) == before
    assert sorted(p.name for p in tmp_path.iterdir() if "v3-migrating" in p.name) == []
    assert migrate_store(store).already_current


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_a_crash_while_building_leaves_the_old_store_in_place_and_a_rerun_restarts(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_v1(kind, tmp_path, ids=("ex-1", "ex-2", "ex-3"))
    before = snapshot(store)
    cls = SqliteStore if kind == "sqlite" else FileStore
    real_create = cls.create
    made = [0]

    def create(self: Any, record: Execution) -> bool:
        made[0] += 1
        if made[0] == 2:
            raise Crash("crash half-way through")
        return real_create(self, record)

    with monkeypatch.context() as patch:
        patch.setattr(cls, "create", create)
        with pytest.raises(Crash):
            migrate_store(store)
    assert snapshot(store) == before  # untouched, and still refused by the new code
    assert os.path.lexists(store.with_name(store.name + ".v3-migrating"))
    report = migrate_store(store)
    assert report.migrated == 3
    assert sorted(new_view(store, kind)) == ["ex-1", "ex-2", "ex-3"]


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_a_crash_before_the_last_directory_fsync_reads_as_done(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_v1(kind, tmp_path)
    calls = [0]
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        if os.path.samefile(f"/proc/self/fd/{fd}", tmp_path):
            calls[0] += 1
            if calls[0] == 3:  # before the first rename, after it, after the second
                raise Crash("crash after the last rename")

    if not Path("/proc/self/fd").exists():
        pytest.skip("needs /proc to tell a directory fsync")
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", fsync)
        with pytest.raises(Crash):
            migrate_store(store)
    report = migrate_store(store)
    assert report.already_current
    assert sorted(new_view(store, kind)) == ["ex-1", "ex-2"]


def test_a_half_done_migration_without_a_backup_is_refused(tmp_path: Path) -> None:
    temp = tmp_path / "store.sqlite3.v3-migrating"
    SqliteStore(temp).close()
    with pytest.raises(MigrationError, match="without a backup"):
        migrate_store(tmp_path / "store.sqlite3")
    assert temp.exists()


# -- what it leaves alone, and what it reports ---------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_a_v2_store_is_already_current_and_nothing_changes(kind: str, tmp_path: Path) -> None:
    path = tmp_path / ("store.sqlite3" if kind == "sqlite" else "store")
    store = open_v2(path, kind)
    store.create(execution("ex-1"))
    if kind == "sqlite":
        store.close()
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.rglob("*")}
    report = migrate_store(path)
    assert report.already_current
    assert (report.migrated, report.backup_path) == (0, None)
    after = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.rglob("*")}
    assert after == before


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_unreadable_records_are_reported_and_stay_in_the_backup(kind: str, tmp_path: Path) -> None:
    good = encode(execution("ok"))
    big = encode(execution("big", goal="x" * 5_000))
    elsewhere = encode(execution("other"))
    if kind == "sqlite":
        path = tmp_path / "store.sqlite3"
        rows = [
            ("ok", good),
            ("big", big),
            ("bad-json", b"{not json"),
            ("strict", orjson.dumps({**orjson.loads(good), "id": "strict", "extra": 1})),
            ("named", elsewhere),  # its body says "other"
            ("../escape", good),  # X1
        ]
        make_v1_sqlite(path, rows)
    else:
        path = tmp_path / "store"
        make_v1_files(
            path,
            {
                "ok.json": good,
                "big.json": big,
                "bad-json.json": b"{not json",
                "strict.json": orjson.dumps({**orjson.loads(good), "id": "strict", "extra": 1}),
                "named.json": elsewhere,
                "a b.json": good,  # X1: a space is not an id character
            },
        )
        (path / "fifo.json").unlink(missing_ok=True)
        os.mkfifo(path / "fifo.json")  # never blocks the reader
    report = migrate_store(path, max_bytes=4_096)
    assert report.migrated == 1
    problems = {p.id: p.error for p in report.problems}
    expected = {"big", "bad-json", "strict", "named", "../escape" if kind == "sqlite" else "a b"}
    if kind == "files":
        expected.add("fifo")
    assert set(problems) == expected
    assert "over the 4,096-byte limit" in problems["big"]  # X2: refused before parsing
    assert "extra" in problems["strict"]
    assert "other" in problems["named"]
    assert sorted(new_view(path, kind)) == ["ok"]
    assert report.backup_path is not None
    kept = read_v1(report.backup_path, max_bytes=4_096)
    assert {p.id for p in kept.problems} == expected  # still there, still unreadable


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_a_taken_backup_name_gives_the_next_one(kind: str, tmp_path: Path) -> None:
    path = make_v1(kind, tmp_path)
    taken = path.with_name(path.name + ".v1-backup")
    taken.write_text("someone else's")
    report = migrate_store(path)
    assert report.backup_path == path.with_name(path.name + ".v1-backup.2")
    assert taken.read_text() == "someone else's"
    assert read_v1(report.backup_path).problems == ()


def test_a_sqlite_store_another_process_has_open_is_refused_and_left_alone(
    tmp_path: Path,
) -> None:
    path = make_v1("sqlite", tmp_path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("SELECT count(*) FROM executions").fetchone()
    try:
        with pytest.raises(StoreInUse, match="in use"):
            migrate_store(path)
    finally:
        other.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.sqlite3"]
    assert migrate_store(path).migrated == 2  # once it is closed


def test_a_file_store_locked_by_a_writer_is_refused(tmp_path: Path) -> None:
    import fcntl

    path = make_v1("files", tmp_path)
    fd = os.open(path / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(StoreInUse):
            migrate_store(path)
    finally:
        os.close(fd)
    assert not path.with_name("store.v1-backup").exists()
    assert migrate_store(path).migrated == 2


def test_a_second_migrate_in_the_same_directory_is_refused(tmp_path: Path) -> None:
    import fcntl

    path = make_v1("sqlite", tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(StoreInUse, match="another `mainspring migrate`"):
            migrate_store(path)
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.sqlite3"]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_U5_a_store_in_a_read_only_directory_is_refused_naming_it_and_nothing_changes(
    kind: str, version: int, tmp_path: Path
) -> None:
    # The new store is built beside the old one, which is then renamed: both need the
    # directory writable. Refused as the documented MigrationError, not a bare OSError
    # naming a file that was never made.
    where = tmp_path / "d"
    where.mkdir()
    if version == 1:
        path = make_v1(kind, where)
    else:
        name = "v2.sqlite3" if kind == "sqlite" else "v2-files"
        path = where / name
        if kind == "sqlite":
            shutil.copy2(V2 / name, path)
        else:
            shutil.copytree(V2 / name, path)
    before = snapshot(path)
    with read_only_directory(where):
        with pytest.raises(MigrationError, match="nothing changed") as raised:
            migrate_store(path)
        assert f"{where} is read-only" in str(raised.value)
        assert sorted(p.name for p in where.iterdir()) == [path.name]
        assert snapshot(path) == before


def test_U6_a_current_store_in_a_read_only_directory_is_already_current(tmp_path: Path) -> None:
    where = tmp_path / "d"
    where.mkdir()
    path = where / "store.db"
    SqliteStore(path).close()
    with read_only_directory(where):
        assert migrate_store(path).already_current
        assert sorted(p.name for p in where.iterdir()) == ["store.db"]


def test_the_wal_of_a_0_1_sqlite_store_is_checkpointed_into_the_backup(tmp_path: Path) -> None:
    """A 0.1 writer that crashed left commits in the WAL only: they are migrated, and the
    backup is one self-contained file (no sidecar left beside the new store)."""
    path = make_v1("sqlite", tmp_path)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("INSERT INTO executions VALUES (?, ?)", ("ex-wal", encode(execution("ex-wal"))))
    for suffix in ("", "-wal", "-shm"):  # what a kill -9 leaves: the WAL holds ex-wal
        shutil.copy2(f"{path}{suffix}", crashed / f"store.sqlite3{suffix}")
    db.close()
    path = crashed / "store.sqlite3"
    assert (crashed / "store.sqlite3-wal").stat().st_size > 0
    report = migrate_store(path)
    assert report.migrated == 3
    assert sorted(p.name for p in crashed.iterdir()) == ["store.sqlite3", "store.sqlite3.v1-backup"]
    assert [e.id for e in read_v1(report.backup_path or path).executions] == [
        "ex-1",
        "ex-2",
        "ex-wal",
    ]


def test_read_v1_refuses_what_is_not_a_0_1_store(tmp_path: Path) -> None:
    with pytest.raises(ms.storage.StorageError, match="no store"):
        read_v1(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ms.storage.StorageError, match="not a mainspring store"):
        read_v1(tmp_path / "empty")
    v2 = tmp_path / "v2.sqlite3"
    SqliteStore(v2).close()
    with pytest.raises(ms.storage.StorageError, match=r"not a mainspring 0\.1 store"):
        read_v1(v2)


# -- storage v2 (made by the v2 code, committed under data/v2) -> v3, on every backend -------

V2 = DATA / "v2"
V2_VIEW = orjson.loads((V2 / "v2-view.json").read_bytes())


def _v2_stop(text: str) -> dict[str, Any]:
    # As the v2 code wrote them: "<operation>[.cascade]:<task id>".
    operation, _, task_id = text.partition(":")
    cascade = operation.endswith(".cascade")
    return {
        "operation_id": operation.removesuffix(".cascade"),
        "task_id": task_id,
        "cascade": cascade,
    }


def _v2_approval(text: str) -> dict[str, Any]:
    # "plan.v<n>" or "step.<id>.v<n>".
    rest, _, version = text.rpartition(".v")
    return {"plan_version": int(version), "step_id": None if rest == "plan" else rest[5:]}


_RESPELLED = {"handing-off": "handing_off", "awaiting-delivery": "awaiting_delivery"}


def as_v3(raw: dict[str, Any]) -> dict[str, Any]:
    """What the v2 code read back, as v3 reads the migrated store: states respelled, stop
    requests and approvals typed, a stop's audit line naming its request (its reason free)."""
    v3 = dict(raw)
    v3["stop_requests"] = [_v2_stop(text) for text in raw["stop_requests"]]
    v3["approvals"] = [_v2_approval(text) for text in raw["approvals"]]
    v3["controls"] = [
        {**c, "reason": "", "stop": _v2_stop(c["reason"])} if c["action"] == "stop-task" else c
        for c in raw["controls"]
    ]
    for part, field in (
        ("workers", "status"),
        ("worker_tasks", "state"),
        ("worker_trail", "status"),
    ):
        if part in raw:
            v3[part] = [{**r, field: _RESPELLED.get(r[field], r[field])} for r in raw[part]]
    return v3


def history_as_v3(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Fields added to history entries since v2 (the timeline's owner, attempt, ...) read as
    # None on an entry written before them.
    fields = {f.name: None for f in attrs.fields(HistoryEvent)}
    return [
        fields
        | (
            {**e, "status": _RESPELLED.get(e["status"], e["status"])}
            if e["kind"] == "worker"
            else e
        )
        for e in events
    ]


def test_the_v2_fixtures_hold_every_value_v3_spells_differently() -> None:
    raw = orjson.dumps(V2_VIEW)
    for old in (b"handing-off", b"awaiting-delivery", b"op-1.cascade:t-code", b"step.b.v1"):
        assert old in raw
    stopping = V2_VIEW["executions"]["ex-stopping"]
    assert [c["reason"] for c in stopping["controls"][:2]] == ["op-1.cascade:t-code", "op-2:t-ask"]


def _migrated_view(store: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    listing = store.list()
    assert listing.problems == ()
    executions = {e.id: orjson.loads(orjson.dumps(unstructure(e))) for e in listing.executions}
    history = {
        e.id: [orjson.loads(orjson.dumps(unstructure(h))) for h in store.history(e.id)]
        for e in listing.executions
    }
    return executions, history


def _assert_reads_as_v2_did(store: Any, kind: str) -> None:
    executions, history = _migrated_view(store)
    expected = V2_VIEW["executions"]
    assert sorted(executions) == sorted(expected) == ["ex-done", "ex-paused", "ex-stopping"]
    for execution_id, raw in expected.items():
        assert executions[execution_id] == as_v3(raw), execution_id
        assert history[execution_id] == history_as_v3(V2_VIEW["history"][kind][execution_id])
    stopping = store.get("ex-stopping")
    assert stopping.stop_requests == (
        ms.storage.StopRequest(operation_id="op-1", task_id="t-code", cascade=True),
        ms.storage.StopRequest(operation_id="op-2", task_id="t-ask"),
    )
    assert stopping.answer_requests[0].ask == ms.storage.QuestionId(0)
    assert store.get("ex-done").approvals == (
        ms.storage.Approval(plan_version=1),
        ms.storage.Approval(plan_version=1, step_id="b"),
    )
    # The typed records parse the new spelling: nothing is left Unreadable.
    assert all(isinstance(w, ms.storage.WorkerRecord) for w in stopping.workers)
    assert [w.status for w in stopping.workers] == [
        ms.storage.WorkerStatus.STOPPED,
        ms.storage.WorkerStatus.HANDING_OFF,
    ]
    assert all(isinstance(t, ms.storage.WorkerTask) for t in stopping.worker_tasks)
    assert ms.storage.WorkerTaskState.AWAITING_DELIVERY in {t.state for t in stopping.worker_tasks}


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_a_v2_store_made_by_the_v2_code_migrates_and_reads_back_as_it_was(
    kind: str, tmp_path: Path
) -> None:
    name = "v2.sqlite3" if kind == "sqlite" else "v2-files"
    store = tmp_path / name
    if kind == "sqlite":
        shutil.copy2(V2 / name, store)
    else:
        shutil.copytree(V2 / name, store)
    before = snapshot(store)
    with pytest.raises(StoreNeedsMigration, match="storage layout 2"):
        open_v2(store, kind)
    assert snapshot(store) == before  # refused, not changed
    report = migrate_store(store)
    backup = tmp_path / f"{name}.v2-backup"
    assert (report.migrated, report.problems, report.backup_path) == (3, (), backup)
    assert (report.from_layout, report.to_layout) == (2, 3)
    assert snapshot(backup) == before  # the old store, kept as it was
    new = open_v2(store, kind)
    try:
        _assert_reads_as_v2_did(new, kind)
    finally:
        new.close()
    again = migrate_store(store)
    assert again.already_current
    assert again.migrated == 0


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_a_crash_while_building_from_v2_leaves_the_v2_store_in_place(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "v2.sqlite3" if kind == "sqlite" else "v2-files"
    store = tmp_path / name
    if kind == "sqlite":
        shutil.copy2(V2 / name, store)
    else:
        shutil.copytree(V2 / name, store)
    before = snapshot(store)
    from mainspring.storage import _migrate

    def crash(*_: Any) -> None:
        raise Crash("crash while reading back")

    with monkeypatch.context() as patch:
        patch.setattr(_migrate, "_read_back", crash)
        with pytest.raises(Crash):
            migrate_store(store)
    assert snapshot(store) == before  # untouched, still v2
    assert os.path.lexists(store.with_name(store.name + ".v3-migrating"))
    assert migrate_store(store).migrated == 3
    new = open_v2(store, kind)
    try:
        _assert_reads_as_v2_did(new, kind)
    finally:
        new.close()


def _load_v2_schema(url: str, schema: str) -> None:
    """A fresh schema at version 4 (storage v2), holding the rows the v2 code wrote."""
    import psycopg

    from mainspring.storage._backends.postgres.schema import upgrade

    dump = orjson.loads((V2 / "v2-postgres.json").read_bytes())
    with psycopg.connect(url, autocommit=True) as conn:
        upgrade(conn, schema, to=4)  # versions 1..4 are as the v2 code made them
        with conn.transaction():
            for table, content in dump.items():
                if not content["rows"]:
                    continue
                columns = content["columns"]
                conn.execute(f'DELETE FROM "{schema}"."{table}"')
                binary = {"head", "checkpoints", "body"}
                for row in content["rows"]:
                    values = [
                        bytes.fromhex(v) if c in binary and v is not None else v
                        for c, v in zip(columns, row, strict=True)
                    ]
                    names = ", ".join(columns)
                    marks = ", ".join(["%s"] * len(columns))
                    conn.execute(
                        f'INSERT INTO "{schema}"."{table}" ({names}) VALUES ({marks})', values
                    )


def test_a_v2_postgres_schema_made_by_the_v2_code_migrates_and_reads_back_as_it_was() -> None:
    from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

    server = require_server()
    schema = fresh_schema()
    url = with_schema(server, schema)
    try:
        _load_v2_schema(server, schema)
        old = ms.storage.PostgresStore(url, read_only=True)
        try:  # reading never writes: the v2 rows are read as v3 spells them, in memory
            _assert_reads_as_v2_did(old, "postgres")
        finally:
            old.close()
        report = migrate_store(url)
        assert (report.kind, report.migrated, report.problems) == ("postgres", 3, ())
        assert (report.from_layout, report.already_current) == (2, False)
        store = ms.storage.PostgresStore(url, read_only=True)
        try:
            _assert_reads_as_v2_did(store, "postgres")
        finally:
            store.close()
        again = migrate_store(url)
        assert again.already_current
    finally:
        drop_schema(schema)
