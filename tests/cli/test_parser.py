"""The command at its edges, from a review: abbreviated --json, --json with no command or a
demo's usage error, malformed ids and odd homes (a file, unreadable, too long), one doctor
shape, unreadable records during events, redacted usage errors."""

from __future__ import annotations

import json
import pathlib
from pathlib import Path

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_NO_STORE, EXIT_OK, EXIT_USAGE, main

from .._cli_kit import inc, run_cli
from .._raw import write_garbage

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("MAINSPRING_HOME", str(path))
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite3"

    async def build() -> None:
        async with ms.open_runtime(store=path, tools={"inc": inc}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="inc"),))
            await (await rt.start("g", plan, execution_id="ex-1")).wait()

    anyio.run(build)
    return path


def _one_json_line(err: str) -> dict[str, object]:
    lines = err.splitlines()
    assert len(lines) == 1, err
    parsed: dict[str, object] = json.loads(lines[0])
    return parsed


# -- bugs ------------------------------------------------------------------------------------


def test_U5_an_abbreviated_json_flag_still_gives_json(store: Path) -> None:
    """argparse accepts ``--jso`` for ``--json`` (allow_abbrev), and before this commit the
    output followed ``args.json``. Now ``as_json = "--json" in argv`` looks at the raw words,
    so ``ls --jso`` parses as JSON-wanted but prints a table: a script gets unparseable
    output. Fixed: take as_json from the parsed args (and pre-scan with the same rule), or
    set allow_abbrev=False."""
    code, out = run_cli("ls", "--jso", "--store", str(store))
    assert code == EXIT_OK
    assert json.loads(out)[0]["id"] == "ex-1"


def test_U5_json_with_no_command_is_a_json_usage_error(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mainspring --json`` (no command) exits 2, a usage error, but prints the help on
    stdout and nothing on stderr: the one usage error that is not JSON."""
    code, _ = run_cli("--json")
    assert code == EXIT_USAGE
    assert _one_json_line(capsys.readouterr().err)["code"] == EXIT_USAGE


@pytest.mark.parametrize(
    "argv",
    [["--json", "demo-reasons", "--steps", "0"], ["--json", "demo-reasons", "--steps", "5000"]],
)
def test_U5_json_demo_usage_error_is_json_not_a_traceback(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``_demo`` calls ``parser.error`` after parsing; with --json the parser raises
    ``_UsageError``, which main() only catches around ``parse_args``: a traceback, exit 1.
    Fixed: wrap the whole of main's body (or _demo) in the ``except _UsageError``."""
    assert main(argv) == EXIT_USAGE
    assert _one_json_line(capsys.readouterr().err)["code"] == EXIT_USAGE


def test_X1_a_malformed_id_is_a_usage_error_on_an_empty_home_as_on_a_store(
    home: Path, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a store ``show 'bad id!'`` is exit 2 (usage); ``stop-task 'bad id!'`` is 2 on an
    empty home too; but show/pause/cancel/tasks/resume of a malformed id on an empty home
    are exit 3 ("unknown"), and the raw id is echoed. Fixed: check_id(args.id) before
    _nothing_here_yet, as stop-task already does."""
    on_store = run_cli("show", "bad id!", "--store", str(store))[0]
    on_empty = run_cli("show", "bad id!")[0]
    task_on_empty = run_cli("stop-task", "bad id!")[0]
    assert on_store == task_on_empty == EXIT_USAGE
    assert on_empty == on_store


def test_U5_a_home_that_is_a_file_is_not_reported_as_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """MAINSPRING_HOME naming a regular file: ``path.exists()`` of home/mainspring.sqlite3 is
    False (ENOTDIR is swallowed), so ``doctor --json`` says {"ok": true} and exit 0 although
    no run can ever create a store there (open_runtime fails). Fixed: in _nothing_here_yet,
    if the home exists and is not a directory, fail with EXIT_NO_STORE."""
    not_a_dir = tmp_path / "home"
    not_a_dir.write_text("")
    monkeypatch.setenv("MAINSPRING_HOME", str(not_a_dir))

    async def first_run() -> None:
        async with ms.open_runtime(tools={"inc": inc}):
            pass

    with pytest.raises(OSError):  # noqa: PT011 - any OSError: the store cannot be made here
        anyio.run(first_run)
    code, out = run_cli("doctor", "--json")
    assert code != EXIT_OK or json.loads(out)["ok"] is False


def test_U5_an_unreadable_home_is_an_exit_code_not_a_traceback(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A home the user cannot search (mode 000, simulated: the tests run as root) makes
    ``Path.exists()`` raise PermissionError (only ENOENT/ENOTDIR/EBADF/ELOOP are swallowed)
    in _dispatch, outside any handler: a traceback even with --json. Fixed: catch OSError
    around the existence check (or in main) and report EXIT_NO_STORE."""
    real_stat = pathlib.Path.stat

    def stat(self: Path, *, follow_symlinks: bool = True):  # type: ignore[no-untyped-def]
        if str(self).startswith(str(home) + "/"):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(pathlib.Path, "stat", stat)
    assert run_cli("ls", "--json") == (EXIT_NO_STORE, "")
    assert _one_json_line(capsys.readouterr().err)["code"] == EXIT_NO_STORE


def test_U5_an_overlong_home_is_an_exit_code_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same unguarded ``exists()``, reproduced without simulation: ENAMETOOLONG."""
    monkeypatch.setenv("MAINSPRING_HOME", str(tmp_path / ("x" * 300)))
    assert run_cli("ls", "--json") == (EXIT_NO_STORE, "")
    assert _one_json_line(capsys.readouterr().err)["code"] == EXIT_NO_STORE


def test_doctor_json_has_the_same_keys_on_an_empty_home_as_on_a_store(
    home: Path, store: Path
) -> None:
    """``doctor --json`` on an empty home has a "store" key (null) that doctor on a real
    store never has: a script reading result["store"] breaks on its first real store.
    Fixed: add "store": args.store_path to _doctor's object too (or drop it here)."""
    _, empty = run_cli("doctor", "--json")
    _, real = run_cli("doctor", "--json", "--store", str(store))
    assert set(json.loads(empty)) == set(json.loads(real))


def test_E7_events_json_says_what_it_could_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: what could not be read is said on stderr, never left out silently (JSON
    warnings with --json). ``ls`` and ``tasks`` warn; ``events`` (``_snapshot``) drops
    ``listing.problems`` without a word. (Pre-existing, not new in this commit.)
    Fixed: _events calls _report_unreadable(out, 0, listing.problems) once per new problem."""
    files = tmp_path / "files"
    files.mkdir()
    ms.storage.FileStore(files)  # an empty FileStore
    write_garbage(files, "broken", b"{not json")
    assert run_cli("ls", "--json", "--store", str(files))[0] == EXIT_OK
    assert "broken" in capsys.readouterr().err  # ls says so
    assert run_cli("events", "--json", "--store", str(files))[0] == EXIT_OK
    err = capsys.readouterr().err
    assert "broken" in err
    assert "warning" in json.loads(err.splitlines()[0])


def test_E5_a_usage_error_without_json_is_redacted_too(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: everything printed is redacted. With --json, argparse's message goes through
    _say and is; without, argparse prints it itself, secret and all. (Pre-existing.)
    Fixed: always subclass ArgumentParser.error to go through _fail (text or JSON)."""
    assert main(["ls", SECRET]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err
    assert "unrecognized arguments" in err


# -- behaviour that held up ------------------------------------------------------------


def test_U5_json_before_the_command_gives_json_too(
    home: Path, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("--json", "ls") == (EXIT_OK, "[]\n")
    _, out = run_cli("--json", "ls", "--store", str(store))
    assert json.loads(out)[0]["id"] == "ex-1"
    assert run_cli("--json", "show", "nope", "--store", str(store))[0] == 3
    assert _one_json_line(capsys.readouterr().err)["code"] == 3


def test_E5_json_usage_errors_are_redacted(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("--json", "ls", SECRET)[0] == EXIT_USAGE
    err = capsys.readouterr().err
    assert SECRET not in err
    assert _one_json_line(err)["code"] == EXIT_USAGE


def test_U5_help_with_json_is_the_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--json", "--help"])
    assert exit.value.code == 0
    assert "exit codes" in capsys.readouterr().out


@pytest.mark.parametrize("mainspring_home", [None, ""])
def test_U6_an_empty_xdg_default_is_read_as_empty_and_nothing_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mainspring_home: str | None
) -> None:
    if mainspring_home is None:
        monkeypatch.delenv("MAINSPRING_HOME", raising=False)
    else:
        monkeypatch.setenv("MAINSPRING_HOME", mainspring_home)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for argv in (["ls"], ["ls", "--json"], ["tasks"], ["events"], ["doctor", "--json"]):
        assert run_cli(*argv)[0] == EXIT_OK
    assert run_cli("show", "ex-1")[0] == 3
    assert not (tmp_path / "state").exists()


def test_U6_an_existing_empty_home_dir_is_empty_and_untouched(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.mkdir(mode=0o755)
    assert run_cli("ls", "--json") == (EXIT_OK, "[]\n")
    assert list(home.iterdir()) == []
    assert home.stat().st_mode & 0o777 == 0o755
