"""Review 14: the operator's view — the command on records that hold what #12 added (stopped
steps, redacted outputs, masked inputs, structured findings, answers, diagnostics, typed
values) and on records of the older format (V3, E5, E7, E10). A control that must come from
another process (a cancel, a stop-task, a pause, a resume while a runtime holds the store) runs
as a real process; a read of a record at rest runs in this process through ``main``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import mainspring as ms
from mainspring.cli import main
from tests._raw import read_raw, write_raw
from tests.executions._kit import FAST, Gate, agent, plan_of, runtime, stored, tasks_of, tool

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SECRET = "ghp_" + "Q" * 36


def _command(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m mainspring.cli ARGV`` in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mainspring.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


async def _shell(*argv: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: _command(*argv))


async def _read(capsys: pytest.CaptureFixture[str], *argv: str) -> subprocess.CompletedProcess[str]:
    """``mainspring ARGV`` in this process, through ``main`` (what it prints, not a process of
    its own, is the point): its exit code, stdout and stderr. ``main`` runs an event loop of
    its own when the command needs one, so it is called from a worker thread."""
    capsys.readouterr()
    out = io.StringIO()
    code = await anyio.to_thread.run_sync(lambda: main(list(argv), stdout=out))
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), capsys.readouterr().err)


async def test_V3_a_cancel_from_the_command_in_another_process_reaches_the_tool_as_that_cancel(
    tmp_path: Path,
) -> None:
    gate = Gate()
    store = tmp_path / "store.sqlite3"
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
        done = await _shell(
            "--store", str(store), "cancel", handle.execution_id, "--reason", "from a shell"
        )
        assert done.returncode == 0, done.stderr
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel), seen
    assert isinstance(seen.root, ms.Cancel), seen.root
    (line,) = [c for c in record.controls if c.action == "cancel"]
    assert line.by != rt.owner
    assert (seen.root.detail, seen.root.source) == ("from a shell", line.by)
    assert result.status == "cancelled"
    assert isinstance(result.stopped_by, ms.Cancel)
    assert result.stopped_by.detail == "from a shell"


VAULT_TOKEN = "tok-" + "v" * 28


async def _rich_record(tmp_path: Path) -> str:
    """One execution holding what #12 added: a tool output with typed values and a secret,
    an agent whose ctx.step was redacted (and so ran again on resume), a structured finding
    with secrets in its evidence, a question answered with a secret, a stopped task."""
    gate = Gate()

    async def typed(**_: Any) -> Any:
        return {
            "when": __import__("datetime").date(2024, 1, 2),
            "raw": b"\x00",
            (1, 2): "pair",
            "token": VAULT_TOKEN,
            "set": {SECRET},
        }

    async def finder(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("fetch", lambda: {"token": VAULT_TOKEN})
        ctx.report_finding(
            f"found {SECRET}",
            evidence=[
                {"kind": "file", "ref": f"{SECRET}.md", "detail": SECRET, "step_id": "fetch"}
            ],
        )
        await ctx.ask(f"go on with {SECRET}?")
        await ctx.step("park", gate)
        return "done"

    plan = plan_of(
        tool("t", "typed"),
        agent("f", "finder", "t"),
        tool("after", "inc", "f", x=1),
    )
    options: dict[str, Any] = {"tools": {"typed": typed}, "agents": {"finder": finder}, **FAST}
    async with runtime(tmp_path, **options) as rt:
        first = await (await rt.start("g", plan, execution_id="ex-rich")).wait()
        assert first.status == "waiting_for_clarification", first
    # Answered in another runtime, which has only the masked fetch: it runs again there.
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.resume("ex-rich", answer=f"yes {SECRET}")
        await gate.entered.wait()
        (task,) = await rt.agent_tasks("ex-rich")
        await rt.stop_agent_task(task.id)
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, "ex-rich")
    assert result.status == "completed", result
    assert result.stopped_steps == ("f",)
    (task,) = tasks_of(record)
    assert task.diagnostics
    assert task.answer_sha256
    assert task.findings
    return str(tmp_path / "store.sqlite3")


def _no_secret(text: str) -> None:
    assert "Q" * 36 not in text
    assert VAULT_TOKEN not in text


async def test_E5_every_read_of_a_rich_record_works_and_prints_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = await _rich_record(tmp_path)
    reads = [
        (argv, extra)
        for argv in (
            ("show", "ex-rich"),
            ("ls",),
            ("tasks",),
            ("tasks", "ex-rich"),
            ("events",),
            ("doctor",),
        )
        for extra in ((), ("--json",))
    ]
    results = [await _read(capsys, "--store", store, *extra, *argv) for argv, extra in reads]
    for (argv, extra), done in zip(reads, results, strict=True):
        assert done.returncode == 0, (argv, extra, done.stderr)
        assert done.stderr == "", (argv, extra, done.stderr)
        _no_secret(done.stdout)
        if extra:
            for line in done.stdout.splitlines() if argv[0] == "events" else [done.stdout]:
                json.loads(line)


async def test_E10_show_says_which_steps_were_stopped_masked_or_ran_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = await _rich_record(tmp_path)
    done = await _read(capsys, "--store", store, "show", "ex-rich")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "stopped: f" in out
    assert "step t: its stored output is redacted" in out
    assert "inner step fetch ran again on resume" in out
    assert "answered" in out
    assert "sha256" in out
    assert "1 evidence" in out
    shown = json.loads((await _read(capsys, "--store", store, "--json", "show", "ex-rich")).stdout)
    (obs,) = [o for o in shown["observations"] if o["step_id"] == "t"]
    assert obs["redacted"] is True
    # The typed encoding is shown as stored, tags and all: it decodes to the stored value.
    assert ms.storage._seam.decode_value(obs["output"])[(1, 2)] == "pair"


def _to_old_format(store: str, execution_id: str) -> None:
    """Rewrite a record as the format before #12 stored it: findings with string evidence
    and a string provenance, checkpoints without `absent`, observations without
    `redacted`, no masked inputs, tasks without hashes, times or diagnostics."""
    body = read_raw(store, execution_id)
    if True:
        for c in body["checkpoints"]:
            c.pop("absent")
        for o in body["observations"]:
            o.pop("redacted")
        body.pop("masked_inputs")
        body.pop("stop_requests")
        for c in body["controls"]:
            c.pop("answer_sha256")
        for t in body["agent_tasks"]:
            for o in t["inner_observations"]:
                o.pop("redacted")
            for f in t["findings"]:
                f["evidence"] = ["read notes.md, line 3", f"saw {SECRET}"]
                f["provenance"] = "ex-rich@1"
                for key in ("agent_id", "task_id", "status", "superseded_by"):
                    f.pop(key)
            for key in (
                "answered_at",
                "answer_sha256",
                "pending_question_at",
                "diagnostics",
                "definition_hash",
                "envelope_hash",
                "attempt",
                "touched_paths",
            ):
                t.pop(key)
    write_raw(store, execution_id, body)


async def test_E5_reads_of_an_old_format_record_work_and_print_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = await _rich_record(tmp_path)
    await anyio.to_thread.run_sync(_to_old_format, store, "ex-rich")
    reads = [
        (argv, extra)
        for argv in (("show", "ex-rich"), ("ls",), ("tasks",), ("events",), ("doctor",))
        for extra in ((), ("--json",))
    ]
    results = [await _read(capsys, "--store", store, *extra, *argv) for argv, extra in reads]
    for (argv, extra), done in zip(reads, results, strict=True):
        assert done.returncode == 0, (argv, extra, done.stdout, done.stderr)
        assert done.stderr == "", (argv, extra, done.stderr)
        _no_secret(done.stdout)
    shown, listed = results[0], results[5]  # show ex-rich, tasks --json
    assert "3 evidence" in shown.stdout  # the provenance string became an item too
    (task,) = json.loads(listed.stdout)
    (finding,) = task["findings"]
    assert [e["kind"] for e in finding["evidence"]] == ["note", "note", "provenance"]
    assert finding["evidence"][0]["detail"] == "read notes.md, line 3"


async def test_E9_calls_made_before_a_stop_task_from_the_command_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """E9/B3: an agent made three skill calls, then waits; `mainspring stop-task` in another
    process stops it. The record, the result and `ls --json` keep the three calls."""
    gate = Gate()
    store = str(tmp_path / "store.sqlite3")

    async def spender(ctx: ms.AgentContext, input: Any) -> str:
        for i in range(3):
            await ctx.call_skill("model", f"p{i}")
        await ctx.step("park", gate)
        return "spent"

    plan = plan_of(agent("w", "spender"), tool("after", "inc", "w", x=1))
    async with runtime(tmp_path, agents={"spender": spender}, **FAST) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        done = await _shell("--store", store, "stop-task", task.id)
        assert done.returncode == 0, (done.stdout, done.stderr)
        with anyio.fail_after(30):
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.stopped_steps == ("w",)
    assert result.status == "completed"
    (task,) = tasks_of(record)
    assert (result.calls_used, record.calls_used, task.calls_used) == (3, 3, 3)
    (row,) = json.loads((await _read(capsys, "--store", store, "--json", "ls")).stdout)
    assert row["calls_used"] == 3
    assert row["stopped_steps"] == ["w"]


APP = """
import mainspring as ms

got = []

async def vault(**_):
    return {"token": "tok-" + "v" * 28, "n": 1}

async def asker(ctx, input):
    value = await ctx.step("fetch", ctx.call_skill, "vault")
    answer = await ctx.ask("go on?")
    print("agent got", value == {"token": "tok-" + "v" * 28, "n": 1}, flush=True)
    return "done"

config = {"agents": {"asker": asker}, "skills": {"vault": vault}}
"""


async def test_E10_resume_from_the_command_with_a_secret_answer_reruns_the_masked_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mainspring resume --answer` in another process: the answer's sha256 is of the answer
    as given, nothing secret is printed, the redacted inner step ran again (and says so),
    every call is counted once."""
    import hashlib
    import importlib

    (tmp_path / "app14.py").write_text(APP)
    sys.path.insert(0, str(tmp_path))
    try:
        app = importlib.import_module("app14")
    finally:
        sys.path.remove(str(tmp_path))
    store = str(tmp_path / "store.sqlite3")
    async with ms.open_runtime(store=store, **app.config) as rt:
        first = await (
            await rt.start("g", plan_of(agent("q", "asker")), execution_id="ex-q")
        ).wait()
    assert first.status == "waiting_for_clarification"
    answer = f"yes {SECRET}"

    def resume() -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "mainspring.cli",
                "--store",
                store,
                "resume",
                "ex-q",
                "--app",
                "app14:config",
                "--answer",
                answer,
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
        )

    done = await anyio.to_thread.run_sync(resume)
    assert done.returncode == 0, (done.stdout, done.stderr)
    _no_secret(done.stdout + done.stderr)
    async with ms.open_runtime(store=store, **app.config) as rt:
        record = stored(rt, "ex-q")
    assert record.status == "completed", record.status
    (task,) = tasks_of(record)
    assert task.answer_sha256 == hashlib.sha256(answer.encode()).hexdigest()
    assert any("fetch" in line and "redacted" in line for line in task.diagnostics)
    assert record.calls_used == 2 == task.calls_used
    shown = await _read(capsys, "--store", store, "show", "ex-q")
    _no_secret(shown.stdout + shown.stderr)
    assert "inner step fetch ran again on resume" in shown.stdout


async def test_E9_pausing_then_resuming_a_run_waiting_for_budget_counts_each_call_once(
    tmp_path: Path,
) -> None:
    """E9/B3: a run waits for budget with 2 calls used; `mainspring pause` (another process)
    pauses the stored run, then it is resumed with more budget: calls_used never goes back
    and ends equal to the calls made (durable ones not counted twice)."""
    from tests.executions._kit import Ledger

    ledger = Ledger()
    store = str(tmp_path / "store.sqlite3")

    async def spender(ctx: ms.AgentContext, input: Any) -> str:
        for i in range(4):
            await ctx.step(f"s{i}", ctx.call_skill, "model", f"p{i}")
        return "spent"

    agents = {"spender": spender}
    async with runtime(tmp_path, ledger, agents=agents, max_calls=2) as rt:
        first = await (await rt.start("g", plan_of(agent("w", "spender")))).wait()
        assert (first.status, first.calls_used) == ("waiting_for_budget", 2)
        done = await _shell("--store", store, "pause", first.execution_id, "--reason", "later")
        assert done.returncode == 0, (done.stdout, done.stderr)
        paused = stored(rt, first.execution_id)
        assert (paused.status, paused.calls_used) == ("paused", 2)
        (task,) = tasks_of(paused)
        assert task.calls_used == 2
        with anyio.fail_after(30):
            result = await (await rt.resume(first.execution_id, max_calls=10)).wait()
        record = stored(rt, first.execution_id)
    assert result.status == "completed", result
    assert ledger.names("skill") == [f"model:p{i}" for i in range(4)]
    (task,) = tasks_of(record)
    assert (result.calls_used, record.calls_used, task.calls_used) == (4, 4, 4)


async def test_E9_cancelling_a_run_waiting_for_budget_from_the_command_keeps_its_calls(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "store.sqlite3")

    async def spender(ctx: ms.AgentContext, input: Any) -> str:
        for i in range(4):
            await ctx.step(f"s{i}", ctx.call_skill, "model", f"p{i}")
        return "spent"

    async with runtime(tmp_path, agents={"spender": spender}, max_calls=2) as rt:
        first = await (await rt.start("g", plan_of(agent("w", "spender")))).wait()
        assert first.status == "waiting_for_budget"
        done = await _shell("--store", store, "--json", "cancel", first.execution_id)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert json.loads(done.stdout)["status"] == "cancelled"
        record = stored(rt, first.execution_id)
    assert (record.status, record.calls_used) == ("cancelled", 2)
    (task,) = tasks_of(record)
    assert (task.state, task.calls_used) == ("cancelled", 2)
    assert record.pending is None


async def test_E10_show_names_the_steps_whose_input_is_masked_on_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """E10 in the operator's view ("what was stored masked is said, not hidden"): a step whose
    input had to be masked will fail if resumed elsewhere; `mainspring show` says which."""
    store = str(tmp_path / "store.sqlite3")
    async with runtime(tmp_path, require_plan_approval=True) as rt:
        first = await (
            await rt.start("g", plan_of(tool("a", "inc"), tool("b", "echo", "a", pw=SECRET)))
        ).wait()
        assert first.status == "waiting_for_approval"
        assert stored(rt, first.execution_id).masked_inputs == ("b",)
    done = await _read(capsys, "--store", store, "show", first.execution_id)
    assert done.returncode == 0
    _no_secret(done.stdout + done.stderr)
    notes = done.stdout.split("\nnotes\n", 1)
    assert len(notes) == 2, done.stdout
    for word in ("step b", "input", "masked"):
        assert word in notes[1], notes[1]


async def test_R4_resume_of_a_finished_run_from_the_command_has_nothing_to_do_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: "A control with nothing to do (pausing a finished run) exits 1". Resuming a
    cancelled (or completed) run has nothing to do either: it must say so and exit 1, like
    `cancel` of a cancelled run does, not 0 as if it had resumed something."""
    store = str(tmp_path / "store.sqlite3")
    (tmp_path / "app14b.py").write_text("config = {}\n")
    async with runtime(tmp_path, require_plan_approval=True) as rt:
        first = await (await rt.start("g", plan_of(tool("a", "inc")))).wait()
        await rt.cancel(first.execution_id)
    # The command in this process (its exit code is the point): --app is found in the
    # working directory, as from a shell there.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "app14b", raising=False)
    again = await _read(capsys, "--store", store, "cancel", first.execution_id)
    assert again.returncode == 1, again  # the documented refusal, for comparison
    done = await _read(
        capsys, "--store", store, "resume", first.execution_id, "--app", "app14b:config"
    )
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)


SECRET_NAMED = {
    "accessToken": "hunter2-access",
    "clientSecret": "hunter2-client",
    "authToken": "hunter2-auth",
    "GITHUB_TOKEN": "hunter2-github",
    "OPENAI_API_KEY": "hunter2-openai",
    "DB_PASSWORD": "hunter2-dbpass",
    "db_password": "hunter2-dbpass2",
    "secretKey": "hunter2-secretkey",
    "bearer_token": "hunter2-bearer",
}


async def test_E5_values_under_common_secret_names_are_not_printed_by_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """E5 and "everything printed is redacted": values under secret-named keys are masked
    whole — also in the spellings config and HTTP code use every day (camelCase, env-var
    names, a prefix), not only the exact snake_case names. Pagination keys stay."""
    store = str(tmp_path / "store.sqlite3")

    async def config(**_: Any) -> dict[str, str]:
        return {**SECRET_NAMED, "nextPageToken": "page-2"}

    async with runtime(tmp_path, tools={"config": config}) as rt:
        result = await (await rt.start("g", plan_of(tool("c", "config")))).wait()
    assert result.status == "completed"
    done = await _read(capsys, "--store", store, "--json", "show", result.execution_id)
    assert done.returncode == 0
    leaked = [key for key, value in SECRET_NAMED.items() if value in done.stdout]
    assert leaked == [], f"printed and stored in clear: {leaked}"
    assert "page-2" in done.stdout
