"""The operator's commands: listings (with --json), show, tasks, doctor, events, and the
controls (pause, cancel, stop-task, resume --app) with their exit codes."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.cli import (
    EXIT_BUSY,
    EXIT_FAILED,
    EXIT_NO_STORE,
    EXIT_OK,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    main,
)
from mainspring.cli._output import when
from mainspring.cli._reads import _chosen
from mainspring.executions import WithUsage
from mainspring.storage import SqliteStore, Usage
from mainspring.storage._seam import encode_frame

from .._cli_kit import inc, run_cli
from .._postgres import postgres_url  # noqa: F401 - a fixture
from .._raw import read_raw, write_garbage, write_raw

SECRET = "ghp_" + "a" * 36


async def _asker(ctx: ms.AgentContext, input: Any) -> str:
    await ctx.step("look", inc, 1)
    return await ctx.ask(f"token {SECRET} ok?")


APP_SOURCE = """
async def inc(x=0):
    return x + 1

async def asker(ctx, input):
    await ctx.step("look", inc, 1)
    return await ctx.ask("token ok?")

def config():
    return {"tools": {"inc": inc}, "agents": {"asker": asker}}
"""


def _plan() -> ms.Plan:
    return ms.Plan(id="p", goal="g", steps=(
        ms.PlanStep(id="s1", tool="inc", input={"x": 1}),
        ms.PlanStep(id="a", agent="asker", depends_on=("s1",)),
    ))  # fmt: skip


def _make_store(path: Path) -> str:
    async def build() -> str:
        async with ms.open_runtime(store=path, tools={"inc": inc}, agents={"asker": _asker}) as rt:
            result = await (
                await rt.start(f"goal with {SECRET}", _plan(), execution_id="ex-1")
            ).wait()
            await (await rt.start("second", _plan(), execution_id="ex-2")).wait()
            return result.execution_id

    return anyio.run(build)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite3"
    _make_store(path)
    return path


def test_ls_lists_executions_as_a_table_and_as_json(store: Path) -> None:
    code, out = run_cli("ls", "--store", str(store))
    assert code == EXIT_OK
    header, *rows = out.splitlines()
    assert header.split() == [
        "ID", "STATUS", "GOAL", "STEPS", "CALLS", "TOKENS", "COST", "LEASE", "UPDATED"
    ]  # fmt: skip
    assert {row.split()[0] for row in rows} == {"ex-1", "ex-2"}
    assert "waiting_for_clarification" in out
    assert SECRET not in out
    code, out = run_cli("ls", "--store", str(store), "--json")
    data = json.loads(out)
    assert {d["id"] for d in data} == {"ex-1", "ex-2"}
    assert data[0]["steps_total"] == 2
    assert data[0]["lease_owner"] is None


def test_show_and_tasks_say_everything_redacted(store: Path) -> None:
    code, out = run_cli("show", "ex-1", "--store", str(store))
    assert code == EXIT_OK
    assert "pending: clarification (agent task ex-1:t1)" in out
    assert "STEP" in out
    assert "s1" in out
    assert "checkpoints" in out
    assert SECRET not in out
    code, out = run_cli("tasks", "ex-1", "--store", str(store), "--json")
    (task,) = json.loads(out)
    assert task["state"] == "waiting_for_clarification"
    code, out = run_cli("tasks", "--store", str(store))
    assert out.count("waiting_for_clarification") == 2


def test_unknown_ids_bad_ids_and_missing_stores_have_their_exit_codes(
    store: Path, tmp_path: Path
) -> None:
    assert run_cli("show", "nope", "--store", str(store))[0] == EXIT_UNKNOWN
    assert run_cli("show", "../x", "--store", str(store))[0] == EXIT_USAGE
    assert run_cli("ls", "--store", str(tmp_path / "missing.sqlite3"))[0] == EXIT_NO_STORE
    assert not (tmp_path / "missing.sqlite3").exists()  # never created by accident
    assert run_cli("stop-task", "nope:t1", "--store", str(store))[0] == EXIT_UNKNOWN
    assert run_cli()[0] == EXIT_USAGE


@pytest.mark.parametrize(
    "kind", ["a directory named like a SQLite file", "a SQLite file named like a directory"]
)
def test_the_command_and_the_runtime_name_a_stores_backend_alike(tmp_path: Path, kind: str) -> None:
    """One rule (mainspring.storage._seam.store_kind) for both: what is at the path decides."""
    if kind.startswith("a directory"):
        path = tmp_path / "runs.sqlite3"
        ms.storage.FileStore(path)
    else:
        path = tmp_path / "runs"
        ms.storage.SqliteStore(tmp_path / "made.sqlite3").close()
        (tmp_path / "made.sqlite3").rename(path)
    _make_store(path)  # the runtime opens what is there (it used to fail on both)
    code, out = run_cli("ls", "--store", str(path), "--json")
    assert code == EXIT_OK
    assert {d["id"] for d in json.loads(out)} == {"ex-1", "ex-2"}
    assert path.is_dir() == kind.startswith("a directory")


def test_pause_cancel_and_stop_task_need_no_user_code(store: Path) -> None:
    code, out = run_cli("stop-task", "ex-2:t1", "--store", str(store))
    assert code == EXIT_OK
    assert "ex-2:t1: cancelled" in out
    code, out = run_cli("stop-task", "ex-2:t1", "--store", str(store), "--json")
    assert code == EXIT_FAILED  # already finished: reported, not repeated
    assert json.loads(out)["state"] == "cancelled"
    code, out = run_cli("pause", "ex-1", "--store", str(store), "--reason", "lunch")
    assert (code, "paused" in out) == (EXIT_OK, True)
    code, out = run_cli("cancel", "ex-1", "--store", str(store))
    assert (code, "cancelled" in out) == (EXIT_OK, True)
    code, out = run_cli("show", "ex-1", "--store", str(store))
    assert "pause by" in out
    assert "cancel by" in out


def test_show_prints_a_controls_reason_with_its_control_characters_escaped(store: Path) -> None:
    # A reason is anyone's text (a server passes its user's): it must not drive the terminal.
    reason = "evil \x1b[31mred\x07 \u202e end"
    code, _ = run_cli("pause", "ex-1", "--store", str(store), "--reason", reason)
    assert code == EXIT_OK
    code, out = run_cli("show", "ex-1", "--store", str(store))
    assert code == EXIT_OK
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "\u202e" not in out
    assert ": evil \\x1b[31mred\\x07 \\u202e end" in out


def test_r8_answer_needs_no_user_code_and_refuses_a_run_not_waiting(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_cli("answer", "ex-2", f"yes {SECRET}", "--store", str(store))
    assert (code, "ex-2: answer stored" in out) == (EXIT_OK, True)
    assert SECRET not in out
    stored = ms.storage.SqliteStore(store)
    try:
        record = stored.get("ex-2")
    finally:
        stored.close()
    assert record is not None
    assert record.status == "waiting_for_clarification"  # stored for the next resume
    assert [r.answer for r in record.answer_requests] == ["yes [redacted github-token]"]
    capsys.readouterr()
    code, out = run_cli("answer", "ex-2", "no", "--store", str(store))
    assert code == EXIT_BUSY  # one answer per question: a second is refused, not dropped
    assert "has an answer already" in capsys.readouterr().err
    assert run_cli("cancel", "ex-1", "--store", str(store))[0] == EXIT_OK
    capsys.readouterr()
    code, out = run_cli("answer", "ex-1", "late", "--store", str(store))
    assert (code, out) == (EXIT_FAILED, "")
    assert "ex-1 is not waiting for an answer (it is cancelled)" in capsys.readouterr().err
    code, out = run_cli("answer", "ex-1", "late", "--store", str(store), "--json")
    assert code == EXIT_FAILED
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == EXIT_FAILED
    assert "not waiting for an answer" in error["error"]
    assert run_cli("answer", "ex-nope", "x", "--store", str(store))[0] == EXIT_UNKNOWN
    code, out = run_cli("answer", "ex-1", "x", "--store", str(store))
    stored = ms.storage.SqliteStore(store)
    try:
        record = stored.get("ex-1")
    finally:
        stored.close()
    assert record is not None
    assert record.answer_requests == ()  # nothing stored on a refusal


def test_r8_a_second_answer_is_busy_without_naming_a_holder_it_does_not_have(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The run waits with its lease free: the refusal is about the stored answer, so the
    # message must not say the run is "held" by anyone.
    assert run_cli("answer", "ex-2", "yes", "--store", str(store))[0] == EXIT_OK
    capsys.readouterr()
    code, _ = run_cli("answer", "ex-2", "no", "--store", str(store))
    assert code == EXIT_BUSY
    err = capsys.readouterr().err
    assert "has an answer already" in err
    assert "held" not in err


def test_l8_answer_to_a_waiting_run_says_an_open_runtime_takes_it_up(store: Path) -> None:
    # Nobody needs to resume by hand: a runtime open on the store recovers the answered run.
    code, out = run_cli("answer", "ex-2", "yes", "--store", str(store))
    assert code == EXIT_OK
    assert "a runtime open on this store takes the run up" in out


def test_r8_answer_says_json(store: Path) -> None:
    code, out = run_cli("answer", "ex-2", "yes", "--store", str(store), "--json")
    assert code == EXIT_OK
    assert json.loads(out) == {
        "id": "ex-2",
        "status": "waiting_for_clarification",
        "answered": True,
        "live": False,
    }


def test_stop_task_stops_or_cascades_and_the_listings_say_which_steps_were_stopped(
    store: Path,
) -> None:
    code, out = run_cli("stop-task", "ex-2:t1", "--store", str(store))
    assert (code, "ex-2:t1: cancelled" in out) == (EXIT_OK, True)
    code, out = run_cli("stop-task", "ex-1:t1", "--cascade", "--store", str(store))
    assert (code, "ex-1:t1: cancelled" in out) == (EXIT_OK, True)
    code, out = run_cli("ls", "--store", str(store), "--json")
    stopped = {d["id"]: d["stopped_steps"] for d in json.loads(out)}
    assert stopped == {"ex-1": [], "ex-2": ["a"]}  # S2: the cascade cancelled ex-1's step
    code, out = run_cli("ls", "--store", str(store))
    (row,) = [line for line in out.splitlines() if line.startswith("ex-2")]
    assert "1/2 (1 stopped)" in row  # succeeded of all: a stopped step is no success
    code, out = run_cli("show", "ex-2", "--store", str(store))
    assert "stopped: a (done without a result)" in out
    code, out = run_cli("show", "ex-1", "--store", str(store), "--json")
    steps = {s["id"]: s["status"] for s in json.loads(out)["plan"]["steps"]}
    assert steps == {"s1": "succeeded", "a": "cancelled"}


def test_resume_runs_user_code_named_by_app(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    # The app's tools are not the ones that started the run: that is drift, and this
    # runtime has no planner, so the run pauses (nothing is lost) and says why.
    code, out = run_cli("resume", "ex-2", "--store", str(store), "--app", "myapp:config",
                     "--answer", "yes")  # fmt: skip
    assert code == EXIT_OK
    assert "ex-2: paused" in out
    assert "why: the workspace drifted (tool inc changed)" in out
    assert run_cli("resume", "ex-1", "--store", str(store), "--app", "nope")[0] == EXIT_USAGE
    assert run_cli("resume", "ex-1", "--store", str(store), "--app", "missing:x")[0] == EXIT_USAGE


def test_p1_resume_with_an_app_lacking_a_runs_agent_is_a_usage_error_and_changes_nothing(
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "toolsonly.py").write_text(
        "async def inc(x=0):\n    return x + 1\n\n"
        "def config():\n    return {'tools': {'inc': inc}}\n"
    )
    monkeypatch.chdir(tmp_path)
    code, out = run_cli("resume", "ex-2", "--store", str(store), "--app", "toolsonly:config",
                     "--answer", "yes", "--json")  # fmt: skip
    assert code == EXIT_USAGE
    error = json.loads(capsys.readouterr().err)["error"]
    assert error.endswith("its plan names unknown agent asker")
    code, out = run_cli("show", "ex-2", "--store", str(store), "--json")
    shown = json.loads(out)
    assert shown["status"] == "waiting_for_clarification"
    assert shown["lease"] is None or not shown["lease"]["owner"]


def test_a_busy_execution_is_reported_with_its_owner(
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    sqlite = ms.storage.SqliteStore(store)
    assert sqlite.acquire("ex-1", "elsewhere:1:abcd", ttl=60).acquired
    sqlite.close()
    code, _ = run_cli("resume", "ex-1", "--store", str(store), "--app", "myapp:config",
                   "--answer", "yes")  # fmt: skip
    assert code == EXIT_BUSY
    assert "ex-1 is busy: held by elsewhere:1:abcd until" in capsys.readouterr().err
    code, _ = run_cli("resume", "ex-1", "--store", str(store), "--app", "json:loads")
    assert code == EXIT_USAGE  # json.loads() gives no configuration
    assert "--app json:loads failed" in capsys.readouterr().err


def test_doctor_reports_without_changing_anything(tmp_path: Path) -> None:
    files = tmp_path / "files"
    _make_store(files)
    assert run_cli("doctor", "--store", str(files))[0] == EXIT_OK
    store = ms.storage.FileStore(files)
    stored = store.get("ex-1")
    assert stored is not None
    assert stored.lease is not None
    # An orphan: marked running, its owner's lease lapsed.
    lapsed = attrs.evolve(stored.lease, owner="gone:1:x", expires_at=time.time() - 5)
    store.edit("ex-2", lambda e, now: attrs.evolve(e, status="running"))
    store.edit("ex-2", lambda e, now: e)
    raw = read_raw(files, "ex-2")
    raw["lease"] = attrs.asdict(lapsed)
    write_raw(files, "ex-2", raw)
    write_garbage(files, "broken", b"{not json")
    (files / ".tmp-abandoned").write_text("half")
    before = {p.name: p.read_bytes() for p in files.iterdir()}
    code, out = run_cli("doctor", "--store", str(files), "--json")
    assert code == EXIT_FAILED
    problems = {f["problem"] for f in json.loads(out)["findings"]}
    assert problems == {"unreadable", "orphaned", "stray-temp-file"}
    assert {p.name: p.read_bytes() for p in files.iterdir()} == before  # read-only


def test_doctor_names_a_dead_owner_apart_from_an_orphan(tmp_path: Path) -> None:
    """L7: a run whose lease looks live but whose owner, a process of this host, is gone
    (``kill -9``) is a problem of its own; right after the kill it is no lapsed lease yet."""
    files = tmp_path / "files"
    _make_store(files)
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from mainspring.storage._seam import new_owner_id; print(new_owner_id())",
        ],
        capture_output=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(ms.__file__).resolve().parent.parent)},
    )
    dead = child.stdout.decode().strip()
    store = ms.storage.FileStore(files)
    stored = store.get("ex-2")
    assert stored is not None
    assert stored.lease is not None
    raw = read_raw(files, "ex-2")
    raw["status"] = "running"
    raw["lease"] = attrs.asdict(
        attrs.evolve(stored.lease, owner=dead, expires_at=time.time() + 3600)
    )
    write_raw(files, "ex-2", raw)
    code, out = run_cli("doctor", "--store", str(files), "--json")
    assert code == EXIT_FAILED
    findings = json.loads(out)["findings"]
    assert [(f["id"], f["problem"]) for f in findings] == [("ex-2", "dead-owner")]
    assert dead in findings[0]["detail"]


def _entry(event: ms.storage.HistoryEvent) -> dict[str, Any]:
    return {k: v for k, v in attrs.asdict(event).items() if v is not None}


def test_events_prints_the_durable_history(store: Path) -> None:
    """Every history entry (V2), in sequence order: one JSON object each with --json (the
    entry's fields, None ones left out), a line each otherwise; --after and an id narrow it."""
    backend = ms.storage.SqliteStore(store, read_only=True)
    try:
        history = backend.history()
    finally:
        backend.close()
    code, out = run_cli("events", "--store", str(store), "--json")
    assert code == EXIT_OK
    entries = [json.loads(line) for line in out.splitlines()]
    assert entries == [_entry(e) for e in history]
    step = {"execution_id": "ex-1", "kind": "step", "step_id": "s1", "status": "succeeded"}
    assert any(step.items() <= e.items() for e in entries)
    fields = {f.name for f in attrs.fields(ms.storage.HistoryEvent)}
    assert all(set(e) <= fields for e in entries)  # V1: ids, states, counts; no text
    assert SECRET not in out  # the goal is not in the history at all
    middle = history[len(history) // 2].seq
    code, out = run_cli("events", "--store", str(store), "--json", "--after", str(middle))
    assert [json.loads(line) for line in out.splitlines()] == [
        _entry(e) for e in history if e.seq > middle
    ]
    code, out = run_cli("events", "ex-2", "--store", str(store), "--json")
    assert [json.loads(line) for line in out.splitlines()] == [
        _entry(e) for e in history if e.execution_id == "ex-2"
    ]
    code, out = run_cli("events", "--store", str(store), "--follow", "--max-polls", "2",
                        "--interval", "0.01")  # fmt: skip
    assert code == EXIT_OK
    lines = out.splitlines()
    assert len(lines) == len(history)  # each once, though it read twice
    # seq, the time (local, to the second), execution, kind, what it has, then who.
    first = lines[0].split()
    assert [first[0], *first[3:6]] == [str(history[0].seq), "ex-1", "created", "planned"]
    assert " ".join(first[1:3]) == when(history[0].at)
    assert first[6:] == (["by", history[0].owner] if history[0].owner else [])
    assert any(
        line.split()[3:7] == ["ex-1", "step", "succeeded", "step"] and "s1" in line
        for line in lines
    ), lines
    assert run_cli("events", "ex-nope", "--store", str(store))[0] == EXIT_UNKNOWN
    assert run_cli("events", "--after", "-1", "--store", str(store))[0] == EXIT_USAGE
    assert run_cli("events", "--after", "x", "--store", str(store))[0] == EXIT_USAGE
    assert run_cli("events", "bad/id", "--store", str(store))[0] == EXIT_USAGE


def test_no_color_unless_a_terminal_and_no_NO_COLOR(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Tty()
    main(["ls", "--store", str(store)], stdout=out)
    assert "\x1b[" in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    out = Tty()
    main(["ls", "--store", str(store)], stdout=out)
    assert "\x1b[" not in out.getvalue()


def _plant_unreadable(store: Path, execution_id: str) -> None:
    """A record that exists and cannot be read: a journal cut short before its first whole
    entry (files), a header row whose head does not parse (SQLite)."""
    if store.is_dir():
        frame = encode_frame(b'{"seq":1,"changes":[]}')
        (store / f"{execution_id}.journal").write_bytes(frame[:-3])
    else:
        write_garbage(store, execution_id, b'{"v": 1, "id": ')


@pytest.mark.parametrize("kind", ["files", "sqlite"])
def test_E7_every_read_says_an_unreadable_record_is_unreadable(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / ("files" if kind == "files" else "s.sqlite3")
    _make_store(store)
    _plant_unreadable(store, "cut")
    capsys.readouterr()
    code, _ = run_cli("ls", "--store", str(store))
    assert code == EXIT_OK
    assert "unreadable execution cut" in capsys.readouterr().err
    code, out = run_cli("doctor", "--store", str(store), "--json")
    assert code == EXIT_FAILED
    assert {"cut": "unreadable"}.items() <= {
        f["id"]: f["problem"] for f in json.loads(out)["findings"]
    }.items()
    for command in ("show", "tasks", "events"):
        code, _ = run_cli(command, "cut", "--store", str(store))
        assert code == EXIT_FAILED, command  # as doctor says: unreadable, not unknown
        err = capsys.readouterr().err
        assert "execution cut cannot be read" in err, command
        assert "no execution" not in err, command
    for command in ("pause", "cancel"):  # a control too: a problem found, not a lost store
        code, _ = run_cli(command, "cut", "--store", str(store))
        assert code == EXIT_FAILED, command
        assert "a record cannot be read: invalid execution cut" in capsys.readouterr().err


def test_L5_a_terminal_runs_lease_is_void_to_doctor_and_the_reads(tmp_path: Path) -> None:
    """Records written before the final write released the lease may still name the owner
    that finished them: nobody holds a finished run, so doctor finds nothing and ls and
    show say the lease is free."""
    files = tmp_path / "files"
    _make_store(files)
    for execution_id, expires in (("ex-1", time.time() - 5), ("ex-2", time.time() + 600)):
        raw = read_raw(files, execution_id)
        raw["status"] = "completed"
        raw["pending"] = None
        raw["lease"] = {"owner": "gone:1:x", "expires_at": expires, "epoch": 1}
        write_raw(files, execution_id, raw)
    code, out = run_cli("doctor", "--store", str(files), "--json")
    assert (code, json.loads(out)["findings"]) == (EXIT_OK, [])
    code, out = run_cli("ls", "--store", str(files), "--json")
    assert code == EXIT_OK
    assert [row["lease_owner"] for row in json.loads(out)] == [None, None]
    code, out = run_cli("show", "ex-2", "--store", str(files))
    assert code == EXIT_OK
    assert "lease:   free" in out
    assert "gone:1:x" not in out


def _count_sweeps(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the recovery sweeps begun and ended in this process from now on. A sweep is
    the one way a runtime takes over runs nobody runs (its watch at open and after, and
    ``Runtime.recover``); a runtime that recovers begins its first as it opens."""
    from mainspring.executions._facade.recovery import Recovery

    sweeps = {"begun": 0, "ended": 0}
    real = Recovery.sweep

    async def counted(self: Recovery) -> Any:
        sweeps["begun"] += 1
        try:
            return await real(self)
        finally:
            sweeps["ended"] += 1

    monkeypatch.setattr(Recovery, "sweep", counted)
    return sweeps


ORPHAN_APP = """
import anyio

SWEEPS = {"begun": 0, "ended": 0}  # the test's counts of recovery sweeps

async def gate():
    # The window under test: the command's runtime stays open until every recovery sweep
    # it began has ended (a runtime recovering runs begins its first as it opens, before
    # this step can run, and would take ex-other in it).
    with anyio.fail_after(30):
        while SWEEPS["begun"] > SWEEPS["ended"]:
            await anyio.sleep(0.01)
    return 1

def config():
    return {"tools": {"gate": gate}, "lease_ttl": 3, "recover": True}
"""


def _orphan(sqlite: ms.storage.SqliteStore, execution_id: str) -> None:
    """A run as a crashed process leaves it: running, its lease released."""
    now = time.time()
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="gate", input={}),))
    record = ms.storage.Execution(
        id=execution_id, goal="g", status="running", plan=plan, plan_version=1,
        lease=ms.storage.Lease(owner="", expires_at=0.0, epoch=1),
        created_at=now, updated_at=now,
    )  # fmt: skip
    assert sqlite.create(record)


def test_l8_a_command_takes_over_no_run_but_the_one_it_is_told_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A control from the shell (even ``resume --app`` with an app that asks for recovery)
    touches only the run it names: other runs nobody runs are left to the servers."""
    (tmp_path / "orphanapp.py").write_text(ORPHAN_APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "orphanapp", raising=False)
    import orphanapp  # type: ignore[import-not-found]  # the module --app loads, as loaded

    orphanapp.SWEEPS = sweeps = _count_sweeps(monkeypatch)
    path = tmp_path / "o.sqlite3"
    sqlite = ms.storage.SqliteStore(path)
    try:
        _orphan(sqlite, "ex-mine")
        _orphan(sqlite, "ex-other")
    finally:
        sqlite.close()
    code, out = run_cli("resume", "ex-mine", "--store", str(path), "--app", "orphanapp:config")
    assert code == EXIT_OK
    assert "ex-mine: completed" in out
    code, _ = run_cli("cancel", "ex-mine", "--store", str(path))  # finished: nothing to do
    assert sweeps == {"begun": 0, "ended": 0}  # the command's runtime never looked for orphans
    sqlite = ms.storage.SqliteStore(path)
    try:
        other = sqlite.get("ex-other")
        history = sqlite.history("ex-other")
    finally:
        sqlite.close()
    assert other is not None
    assert other.status == "running"
    assert other.lease is not None
    assert (other.lease.owner, other.lease.epoch) == ("", 1)  # never taken
    assert [event.kind for event in history] == ["created", "plan"]


def test_l7_an_owner_id_read_from_the_store_never_drives_the_terminal(tmp_path: Path) -> None:
    """An owner id is text anyone who can write the store chose: ``ls``, ``show`` and
    ``doctor``'s dead-owner finding show its control characters as escapes."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from mainspring.storage._seam import new_owner_id; print(new_owner_id())",
        ],
        capture_output=True, check=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(ms.__file__).resolve().parent.parent)},
    )  # fmt: skip
    owner = out.stdout.decode().strip() + ":\x1b[2J\x1b]0;owned\x07"  # a gone process's
    path = tmp_path / "h.sqlite3"
    sqlite = ms.storage.SqliteStore(path)
    try:
        now = time.time()
        plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="gate", input={}),))
        record = ms.storage.Execution(
            id="ex-h", goal="g", status="running", plan=plan, plan_version=1,
            lease=ms.storage.Lease(owner=owner, expires_at=0.0, epoch=1),
            created_at=now, updated_at=now,
        )  # fmt: skip
        assert sqlite.create(record, lease_ttl=600)
    finally:
        sqlite.close()
    outputs = {
        command: run_cli(command, *extra, "--store", str(path))
        for command, *extra in (("ls",), ("show", "ex-h"), ("doctor",))
    }
    assert outputs["doctor"][0] == EXIT_FAILED
    assert "dead-owner" in outputs["doctor"][1]
    for command, (_, text) in outputs.items():
        assert "\x1b" not in text, command
        assert "\x07" not in text, command
        assert "\\x1b[2J\\x1b]0;owned\\x07" in text, command


TAKEOVER_APP = """
import anyio

STATE = {"building": False, "started": [], "wake": None, "taken": None}
SWEEPS = {"begun": 0, "ended": 0}  # the test's counts of recovery sweeps


async def _hold(name):
    STATE["started"].append(name)
    STATE["wake"].set()
    await anyio.sleep_forever()


async def orphan_step():
    if STATE["building"]:
        await _hold("orphan_step")
    STATE["taken"].set()  # the command's runtime runs a run it was not asked about
    return "ran in the shell"


async def gate():
    if STATE["building"]:
        await _hold("gate")
    # Long enough for a takeover to show: until every recovery sweep the command's runtime
    # began has ended (a runtime recovering runs begins its first as it opens, before this
    # step can run), and the orphan's step has run if a sweep took it.
    with anyio.fail_after(30):
        while SWEEPS["begun"] > SWEEPS["ended"]:
            await anyio.sleep(0.01)
        if SWEEPS["begun"]:
            await STATE["taken"].wait()
    return "done"


def config():
    STATE["building"] = False
    STATE["taken"] = anyio.Event()
    return {"tools": {"orphan_step": orphan_step, "gate": gate}}
"""


def test_L8_a_command_never_takes_over_the_stores_other_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run nobody runs is a server's to recover (it has the application): ``mainspring
    resume ID``, ``answer``, ``pause``... act on the run they name, never on the others."""
    (tmp_path / "takeover_app.py").write_text(TAKEOVER_APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "takeover_app", raising=False)
    import takeover_app as app  # type: ignore[import-not-found]

    path = tmp_path / "s.sqlite3"

    async def build() -> None:
        app.STATE["building"] = True
        tools = {"orphan_step": app.orphan_step, "gate": app.gate}
        async with ms.open_runtime(store=path, tools=tools, recover=False) as rt:
            one = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="orphan_step"),))
            two = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="gate"),))
            await rt.start("orphan", one, execution_id="orph")
            await rt.start("paused", two, execution_id="held")
            while len(app.STATE["started"]) < 2:
                app.STATE["wake"] = anyio.Event()
                with anyio.fail_after(30):
                    await app.STATE["wake"].wait()
            assert (await rt.pause("held")).status == "paused"
        # Leaving the block left "orph" running with its lease released: an orphan.

    anyio.run(build)
    sqlite = ms.storage.SqliteStore(path)
    try:
        before = sqlite.get("orph")
    finally:
        sqlite.close()
    assert before is not None
    assert before.status == "running"
    app.SWEEPS = sweeps = _count_sweeps(monkeypatch)
    code, out = run_cli("answer", "held", "x", "--store", str(path))
    assert code == EXIT_FAILED  # not waiting for an answer
    code, out = run_cli("resume", "held", "--store", str(path), "--app", "takeover_app:config")
    assert (code, "held: completed" in out) == (EXIT_OK, True)
    assert sweeps == {"begun": 0, "ended": 0}  # the command's runtime never looked for orphans
    sqlite = ms.storage.SqliteStore(path)
    try:
        after = sqlite.get("orph")
    finally:
        sqlite.close()
    assert after is not None
    assert after.lease == before.lease  # never taken: no other owner, no new epoch
    assert (after.status, after.plan, after.completed_steps) == (
        before.status,
        before.plan,
        before.completed_steps,
    )


def test_r8_an_answer_with_undecodable_bytes_is_a_usage_error(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes on the command line that are not UTF-8 reach Python as lone surrogates, which
    no store can hold: a usage error (exit 2, JSON with --json), not a traceback."""
    bad = os.fsdecode(b"caf\xe9")
    code, out = run_cli("answer", "ex-2", bad, "--store", str(store))
    assert (code, out) == (EXIT_USAGE, "")
    assert "not UTF-8 text" in capsys.readouterr().err  # U4: the parser's usage error
    code, out = run_cli("answer", "ex-2", bad, "--store", str(store), "--json")
    assert code == EXIT_USAGE
    assert json.loads(capsys.readouterr().err)["code"] == EXIT_USAGE
    code, _ = run_cli("resume", "ex-2", "--store", str(store), "--app", "x:y", "--answer", bad)
    assert code == EXIT_USAGE
    stored = ms.storage.SqliteStore(store)
    try:
        record = stored.get("ex-2")
    finally:
        stored.close()
    assert record is not None
    assert record.answer_requests == ()
    assert record.lease is not None
    assert not record.lease.owner


def test_r8_answer_calls_a_run_live_only_while_its_lease_has_not_lapsed(
    store: Path,
) -> None:
    """``answer`` says a runner takes the answer only if one holds a live lease: a lease
    left by a crashed runner, lapsed on the store's clock, is no runner."""
    raw = read_raw(store, "ex-2")
    epoch = raw["lease"]["epoch"] + 1
    raw["lease"] = {"owner": "elsewhere:1:abcd", "expires_at": time.time() - 60, "epoch": epoch}
    write_raw(store, "ex-2", raw)
    code, out = run_cli("answer", "ex-2", "yes", "--store", str(store), "--json")
    assert code == EXIT_OK
    assert json.loads(out)["live"] is False
    code, out = run_cli("answer", "ex-2", "no", "--store", str(store))
    assert code == EXIT_BUSY  # answered already
    sqlite = ms.storage.SqliteStore(store)
    try:
        assert sqlite.acquire("ex-1", "elsewhere:2:abcd", ttl=600).acquired
    finally:
        sqlite.close()
    code, out = run_cli("answer", "ex-1", "yes", "--store", str(store), "--json")
    assert code == EXIT_OK
    assert json.loads(out)["live"] is True  # its runner takes it at its next heartbeat


def test_r8_answer_to_a_paused_run_says_only_its_resume_gives_it(store: Path) -> None:
    """A paused run is not recovered by anyone (L8 leaves it alone): ``answer`` does not
    promise that recovery will pick it up."""
    assert run_cli("pause", "ex-2", "--store", str(store))[0] == EXIT_OK
    code, out = run_cli("answer", "ex-2", "yes", "--store", str(store))
    assert code == EXIT_OK
    assert "ex-2: answer stored; the run is paused: its resume gives it" in out


# ----------------------------------------------------------------------
# ``mainspring events --follow --after SEQ``: a separate process tails the durable history
# (V2) while a run commits, and prints exactly the entries after SEQ, each once.

ROOT = Path(__file__).resolve().parents[2]


def _plan_cli_events(prefix: str, n: int, gate: bool = False) -> ms.Plan:
    """A chain of ``n`` inc steps, then (with ``gate``) one that waits and four more."""
    ids = [f"{prefix}{i}" for i in range(n)]
    if gate:
        ids += ["gate", *(f"after{i}" for i in range(4))]
    steps = tuple(
        ms.PlanStep(
            id=step_id,
            tool="gate" if step_id == "gate" else "inc",
            depends_on=(ids[i - 1],) if i else (),
        )
        for i, step_id in enumerate(ids)
    )
    return ms.Plan(id="p", goal="g", steps=steps)


class _Follower:
    """``python -m mainspring events --follow --json --after SEQ`` in its own process."""

    def __init__(self, store: Path | str, after: int, interval: float = 0.02) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mainspring", "events", "--follow", "--json",
             "--after", str(after), "--interval", str(interval), "--store", str(store)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            text=True,
        )  # fmt: skip
        self.lines: list[dict[str, Any]] = []

    async def until(self, seq: int) -> None:
        """Read what it prints until the entry ``seq`` (the pipe is read off the loop)."""
        assert self.proc.stdout is not None
        with anyio.fail_after(60):
            while not self.lines or self.lines[-1]["seq"] < seq:
                line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
                assert line, "the follower exited"
                self.lines.append(json.loads(line))


@pytest.fixture
def followers() -> Iterator[list[_Follower]]:
    made: list[_Follower] = []
    yield made
    for follower in made:
        follower.proc.kill()
        follower.proc.wait(timeout=30)
        assert follower.proc.stdout is not None
        follower.proc.stdout.close()


@pytest.fixture(params=["sqlite", "files", "postgres"])
def store_cli_events(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where the run writes; resolved before the test's event loop starts."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return tmp_path / ("s.sqlite3" if request.param == "sqlite" else "files")


@pytest.mark.anyio
async def test_events_follow_after_prints_every_later_entry_once(
    store_cli_events: Path | str, followers: list[_Follower]
) -> None:
    # On PostgreSQL the follower polls only every 30 s: within the 60 s it is given, it can
    # keep up only through the store's notices (LISTEN/NOTIFY).
    interval = 30.0 if isinstance(store_cli_events, str) else 0.02
    released = anyio.Event()

    async def gate() -> int:
        await released.wait()
        return 0

    async with ms.open_runtime(store=store_cli_events, tools={"inc": inc, "gate": gate}) as rt:
        await (await rt.start("first", _plan_cli_events("s", 3), execution_id="ex-1")).wait()
        before = await anyio.to_thread.run_sync(lambda: rt.store.history())
        after = before[len(before) // 2].seq  # mid-run of ex-1: its later entries follow
        follower = _Follower(store_cli_events, after, interval)
        followers.append(follower)
        handle = await rt.start("second", _plan_cli_events("t", 2, gate=True), execution_id="ex-2")
        # The follower is tailing: it printed ex-2's first steps, the gate holds the rest.
        async with contextlib.aclosing(rt.events(after=after)) as stream:
            async for event in stream:
                if event.step_id == "t1" and event.status == "succeeded":
                    break
        await follower.until(event.seq)
        released.set()  # more commits, made while it follows
        assert (await handle.wait()).status == "completed"
        full = await anyio.to_thread.run_sync(lambda: rt.store.history(after=after))
        await follower.until(full[-1].seq)
    assert follower.lines == [_entry(e) for e in full]  # each once, none missed
    finished = [e["step_id"] for e in follower.lines if e["kind"] == "step"
                and e.get("status") == "succeeded" and e["execution_id"] == "ex-2"]  # fmt: skip
    assert finished == ["t0", "t1", "gate", "after0", "after1", "after2", "after3"]


# ----------------------------------------------------------------------
# ``ls``: newest first, ``--status S[,S]``, ``--limit N`` and ``--since DURATION|ISO``, and a
# table that fits the terminal (``$COLUMNS``), the goal cut with an ellipsis.

LONG_GOAL = "Survey every open dataset on river temperatures and summarise the trends by decade"


async def _asker_cli_ls(ctx: ms.AgentContext, input: Any) -> str:
    return str(await ctx.ask("which rivers?"))


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, float]:
    """ex-old (completed), then ex-ask (waiting for an answer) and ex-new (completed);
    with the time between the first and the others."""
    path = tmp_path / "s.sqlite3"
    between = 0.0

    async def build() -> None:
        nonlocal between
        tools = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="inc"),))
        asks = ms.Plan(id="q", goal="g", steps=(ms.PlanStep(id="a", agent="asker"),))
        async with ms.open_runtime(
            store=path, tools={"inc": inc}, agents={"asker": _asker_cli_ls}
        ) as rt:
            await (await rt.start(LONG_GOAL, tools, execution_id="ex-old")).wait()
            between = time.time()
            await (await rt.start("ask", asks, execution_id="ex-ask")).wait()
            await (await rt.start("short", tools, execution_id="ex-new")).wait()

    anyio.run(build)
    return path, between


def _ids(*argv: str) -> list[str]:
    code, out = run_cli("ls", "--json", *argv)
    assert code == EXIT_OK
    return [e["id"] for e in json.loads(out)]


def test_ls_filters_by_status_limit_and_since(built: tuple[Path, float]) -> None:
    path, between = built
    store = ("--store", str(path))
    assert _ids(*store) == ["ex-new", "ex-ask", "ex-old"]  # newest first
    assert _ids(*store, "--status", "completed") == ["ex-new", "ex-old"]
    both = ["ex-new", "ex-ask", "ex-old"]
    assert _ids(*store, "--status", "completed,waiting_for_clarification") == both
    assert _ids(*store, "--status", "completed", "--status", "failed") == ["ex-new", "ex-old"]
    assert _ids(*store, "--limit", "2") == ["ex-new", "ex-ask"]
    assert _ids(*store, "--status", "completed", "--limit", "1") == ["ex-new"]
    assert _ids(*store, "--since", "1h") == both
    local = datetime.fromtimestamp(between).isoformat()  # no zone: local time
    assert _ids(*store, "--since", local) == ["ex-new", "ex-ask"]
    utc = datetime.fromtimestamp(between).astimezone().isoformat()
    assert _ids(*store, "--since", utc) == ["ex-new", "ex-ask"]
    code, out = run_cli("ls", *store, "--status", "paused")
    assert (code, out.split()) == (EXIT_OK, ["ID", "STATUS", "GOAL", "STEPS", "CALLS",
                                             "TOKENS", "COST", "LEASE", "UPDATED"])  # fmt: skip


def test_ls_since_a_duration_counts_back_from_the_stores_clock(built: tuple[Path, float]) -> None:
    path, _ = built
    db = SqliteStore(path, read_only=True)
    try:
        executions = db.list().executions
        now = db.now()
    finally:
        db.close()

    def chosen(since: tuple[str, float], at: float) -> list[str]:
        args = argparse.Namespace(statuses=None, since=since, limit=None)
        return [e.id for e in _chosen(executions, args, at)]

    assert len(chosen(("ago", 3600), now)) == 3
    assert chosen(("ago", 3600), now + 7200) == []  # two hours on: none in the last hour


@pytest.mark.parametrize("argv", [["--status", "done"], ["--limit", "0"], ["--limit", "x"]])
def test_ls_bad_filters_are_usage_errors(built: tuple[Path, float], argv: list[str]) -> None:
    path, _ = built
    assert run_cli("ls", "--store", str(path), *argv)[0] == EXIT_USAGE


def test_ls_fits_the_terminal(built: tuple[Path, float], monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = built
    monkeypatch.setenv("COLUMNS", "120")
    code, out = run_cli("ls", "--store", str(path))
    assert code == EXIT_OK
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 120  # it used to: 40 goal columns, 131 wide
    [old] = [line for line in lines if line.startswith("ex-old")]
    assert "  Survey every open dataset" in old
    assert "\u2026  1/1" in old  # cut with the ellipsis, the next column still lines up
    assert old.index("1/1") == lines[0].index("STEPS")

    monkeypatch.setenv("COLUMNS", "250")  # wide: the whole goal
    _, out = run_cli("ls", "--store", str(path))
    assert f"  {LONG_GOAL}  1/1" in out

    monkeypatch.delenv("COLUMNS")  # no terminal (a pipe): 40 columns of goal, as before
    _, out = run_cli("ls", "--store", str(path))
    assert f"  {LONG_GOAL[:39]}\u2026  1/1" in out


# ----------------------------------------------------------------------
# What ``mainspring show`` says about replay (E10): outputs stored redacted and inner steps
# that ran again because of it are listed; ``--json`` prints values in the typed encoding.


def _make_store_cli_replay(path: Path) -> None:
    async def creds() -> dict[str, Any]:
        return {"api_key": "k-live-123456", "when": dt.datetime(2024, 1, 2), "ids": {1, 2}}

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("login", lambda: {"token": "live-token-1"})
        return await ctx.ask("go on?")

    async def build() -> None:
        options: dict[str, Any] = {"tools": {"creds": creds}, "agents": {"worker": worker}}
        async with ms.open_runtime(store=path, **options) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(
                ms.PlanStep(id="creds", tool="creds"),
                ms.PlanStep(id="a", agent="worker", depends_on=("creds",)),
            ))  # fmt: skip
            first = await (await rt.start("g", plan, execution_id="ex-1")).wait()
            assert first.status == "waiting_for_clarification"
        # Another runtime has only the mask of login's result: login runs again there.
        async with ms.open_runtime(store=path, **options) as rt:
            await (await rt.resume("ex-1", answer="yes")).wait()

    anyio.run(build)


def test_show_lists_redacted_outputs_and_steps_that_ran_again(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store_cli_replay(store)
    code, out = run_cli("show", "ex-1", "--store", str(store))
    assert code == 0
    notes = out.split("\nnotes\n")[1].split("\n\n")[0].splitlines()
    assert notes == [
        "  step creds: its stored output is redacted, not what it returned",
        "  task ex-1:t1: inner step login ran again on resume: its stored result had been redacted",
    ]
    assert "live" not in out
    code, out = run_cli("show", "ex-1", "--store", str(store), "--json")
    (creds,) = [o for o in json.loads(out)["observations"] if o["step_id"] == "creds"]
    assert creds["redacted"] is True
    assert creds["output"] == {
        "api_key": "[redacted secret]",
        "ids": {"$ms": "set", "v": [1, 2]},
        "when": {"$ms": "datetime", "v": "2024-01-02T00:00:00"},
    }


# ----------------------------------------------------------------------
# B3 in the command: `ls`, `show`, `events` and their --json say what a run's model calls
# spent, and a run waiting for budget says which budget ran out and what the rest needs.

SPENT = Usage(input_tokens=1200, output_tokens=300, cost=Decimal("0.0450"))


async def _chat(prompt: str = "") -> WithUsage:
    return WithUsage(f"said {prompt}", usage=SPENT)


def _plan_cli_usage() -> ms.Plan:
    return ms.Plan(id="p", goal="g", steps=(
        ms.PlanStep(id="a", skill="chat", input={"prompt": "one"}),
        ms.PlanStep(id="b", skill="chat", input={"prompt": "two"}, depends_on=("a",)),
    ))  # fmt: skip


@pytest.fixture
def store_cli_usage(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite3"

    async def build() -> None:
        async with ms.open_runtime(store=path, skills={"chat": _chat}, max_tokens=1000) as rt:
            result = await (await rt.start("g", _plan_cli_usage(), execution_id="ex-1")).wait()
            assert result.status == "waiting_for_budget"

    anyio.run(build)
    return path


def test_B3_ls_shows_tokens_and_cost_as_a_table_and_as_json(store_cli_usage: Path) -> None:
    code, out = run_cli("ls", "--store", str(store_cli_usage))
    assert code == EXIT_OK
    header, row = out.splitlines()
    columns = header.split()
    assert columns[4:7] == ["CALLS", "TOKENS", "COST"]
    cells = row.split()
    assert cells[0] == "ex-1"
    assert cells[4:7] == ["1", "1,500", "0.0450"]
    code, out = run_cli("ls", "--store", str(store_cli_usage), "--json")
    (entry,) = json.loads(out)
    assert entry["usage"] == {"input_tokens": 1200, "output_tokens": 300, "cost": "0.0450"}


def test_B3_show_says_the_usage_its_limits_and_the_budget_that_ran_out(
    store_cli_usage: Path,
) -> None:
    code, out = run_cli("show", "ex-1", "--store", str(store_cli_usage))
    assert code == EXIT_OK
    assert "usage:   1,500 tokens (1,200 in, 300 out) of 1,000, cost 0.0450" in out
    assert "budget:  tokens exhausted; the rest of the plan needs 1 more calls" in out
    # A budget wait has no question: its line ends with when it began, not with ": ".
    (pending,) = [line for line in out.splitlines() if line.startswith("pending: budget")]
    assert not pending.rstrip().endswith(":"), pending
    code, out = run_cli("show", "ex-1", "--store", str(store_cli_usage), "--json")
    data: dict[str, Any] = json.loads(out)
    assert data["usage"] == {"input_tokens": 1200, "output_tokens": 300, "cost": "0.0450"}
    assert data["max_tokens"] is None  # the runtime's default, not set for this run
    assert data["pending"]["budget"]["max_tokens"] == 1000
    assert data["pending"]["budget"]["budget"] == "tokens"
    assert data["pending"]["budget"]["needed"] == 1


def test_B3_V1_the_history_carries_tokens_and_cost_as_numbers(store_cli_usage: Path) -> None:
    code, out = run_cli("events", "ex-1", "--store", str(store_cli_usage), "--json")
    assert code == EXIT_OK
    steps = [e for e in map(json.loads, out.splitlines()) if e["kind"] == "step"]
    done = next(e for e in steps if e["step_id"] == "a" and e["status"] == "succeeded")
    assert (done["input_tokens"], done["output_tokens"], done["cost"]) == (1200, 300, "0.0450")
    code, out = run_cli("events", "ex-1", "--store", str(store_cli_usage))
    assert "1500 tokens, cost 0.0450" in out


_APP = """
from decimal import Decimal
from mainspring.executions import WithUsage
from mainspring.storage import Usage

SPENT = Usage(input_tokens=1200, output_tokens=300, cost=Decimal("0.0450"))

async def _chat(prompt=""):
    return WithUsage(f"said {prompt}", usage=SPENT)

def config():
    return {"skills": {"chat": _chat}, "max_tokens": 1000}
"""


def test_B3_resume_from_the_command_raises_a_budget_and_the_run_goes_on(
    store_cli_usage: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mainspring resume ID --max-tokens N --app ...` is `rt.resume(id, max_tokens=N)`: the
    run that waited for its tokens budget finishes; bad budgets and deadlines are usage
    errors, refused before anything is opened."""
    (tmp_path / "usageapp.py").write_text(_APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    where = ("--store", str(store_cli_usage), "--app", "usageapp:config")
    for bad in (("--max-tokens", "-1"), ("--max-tokens", "1.5"), ("--max-cost", "NaN"),
                ("--max-calls", "2000000"), ("--deadline", "soon")):  # fmt: skip
        code, _ = run_cli("resume", "ex-1", *where, *bad)
        assert code == EXIT_USAGE, bad
    sqlite = ms.storage.SqliteStore(store_cli_usage)
    try:
        waiting = sqlite.get("ex-1")
    finally:
        sqlite.close()
    assert waiting is not None
    assert waiting.status == "waiting_for_budget"  # nothing was changed by the refusals
    code, out = run_cli("resume", "ex-1", *where, "--max-tokens", "5000", "--deadline", "1h")
    assert code == EXIT_OK, out
    assert "ex-1: completed" in out, out
    code, out = run_cli("show", "ex-1", "--store", str(store_cli_usage), "--json")
    data: dict[str, Any] = json.loads(out)
    assert data["status"] == "completed"
    assert data["max_tokens"] == 5000
    assert data["usage"]["input_tokens"] == 2400  # both calls, across the resume (E9)


# ----------------------------------------------------------------------
# B3 in the command: each agent task's tokens and cost are shown by ``show`` and
# ``tasks`` (not only in --json), and ``events`` prints a cost as ``ls`` / ``show`` do
# (0.0000001, not 1E-7).

TINY = Usage(input_tokens=1200, output_tokens=34, cost=Decimal("1E-7"))


async def _chat_cli_usage(prompt: str = "") -> WithUsage:
    return WithUsage(f"said {prompt}", usage=TINY)


async def _writer(ctx: ms.AgentContext, input: Any) -> str:
    return str(await ctx.call_skill("chat", "draft"))


@pytest.fixture
def store_cli_usage2(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite3"
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="w", agent="writer"),))

    async def build() -> None:
        async with ms.open_runtime(
            store=path, skills={"chat": _chat_cli_usage}, agents={"writer": _writer}
        ) as rt:
            result = await (await rt.start("g", plan, execution_id="ex-1")).wait()
            assert result.status == "completed"

    anyio.run(build)
    return path


@pytest.mark.parametrize("command", [["show", "ex-1"], ["tasks", "ex-1"]])
def test_B3_the_agent_task_table_says_each_tasks_tokens_and_cost(
    store_cli_usage2: Path, command: list[str]
) -> None:
    code, out = run_cli(*command, "--store", str(store_cli_usage2))
    assert code == EXIT_OK
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:2] == ["TASK", "STATE"])
    header, row = lines[at].split(), lines[at + 1].split()
    assert header[header.index("CALLS") + 1 : header.index("CALLS") + 3] == ["TOKENS", "COST"]
    assert row[header.index("TOKENS")] == "1,234"
    assert row[header.index("COST")] == "0.0000001"


def test_B3_events_print_a_cost_as_plain_decimal_text_and_json_stays_exact(
    store_cli_usage2: Path,
) -> None:
    code, out = run_cli("events", "ex-1", "--store", str(store_cli_usage2))
    assert code == EXIT_OK
    assert "1234 tokens, cost 0.0000001" in out
    assert "1E-7" not in out
    code, out = run_cli("events", "ex-1", "--store", str(store_cli_usage2), "--json")
    costs = {json.loads(line).get("cost") for line in out.splitlines()} - {None}
    assert {Decimal(cost) for cost in costs} == {Decimal("1E-7")}


# -- the timeline: owners, runs nobody runs, following a run ------------------------------

A, B = "host-a:1:aaaa", "host-b:2:bbbb"


def _leased(store: SqliteStore, execution_id: str, status: str, lease: ms.storage.Lease) -> None:
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s1", tool="t"),))
    record = ms.storage.Execution(
        id=execution_id, goal="g", status=status, plan=plan, plan_version=1, lease=lease,
        created_at=1_000.0, updated_at=2_000.0,
    )  # fmt: skip
    assert store.create(record)


def _owners_store(path: Path) -> None:
    store = SqliteStore(path)
    try:
        far = time.time() + 3_600
        _leased(store, "ex-held", "running", ms.storage.Lease(owner=A, expires_at=far, epoch=1))
        _leased(store, "ex-lapsed", "running", ms.storage.Lease(owner=A, expires_at=1_500, epoch=1))
        _leased(store, "ex-released", "running", ms.storage.Lease(owner="", expires_at=0, epoch=1))
        _leased(store, "ex-paused", "paused", ms.storage.Lease(owner="", expires_at=0, epoch=1))
    finally:
        store.close()


def test_ls_and_show_say_when_a_running_run_has_no_owner(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    _owners_store(path)
    code, out = run_cli("ls", "--store", str(path))
    assert code == EXIT_OK
    status = {line.split()[0]: line.split("  ")[1:] for line in out.splitlines()[1:]}
    assert f"running (no owner since {when(1_500)})" in out  # lapsed: when its lease ended
    assert f"running (no owner since {when(2_000)})" in out  # released: its last write
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "no owner" not in rows["ex-held"]
    assert "no owner" not in rows["ex-paused"]  # nobody is meant to run a paused run
    assert set(status) == {"ex-held", "ex-lapsed", "ex-released", "ex-paused"}
    code, out = run_cli("ls", "--store", str(path), "--json")
    since = {e["id"]: e["no_owner_since"] for e in json.loads(out)}
    assert since == {"ex-held": None, "ex-lapsed": 1_500, "ex-released": 2_000, "ex-paused": None}
    code, out = run_cli("show", "ex-lapsed", "--store", str(path))
    first, *rest = out.splitlines()
    assert first == f"ex-lapsed  running (no owner since {when(1_500)})"
    assert any(line.startswith(f"lease:   free since {when(1_500)}") for line in rest)
    code, out = run_cli("show", "ex-held", "--store", str(path))
    assert out.splitlines()[0] == "ex-held  running"
    assert f"lease:   {A}" in out


def test_L7_ls_and_show_say_when_a_live_looking_lease_belongs_to_a_process_that_ended(
    tmp_path: Path,
) -> None:
    # A kill -9'd owner leaves a lease that still looks live: nobody runs the run until it
    # lapses or a runtime recovers it (L7), and ls / show say so instead of plain "running".
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from mainspring.storage._seam import new_owner_id; print(new_owner_id())",
        ],
        capture_output=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(ms.__file__).resolve().parent.parent)},
    )
    dead = child.stdout.decode().strip()  # the process that made this owner id has ended
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path)
    try:
        far = time.time() + 3_600
        _leased(store, "ex-dead", "running", ms.storage.Lease(owner=dead, expires_at=far, epoch=1))
        _leased(store, "ex-held", "running", ms.storage.Lease(owner=A, expires_at=far, epoch=1))
    finally:
        store.close()
    code, out = run_cli("ls", "--store", str(path))
    assert code == EXIT_OK
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "running (owner gone: its process ended)" in rows["ex-dead"]
    assert "owner gone" not in rows["ex-held"]  # another host's owner: in doubt, alive
    code, out = run_cli("ls", "--store", str(path), "--json")
    gone = {e["id"]: e["owner_gone"] for e in json.loads(out)}
    assert gone == {"ex-dead": True, "ex-held": False}
    code, out = run_cli("show", "ex-dead", "--store", str(path))
    assert out.splitlines()[0] == "ex-dead  running (owner gone: its process ended)"


def test_events_say_who_took_a_run_over_from_whom_and_who_ran_each_entry(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    _owners_store(path)
    store = SqliteStore(path)
    try:
        taken = store.acquire("ex-lapsed", B, ttl=600)
        assert taken.acquired
        assert taken.lease is not None
        stored = store.get("ex-lapsed")
        assert stored is not None
        assert stored.plan is not None
        done = attrs.evolve(stored.plan.steps[0], status="succeeded")
        plan = attrs.evolve(stored.plan, steps=(done,))
        assert store.commit_run(attrs.evolve(stored, plan=plan, completed_steps=("s1",)), B).ok
    finally:
        store.close()
    code, out = run_cli("events", "ex-lapsed", "--store", str(path))
    assert code == EXIT_OK
    lines = out.splitlines()
    created, plan, lapse, takeover, step = lines
    assert created.endswith(f"created  running  by {A}")
    assert plan.endswith(f"by {A}")  # who held the lease when it was written
    assert "lapse" in lapse.split()
    assert f"lease lapsed {when(1_500)}" in lapse
    assert lapse.endswith(f"reason lease-expired  by {A}")
    assert f"takeover  from {A}" in takeover
    assert takeover.endswith(f"reason lease-expired  by {B}")
    assert step.endswith(f"by {B}")
    code, out = run_cli("events", "ex-lapsed", "--store", str(path), "--json")
    entries = [json.loads(line) for line in out.splitlines()]
    assert [e["kind"] for e in entries] == ["created", "plan", "lapse", "takeover", "step"]
    assert (entries[3]["owner"], entries[3]["previous_owner"]) == (B, A)
    assert all("at" in e and "seq" in e for e in entries)  # --json keeps its fields


def test_show_watch_prints_each_new_entry_and_stops_when_the_run_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.sqlite3"
    _owners_store(path)
    writer = SqliteStore(path)
    stored = writer.get("ex-held")
    assert stored is not None
    assert stored.plan is not None
    done = attrs.evolve(stored.plan.steps[0], status="succeeded")
    plan = attrs.evolve(stored.plan, steps=(done,))
    steps = [
        attrs.evolve(stored, plan=plan, completed_steps=("s1",)),
        attrs.evolve(stored, plan=plan, completed_steps=("s1",), status="completed"),
    ]
    waits: list[float] = []

    def next_write(interval: float) -> None:
        """Where the watcher would wait: the run commits its next change instead."""
        waits.append(interval)
        assert steps, "the watcher went on after the run finished"
        assert writer.commit_run(steps.pop(0), A).ok

    monkeypatch.setattr("mainspring.cli._reads.time.sleep", next_write)
    try:
        code, out = run_cli(
            "show", "ex-held", "--watch", "--interval", "0.01", "--store", str(path)
        )
    finally:
        writer.close()
    assert code == EXIT_OK
    assert waits == [0.01, 0.01]
    shown, followed = out.split("watching (Ctrl-C to stop)\n")
    assert shown.startswith("ex-held  running")
    lines = followed.splitlines()
    assert [line.split()[4] for line in lines] == ["step", "status"]
    assert "succeeded" in lines[0]
    assert "running -> completed" in lines[1]
    # A finished run is shown and not watched.
    code, out = run_cli("show", "ex-held", "--watch", "--store", str(path))
    assert code == EXIT_OK
    assert "watching" not in out


def test_E13_events_credit_a_pause_and_a_cancel_from_elsewhere_to_who_issued_them(
    tmp_path: Path,
) -> None:
    # A runs ex-held; the command pauses it, then cancels it. The status changes are the
    # command's writes, not A's, and nobody holds the lease after the pause (L3).
    path = tmp_path / "s.sqlite3"
    _owners_store(path)
    assert run_cli("pause", "ex-held", "--store", str(path))[0] == EXIT_OK
    assert run_cli("cancel", "ex-held", "--store", str(path))[0] == EXIT_OK
    code, out = run_cli("events", "ex-held", "--store", str(path))
    assert code == EXIT_OK
    lines = out.splitlines()
    paused = next(line for line in lines if "running -> paused" in line)
    pause = next(line for line in lines if "  control  pause" in line)
    cancelled = next(line for line in lines if "paused -> cancelled" in line)
    cancel = next(line for line in lines if "  control  cancel" in line)
    assert lines[0].endswith(f"by {A}")  # created: A held it
    issuer = pause.rsplit("  by ", 1)[1]
    assert issuer != A
    assert paused.endswith(f"by {issuer}")
    assert cancelled.endswith(f"by {cancel.rsplit('  by ', 1)[1]}")
    assert not any(line.endswith(f"by {A}") for line in lines[lines.index(paused) :])
