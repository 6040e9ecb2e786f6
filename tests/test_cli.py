"""The `mainspring` command: the durable demo (killed, resumed, finished, nothing durable
re-run) and the reasons demo (every actor's own view of why it stopped)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import mainspring as ms
from mainspring._demos import REASONS, run_reasons_demo
from mainspring.cli import main
from mainspring.cli._parser import DEMO_REASONS

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("reason", ["cancel", "pause", "timeout"])
async def test_demo_every_actor_reports_the_root_reason(reason: str) -> None:
    out = io.StringIO()
    final = await run_reasons_demo(out, reason_name=reason, steps=3)
    text = out.getvalue()
    assert final.kind == reason
    paths = ["/execution"] + [
        f"/execution/{agent}{tool}"
        for agent in ("planner", "researcher", "writer")
        for tool in ("", "/tool")
    ]
    for path in paths:
        assert f"  {path:<28} stopped: " in text, path
    assert text.count(f"(root cause: {reason}: ") == 6  # every descendant names the root
    assert "interrupted during step" in text
    assert "nothing was left running" in text


def test_the_durable_demo_survives_its_own_kill_and_runs_again_on_the_same_store_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each backend in turn, on one --store-dir: every run is a new one (a fresh id, its own
    side-effect ledger) beside the earlier runs in the same store."""
    ids = []
    for backend in ("asyncio", "trio"):
        # The second run used to end in an ExecutionExists traceback and exit 1.
        assert main(["demo", "--backend", backend, "--store-dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        rows = {
            cells[1].strip(): cells[2].strip()
            for line in out.splitlines()
            if (cells := line.split("|")) and len(cells) == 3
        }
        assert rows["final status"] == "completed"
        assert rows["durable steps or inner steps run again"] == "0"
        assert int(rows["steps durable when worker 1 was killed"]) >= 8
        assert rows["store"] == str(tmp_path / "mainspring.sqlite3")
        assert "killed worker 1 with SIGKILL" in out
        assert "(not a terminal: answering 'yes')" in out
        assert "resumed: " in out
        [shown] = [line for line in out.splitlines() if "mainspring show " in line]
        ids.append(shown.rsplit(" ", 1)[1])
        # The ledger agrees: every side effect that began also ended, after the resumes.
        ledger = Path(rows["side-effect ledger"])
        assert ledger.parent == tmp_path
        assert sum(line.endswith(" end") for line in ledger.read_text().split("\n")) >= 18
    assert len(set(ids)) == 2
    assert all(i.startswith("demo-research-") for i in ids)
    db = ms.storage.SqliteStore(tmp_path / "mainspring.sqlite3", read_only=True)
    try:
        assert sorted(e.id for e in db.list().executions) == sorted(ids)
    finally:
        db.close()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_reasons_demo_command_runs_on_both_backends(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-reasons", "--backend", backend, "--steps", "2"]) == 0
    assert "/execution                   stopped: it was cancelled" in capsys.readouterr().out


def test_cli_rejects_bad_input_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo-reasons", "--steps", "0"]) == 2
    err = capsys.readouterr().err
    assert "--steps must be between 1 and 1000" in err
    assert err.startswith("usage: mainspring")
    assert main([]) == 2


def test_the_parser_offers_exactly_the_reasons_demo_s_reasons() -> None:
    # The parser keeps its own copy, so that parsing never imports the demos.
    assert tuple(sorted(REASONS)) == DEMO_REASONS


def test_commands_other_than_the_demos_do_not_import_them(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from mainspring.cli import main\n"
        "main(['ls', '--store', sys.argv[1]])\n"
        "assert not [m for m in sys.modules if m.startswith('mainspring._demos')]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "missing.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no store at" in done.stderr


@pytest.mark.parametrize("module", ["mainspring", "mainspring.cli"])
def test_python_dash_m_runs_the_demo(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "demo-reasons", "--steps", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "stopped: it was cancelled" in done.stdout


async def test_demo_leaves_nothing_running() -> None:
    before = len(anyio.get_running_tasks())
    await run_reasons_demo(io.StringIO(), steps=1)
    assert len(anyio.get_running_tasks()) == before
    assert ms.cancel_reason() is None


@pytest.mark.parametrize("json", [False, True], ids=["text", "json"])
def test_the_demo_on_a_store_dir_it_cannot_use_is_one_line_and_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], json: bool
) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    for store_dir in (taken, taken / "below"):  # it used to be a traceback from mkdir
        argv = [*(["--json"] if json else []), "demo", "--store-dir", str(store_dir)]
        assert main(argv) == 5
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert f"cannot use --store-dir {store_dir}" in err
