"""Running programs (``run_program``, ``ProgramResult``): arguments, output caps, stdin, cwd,
env, exit statuses, bad arguments refused before anything starts, the stored form, and the
whole process tree stopped on a timeout or a plain cancel scope.

The tree stopped when a step is paused, cancelled, loses its lease or is shut down is in
test_subprocess_stops.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.executions import ProgramFailed, ProgramResult, run_program
from mainspring.storage._values import decode_value, encode_value

from .._examples import examples
from ._proc_tree import TREE_SIZE, Tree, survivors

pytestmark = pytest.mark.anyio

PY = sys.executable


async def test_argv_runs_without_a_shell_and_reports_how_it_ran() -> None:
    out = await run_program([PY, "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME", "*"])
    assert out["stdout"] == "['a b', '$HOME', '*']\n"  # no shell: nothing split or expanded
    assert out["returncode"] == 0
    assert (out["stdout_truncated"], out["stderr_truncated"]) == (0, 0)
    assert out["stopped_by"] is None
    assert out["duration"] > 0
    assert out["argv"][0] == PY


async def test_a_command_string_needs_shell_true_and_then_runs_in_sh() -> None:
    with pytest.raises(TypeError, match="shell=True"):
        await run_program("echo $((1 + 2))")
    with pytest.raises(TypeError, match="one string"):
        await run_program(["echo", "x"], shell=True)
    out = await run_program("echo $((1 + 2)) | tr 3 7", shell=True)
    assert out["stdout"] == "7\n"
    assert out["argv"] == ["/bin/sh", "-c", "echo $((1 + 2)) | tr 3 7"]


async def test_each_output_is_capped_read_to_its_end_and_what_was_cut_is_counted() -> None:
    # 3 MB on each pipe: far more than a pipe buffer, so the program would block forever if
    # reading stopped at the cap.
    code = "import sys; sys.stdout.write('o' * 3_000_000); sys.stderr.write('e' * 3_000_001)"
    out = await run_program([PY, "-c", code], max_output=1000)
    assert out["stdout"] == "o" * 1000
    assert out["stderr"] == "e" * 1000
    assert out["stdout_truncated"] == 3_000_000 - 1000
    assert out["stderr_truncated"] == 3_000_001 - 1000
    default = await run_program([PY, "-c", code])
    assert len(default["stdout"]) == 64 * 1024
    assert default["stdout_truncated"] == 3_000_000 - 64 * 1024
    nothing = await run_program([PY, "-c", code], max_output=0)
    assert (nothing["stdout"], nothing["stdout_truncated"]) == ("", 3_000_000)


async def test_output_is_text_decoded_with_replacement() -> None:
    code = "import sys; sys.stdout.buffer.write(b'ok \\xff \\xc3\\xa9')"
    out = await run_program([PY, "-c", code])
    assert out["stdout"] == "ok \ufffd \u00e9"


async def test_stdin_is_written_then_closed_and_is_dev_null_without_it() -> None:
    echo = [PY, "-c", "import sys; d = sys.stdin.buffer.read(); print(len(d), d[:5])"]
    assert (await run_program(echo, stdin="héllo"))["stdout"] == "6 b'h\\xc3\\xa9ll'\n"
    big = b"x" * 2_000_000  # more than a pipe holds: written while the program reads
    assert (await run_program(echo, stdin=big))["stdout"] == "2000000 b'xxxxx'\n"
    assert (await run_program(echo))["stdout"] == "0 b''\n"
    # A program that never reads its stdin does not make the helper hang.
    assert (await run_program(["true"], stdin=big))["returncode"] == 0


async def test_cwd_and_env(tmp_path: Path) -> None:
    out = await run_program([PY, "-c", "import os; print(os.getcwd())"], cwd=tmp_path)
    assert Path(out["stdout"].strip()) == Path(await anyio.Path(tmp_path).resolve())
    code = "import os; e = os.environ; print(e.get('MS_A'), e.get('HOME') is None, 'PATH' in e)"
    out = await run_program([PY, "-c", code], env={"MS_A": "a b", "HOME": None})
    assert out["stdout"] == "a b True True\n"  # added to this process's environment


async def test_a_non_zero_exit_raises_ProgramFailed_with_the_status_and_stderr_tail() -> None:
    code = "import sys; sys.stderr.write('x' * 5000 + 'the real reason'); sys.exit(3)"
    with pytest.raises(ProgramFailed) as info:
        await run_program([PY, "-c", code])
    result = info.value.result
    assert isinstance(info.value, ms.MainspringError)
    assert (result.returncode, result.ok, result.stopped_by) == (3, False, None)
    assert "exited with status 3" in str(info.value)
    assert str(info.value).endswith("the real reason")
    assert len(str(info.value)) < 1500  # the tail, not all of stderr
    returned = await run_program([PY, "-c", code], check=False)
    assert returned["returncode"] == 3


async def test_a_signal_is_named_and_secrets_in_stderr_are_redacted() -> None:
    with pytest.raises(ProgramFailed, match="killed by signal 9"):
        await run_program("kill -9 $$", shell=True)
    secret = "sk-" + "A1b2C3d4" * 5
    with pytest.raises(ProgramFailed) as info:
        await run_program(f"echo 'token {secret}' >&2; exit 1", shell=True)
    assert secret not in str(info.value)
    assert secret in info.value.result.stderr  # the result itself is the program's


async def test_a_program_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="cannot start 'no-such-program-ms'"):
        await run_program(["no-such-program-ms", "x"])
    with pytest.raises(FileNotFoundError, match="cannot start 'true' in"):
        await run_program(["true"], cwd=tmp_path / "missing")


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_output": (1 << 20) + 1}, ValueError, "1 MiB"),
        ({"max_output": -1}, ValueError, "max_output"),
        ({"timeout": -1}, ValueError, "timeout must be a positive"),
        ({"timeout": 0}, ValueError, "timeout must be a positive"),
        ({"timeout": float("inf")}, ValueError, "timeout"),
        ({"timeout": "10"}, TypeError, "timeout"),
        ({"grace": -0.1}, ValueError, "grace"),
        ({"grace": 61}, ValueError, "grace"),
        ({"env": {"A=B": "x"}}, ValueError, "variable name"),
        ({"env": {"A": 1}}, ValueError, "env"),
        ({"stdin": 5}, TypeError, "stdin"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_starts(
    tmp_path: Path, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(error, match=match):
        await run_program(["touch", str(marker)], **options)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("argv", "match"),
    [([], "empty"), (["a\0b"], "NUL"), ([b"true"], "bytes"), (b"true", "list of strings")],
)
async def test_bad_argv_is_refused(argv: Any, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        await run_program(argv)


def _results() -> st.SearchStrategy[ProgramResult]:
    text = st.text(max_size=50)
    return st.builds(
        ProgramResult,
        argv=st.lists(text, min_size=1, max_size=4).map(tuple),
        returncode=st.none() | st.integers(-64, 255),
        stdout=text,
        stderr=text,
        stdout_truncated=st.integers(0, 2**40),
        stderr_truncated=st.integers(0, 2**40),
        duration=st.floats(0, 1e6),
        stopped_by=st.none() | st.builds(ms.Timeout, detail=text, source=text),
    )


@settings(max_examples=examples(100))
@given(_results())
def test_the_stored_form_round_trips_through_the_storage_codec(result: ProgramResult) -> None:
    stored = decode_value(encode_value(result.to_dict()))
    assert ProgramResult.from_dict(stored) == result


def test_from_dict_refuses_what_is_not_a_stored_result() -> None:
    good = ProgramResult(argv=("true",), returncode=0, stdout="", stderr="").to_dict()
    with pytest.raises(ValueError, match="unknown"):
        ProgramResult.from_dict({**good, "extra": 1})
    with pytest.raises(ValueError, match="stopped_by"):
        ProgramResult.from_dict({**good, "stopped_by": {"kind": "pause"}})
    for key, bad in [("returncode", "0"), ("stdout", b""), ("duration", True), ("argv", [1])]:
        with pytest.raises(ValueError, match=f"not a stored ProgramResult: {key}"):
            ProgramResult.from_dict({**good, key: bad})
    timeout = {"kind": "timeout", "detail": 1, "source": "", "at": 0.0}
    with pytest.raises(ValueError, match=r"stopped_by\.detail is int"):
        ProgramResult.from_dict({**good, "stopped_by": timeout})


# -- the tree stopped ------------------------------------------------------------------------


async def test_B2_a_timeout_stops_the_whole_tree_and_the_result_says_Timeout(
    tmp_path: Path,
) -> None:
    tree = Tree(tmp_path)
    pids: list[int] = []

    async def watch() -> None:
        pids.extend(await tree.started())

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        # Long enough for the tree to start on a loaded machine; it never ends by itself.
        result = ProgramResult.from_dict(
            await run_program(tree.argv, timeout=3, grace=0.2, check=False)
        )
    assert len(pids) == TREE_SIZE
    assert survivors(pids) == []
    assert isinstance(result.stopped_by, ms.Timeout)
    assert "timeout of 3 s" in result.stopped_by.detail
    assert result.returncode is not None
    assert result.returncode < 0  # signalled
    assert not result.ok
    with pytest.raises(ProgramFailed, match="stopped: it ran longer than its timeout"):
        await run_program(["sleep", "100"], timeout=0.05)


async def test_B2_a_cancelled_scope_stops_the_whole_tree_and_cancellation_goes_on(
    tmp_path: Path,
) -> None:
    tree = Tree(tmp_path)
    caught: list[BaseException] = []

    async def run() -> None:
        try:
            await run_program(tree.argv, grace=0.2)
        except BaseException as exc:
            caught.append(exc)
            raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        pids = await tree.started()
        assert len(survivors(pids)) == TREE_SIZE
        tg.cancel_scope.cancel()
    assert survivors(pids) == []
    (exc,) = caught
    assert isinstance(exc, anyio.get_cancelled_exc_class())  # never swallowed
    (note,) = exc.__notes__
    assert f"(pid {pids[0]})" in note
    assert "its cancel scope was cancelled" in note


async def test_a_program_that_exits_on_SIGTERM_is_not_given_the_whole_grace(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    stopped = anyio.Event()

    async def run(scope: anyio.CancelScope) -> None:
        with scope:
            await run_program(["sh", "-c", 'echo $$ > "$0"; exec sleep 100', str(pid_file)],
                              grace=60)  # fmt: skip
        stopped.set()

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(run, scope)
        with anyio.fail_after(60):
            while not pid_file.exists() or not pid_file.read_text().strip():  # noqa: ASYNC110
                await anyio.sleep(0.01)
        pid = int(pid_file.read_text())
        scope.cancel()
        with anyio.fail_after(30):  # a hang guard: the grace is 60 s, sleep dies on TERM
            await stopped.wait()
    assert survivors([pid]) == []


def test_where_processes_have_no_sessions_running_is_refused_clearly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Windows: importing works (this module did); running says why it cannot, before
    # anything starts. The check comes before the first await, so no event loop is needed.
    monkeypatch.setattr(os, "name", "nt")
    coro = run_program(["true"])
    with pytest.raises(NotImplementedError, match="POSIX systems only"):
        coro.send(None)


async def test_B2_without_proc_the_process_group_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Other POSIX systems have no /proc to walk: killpg on the program's group stops the
    # tree (the orphan included: it left its parent, not its group).
    from mainspring.executions._programs import proctree as _proctree

    monkeypatch.setattr(_proctree, "HAVE_PROC", False)
    tree = Tree(tmp_path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run_program(tree.argv, grace=0.2))
        pids = await tree.started()
        tg.cancel_scope.cancel()
    assert survivors(pids) == []


@pytest.mark.parametrize("form", ["run_program", "run_program_result"])
async def test_B1_a_caller_already_cancelled_starts_no_program(tmp_path: Path, form: str) -> None:
    # run_program is a checkpoint: called in a cancelled scope (a step whose timeout fired
    # while its blocking code ran, and that goes on to run a program) it raises the
    # cancellation before anything starts; the program used to run first.
    from mainspring.executions._programs.programs import run_program_result

    marker = tmp_path / "ran"
    run = run_program if form == "run_program" else run_program_result
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run(["touch", str(marker)])
        raise AssertionError("not cancelled")  # pragma: no cover
    assert scope.cancelled_caught
    assert not marker.exists()
