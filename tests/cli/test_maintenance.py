"""``mainspring migrate`` and ``mainspring prune``: what they print (text and --json),
their exit codes, and usage errors for a bad duration or status."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from mainspring.cli import EXIT_BUSY, EXIT_FAILED, EXIT_NO_STORE, EXIT_OK, EXIT_USAGE
from mainspring.storage import Execution, FileStore, SqliteStore
from mainspring.storage._seam import encode

from .._cli_kit import run_cli
from .._read_only_dir import read_only_directory

DATA = Path(__file__).parents[1] / "storage" / "data"


def v1_copy(tmp_path: Path, kind: str) -> Path:
    if kind == "sqlite":
        target = tmp_path / "v1.sqlite3"
        shutil.copy2(DATA / "v1.sqlite3", target)
    else:
        target = tmp_path / "v1-files"
        shutil.copytree(DATA / "v1-files", target)
    return target


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_migrate_converts_a_0_1_store_then_says_it_is_current(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = v1_copy(tmp_path, kind)
    code, out = run_cli("ls", "--store", str(store))
    assert code == EXIT_NO_STORE
    assert f"mainspring migrate --store {store}" in capsys.readouterr().err
    code, out = run_cli("migrate", "--store", str(store))
    assert code == EXIT_OK
    assert f"3 executions migrated to storage layout 3; the 0.1 store is kept at {store}" in out
    assert (tmp_path / f"{store.name}.v1-backup").exists()
    code, out = run_cli("ls", "--store", str(store), "--json")
    assert code == EXIT_OK
    assert sorted(row["id"] for row in json.loads(out)) == ["ex-done", "ex-paused", "ex-waiting"]
    code, out = run_cli("migrate", "--store", str(store), "--json")
    assert code == EXIT_OK
    assert json.loads(out) == {
        "store": str(store),
        "kind": kind,
        "status": "current",
        "migrated": 0,
        "backup": None,
        "problems": [],
        "from_layout": 3,
    }
    code, out = run_cli("migrate", "--store", str(store))
    assert "already current (storage layout 3): nothing changed" in out


def test_migrate_reports_unreadable_records_with_exit_1(tmp_path: Path) -> None:
    store = tmp_path / "v1"
    store.mkdir()
    good = Execution(id="ok", goal="g", created_at=1.0, updated_at=1.0)
    (store / "ok.json").write_bytes(encode(good))
    (store / "bad.json").write_bytes(b"{")
    code, out = run_cli("migrate", "--store", str(store), "--json")
    assert code == EXIT_FAILED
    report = json.loads(out)
    assert (report["status"], report["migrated"]) == ("migrated", 1)
    assert [p["id"] for p in report["problems"]] == ["bad"]
    assert report["backup"] == f"{store}.v1-backup"


def test_migrate_without_a_store_is_a_json_error_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_cli("migrate", "--store", str(tmp_path / "missing.sqlite3"), "--json")
    assert (code, out) == (EXIT_NO_STORE, "")
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == EXIT_NO_STORE
    assert "no store at" in error["error"]


def test_migrate_of_a_store_in_use_is_busy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    store = v1_copy(tmp_path, "sqlite")
    other = sqlite3.connect(store)
    other.execute("SELECT 1 FROM executions").fetchall()
    try:
        code, _ = run_cli("migrate", "--store", str(store))
    finally:
        other.close()
    assert code == EXIT_BUSY
    assert "in use by another process" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["sqlite", "files"])
@pytest.mark.parametrize("as_json", [False, True])
def test_U5_migrate_in_a_read_only_directory_is_refused_with_exit_1_and_nothing_changes(
    tmp_path: Path, kind: str, as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "d"
    where.mkdir()
    store = v1_copy(where, kind)
    before = sorted(str(p.relative_to(where)) for p in where.rglob("*"))
    with read_only_directory(where):
        code, out = run_cli("migrate", "--store", str(store), *(["--json"] if as_json else []))
    err = capsys.readouterr().err
    assert code == EXIT_FAILED
    assert out == ""
    message = json.loads(err)["error"] if as_json else err
    assert f"{where} is read-only" in message
    assert "not migrated" in message
    assert "Traceback" not in err
    assert sorted(str(p.relative_to(where)) for p in where.rglob("*")) == before


def seed(store: SqliteStore | FileStore) -> None:
    for id, status, at in (
        ("old-done", "completed", 1_000.0),
        ("old-paused", "paused", 1_000.0),
        ("new-done", "completed", time.time() + 3_600),
    ):
        store.create(Execution(id=id, goal="g", status=status, created_at=at, updated_at=at))


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_prune_dry_run_then_prune(tmp_path: Path, kind: str) -> None:
    path = tmp_path / ("store.sqlite3" if kind == "sqlite" else "store")
    store = SqliteStore(path) if kind == "sqlite" else FileStore(path)
    seed(store)
    if isinstance(store, SqliteStore):
        store.close()
    code, out = run_cli("prune", "--store", str(path), "--older-than", "7d", "--dry-run")
    assert code == EXIT_OK
    assert out.splitlines() == [
        "would delete old-done",
        "1 would be deleted (dry run: nothing was deleted)",
    ]
    code, out = run_cli("ls", "--store", str(path), "--json")
    assert len(json.loads(out)) == 3  # nothing went
    code, out = run_cli("prune", "--store", str(path), "--older-than", "2w", "--json")
    assert code == EXIT_OK
    assert json.loads(out) == {"dry_run": False, "deleted": ["old-done"], "skipped": []}
    code, out = run_cli("prune", "--store", str(path), "--older-than", "30s", "--status", "failed")
    assert out.splitlines() == ["0 deleted"]
    code, out = run_cli("ls", "--store", str(path), "--json")
    assert sorted(row["id"] for row in json.loads(out)) == ["new-done", "old-paused"]


@pytest.mark.parametrize(
    "argv",
    [
        ("--older-than", "7"),
        ("--older-than", "7x"),
        ("--older-than=-1d",),
        ("--older-than", "1.5h"),
        ("--older-than", "7d", "--status", "running"),
        (),
    ],
)
def test_prune_usage_errors(
    tmp_path: Path, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path)
    seed(store)
    store.close()
    code, out = run_cli("prune", "--store", str(path), *argv, "--json")
    assert (code, out) == (EXIT_USAGE, "")
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == EXIT_USAGE
    code, _ = run_cli("prune", "--store", str(path), *argv)
    assert code == EXIT_USAGE
    if argv and argv[0].startswith("--older-than") and "--status" not in argv:
        assert "is not a duration" in capsys.readouterr().err


# ----------------------------------------------------------------------
# ``prune`` where nothing has run yet.


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$MAINSPRING_HOME`` where no run has ever been made (not even the directory)."""
    path = tmp_path / "home"
    monkeypatch.setenv("MAINSPRING_HOME", str(path))
    return path


@pytest.mark.parametrize("dry_run", [False, True])
def test_U6_prune_where_nothing_has_run_yet_deletes_nothing_and_says_so(
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
