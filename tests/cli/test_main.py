"""The `mainspring` command: the durable demo (killed, resumed, finished, nothing durable
re-run) and the reasons demo (every actor's own view of why it stopped)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring._demos import REASONS, run_reasons_demo
from mainspring.cli import EXIT_FAILED, EXIT_NO_STORE, EXIT_OK, EXIT_USAGE, main
from mainspring.cli._parser import DEMO_REASONS

from .._cli_kit import inc, run_cli
from .._raw import read_raw, write_garbage, write_raw


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_reasons_demo_command_runs_on_both_backends(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo-reasons", "--backend", backend, "--steps", "2"]) == 0
    assert "/execution                   stopped: it was cancelled" in capsys.readouterr().out


@pytest.mark.anyio
def test_cli_rejects_bad_input_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo-reasons", "--steps", "0"]) == 2
    err = capsys.readouterr().err
    assert "--steps must be between 1 and 1000" in err
    assert err.startswith("usage: mainspring")
    assert main([]) == 2


@pytest.mark.anyio
def test_the_parser_offers_exactly_the_reasons_demo_s_reasons() -> None:
    # The parser keeps its own copy, so that parsing never imports the demos.
    assert tuple(sorted(REASONS)) == DEMO_REASONS


def _script_on_a_missing_store(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter, with a store path that does not exist as argv[1]."""
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "missing.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.anyio
def test_commands_other_than_the_demos_do_not_import_them(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from mainspring.cli import main\n"
        "main(['ls', '--store', sys.argv[1]])\n"
        "assert not [m for m in sys.modules if m.startswith('mainspring._demos')]\n"
    )
    done = _script_on_a_missing_store(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no store at" in done.stderr


def test_version_help_and_usage_errors_load_neither_the_stores_nor_the_execution_layer(
    tmp_path: Path,
) -> None:
    """What needs no store imports none: ``--version``, ``--help`` and a usage error (text or
    JSON, redacted all the same) leave storage, the execution layer and cattrs unloaded; a
    command that reads a store loads storage when it runs."""
    code = (
        "import contextlib, io, sys\n"
        "from mainspring.cli import main\n"
        "heavy = ('mainspring.storage', 'mainspring.executions', 'cattrs')\n"
        "for argv in (['--version'], ['--json', '--version'], ['--help'], ['--bogus'],\n"
        "             ['--json', '--bogus'], ['show'], ['ls', '--bogus', 'AKIA' + 'Q' * 16]):\n"
        "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "        main(argv)\n"
        "    loaded = [m for m in heavy if m in sys.modules]\n"
        "    assert not loaded, (argv, loaded)\n"
        "main(['ls', '--store', sys.argv[1]])\n"
        "assert 'mainspring.storage' in sys.modules\n"
    )
    done = _script_on_a_missing_store(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "unrecognized arguments: --bogus [redacted aws-access-key]" in done.stderr
    assert '{"error": "unrecognized arguments: --bogus", "code": 2}' in done.stderr
    assert "AKIA" not in done.stderr


@pytest.mark.anyio
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


@pytest.mark.anyio
async def test_demo_leaves_nothing_running() -> None:
    before = len(anyio.get_running_tasks())
    await run_reasons_demo(io.StringIO(), steps=1)
    assert len(anyio.get_running_tasks()) == before
    assert ms.cancel_reason() is None


@pytest.mark.anyio
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


# ----------------------------------------------------------------------
# Edge cases of the `mainspring` command, the Runtime's control paths and the examples:
# reads that changed what they read, silent no-ops, tracebacks instead of
# exit codes, redaction gaps. Each asserts what README.md and DESIGN.md promise.

SECRET = "ghp_" + "Z" * 36


async def _asker(ctx: ms.AgentContext, input: Any) -> str:
    await ctx.step("look", inc, 1)
    return await ctx.ask("go on?")


def _plan() -> ms.Plan:
    return ms.Plan(id="p", goal="g", steps=(
        ms.PlanStep(id="s1", tool="inc", input={"x": 1}),
        ms.PlanStep(id="a", agent="asker", depends_on=("s1",)),
    ))  # fmt: skip


def _make_store(path: Path) -> None:
    """ex-1 waits for an agent's answer; ex-done completed."""

    async def build() -> None:
        async with ms.open_runtime(store=path, tools={"inc": inc}, agents={"asker": _asker}) as rt:
            await (await rt.start("first", _plan(), execution_id="ex-1")).wait()
            only_tools = ms.Plan(id="q", goal="g", steps=(ms.PlanStep(id="s", tool="inc"),))
            await (await rt.start("done", only_tools, execution_id="ex-done")).wait()

    anyio.run(build)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- 1. "a command never creates a store by accident" / "reads never write" ---------------------


def test_U6_ls_on_a_directory_that_is_not_a_store_neither_chmods_it_nor_calls_it_empty(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o755)
    (project / "notes.txt").write_text("not a store")
    code, _ = run_cli("ls", "--store", str(project))
    assert _mode(project) == 0o755  # it used to: chmod'ed to 0700 by FileStore.__init__
    assert code == EXIT_NO_STORE  # it used to: 0 and an empty table


@pytest.mark.parametrize("kind", ["foreign-sqlite", "empty-file"])
def test_U6_ls_on_a_sqlite_file_that_is_not_ours_leaves_it_alone(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "other.sqlite3"
    if kind == "foreign-sqlite":
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        conn.close()
    else:
        db.touch()
    db.chmod(0o644)
    before = db.read_bytes()
    code, _ = run_cli("ls", "--store", str(db))
    # it used to: journal_mode switched to WAL, an `executions` table added, mode 0600, exit 0
    assert (db.read_bytes() == before, _mode(db)) == (True, 0o644)
    assert code == EXIT_NO_STORE


def test_U6_a_file_that_is_not_sqlite_is_refused_without_a_chmod(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    notes.chmod(0o644)
    code, _ = run_cli("ls", "--store", str(notes))
    assert code == EXIT_NO_STORE
    assert _mode(notes) == 0o644  # it used to: 0600 (SqliteStore chmods before sqlite3 refuses)


# -- 2. bad stores and bad records end in a traceback instead of an exit code ------------------


@pytest.mark.parametrize("command", ["ls", "doctor"])
def test_U5_a_corrupt_sqlite_store_is_an_exit_code_not_a_traceback(
    tmp_path: Path, command: str
) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store(store)
    data = bytearray(store.read_bytes())
    assert len(data) > 4096
    data[4096:] = b"\xab" * (len(data) - 4096)  # page 1 (the header) intact, the rest garbage
    store.write_bytes(bytes(data))
    code, _ = run_cli(command, "--store", str(store))  # it used to: sqlite3.DatabaseError escapes
    assert code in (EXIT_FAILED, EXIT_NO_STORE)


def test_U5_show_of_a_record_that_cannot_be_opened_is_an_exit_code_not_a_traceback(
    tmp_path: Path,
) -> None:
    files = tmp_path / "files"
    _make_store(files)
    record = files / "ex-1.journal"
    elsewhere = tmp_path / "elsewhere.journal"
    record.rename(elsewhere)
    record.symlink_to(elsewhere)  # O_NOFOLLOW -> OSError(ELOOP); EACCES takes the same path
    code, _ = run_cli("show", "ex-1", "--store", str(files))  # it used to: OSError escapes
    assert code == EXIT_FAILED


def test_U5_one_record_with_an_odd_timestamp_does_not_break_ls_for_every_record(
    tmp_path: Path,
) -> None:
    files = tmp_path / "files"
    _make_store(files)
    raw = read_raw(files, "ex-done")
    raw["updated_at"] = 1e300  # accepted by the strict record parser
    write_raw(files, "ex-done", raw)
    assert ms.storage.FileStore(files).get("ex-done") is not None
    code, out = run_cli("ls", "--store", str(files))  # it used to: OverflowError in _when
    assert code in (EXIT_OK, EXIT_FAILED)
    assert "ex-1" in out


# -- 3. stop-task: "never a silent no-op" (S1) -------------------------------------------------


def test_S1_stop_task_in_a_terminal_execution_does_not_claim_a_runner_will_stop_it(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store(store)
    # The run ended (e.g. failed on drift after its task was requeued) with its agent task
    # still unfinished; nobody holds the lease, nobody runs it.
    sqlite = ms.storage.SqliteStore(store)
    sqlite.edit("ex-1", lambda e, now: attrs.evolve(e, status="failed", pending=None))
    sqlite.close()
    code, out = run_cli("stop-task", "ex-1:t1", "--store", str(store), "--json")
    result = json.loads(out)
    sqlite = ms.storage.SqliteStore(store)
    stored = sqlite.get("ex-1")
    sqlite.close()
    assert stored is not None
    (task,) = ms.storage._seam.parse_agent_tasks(stored)[0]
    # it used to: ok=True, state "stopping", "its runner stops it within one heartbeat", exit 0,
    # and nothing was written: the task stays unfinished forever.
    assert result["state"] != "stopping"
    assert code != EXIT_OK or task.state == "cancelled"


# -- 4. exit codes the README documents -------------------------------------------------------


@pytest.mark.parametrize("command", ["pause", "cancel"])
def test_U5_a_control_refused_because_the_run_is_terminal_exits_1(
    tmp_path: Path, command: str
) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store(store)
    code, out = run_cli(command, "ex-done", "--store", str(store))
    assert "completed" in out  # nothing changed ...
    assert code == EXIT_FAILED  # ... so it was refused (README: 1); it used to be 0, like a success


def test_U5_an_app_module_that_fails_to_import_is_a_usage_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store(store)
    (tmp_path / "brokenapp.py").write_text("raise RuntimeError('no DATABASE_URL set')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "brokenapp", raising=False)
    code, _ = run_cli("resume", "ex-1", "--store", str(store), "--app", "brokenapp:config")
    assert code == EXIT_USAGE  # it used to: RuntimeError escapes (exit 1 with a traceback)


# -- 5. "everything printed is redacted"; E7 "reports how many it dropped" ------------------------


def test_E5_a_clamped_goal_does_not_leak_a_prefix_of_a_secret(tmp_path: Path) -> None:
    files = ms.storage.FileStore(tmp_path / "files")
    now = time.time()
    goal = f"push with {SECRET} now"  # a record not written through the runtime
    files.create(ms.storage.Execution(id="ex-s", goal=goal, status="planned", created_at=now,
                              updated_at=now))  # fmt: skip
    code, out = run_cli("ls", "--store", str(tmp_path / "files"))
    assert code == EXIT_OK
    assert "ZZZZZZZZ" not in out  # it used to: clamped to 40 chars first, so the pattern misses


def test_E5_error_messages_are_redacted_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store(store)
    code, _ = run_cli("pause", SECRET, "--store", str(store))  # a token pasted as the id
    assert code == 3
    assert SECRET not in capsys.readouterr().err  # it used to: printed as is


def test_E7_tasks_and_ls_json_say_what_they_could_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = tmp_path / "files"
    _make_store(files)
    raw = read_raw(files, "ex-1")
    raw["agent_tasks"].append({**raw["agent_tasks"][0], "id": "ex-1:t9", "bogus": 1})
    write_raw(files, "ex-1", raw)
    write_garbage(files, "broken", b"{not json")
    _, out = run_cli("show", "ex-1", "--store", str(files))
    assert "1 unreadable" in out  # show reports it ...
    _, out = run_cli("tasks", "ex-1", "--store", str(files))
    assert "unreadable" in out + capsys.readouterr().err  # ... tasks drops it silently
    _, out = run_cli("ls", "--store", str(files), "--json")
    assert "broken" in out + capsys.readouterr().err  # ... and ls --json drops broken.json


def test_U5_a_closed_pipe_is_not_a_traceback(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store(store)

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    before = os.fstat(sys.stdout.fileno()) if _has_fd(sys.stdout) else None
    opened = _open_fds()
    code = main(["events", "--store", str(store)], stdout=ClosedPipe())  # `| head`
    assert code == EXIT_OK
    # The stream that broke was the caller's, not the process's stdout: the descriptor behind
    # sys.stdout (pytest's capture file here) still points where it did, and nothing opened
    # on the way out is left open.
    if before is not None:
        after = os.fstat(sys.stdout.fileno())
        assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    assert _open_fds() <= opened


class _ClosedPipe(io.StringIO):
    """A stream whose reader went away (`| head -0`)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


class _PipeClosingAfterOnePrint(io.StringIO):
    """A stream whose reader takes what one print() wrote and goes away (`| head -1`)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        if self.writes > 2:  # print() writes its text, then its end
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


@pytest.mark.parametrize("argv", [["--version"], ["--version", "--json"]])
def test_U5_version_into_a_closed_pipe_is_not_a_traceback(argv: list[str]) -> None:
    assert main(argv, stdout=_ClosedPipe()) == EXIT_OK  # it raised BrokenPipeError


def test_U5_resume_whose_progress_meets_a_closed_pipe_is_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mainspring resume ID --app myapp:config | head -0`: the first progress line is
    written by a task beside the run; its BrokenPipeError came out of main() wrapped in an
    ExceptionGroup (a traceback, exit 1)."""
    store, status = _asker_run_started_by_a_script(tmp_path, monkeypatch)
    assert status == "waiting_for_clarification"
    argv = ["resume", "ex-1", "--store", str(store), "--app", "myapp:config", "--answer", "yes"]
    assert main(argv, stdout=_ClosedPipe()) == EXIT_OK


def test_U5_a_process_without_stdout_is_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mainspring ls >&-`: Python gives a process whose descriptor 1 is closed no
    sys.stdout (None); the command took its isatty() (AttributeError)."""
    store = tmp_path / "s.sqlite3"
    _make_store(store)
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["ls", "--store", str(store)]) == EXIT_OK
    assert main(["show", "nope", "--store", str(store)]) == 3  # the outcome's code, still


@pytest.mark.anyio
async def test_U5_demo_reasons_whose_reader_went_away_ends(tmp_path: Path) -> None:
    """`mainspring demo-reasons | head -1`: an actor's line met the closed pipe, its
    supervisor restarted it again and again, the steps never added up and the demo never
    ended."""
    out = _PipeClosingAfterOnePrint()
    # The demo's own line may meet the closed pipe: main() turns that into exit 0.
    with anyio.fail_after(30), contextlib.suppress(BrokenPipeError):
        await run_reasons_demo(out, steps=3)
    assert out.getvalue().startswith("mainspring demo:")  # its header, and nothing after


def test_U5_demo_whose_reader_went_away_leaves_no_worker_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mainspring demo | head -2`: the line naming a worker met the closed pipe after the
    worker started; the demo exited and left the worker running the run on its own (its
    traceback on the shared stderr once its own pipe broke)."""
    from mainspring._demos import _durable

    started: list[subprocess.Popen[str]] = []
    real = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(_durable.subprocess, "Popen", popen)
    demo = _durable._Demo(_ClosedPipe(), tmp_path, "asyncio", interactive=False)
    with pytest.raises(BrokenPipeError):
        demo.spawn(1, "start")
    assert len(started) == 1
    assert started[0].poll() is not None  # it ended with the demo


def _has_fd(stream: Any) -> bool:
    try:
        stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return False
    return True


def _open_fds() -> set[int]:
    return (
        {int(fd) for fd in os.listdir("/proc/self/fd")} if Path("/proc/self/fd").is_dir() else set()
    )


def test_U5_a_command_whose_reader_went_away_exits_0_silently(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store(store)
    script = (
        "import sys; from mainspring.cli import main; "
        f"sys.exit(main(['events', '--store', {str(store)!r}]))"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # `| head -0`: the reader is gone before the first line
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == EXIT_OK
    assert err == b""


# -- 6. resume --app: a script's tools are "__main__" tools -----------------------------------

APP_SOURCE = """
async def inc(x=0):
    return x + 1

async def asker(ctx, input):
    await ctx.step("look", inc, 1)
    return await ctx.ask("go on?")

def config():
    return {"tools": {"inc": inc}, "agents": {"asker": asker}}
"""


def _asker_run_started_by_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str]:
    """`python myapp.py` starts run ex-1 with its tools in `__main__`; the shell then moves
    to the script's folder, where `--app myapp:config` imports it anew. Returns the store
    and the status the run stopped in."""
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    script: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(APP_SOURCE, str(tmp_path / "myapp.py"), "exec"), script)
    store = tmp_path / "s.sqlite3"

    async def start() -> str:
        async with ms.open_runtime(store=store, **script["config"]()) as rt:
            return (await (await rt.start("g", _plan(), execution_id="ex-1")).wait()).status

    status = anyio.run(start)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "myapp", raising=False)
    return store, status


def test_R7_resume_app_of_the_same_tools_a_script_ran_is_not_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python myapp.py` starts the run (tools in __main__); the operator resumes it with
    `mainspring resume ID --app myapp:config`, exactly as README suggests."""
    store, status = _asker_run_started_by_a_script(tmp_path, monkeypatch)
    assert status == "waiting_for_clarification"
    _, out = run_cli("resume", "ex-1", "--store", str(store), "--app", "myapp:config",
                  "--answer", "yes")  # fmt: skip
    # it used to: "tool inc changed" (its hash includes __module__), no planner -> the run is
    # failed for good, and the command still exits 0.
    assert "completed" in out, out
    # Progress while it ran: the run's StepFinished events, as lines.
    assert any(line.split()[:2] == ["succeeded", "a"] for line in out.splitlines()), out


# -- 7. the Runtime: resume right after the store says "waiting" --------------------------------

pytest_anyio = pytest.mark.anyio


@pytest_anyio
async def test_L3_resume_with_an_answer_once_the_store_says_waiting(tmp_path: Path) -> None:
    async with ms.open_runtime(
        store=tmp_path / "s.sqlite3", tools={"inc": inc}, agents={"asker": _asker}
    ) as rt:
        await rt.start("g", _plan(), execution_id="ex-1")
        with anyio.fail_after(10):
            while (stored := await rt.get("ex-1")) is None or stored.status != (
                "waiting_for_clarification"
            ):
                pass  # rt.get is a checkpoint: polling the store, as another process would
        # The run is waiting (durably, lease released): an answer must be accepted. Today:
        # ExecutionBusy("it is running in this runtime") while its actor winds down.
        handle = await rt.resume("ex-1", answer="yes")
        assert (await handle.wait()).status == "completed"


# -- 8. examples/fastapi_app.py -----------------------------------------------------------------


@pytest.fixture
def fastapi_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from examples import fastapi_app as module

    monkeypatch.setenv("MAINSPRING_STORE", str(tmp_path / "app.sqlite3"))
    return module


@pytest_anyio
async def test_X1_fastapi_example_answers_400_for_a_bad_id_on_every_endpoint(
    fastapi_app: Any,
) -> None:
    import httpx

    app = fastapi_app.app
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.get("/executions/bad%20id")).status_code == 400
            codes = {
                path: (await client.request(method, path, json={})).status_code
                for method, path in [
                    ("GET", "/executions/bad%20id/tasks"),
                    ("POST", "/executions/bad%20id/pause"),
                    ("POST", "/executions/bad%20id/cancel"),
                    ("POST", "/executions/bad%20id/resume"),
                ]
            }
    assert set(codes.values()) == {400}, codes  # it used to: 500 (InvalidId unhandled)


@pytest_anyio
async def test_L8_fastapi_example_resumes_runs_the_last_shutdown_interrupted(
    fastapi_app: Any, tmp_path: Path
) -> None:
    """README: on shutdown every run "stays resumable (rt.recover() on the next start)"."""
    entered = anyio.Event()

    async def slow_search(topic: str) -> str:
        entered.set()
        await anyio.sleep_forever()
        raise AssertionError

    options = {**fastapi_app.runtime_options(), "tools": {"search": slow_search}}
    async with ms.open_runtime(store=tmp_path / "app.sqlite3", **options) as rt:
        await rt.start("research wind", execution_id="ex-left")
        await entered.wait()
    # the previous server is gone; the record is `running`, its lease released
    app = fastapi_app.app
    async with app.router.lifespan_context(app):
        with anyio.move_on_after(30):
            while (await app.state.runtime.get("ex-left")).status == "running":  # noqa: ASYNC110
                await anyio.sleep(0.01)
        status = (await app.state.runtime.get("ex-left")).status
    assert status != "running"  # it used to: nobody calls rt.recover(); it stays orphaned


@pytest_anyio
async def test_L3_fastapi_example_accepts_an_answer_once_get_says_waiting(fastapi_app: Any) -> None:
    """The same race as test_L3_resume_with_an_answer_once_the_store_says_waiting, over HTTP:
    a client that polls GET until "waiting_for_clarification" and then answers gets 409."""
    import httpx

    app = fastapi_app.app
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            started = await client.post("/executions", json={"goal": "research wind"})
            execution_id = started.json()["id"]
            with anyio.fail_after(10):
                while (await client.get(f"/executions/{execution_id}")).json()[
                    "status"
                ] != "waiting_for_clarification":
                    pass
            resumed = await client.post(
                f"/executions/{execution_id}/resume", json={"answer": "deep"}
            )
            assert resumed.status_code == 202, resumed.text  # it used to: 409 "busy"


ESCAPING_APP_SOURCE = """
async def inc(x=0):
    return x + 1

async def boom(**_):
    raise ValueError("evil \\x1b[31mred\\x07")

async def asker(ctx, input):
    return await ctx.ask("go \\x1b[2Jon?")

def config():
    return {"tools": {"inc": inc, "boom": boom}, "agents": {"asker": asker}}
"""


def test_resume_prints_why_a_run_failed_with_its_control_characters_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "escapingapp.py").write_text(ESCAPING_APP_SOURCE)
    script: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(ESCAPING_APP_SOURCE, str(tmp_path / "escapingapp.py"), "exec"), script)
    store = tmp_path / "s.sqlite3"
    plan = ms.Plan(
        id="p",
        goal="g",
        steps=(
            ms.PlanStep(id="a", agent="asker"),
            ms.PlanStep(id="b", tool="boom", depends_on=("a",)),
        ),
    )

    async def start() -> str:
        async with ms.open_runtime(store=store, **script["config"]()) as rt:
            return (await (await rt.start("g", plan, execution_id="ex-1")).wait()).status

    assert anyio.run(start) == "waiting_for_clarification"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "escapingapp", raising=False)
    _, out = run_cli(
        "resume", "ex-1", "--store", str(store), "--app", "escapingapp:config", "--answer", "y"
    )
    assert "why: step b failed: ValueError: evil \\x1b[31mred\\x07" in out, out
    assert "\x1b" not in out
    assert "\x07" not in out


def test_U5_a_broken_pipe_that_is_not_stdouts_is_a_failure_not_a_quiet_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only stdout's reader going away is a quiet exit 0: a pipe to a worker or a program
    that breaks while the command's own reader is still there is reported, exit 1."""
    import mainspring.cli._main as cli_main

    def broken(*_: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe (a worker's)")

    monkeypatch.setattr(cli_main, "_dispatch", broken)
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as reader, os.fdopen(write_end, "w") as stream:
        code = main(["ls", "--store", str(tmp_path / "s.sqlite3")], stdout=stream)
        assert reader is not None  # the reader is still there
    assert code == EXIT_FAILED
    assert "a pipe closed under the command" in capsys.readouterr().err
    # The same error where stdout's own reader is gone is the quiet exit 0 of `| head`.
    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w") as stream:
        assert main(["ls", "--store", str(tmp_path / "s.sqlite3")], stdout=stream) == EXIT_OK
