"""U3: ``doctor`` runs SQLite's quick_check on the store's databases (a SQLite store, a
FileStore's memory database), read-only, and reports damage as a problem that names the file,
also when the store is too damaged to open."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_FAILED, EXIT_NO_STORE, EXIT_OK
from mainspring.cli._integrity import MEMORY_FILE, quick_check

from .._cli_kit import inc, run_cli

PAGE = 4096


def _make_store(path: Path) -> None:
    """Three finished runs of five steps: some 40 pages, none free."""

    async def build() -> None:
        async with ms.open_runtime(store=path, tools={"inc": inc}) as rt:
            for i in range(3):
                steps = tuple(ms.PlanStep(id=f"s{j}", tool="inc", input={"x": j}) for j in range(5))
                plan = ms.Plan(id="p", goal="g", steps=steps)
                await (await rt.start(f"goal {i}", plan, execution_id=f"ex-{i}")).wait()

    anyio.run(build)


def _overwrite(path: Path, at: int, size: int) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        f.write(b"\xab" * size)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite3"
    _make_store(path)
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path


def test_u3_doctor_reports_8_kib_overwritten_mid_file_naming_the_file(store: Path) -> None:
    middle = store.stat().st_size // 2 // PAGE * PAGE
    _overwrite(store, middle, 2 * PAGE)  # two pages, the file header intact
    code, out = run_cli("doctor", "--store", str(store))
    assert code == EXIT_FAILED  # it used to: exit 0, "all well"
    assert "all well" not in out
    assert f"corrupt              {store}: SQLite finds: " in out
    code, out = run_cli("doctor", "--store", str(store), "--json")
    assert code == EXIT_FAILED
    report = json.loads(out)
    assert report["ok"] is False
    corrupt = [f for f in report["findings"] if f["problem"] == "corrupt"]
    assert [f["id"] for f in corrupt] == [str(store)]


def test_u3_a_store_too_damaged_to_open_is_an_exit_1_report(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _overwrite(store, 0, 2 * PAGE)  # the header too: SQLite cannot even open it
    code, out = run_cli("doctor", "--store", str(store))
    assert code == EXIT_FAILED  # it used to: exit 5, "cannot use the store"
    assert "the store could not be read" in out
    assert f"corrupt              {store}: SQLite finds: file is not a database" in out
    code, out = run_cli("doctor", "--store", str(store), "--json")
    assert code == EXIT_FAILED
    report = json.loads(out)
    assert report["ok"] is False
    assert report["executions"] is None
    assert {f["problem"] for f in report["findings"]} == {"corrupt", "unreadable-store"}
    assert capsys.readouterr().err == ""


def test_u3_doctor_checks_a_file_stores_memory_database(tmp_path: Path) -> None:
    files = tmp_path / "files"

    async def build() -> None:
        async with ms.open_runtime(store=files, tools={"inc": inc}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="inc"),))
            await (await rt.start("goal", plan, execution_id="ex-1")).wait()

    anyio.run(build)
    assert run_cli("doctor", "--store", str(files))[0] == EXIT_OK
    memory = files / MEMORY_FILE
    memory.write_bytes(b"\xab" * 2 * PAGE)
    code, out = run_cli("doctor", "--store", str(files), "--json")
    assert code == EXIT_FAILED
    [finding] = json.loads(out)["findings"]
    assert finding["id"] == str(memory)
    assert finding["problem"] == "corrupt"


def test_u3_a_sound_store_passes_and_the_check_changes_nothing(store: Path) -> None:
    before = store.read_bytes()
    assert quick_check(store) is None
    code, out = run_cli("doctor", "--store", str(store))
    assert (code, out.splitlines()[-1]) == (EXIT_OK, "all well")
    assert store.read_bytes() == before


def test_u3_no_store_at_all_stays_exit_5(tmp_path: Path) -> None:
    assert run_cli("doctor", "--store", str(tmp_path / "none.sqlite3"))[0] == EXIT_NO_STORE


def test_the_memory_file_doctor_checks_is_the_one_a_file_store_remembers_in(
    tmp_path: Path,
) -> None:
    files = tmp_path / "files"

    async def remember() -> None:
        async with ms.open_runtime(store=files) as rt:
            await rt.memory.remember("the deploy uses blue-green rollouts")

    anyio.run(remember)
    assert (files / MEMORY_FILE).is_file()


def test_u3_a_database_that_cannot_be_opened_here_is_not_called_corrupt(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a read-only mount does to a WAL store: SQLite cannot open (or create) its -wal,
    # SQLITE_CANTOPEN. Its pages are sound; that it was not checked is said, not "corrupt".
    Path(f"{store}-wal").unlink(missing_ok=True)
    Path(f"{store}-wal").mkdir()
    code, out = run_cli("doctor", "--store", str(store), "--json")
    report = json.loads(out)
    assert "corrupt" not in {f["problem"] for f in report["findings"]}
    assert "not checked for damage" in capsys.readouterr().err
    assert code == EXIT_FAILED  # the store cannot be read here: said, with exit 1
    with pytest.raises(sqlite3.OperationalError):
        quick_check(store)
