"""The command on a home where nothing has run yet, and errors a script can parse.

An empty home is a state, not an error: listings are empty and exit 0, ids are unknown (3),
nothing is created. A ``--store`` named on purpose that does not exist stays an error (5).
With ``--json`` every error is one JSON object on stderr."""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_BUSY, EXIT_NO_STORE, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE, main

from .._cli_kit import inc, run_cli
from .._postgres import drop_schema, fresh_schema, postgres_url, require_server, with_schema
from .._read_only_dir import read_only_directory

__all__ = ["postgres_url"]

#: The checkout, for the command's own processes.
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$MAINSPRING_HOME`` where no run has ever been made (not even the directory)."""
    path = tmp_path / "home"
    monkeypatch.setenv("MAINSPRING_HOME", str(path))
    return path


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["ls"], "no executions yet"),
        (["tasks"], "no agent tasks yet"),
        (["events"], "no executions yet"),
        (["doctor"], "nothing to check yet"),
    ],
)
def test_an_empty_home_lists_nothing_and_exits_0(
    home: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_cli(*argv)
    assert code == EXIT_OK
    assert out.startswith(says)
    assert str(home / "mainspring.sqlite3") in out  # where a first run will put it
    assert capsys.readouterr().err == ""
    assert not home.exists()  # nothing created by looking


def test_an_empty_home_in_json_is_empty_json(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("ls", "--json") == (EXIT_OK, "[]\n")
    assert run_cli("tasks", "--json") == (EXIT_OK, "[]\n")
    assert run_cli("events", "--json") == (EXIT_OK, "")  # one object per change: none
    code, out = run_cli("doctor", "--json")
    assert code == EXIT_OK
    assert json.loads(out) == {"ok": True, "executions": 0, "findings": [], "store": None}
    assert capsys.readouterr().err == ""
    assert not home.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "ex-1"],
        ["tasks", "ex-1"],
        ["pause", "ex-1"],
        ["cancel", "ex-1"],
        ["stop-task", "ex-1:t1"],
        ["resume", "ex-1", "--app", "nowhere:config"],
    ],
)
def test_an_id_on_an_empty_home_is_unknown(
    home: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(*argv) == (EXIT_UNKNOWN, "")
    assert "nothing has run here" in capsys.readouterr().err
    assert not home.exists()


def test_a_named_store_that_does_not_exist_is_still_an_error(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.sqlite3"
    for argv in (["ls"], ["doctor"], ["events"], ["tasks"]):
        assert run_cli(*argv, "--store", str(missing))[0] == EXIT_NO_STORE
    assert "no store at" in capsys.readouterr().err
    assert not missing.exists()


def _error(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    parsed: dict[str, object] = json.loads(line)
    return parsed


def test_with_json_every_error_is_json_on_stderr(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "typo.sqlite3")
    assert run_cli("ls", "--json", "--store", missing) == (EXIT_NO_STORE, "")
    error = _error(capsys)
    assert error["code"] == EXIT_NO_STORE
    assert "no store at" in str(error["error"])

    assert run_cli("show", "ex-1", "--json") == (EXIT_UNKNOWN, "")
    assert _error(capsys)["code"] == EXIT_UNKNOWN

    assert run_cli("ls", "--json", "--bogus") == (EXIT_USAGE, "")  # argparse's own errors too
    error = _error(capsys)
    assert error == {"error": "unrecognized arguments: --bogus", "code": EXIT_USAGE}
    assert run_cli("show", "--json") == (EXIT_USAGE, "")
    assert "required" in str(_error(capsys)["error"])


_APP = """
async def asker(ctx, input):
    return await ctx.ask("ok?")

def config():
    return {"agents": {"asker": asker}}
"""


def test_a_busy_error_is_json_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.sqlite3"

    async def asker(ctx: ms.AgentContext, input: object) -> object:
        return await ctx.ask("ok?")

    async def build() -> None:
        async with ms.open_runtime(store=store, agents={"asker": asker}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asker"),))
            await (await rt.start("g", plan, execution_id="ex-1")).wait()

    anyio.run(build)
    db = ms.storage.SqliteStore(store)
    try:
        assert db.acquire("ex-1", "someone:1:x", ttl=600).acquired
    finally:
        db.close()
    (tmp_path / "firstapp.py").write_text(_APP)
    monkeypatch.chdir(tmp_path)
    code, out = run_cli("resume", "ex-1", "--app", "firstapp:config", "--answer", "yes",
                        "--json", "--store", str(store))  # fmt: skip
    assert (code, out) == (EXIT_BUSY, "")
    error = _error(capsys)
    assert error["code"] == EXIT_BUSY
    assert "someone:1:x" in str(error["error"])


def test_events_follow_on_an_empty_home_waits_for_the_first_run(home: Path) -> None:
    out = io.StringIO()
    codes: list[int] = []
    follower = threading.Thread(
        target=lambda: codes.append(
            main(["events", "--follow", "--interval", "0.01", "--max-polls", "2"], stdout=out)
        ),
        daemon=True,
    )
    follower.start()
    waiting = threading.Event()
    for _ in range(6000):  # the follower says it waits before the store exists
        if "waiting for the first run" in out.getvalue():
            waiting.set()
            break
        waiting.wait(0.01)
    assert waiting.is_set()

    # The first run is made elsewhere and its store moved into the home whole, so what the
    # follower sees first does not depend on how fast this machine is (a half-made store is
    # covered by the store-birth wait, a run committed later by --follow itself).
    made = home.parent / "made" / "mainspring.sqlite3"

    async def first_run() -> None:
        async with ms.open_runtime(store=made, tools={"inc": inc}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="inc"),))
            await (await rt.start("g", plan, execution_id="ex-first")).wait()

    anyio.run(first_run)
    home.mkdir(mode=0o700)
    os.replace(made, home / "mainspring.sqlite3")
    follower.join(timeout=60)
    assert not follower.is_alive()
    assert codes == [EXIT_OK]
    assert "ex-first  created" in out.getvalue()
    assert "ex-first  status   running -> completed" in out.getvalue()


# -- Ctrl-C, --version, durations -----------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process is POSIX")
@pytest.mark.parametrize("as_json", [False, True])
def test_u2_ctrl_c_on_events_follow_exits_130_without_a_traceback(
    tmp_path: Path, as_json: bool
) -> None:
    store = tmp_path / "s.sqlite3"

    async def build() -> None:
        async with ms.open_runtime(store=store, tools={"inc": inc}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="inc"),))
            await (await rt.start("g", plan, execution_id="ex-1")).wait()

    anyio.run(build)
    argv = ["events", "--follow", "--interval", "0.05", "--store", str(store)]
    # A shell's background job starts with SIGINT ignored, and an ignored signal stays ignored
    # across exec: handled here while the command starts, it starts as from a terminal (the
    # handler resets to the default in the child, and Python installs its own).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        follower = subprocess.Popen(
            [sys.executable, "-m", "mainspring.cli", *argv, *(["--json"] if as_json else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert follower.stdout is not None
        assert b"ex-1" in follower.stdout.readline()  # it follows: the history is printed
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 130  # it used to: a KeyboardInterrupt traceback
    assert b"Traceback" not in err
    assert b"KeyboardInterrupt" not in err


def test_version_is_the_installed_one(home: Path) -> None:
    try:
        expected = importlib.metadata.version("mainspring")
    except importlib.metadata.PackageNotFoundError:
        expected = ms.__version__
    assert run_cli("--version") == (EXIT_OK, f"mainspring {expected}\n")
    assert run_cli("--version", "--json") == (EXIT_OK, json.dumps({"version": expected}) + "\n")


@pytest.mark.parametrize(
    "value",
    ["0s", "2w", "1000001s", "garbage", "1.5h", "-5s", "", "5 s"],
)
def test_u4_a_bad_deadline_is_a_usage_error(
    home: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["resume", "ex-1", "--app", "nowhere:config", f"--deadline={value}"]
    assert run_cli(*argv) == (EXIT_USAGE, "")  # it used to: 0s and 2w a traceback (exit 1)
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("mainspring: error: argument --deadline: ")
    assert run_cli(*argv, "--json") == (EXIT_USAGE, "")
    error = _error(capsys)
    assert error["code"] == EXIT_USAGE
    assert str(error["error"]).startswith("argument --deadline: ")


@pytest.mark.parametrize("value", ["0s", "yesterday", "2026-13-01", "-1h", "12"])
def test_u4_a_bad_since_is_a_usage_error(
    home: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("ls", f"--since={value}", "--json") == (EXIT_USAGE, "")
    error = _error(capsys)
    assert error["code"] == EXIT_USAGE
    assert str(error["error"]).startswith("argument --since: ")


@pytest.mark.parametrize(
    ("option", "value"),
    [("--interval", v) for v in ("nan", "-1", "0", "inf", "1e20", "x")]
    + [("--max-polls", v) for v in ("-1", "x")],
)
def test_u4_a_bad_follow_interval_is_a_usage_error(
    home: Path, option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It used to be a traceback from time.sleep (NaN, negative, out of range for time_t).
    argv = ["events", "--follow", "--max-polls", "1", f"{option}={value}"]
    assert run_cli(*argv, "--json") == (EXIT_USAGE, "")
    error = _error(capsys)
    assert error["code"] == EXIT_USAGE
    assert str(error["error"]).startswith(f"argument {option}: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["answer", "ex-1", "yes \udcff"],
        ["pause", "ex-1", "--reason", "\udcff"],
        ["cancel", "ex-1", "--reason", "\udcff"],
        ["resume", "ex-1", "--app", "nowhere:config", "--answer", "\udcff"],
        ["memory", "search", "\udcff"],
    ],
    ids=["answer", "pause", "cancel", "resume", "search"],
)
def test_u1_text_that_is_not_utf8_is_a_usage_error(
    home: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Bytes from a non-UTF-8 shell reach Python as lone surrogates; no record can store
    # them. It used to be a traceback from the store's encoder (exit 1).
    assert run_cli(*argv, "--json") == (EXIT_USAGE, "")
    error = _error(capsys)
    assert error["code"] == EXIT_USAGE
    assert "not UTF-8 text" in str(error["error"])


def test_u4_a_good_deadline_passes_parsing(home: Path) -> None:
    # Parsed, then the id is unknown on an empty home: the duration was not the problem.
    for value in ("1s", "30m", "11d", "1000000s"):
        code, _ = run_cli("resume", "ex-1", "--app", "nowhere:config", "--deadline", value)
        assert code == EXIT_UNKNOWN


@pytest.mark.parametrize(
    "interrupt",
    [KeyboardInterrupt(), BaseExceptionGroup("a task group", [KeyboardInterrupt()])],
    ids=["plain", "from-a-task-group"],
)
def test_u2_ctrl_c_anywhere_in_a_command_is_exit_130(
    home: Path, monkeypatch: pytest.MonkeyPatch, interrupt: BaseException
) -> None:
    def interrupted(*_: object) -> int:
        raise interrupt

    monkeypatch.setattr("mainspring.cli._main._dispatch", interrupted)
    assert run_cli("ls") == (130, "")


def test_u2_a_group_without_ctrl_c_is_not_swallowed(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failed(*_: object) -> int:
        raise BaseExceptionGroup("a task group", [SystemExit(3)])

    monkeypatch.setattr("mainspring.cli._main._dispatch", failed)
    with pytest.raises(BaseExceptionGroup):
        run_cli("ls")


# ----------------------------------------------------------------------
# The command on a PostgreSQL store: ``--store postgresql://...`` and ``MAINSPRING_STORE``
# name it like a path does; a read never creates the schema; a password never reaches the
# screen.


def _make_runs(url: str) -> None:
    async def main() -> None:
        async with ms.open_runtime(store=url, tools={"inc": inc}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="inc"),))
            await (await rt.start("done", plan, execution_id="ex-done")).wait()
            waiting = ms.Plan(
                id="q",
                goal="g",
                steps=(ms.PlanStep(id="b", tool="inc", requires_approval=True),),
            )
            await (await rt.start("waits", waiting, execution_id="ex-waits")).wait()

    anyio.run(main)


def test_the_command_reads_and_steers_a_postgresql_store(postgres_url: str) -> None:
    _make_runs(postgres_url)
    code, out = run_cli("ls", "--json", "--store", postgres_url)
    assert code == 0
    assert {row["id"]: row["status"] for row in json.loads(out)} == {
        "ex-done": "completed",
        "ex-waits": "waiting_for_approval",
    }
    code, out = run_cli("events", "ex-done", "--json", "--store", postgres_url)
    assert code == 0
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert kinds[0] == "created"
    code, out = run_cli("cancel", "ex-waits", "--store", postgres_url)
    assert code == 0
    code, out = run_cli("show", "ex-waits", "--json", "--store", postgres_url)
    assert json.loads(out)["status"] == "cancelled"


def test_MAINSPRING_STORE_names_the_store(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _make_runs(postgres_url)
    monkeypatch.setenv("MAINSPRING_STORE", postgres_url)
    code, out = run_cli("ls", "--json")
    assert code == 0
    assert sorted(row["id"] for row in json.loads(out)) == ["ex-done", "ex-waits"]
    # open_runtime takes it too when no store is given.
    store, close = ms.storage.open_store(None)
    try:
        assert isinstance(store, ms.storage.PostgresStore)
        assert store.get("ex-done") is not None
    finally:
        close()


def test_a_read_of_a_schema_without_a_store_creates_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = require_server()
    schema = fresh_schema()
    try:
        code, _ = run_cli("ls", "--store", with_schema(url, schema))
        assert code == 5  # no usable store
        assert "no mainspring store" in capsys.readouterr().err
        import psycopg

        with psycopg.connect(url) as conn:
            found = conn.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                (schema,),
            ).fetchone()
        assert found == (0,)
    finally:
        drop_schema(schema)


def test_a_password_in_the_store_url_is_never_shown(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_cli(
        "ls", "--store", "postgresql://someone:hunter2secret@127.0.0.1:1/nowhere?connect_timeout=1"
    )
    assert code == 5
    err = capsys.readouterr().err
    assert "hunter2secret" not in err
    assert "someone:***@" in err


def test_E7_a_row_that_does_not_parse_is_unreadable_to_every_read(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    from .._postgres import server_url

    _make_runs(postgres_url)
    schema = postgres_url.rsplit("schema=", 1)[1]
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".executions (id, seq, stamp, status, updated_at, head, '
            "checkpoints) VALUES ('cut', 1, 1, 'planned', 0, %s, '[]')",
            (b'{"v": 1, "id": ',),
        )
    capsys.readouterr()
    code, _ = run_cli("ls", "--store", postgres_url)
    assert code == 0
    assert "unreadable execution cut" in capsys.readouterr().err
    code, out = run_cli("doctor", "--json", "--store", postgres_url)
    assert code == 1
    assert {"id": "cut", "problem": "unreadable"}.items() <= json.loads(out)["findings"][0].items()
    for command in ("show", "tasks", "events"):
        code, _ = run_cli(command, "cut", "--store", postgres_url)
        assert code == 1, command  # as doctor says: unreadable, not unknown (3)
        assert "execution cut cannot be read" in capsys.readouterr().err, command


def _store_in(directory: Path, kind: str) -> Path:
    """A store of ``kind`` holding ``ex-1`` (a plan of one step, never run), closed."""
    directory.mkdir()
    path = directory / ("store.db" if kind == "sqlite" else "store")
    store = ms.storage.SqliteStore(path) if kind == "sqlite" else ms.storage.FileStore(path)
    try:
        store.create(ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0))
    finally:
        store.close()
    return path


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*")}


@pytest.mark.parametrize(
    "argv", [("ls",), ("ls", "--json"), ("show", "ex-1"), ("doctor",), ("migrate",)]
)
def test_U5_U6_reads_of_a_sqlite_store_in_a_read_only_directory_work_and_create_nothing(
    argv: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _store_in(tmp_path / "d", "sqlite")
    before = _files(path.parent)
    with read_only_directory(path.parent):
        code, out = run_cli(*argv, "--store", str(path))
        err = capsys.readouterr().err
        assert "not a readable SQLite database" not in err
        assert "not checked for damage" not in err
        assert code == (EXIT_OK if argv[0] != "doctor" else 1), err  # doctor: ex-1 orphaned
        assert ("ex-1" in out) == (argv[0] != "migrate")
        assert ("already current" in out) == (argv[0] == "migrate")
        assert _files(path.parent) == before


def test_U5_a_write_to_a_sqlite_store_in_a_read_only_directory_names_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _store_in(tmp_path / "d", "sqlite")
    before = _files(path.parent)
    with read_only_directory(path.parent):
        code, _ = run_cli("cancel", "ex-1", "--store", str(path))
        err = capsys.readouterr().err
        assert code == EXIT_NO_STORE
        assert f"its directory {path.parent} is read-only" in err
        assert "not a readable SQLite database" not in err
        assert "Traceback" not in err
        assert _files(path.parent) == before
