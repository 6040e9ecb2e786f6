"""Running programs (``run_program``, ``ProgramResult``): arguments, output caps, stdin, cwd,
env, exit statuses, bad arguments refused before anything starts, the stored form, and the
whole process tree stopped on a timeout or a plain cancel scope.

The tree stopped when a step is paused, cancelled, loses its lease or is shut down is in
test_subprocess_stops.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.executions import ProgramFailed, ProgramResult, run_program
from mainspring.executions._programs.proctree import alive, stop_tree
from mainspring.storage import register_secret
from mainspring.storage._seam import decode_value, encode_value

from ..._examples import examples
from .._kit import FAST, agent, plan_of, runtime, stored, tasks_of, tool
from .._proc_tree import TREE_SIZE, Tree, survivors

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


#: The first timeout a tree is given: on a quiet machine its processes start within a tenth
#: of it. A timeout that fired before the whole tree started is tried again, doubled.
FIRST_TIMEOUT = 0.5


def _timeouts(tmp_path: Path) -> Iterator[tuple[Tree, float]]:
    """A fresh tree and a timeout for it, doubled each time the caller asks again (the
    timeout fired before the tree had started whole: a loaded machine), up to 32 s."""
    timeout = FIRST_TIMEOUT
    while timeout <= 32:
        where = tmp_path / f"timeout-{timeout:g}"
        where.mkdir()
        yield Tree(where), timeout
        timeout *= 2
    raise AssertionError("the tree never started whole within a 32 s timeout")


async def test_B2_a_timeout_stops_the_whole_tree_and_the_result_says_Timeout(
    tmp_path: Path,
) -> None:
    for tree, timeout in _timeouts(tmp_path):
        # The tree never ends by itself.
        result = ProgramResult.from_dict(
            await run_program(tree.argv, timeout=timeout, grace=0.2, check=False)
        )
        pids = tree.pids()
        assert survivors(pids) == []  # stopped, however much of it had started
        if len(pids) == TREE_SIZE:
            break
    assert len(pids) == TREE_SIZE
    assert survivors(pids) == []
    assert isinstance(result.stopped_by, ms.Timeout)
    assert f"timeout of {timeout:g} s" in result.stopped_by.detail
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


# ----------------------------------------------------------------------
# A program run by a step dies with its step: for each reason a step stops (pause, cancel,
# its own timeout, lease lost, shutdown), the program's whole process tree — children,
# grandchildren, some ignoring SIGTERM, an orphan re-parented away — is gone afterwards, and
# the reason is visible to the tool (``cancel_reason()``) or in the step's error. A program
# that exits non-zero fails its step, naming the status and the end of stderr.
#
# Invariant B2: a cancelled step leaves no process of its tree alive.


class Program:
    """``run_program`` as a tool, recording why it was cancelled if it was."""

    def __init__(self) -> None:
        self.reasons: list[ms.CancelReason | None] = []
        self.notes: list[str] = []
        self.calls = 0

    async def __call__(self, **input: Any) -> dict[str, Any]:
        self.calls += 1
        try:
            return await run_program(**input)
        except BaseException as exc:
            self.reasons.append(ms.cancel_reason())
            self.notes.extend(getattr(exc, "__notes__", ()))
            raise


def _tree_step(tree: Tree, **more: Any) -> ms.PlanStep:
    return tool("t", "sh", argv=tree.argv, grace=0.2, **more)


async def test_B2_a_pause_stops_the_tree_and_the_tool_sees_Pause(tmp_path: Path) -> None:
    tree, program = Tree(tmp_path), Program()
    async with runtime(tmp_path, tools={"sh": program}) as rt:
        handle = await rt.start("g", plan_of(_tree_step(tree)))
        pids = await tree.started()
        assert len(survivors(pids)) == TREE_SIZE
        result = await rt.pause(handle.execution_id, reason="lunch")
        assert result.status == "paused"
        assert survivors(pids) == []
        (reason,) = program.reasons
        assert isinstance(reason, ms.Pause)
        (note,) = program.notes  # the cancellation names the program and why it stopped
        assert f"(pid {pids[0]}) and its process tree were stopped because it was paused" in note
        assert stored(rt, handle.execution_id).plan.steps[0].status == "pending"  # type: ignore[union-attr]


async def test_B2_a_cancel_stops_the_tree(tmp_path: Path) -> None:
    tree, program = Tree(tmp_path), Program()
    async with runtime(tmp_path, tools={"sh": program}) as rt:
        handle = await rt.start("g", plan_of(_tree_step(tree)))
        pids = await tree.started()
        result = await rt.cancel(handle.execution_id, reason="not needed")
        assert result.status == "cancelled"
        assert survivors(pids) == []
        (reason,) = program.reasons
        assert reason is not None
        assert isinstance(reason.root, ms.Cancel)


async def test_B2_a_lost_lease_stops_the_tree(tmp_path: Path) -> None:
    tree, program = Tree(tmp_path), Program()
    async with runtime(tmp_path, tools={"sh": program}, **FAST) as rt:
        handle = await rt.start("g", plan_of(_tree_step(tree)))
        pids = await tree.started()
        store = rt.store
        assert store.release(handle.execution_id, rt.owner)
        assert store.acquire(handle.execution_id, "thief:1:x", ttl=60).acquired
        with anyio.fail_after(60):
            result = await handle.wait()
        assert isinstance(result.stopped_by, ms.LeaseLost)
        assert survivors(pids) == []
        (reason,) = program.reasons
        assert reason is not None
        assert isinstance(reason.root, ms.LeaseLost)


async def test_B2_leaving_the_runtime_stops_the_tree_with_Shutdown(tmp_path: Path) -> None:
    tree, program = Tree(tmp_path), Program()
    async with runtime(tmp_path, tools={"sh": program}) as rt:
        await rt.start("g", plan_of(_tree_step(tree)))
        pids = await tree.started()
    assert survivors(pids) == []
    (reason,) = program.reasons
    assert reason is not None
    assert isinstance(reason.root, ms.Shutdown)


async def test_B2_the_programs_own_timeout_stops_the_tree_and_fails_the_step_naming_it(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path, tools={"sh": run_program}) as rt:
        for tree, timeout in _timeouts(tmp_path):
            handle = await rt.start("g", plan_of(_tree_step(tree, timeout=timeout)))
            with anyio.fail_after(60):
                result = await handle.wait()
            pids = tree.pids()
            assert survivors(pids) == []  # stopped, however much of it had started
            if len(pids) == TREE_SIZE:
                break
        (observation,) = stored(rt, handle.execution_id).observations
    assert len(pids) == TREE_SIZE
    assert survivors(pids) == []
    assert result.status == "failed"
    assert observation.error is not None
    assert observation.error.startswith("ProgramFailed: the program")
    assert f"stopped: it ran longer than its timeout of {timeout:g} s" in observation.error


async def test_run_program_as_a_tool_returns_a_stored_result_and_fails_on_a_bad_exit(
    tmp_path: Path,
) -> None:
    plan = plan_of(
        tool("ok", "sh", argv=["sh", "-c", "echo hi; echo there >&2"]),
        tool("bad", "sh", "ok", argv=["sh", "-c", "echo boom >&2; exit 4"]),
    )
    async with runtime(tmp_path, tools={"sh": run_program}) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        observations = {o.step_id: o for o in stored(rt, handle.execution_id).observations}
    assert result.status == "failed"
    ok = ProgramResult.from_dict(observations["ok"].output)
    assert (ok.stdout, ok.stderr, ok.returncode) == ("hi\n", "there\n", 0)
    assert ok.argv == ("sh", "-c", "echo hi; echo there >&2")
    error = observations["bad"].error
    assert error == (
        "ProgramFailed: the program 'sh -c echo boom >&2; exit 4' exited with status 4; "
        "its stderr ends with: boom"
    )


async def test_B2_an_agents_ctx_run_dies_with_its_task_on_pause_and_runs_again_on_resume(
    tmp_path: Path,
) -> None:
    tree = Tree(tmp_path)
    reasons: list[ms.CancelReason | None] = []
    runs: list[ProgramResult] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        if tree.pids_file.exists():  # the resume: a short program this time
            runs.append(await ctx.run(["sh", "-c", "echo again"]))
            return "done"
        try:
            await ctx.run(tree.argv, grace=0.2)
        except BaseException:
            reasons.append(ctx.cancel_reason())
            raise
        return "unreachable"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        pids = await tree.started()
        await rt.pause(handle.execution_id)
        assert survivors(pids) == []
        (reason,) = reasons
        assert isinstance(reason, ms.Pause)
        (task,) = tasks_of(stored(rt, handle.execution_id))
        assert task.interruption is not None
        assert task.interruption.kind == "pause"
        done = await (await rt.resume(handle.execution_id)).wait()
    assert done.status == "completed"
    (again,) = runs
    assert (again.stdout, again.ok) == ("again\n", True)


# ----------------------------------------------------------------------
# The subprocess helper: a program that exited is not waited for by a
# background child holding its stdin, and the tool form's result always fits in one stored
# output (X2), even at the largest cap or with output whose stored form is larger than its
# bytes.
#
# Invariants B2 (a program is bounded and dies with its step) and X2 (one output at most 1 MiB
# as stored).
#
# Its tests carry the marks its module had:
# Seen in 3 of about 12 full runs, never reproduced alone: on asyncio, the stdin pipe of
# the program a background child holds (the first test) was collected unclosed during a
# later test of this module (its megabyte outputs trigger a full collection). _feed now
# aborts a transport it gave up on; until the leak is understood, its warning is not
# allowed to fail an unrelated test here.

_programs_mark1 = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in.*_UnixWritePipeTransport:"
    "pytest.PytestUnraisableExceptionWarning"
)

_programs_mark2 = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <_io.FileIO name=\d+ mode='wb':"
    "pytest.PytestUnraisableExceptionWarning"
)


@_programs_mark1
@_programs_mark2
async def test_B2_a_program_that_exited_is_not_held_up_by_a_child_keeping_its_stdin() -> None:
    # The program exits at once with status 0; a background child keeps a copy of its
    # stdin (and nothing else) without reading it. What the program did not read, nobody
    # will: the helper returns, rather than waiting for the timeout and calling it stopped.
    script = "exec 3<&0; sleep 60 0<&3 3<&- >/dev/null 2>&1 & echo $!; exit 0"
    result = await run_program(
        ["sh", "-c", script], stdin=b"x" * (1 << 20), timeout=15, check=False
    )
    child = int(result["stdout"].split()[0])
    try:
        assert result["stopped_by"] is None
        assert result["returncode"] == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)  # left alone, as documented: the test cleans up


@_programs_mark1
@_programs_mark2
@pytest.mark.parametrize(
    ("name", "code"),
    [
        # The documented largest cap, used by stdout alone.
        ("text", "import sys; sys.stdout.write('a' * (1 << 20))"),
        # Bytes that are not UTF-8: each becomes U+FFFD, three bytes as stored.
        ("binary", "import sys; sys.stdout.buffer.write(b'\\xff' * (1 << 20))"),
        # Control characters: each stored as a six-byte JSON escape.
        ("control", "import sys; sys.stdout.buffer.write(b'\\x01' * 900_000)"),
        # Both streams full.
        (
            "both",
            "import sys; sys.stdout.write('o' * (1 << 20)); sys.stderr.write('e' * (1 << 20))",
        ),
    ],
)
async def test_X2_the_tool_form_at_the_largest_cap_is_stored_with_the_cut_counted(
    tmp_path: Path, name: str, code: str
) -> None:
    step = tool("t", "sh", argv=[PY, "-c", code], max_output=1 << 20)  # 1 MiB: the largest cap
    async with runtime(tmp_path, tools={"sh": run_program}) as rt:
        handle = await rt.start("g", plan_of(step))
        done = await handle.wait()
    assert done.status == "completed", (name, done)
    out = done.outputs["t"]
    assert out["returncode"] == 0
    assert out["stdout"]  # kept what fits, not nothing
    assert out["stdout_truncated"] > 0  # and said what was cut


@_programs_mark1
@_programs_mark2
async def test_B2_a_reaped_programs_pid_reused_by_another_process_spares_its_children() -> None:
    # Once the program is reaped its pid may be given to an unrelated process. Stopping the
    # tree then must not walk that process's children by their parent links: a dead
    # program has no children of its own (they were re-parented when it exited), so any
    # process naming its pid as parent belongs to someone else. Simulated here with a
    # stranger's pid standing in for the reused one.
    stranger = await anyio.open_process(
        [
            PY,
            "-c",
            "import subprocess, sys; c = subprocess.Popen(['sleep', '60']);"
            " print(c.pid, flush=True); sys.stdin.read(); c.kill(); c.wait()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert stranger.stdout is not None
        with anyio.fail_after(30):
            line = await stranger.stdout.receive()
        child = int(line.split()[0])
        with anyio.fail_after(30):
            await stop_tree(stranger.pid, grace=0.1, reaped=lambda: True)
        assert alive(child), "stopping a reaped program's tree killed a stranger's child"
        # Nor when the reuse happened before the runtime saw the program reaped (asyncio
        # reaps in a watcher thread): a program leads its own session, a stranger does not.
        with anyio.fail_after(30):
            await stop_tree(stranger.pid, grace=0.1, reaped=lambda: False)
        assert alive(stranger.pid), "a stranger was stopped"
        assert alive(child), "a stranger's child was stopped"
    finally:
        stranger.kill()
        with anyio.CancelScope(shield=True):
            await stranger.aclose()
        with contextlib.suppress(ProcessLookupError, NameError):
            os.kill(child, signal.SIGKILL)


@_programs_mark1
@_programs_mark2
async def test_E5_the_note_on_a_cancellation_does_not_show_a_registered_secret() -> None:
    secret = "rev15-note-secret-Zq9"
    register_secret(secret)
    notes: list[str] = []

    async def run() -> None:
        try:
            await run_program([sys.executable, "-c", "import time; time.sleep(60)", secret])
        except BaseException as exc:
            notes.extend(getattr(exc, "__notes__", ()))
            raise

    def started() -> bool:
        for pid in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                if pid.isdigit() and secret.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
        return False

    # Cancelled once the program runs (run_program is a checkpoint: a scope cancelled
    # before it starts nothing, and there is no program to name).
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            while not await anyio.to_thread.run_sync(started):  # noqa: ASYNC110 - /proc only
                await anyio.sleep(0.01)  # polls /proc: no event says a program started
            tg.cancel_scope.cancel()
    assert notes, "the cancellation names the program"
    assert all(secret not in note for note in notes), notes


@_programs_mark1
@_programs_mark2
async def test_E5_a_large_tool_output_is_redacted_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redacting a megabyte of output (what run_program's tool form may return) takes about
    # a quarter of a second: done on the event loop it stalls every run's heartbeats.
    from mainspring.executions._steps import outputs as _outputs

    where: list[bool] = []
    real = _outputs.redact_flagged

    def spy(value: Any, **options: Any) -> Any:
        where.append(threading.current_thread() is threading.main_thread())
        return real(value, **options)

    monkeypatch.setattr(_outputs, "redact_flagged", spy)
    step = tool("t", "sh", argv=[PY, "-c", "print('x' * 100_000)"], max_output=1 << 20)
    async with runtime(tmp_path, tools={"sh": run_program}) as rt:
        handle = await rt.start("g", plan_of(step))
        done = await handle.wait()
    assert done.status == "completed"
    assert where == [False], "the output was redacted on the event loop's thread"


@_programs_mark1
@_programs_mark2
@pytest.mark.parametrize("option", ["check", "shell"])
@pytest.mark.parametrize("value", ["false", "no", 0, 1, None])
async def test_X4_check_and_shell_are_booleans_not_truthy_values(option: str, value: Any) -> None:
    # A planner writing {"check": "false"} must not get the opposite of what it asked for:
    # like timeout's bool, a flag of the wrong type is refused before anything starts.
    with pytest.raises(TypeError, match=option):
        await run_program(["false"], **{option: value})


_SUBREAPER_HOST = """
import ctypes, os, sys, anyio
from mainspring.executions import ProgramFailed, run_program

async def main(where):
    for n in range(3):  # a tree whose orphan is re-parented to this process, then stopped
        started = os.path.join(where, f"started{n}")  # once the orphan is re-parented
        script = 'sh -c "sleep 100 & exit 0"; : > "$0"; sleep 100'

        async def run():
            await run_program(["sh", "-c", script, started], grace=0.1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(60):
                while not os.path.exists(started):
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = open(f"/proc/{name}/stat").read()
            except OSError:
                continue
            state, ppid = raw[raw.rfind(")") + 2 :].split()[:2]
            if int(ppid) == os.getpid() and state == "Z":
                found.append(name)
    print(len(found))

if ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    print("skip")
else:
    anyio.run(main, sys.argv[2], backend=sys.argv[1])
"""


@_programs_mark1
@_programs_mark2
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreapers are Linux's")
async def test_B2_a_host_that_is_a_subreaper_or_pid_1_is_not_left_with_zombies(
    anyio_backend_name: str, tmp_path: Path
) -> None:
    # In a container without an init, the runtime's process is PID 1: every orphan of a
    # program is re-parented to it. Those the tree stopping killed must be reaped, not left
    # as zombies filling the process table. Run in a process of its own (the flag is for
    # life).
    argv = [PY, "-c", _SUBREAPER_HOST, anyio_backend_name, str(tmp_path)]
    host = await anyio.run_process(argv, check=True)
    out = host.stdout.decode().strip()
    if out == "skip":
        pytest.skip("cannot become a subreaper here")
    assert out == "0", f"{out} zombies left in the host"


@_programs_mark1
@_programs_mark2
async def test_E5_a_secret_cut_in_two_by_the_error_messages_window_is_not_shown() -> None:
    # ProgramFailed shows the end of stderr (1000 characters) and the start of argv (200):
    # a registered secret straddling either edge must not leave half of itself behind.
    secret = "rev15-window-secret-" + "K7p2" * 5  # 40 characters
    register_secret(secret)
    half = secret[20:]
    stderr = secret + "." * (1000 - 20)  # the tail window starts in the secret's middle
    code = "import sys; sys.stderr.write(sys.argv[1]); sys.exit(2)"
    with pytest.raises(ProgramFailed) as info:
        await run_program([PY, "-c", code, stderr])
    assert half not in str(info.value)
    # The argv shown is cut at 200 characters, 20 into the secret.
    padding = "a" * (180 - len(f"{PY} -c {code} "))
    with pytest.raises(ProgramFailed) as info:
        await run_program([PY, "-c", code, padding + secret])
    assert secret[:20] not in str(info.value)


@_programs_mark1
@_programs_mark2
async def test_E5_a_secret_cut_in_two_by_the_output_cap_is_not_stored_in_half(
    tmp_path: Path,
) -> None:
    # Redaction masks a registered secret it sees whole; one cut in two by max_output would
    # leave its first half in the stored output. The cut drops the whole secret instead.
    secret = "rev15-cap-secret-" + "Jx5w" * 6  # 41 characters
    register_secret(secret)
    code = "import sys; sys.stdout.write('.' * 1000 + sys.argv[1] + '.' * 100)"
    step = tool("t", "sh", argv=[PY, "-c", code, secret], max_output=1020)
    async with runtime(tmp_path, tools={"sh": run_program}) as rt:
        handle = await rt.start("g", plan_of(step))
        done = await handle.wait()
        stored = rt.store.get(handle.execution_id)
    assert done.status == "completed"
    assert stored is not None
    (observation,) = stored.observations
    kept = observation.output["stdout"]
    assert secret[:20] not in kept, kept[-40:]
    assert kept == "." * 1000  # the secret's start is cut too, and counted
    assert observation.output["stdout_truncated"] == len(secret) + 100
