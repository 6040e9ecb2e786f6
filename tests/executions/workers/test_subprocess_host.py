"""SubprocessHost: real child processes that report, idle, read repairs, ignore SIGTERM,
outlive the runtime that started them; their identity (pid reuse, another host), their
stop (the whole tree, confirmed dead), their start failures, and no zombie left behind."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions import SubprocessHost, WorkerAgent, WorkerHost, WorkerSpec
from mainspring.executions._seam import Report, WorkerStartFailed
from mainspring.executions._workers.hosts import MAX_REPORT_LINE
from mainspring.executions._workers.subprocess_host import process_stat
from mainspring.storage._seam import ProcessIdentity

from .._kit import FAST, agent, plan_of, runtime

pytestmark = pytest.mark.anyio

#: A worker that does what its argv says, one JSON action each: say an object, write a raw
#: line, write a line of n bytes, report its environment, read stdin lines and report them,
#: ignore SIGTERM, start a grandchild (that ignores SIGTERM too) writing its pid to a file,
#: wait forever, exit.
_WORKER = r"""
import json, os, signal, subprocess, sys, time
for action in map(json.loads, sys.argv[1:]):
    kind, value = next(iter(action.items()))
    if kind == "say":
        print(json.dumps(value), flush=True)
    elif kind == "raw":
        sys.stdout.write(value); sys.stdout.flush()
    elif kind == "long":
        size, char, end = value
        sys.stdout.write(char * size + end); sys.stdout.flush()
    elif kind == "env":
        env = {k: v for k, v in os.environ.items() if k.startswith(("MAINSPRING_", "EXTRA_"))}
        print(json.dumps({"type": "progress", "env": env, "cwd": os.getcwd()}), flush=True)
    elif kind == "read":
        for _ in range(value):
            line = sys.stdin.readline()
            print(json.dumps({"type": "progress", "got": json.loads(line)}), flush=True)
    elif kind == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif kind == "grandchild":
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(%r, 'w').write(str(__import__('os').getpid())); time.sleep(1000)" % value])
    elif kind == "forever":
        while True:
            time.sleep(1000)
    elif kind == "exit":
        sys.exit(value)
"""

#: Starts the worker in a session of its own, prints its pid, and exits without waiting:
#: an orphan, as a crashed runtime leaves it.
_ORPHANER = r"""
import subprocess, sys
child = subprocess.Popen(sys.argv[1:], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(child.pid, flush=True)
"""


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(_WORKER)
    return path


def spec_of(worker: Path, *actions: dict[str, Any], **fields: Any) -> WorkerSpec:
    return WorkerSpec(
        command=(sys.executable, str(worker), *map(json.dumps, actions)),
        **{
            "worker_id": "w-1",
            "generation": 2,
            "task_id": "t-1",
            "session": "s-1",
            "job": "j-1",
            **fields,
        },
    )


async def all_reports(process: Any) -> list[Report]:
    with anyio.fail_after(60):
        return [report async for report in process.reports]


_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _zombies_before() -> None:
    """Zombies this process had before the test (another test's, whose event loop ended
    before it reaped them): not this test's to answer for."""
    _BEFORE.clear()
    _BEFORE.update(_zombie_children())


def zombies() -> list[int]:
    """This process's children that became zombies during the test (none may be left: B2)."""
    return [pid for pid in _zombie_children() if pid not in _BEFORE]


def _zombie_children() -> list[int]:
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            fields = raw[raw.rfind(b")") + 2 :].split()
            if fields[0] == b"Z" and int(fields[1]) == me:
                found.append(int(name))
    return found


def live(pid: int) -> bool:
    stat = process_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


async def until(check: Any) -> None:
    """Poll ``check`` (another process changes what it sees: no event to await)."""
    with anyio.fail_after(60):
        while not check():  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def test_reports_are_read_typed_and_stamped_and_the_exit_status_kept(worker: Path) -> None:
    host = SubprocessHost()
    assert isinstance(host, WorkerHost)
    said = [
        {"type": "progress", "useful": True},
        {"type": "idle"},
        {"type": "busy"},
        {"type": "failure", "failure_class": "tests", "fingerprint": "f" * 64},
        {"type": "usage", "input_tokens": 3, "output_tokens": 4, "cost": "0.01"},
        {"type": "result", "output": {"answer": 42}, "source_commit": "abc"},
    ]
    process = await host.start(spec_of(worker, *({"say": s} for s in said), {"exit": 7}))
    assert process.identity.host == host.host
    assert process.identity.group == process.identity.pid
    # Its start time, unless it had already exited (and was reaped) when /proc was read: it
    # says its lines and exits at once, which a loaded machine can let it finish first.
    started = process.identity.started
    assert started > 0 or (await host.inspect(process.identity)).state == "exited"
    reports = await all_reports(process)
    assert [r.type for r in reports] == [s["type"] for s in said]
    assert [dict(r.data) for r in reports] == said
    assert {(r.generation, r.session, r.job) for r in reports} == {(2, "s-1", "j-1")}
    with anyio.fail_after(60):
        assert await process.wait() == 7
    seen = await host.inspect(process.identity)
    assert (seen.state, seen.exit_code, seen.dead) == ("exited", 7, True)
    # Stopping what is dead already: exited, its status kept.
    seen = await host.stop(process.identity, grace=0.2)
    assert (seen.state, seen.exit_code) == ("exited", 7)
    assert zombies() == []


async def test_lines_that_are_not_reports_are_protocol_reports_without_their_text(
    worker: Path,
) -> None:
    host = SubprocessHost()
    raw = 'not json\n[1, 2]\n{"type": "nope", "x": 1}\n{"no": 1}\n\n   \n{"type": "protocol"}\n'
    process = await host.start(
        spec_of(worker, {"raw": raw}, {"say": {"type": "progress"}}, {"raw": '{"type": "idle"}'})
    )
    reports = await all_reports(process)
    assert [(r.type, dict(r.data)) for r in reports] == [
        ("protocol", {"reason": "not-json"}),
        ("protocol", {"reason": "not-object"}),
        ("protocol", {"reason": "unknown-type"}),
        ("protocol", {"reason": "unknown-type"}),
        ("protocol", {"reason": "unknown-type"}),
        ("progress", {"type": "progress"}),
        ("idle", {"type": "idle"}),  # a last line without its newline still counts
    ]
    with anyio.fail_after(60):
        assert await process.wait() == 0


async def test_an_over_long_line_is_skipped_to_its_end_as_one_protocol_report(
    worker: Path,
) -> None:
    host = SubprocessHost()
    process = await host.start(
        spec_of(
            worker,
            {"long": [MAX_REPORT_LINE + 1, "x", "\n"]},
            {"say": {"type": "progress", "n": 1}},
            {"long": [3 * MAX_REPORT_LINE, "x", "\n"]},
            {"long": [MAX_REPORT_LINE, "y", "\n"]},  # at most the limit, and not JSON
            {"long": [MAX_REPORT_LINE + 7000, "x", "\n"]},
            {"say": {"type": "progress", "n": 2}},
            {"long": [MAX_REPORT_LINE + 1, "z", ""]},  # too long, and the last (no newline)
        )
    )
    reports = await all_reports(process)
    assert [(r.type, r.data.get("reason", r.data.get("n"))) for r in reports] == [
        ("protocol", "too-long"),
        ("progress", 1),
        ("protocol", "too-long"),
        ("protocol", "not-json"),
        ("protocol", "too-long"),
        ("progress", 2),
        ("protocol", "too-long"),
    ]
    with anyio.fail_after(60):
        assert await process.wait() == 0


async def test_environment_workspace_and_resume(worker: Path, tmp_path: Path) -> None:
    host = SubprocessHost(env={"EXTRA_HOST": "h", "EXTRA_BOTH": "host"})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    fields = {
        "workspace": workspace,
        "input": {"question": "why?", "n": [1, 2]},
        "env": {"EXTRA_BOTH": "spec", "MAINSPRING_WORKER_ID": "not-this"},
    }
    os.environ["MAINSPRING_WORKER_RESUMES"] = "inherited"  # not passed on to a fresh start
    try:
        started = await host.start(spec_of(worker, {"env": True}, **fields))
        resumed = await host.resume(spec_of(worker, {"env": True}, resumes="s-0", **fields))
    finally:
        del os.environ["MAINSPRING_WORKER_RESUMES"]
    [first], [second] = await all_reports(started), await all_reports(resumed)
    # What the host set (CI sets MAINSPRING_REQUIRE_POSTGRES and such: inherited, not ours).
    env = {
        k: v for k, v in first.data["env"].items() if k.startswith(("EXTRA_", "MAINSPRING_WORKER_"))
    }
    assert env == {
        "EXTRA_HOST": "h",
        "EXTRA_BOTH": "spec",
        "MAINSPRING_WORKER_ID": "w-1",
        "MAINSPRING_WORKER_GENERATION": "2",
        "MAINSPRING_WORKER_TASK_ID": "t-1",
        "MAINSPRING_WORKER_SESSION": "s-1",
        "MAINSPRING_WORKER_JOB": "j-1",
        "MAINSPRING_WORKER_INPUT": env["MAINSPRING_WORKER_INPUT"],
    }
    assert json.loads(env["MAINSPRING_WORKER_INPUT"]) == {"question": "why?", "n": [1, 2]}
    assert Path(first.data["cwd"]) == workspace
    assert second.data["env"]["MAINSPRING_WORKER_RESUMES"] == "s-0"
    with anyio.fail_after(60):
        assert (await started.wait(), await resumed.wait()) == (0, 0)
    with pytest.raises(ValueError, match="resumes"):
        await host.resume(spec_of(worker))


async def test_idle_send_and_stop(worker: Path) -> None:
    host = SubprocessHost()
    process = await host.start(spec_of(worker, {"say": {"type": "idle"}}, {"read": 2}))
    reports = process.reports
    with anyio.fail_after(60):
        assert (await reports.receive()).type == "idle"
    assert (await host.inspect(process.identity)).state == "idle"
    await host.send(process.identity, {"type": "repair", "text": "fix the test"})
    with anyio.fail_after(60):
        got = await reports.receive()
    assert got.data["got"] == {"type": "repair", "text": "fix the test"}
    assert (await host.inspect(process.identity)).state == "running"
    seen = await host.stop(process.identity, grace=5)
    assert seen.state == "exited"
    assert seen.exit_code == -15
    assert not live(process.identity.pid)
    with pytest.raises(ProcessLookupError):
        await host.send(process.identity, {"type": "repair", "text": "too late"})
    with pytest.raises(ProcessLookupError):
        await host.send(attrs.evolve(process.identity, host="elsewhere"), {"type": "x"})
    with anyio.fail_after(60):
        assert [r async for r in reports] == []
        assert await process.wait() == -15
    assert zombies() == []


@pytest.mark.slow
async def test_a_tree_that_ignores_sigterm_is_killed_and_confirmed_dead(
    worker: Path, tmp_path: Path
) -> None:
    host = SubprocessHost(grace=0.2)
    pid_file = tmp_path / "grandchild"
    process = await host.start(
        spec_of(
            worker,
            {"ignore_term": True},
            {"grandchild": str(pid_file)},
            {"say": {"type": "progress"}},
            {"forever": True},
        )
    )
    with anyio.fail_after(60):
        assert (await process.reports.receive()).type == "progress"
    await until(lambda: pid_file.exists() and pid_file.read_text())
    grandchild = int(pid_file.read_text())
    assert live(grandchild)
    assert (await host.inspect(process.identity)).state == "running"
    seen = await host.stop(process.identity)  # the host's grace: 0.2 s
    assert (seen.state, seen.exit_code) == ("exited", -9)
    assert not live(process.identity.pid)
    assert not live(grandchild)
    with anyio.fail_after(60):
        await process.reports.aclose()
    assert zombies() == []


async def test_a_reused_pid_or_another_host_is_not_the_process(worker: Path) -> None:
    host = SubprocessHost()
    process = await host.start(spec_of(worker, {"read": 1}))
    identity = process.identity
    reused = attrs.evolve(identity, started=identity.started + 1)
    assert (await host.inspect(reused)).state == "exited"
    # Stopping the identity of an earlier process with this pid stops nothing.
    assert (await host.stop(reused, grace=0.2)).state == "exited"
    assert live(identity.pid)
    elsewhere = attrs.evolve(identity, host="another-machine/boot")
    assert (await host.inspect(elsewhere)).state == "unknown"
    assert (await host.stop(elsewhere, grace=0.2)).state == "unknown"
    assert live(identity.pid)
    # A pid that no process has.
    gone = ProcessIdentity(host=host.host, pid=2**22 + 12345, group=2**22 + 12345, started=1)
    assert (await host.inspect(gone)).state == "exited"
    assert (await host.stop(gone, grace=0.2)).state == "exited"
    assert (await host.stop(identity, grace=5)).state == "exited"
    with anyio.fail_after(60):
        await process.reports.aclose()


@pytest.mark.slow
async def test_an_orphan_another_process_started_is_stopped_by_its_identity(
    worker: Path, tmp_path: Path
) -> None:
    orphaner = tmp_path / "orphaner.py"
    orphaner.write_text(_ORPHANER)
    command = [sys.executable, str(orphaner), sys.executable, str(worker)]
    command += [json.dumps({"ignore_term": True}), json.dumps({"forever": True})]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, check=True)
    pid = int(done.stdout)
    stat = process_stat(pid)
    assert stat is not None
    host = SubprocessHost(grace=0.2)  # a runtime that did not start it
    identity = ProcessIdentity(host=host.host, pid=pid, group=pid, started=stat[2])
    assert (await host.inspect(identity)).state == "running"
    with pytest.raises(ProcessLookupError):
        await host.send(identity, {"type": "repair", "text": "not mine to talk to"})
    seen = await host.stop(identity)
    assert seen.state == "exited"
    assert seen.exit_code is None  # another process's child: not reaped here
    await until(lambda: not live(pid))


async def test_start_failures_raise_and_leave_nothing(worker: Path, tmp_path: Path) -> None:
    host = SubprocessHost()
    before = children()
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program")
    for spec in (
        attrs.evolve(spec_of(worker), command=(str(tmp_path / "missing"),)),
        attrs.evolve(spec_of(worker), command=(str(plain),)),  # not executable
        spec_of(worker, workspace=tmp_path / "no-such-dir"),
        spec_of(worker, workspace=plain),
        spec_of(worker, env={"BAD": "nul\x00"}),
    ):
        with pytest.raises(WorkerStartFailed, match="w-1"):
            await host.start(spec)
    with pytest.raises(WorkerStartFailed, match="not JSON"):
        await host.start(spec_of(worker, input={"x": object()}))
    assert children() - before == set()
    assert zombies() == []


def children() -> set[int]:
    me, found = os.getpid(), set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            if int(raw[raw.rfind(b")") + 2 :].split()[1]) == me:
                found.add(int(name))
    return found


async def test_a_process_nobody_waits_for_is_reaped_by_the_next_look(worker: Path) -> None:
    host = SubprocessHost()
    process = await host.start(spec_of(worker, {"exit": 3}))
    assert await all_reports(process) == []
    await until(lambda: not live(process.identity.pid))
    with anyio.fail_after(60):
        while (seen := await host.inspect(process.identity)).exit_code is None:  # noqa: ASYNC110
            await anyio.sleep(0.01)  # asyncio's watcher reaps in its own time
    assert seen.state == "exited"
    assert seen.exit_code == 3
    assert zombies() == []


def test_refused_where_there_are_no_process_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "name", "nt")
    with pytest.raises(NotImplementedError, match="POSIX"):
        SubprocessHost()


def test_grace_is_bounded() -> None:
    for grace in (-1, float("nan"), float("inf"), 10_000):
        with pytest.raises(ValueError, match="grace"):
            SubprocessHost(grace=grace)


@pytest.mark.slow
async def test_a_process_whose_child_outlives_it_is_not_dead_until_its_tree_is(
    worker: Path, tmp_path: Path
) -> None:
    """Its pid gone is not enough: a grandchild left in its session may still write to the
    workspace, so inspect says running until stop has stopped it too (no two writers)."""
    host = SubprocessHost(grace=0.2)
    pid_file = tmp_path / "grandchild"
    process = await host.start(spec_of(worker, {"grandchild": str(pid_file)}, {"exit": 4}))
    await until(lambda: pid_file.exists() and pid_file.read_text())
    grandchild = int(pid_file.read_text())
    with anyio.fail_after(60):
        assert await process.wait() == 4
    assert live(grandchild)
    assert (await host.inspect(process.identity)).state == "running"
    seen = await host.stop(process.identity)
    assert (seen.state, seen.exit_code) == ("exited", 4)
    assert not live(grandchild)
    with anyio.fail_after(60):
        await process.reports.aclose()
    assert zombies() == []


# ----------------------------------------------------------------------
# Worker-backed steps with the built-in SubprocessHost and tiny Python workers: a result,
# a repair on stdin, a process that ignores SIGTERM stopped (KILLed) before it is recorded
# stopped.

DELIVER = """
import json, os
given = json.loads(os.environ["MAINSPRING_WORKER_INPUT"])
print(json.dumps({"type": "usage", "input_tokens": 7, "output_tokens": 3}), flush=True)
print(json.dumps({"type": "result", "output": {"doubled": given["n"] * 2}}), flush=True)
"""

REPAIRED = """
import json, sys
print(json.dumps({"type": "busy"}), flush=True)
line = json.loads(sys.stdin.readline())
print(json.dumps({"type": "result", "output": {"repaired": line["type"]}}), flush=True)
"""

STUBBORN = """
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
print(json.dumps({"type": "busy"}), flush=True)
while True:
    time.sleep(0.05)
"""


def worker_workers_subprocess(
    tmp_path: Path, source: str, *args: str, **options: Any
) -> WorkerAgent:
    script = tmp_path / f"w{abs(hash(source))}.py"
    script.write_text(source)
    options.setdefault("grace", 0.2)
    return WorkerAgent([sys.executable, str(script), *args], **options)


async def _wait_running(rt: ms.Runtime, execution_id: str) -> ms.executions.WorkersView:
    with anyio.fail_after(60):
        while True:
            seen = await rt.workers(execution_id)
            if seen.workers and seen.workers[0].status == "running":
                return seen
            await anyio.sleep(0.02)


async def test_a_subprocess_worker_delivers_its_result(tmp_path: Path) -> None:
    agents = {"coder": worker_workers_subprocess(tmp_path, DELIVER)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder", n=21)))
        with anyio.fail_after(60):
            result = await handle.wait()
        seen = await rt.workers(handle.execution_id)
    assert result.status == "completed"
    assert result.outputs["a"] == {"doubled": 42}
    assert seen.workers[0].status == "delivered"
    assert seen.workers[0].usage[0].total_tokens == 10


async def test_a_repair_reaches_a_subprocess_worker(tmp_path: Path) -> None:
    agents = {"coder": worker_workers_subprocess(tmp_path, REPAIRED)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        seen = await _wait_running(rt, handle.execution_id)
        await rt.repair_worker(handle.execution_id, seen.workers[0].id, "try again")
        with anyio.fail_after(60):
            result = await handle.wait()
    assert result.outputs["a"] == {"repaired": "repair"}


@pytest.mark.slow
async def test_a_worker_ignoring_sigterm_is_killed_before_it_is_recorded_stopped(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pid"
    agents = {"coder": worker_workers_subprocess(tmp_path, STUBBORN, str(pidfile))}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(60):  # its SIGTERM handler is set once it wrote its pid
            written = anyio.Path(pidfile)
            while True:
                if await written.exists() and (await written.read_text()).strip():
                    break
                await anyio.sleep(0.02)  # polls the file the worker writes: no event for it
            await rt.pause(handle.execution_id)
        seen = await rt.workers(handle.execution_id)
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert seen.workers[0].status == "stopped"
    assert seen.workers[0].reason == "pause"


#: A worker that delivers at once, then ignores SIGTERM: its handoff's stop lasts the grace.
DELIVERS_THEN_LINGERS = """
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
print(json.dumps({"type": "result", "output": {"late": True}}), flush=True)
while True:
    time.sleep(0.05)
"""


async def test_B1_a_worker_handing_off_past_its_steps_timeout_is_recorded_stopped_not_delivered(
    tmp_path: Path,
) -> None:
    # The result arrives long before the step's timeout; stopping the worker for its handoff
    # takes the whole grace (SIGTERM ignored), past the timeout. The step fails
    # agent-timeout, and its worker must say so: stopped (its process killed and confirmed
    # dead) with the timeout as the reason, never handing_off (active, for good, under a
    # failed step) nor delivered. A result that came late (a loaded machine) ends the same.
    # The grace outlasts the timeout: the handoff starts after the step did, so its stop
    # (the whole grace) ends past the timeout whatever the load. The timeout is several
    # times what this plain script takes to write its pid and deliver on a loaded machine
    # (under 0.1 s).
    pidfile = tmp_path / "pid"
    agents = {
        "coder": worker_workers_subprocess(tmp_path, DELIVERS_THEN_LINGERS, str(pidfile), grace=1.0)
    }
    options: dict[str, Any] = {**FAST, "timeouts": {"agent": 0.75}}
    async with runtime(tmp_path, agents=agents, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(60):
            result = await handle.wait()
        seen = await rt.workers(handle.execution_id)
        record = rt.store.get(handle.execution_id)
    assert result.status == "failed"
    assert result.outputs == {}
    assert record is not None
    (observation,) = record.observations
    assert observation.code == "agent-timeout"
    (only,) = seen.workers
    assert only.status == "stopped"
    assert only.reason == "timeout"
    (task,) = record.worker_tasks
    assert task.state == "ready"  # type: ignore[union-attr]
    assert task.delivery_digest is None  # type: ignore[union-attr]
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)
