"""Stopping the worker of an agent task whose runtime is gone (#17, S1), with ScriptedHost:
the worker left active on the record is stopped through the agent's host and recorded
stopped only once confirmed dead; a process that survives, one on another host, an agent
not registered here, or a start whose process cannot be looked for keeps anything from
being recorded, and the caller is told why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent
from mainspring.testing import ScriptedHost

from .._kit import FAST, agent, plan_of, runtime, stored, tasks_of

pytestmark = pytest.mark.anyio


class WatchedHost(ScriptedHost):
    """A ScriptedHost that notes, at each stop, the worker's status as stored then."""

    def __init__(self, *scripts: Any) -> None:
        super().__init__(scripts)
        self.store: ms.storage.Store | None = None
        self.execution_id = ""
        self.stored_at_stop: list[str] = []

    async def stop(
        self, process: ms.storage._seam.ProcessIdentity, *, grace: float | None = None
    ) -> Any:
        if self.store is not None:
            record = self.store.get(self.execution_id)
            assert record is not None
            self.stored_at_stop.append(record.workers[0].status)
        return await super().stop(process, grace=grace)


def coder(host: ScriptedHost) -> dict[str, WorkerAgent]:
    return {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}


@asynccontextmanager
async def orphaned(tmp_path: Path, host: ScriptedHost) -> AsyncIterator[str]:
    """A run whose runtime ended with its worker still running (its stop unconfirmed, as
    a crash leaves it): yields the execution id, its store under ``tmp_path``."""
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            while True:  # polls the store: a worker's start is not an event
                seen = await rt.workers(handle.execution_id)
                if seen.workers and seen.workers[0].status == "running":
                    break
                await anyio.sleep(0.01)
            await rt.pause(handle.execution_id)
        seen = await rt.workers(handle.execution_id)
        assert seen.workers[0].status == "running"  # the process survived the pause
    yield handle.execution_id


async def _stop(tmp_path: Path, host: ScriptedHost, eid: str) -> tuple[Any, ms.storage.Execution]:
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        (task,) = tasks_of(stored(rt, eid))
        with anyio.fail_after(30):
            result = await rt.stop_agent_task(task.id)
        return result, stored(rt, eid)


async def test_an_orphan_is_recorded_stopped_only_after_it_is_confirmed_dead(
    tmp_path: Path,
) -> None:
    released = anyio.Event()
    host = WatchedHost([ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()])
    async with orphaned(tmp_path, host) as eid:
        # It survives the stop: nothing is recorded, and the caller is told why.
        refused, record = await _stop(tmp_path, host, eid)
        assert not refused.ok
        assert refused.reason == "its worker process could not be stopped"
        assert record.workers[0].status == "running"
        assert tasks_of(record)[0].state != "cancelled"
        assert host.processes[0].alive
        # Once it can be stopped, it is: and then recorded stopped with its task blocked.
        released.set()
        host.store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
        host.execution_id = eid
        done, record = await _stop(tmp_path, host, eid)
    assert done.ok
    assert done.state == "cancelled"
    assert not host.processes[0].alive
    assert host.stored_at_stop == ["running"]  # the stop came before the record
    view = ms.executions._facade.workers.view_of(record)
    (worker,) = view.workers
    assert worker.status == "stopped"
    assert worker.reason == "stop-task"
    assert view.tasks[0].state == "blocked"
    assert tasks_of(record)[0].state == "cancelled"
    assert ("stopped", "stop-task") in [(e.event, e.detail) for e in view.trail]


async def test_an_orphan_on_another_host_is_not_recorded_stopped(tmp_path: Path) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    async with orphaned(tmp_path, host) as eid:
        elsewhere = ScriptedHost()
        elsewhere.host = "another-machine"  # type: ignore[misc]
        result, record = await _stop(tmp_path, elsewhere, eid)
        released.set()
    assert not result.ok
    assert "cannot be inspected from here" in result.reason
    assert elsewhere.stops == []
    assert record.workers[0].status == "running"
    assert tasks_of(record)[0].state != "cancelled"


async def test_an_orphan_whose_agent_is_not_registered_is_refused(tmp_path: Path) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    async with orphaned(tmp_path, host) as eid:
        async with runtime(tmp_path, **FAST) as rt:
            (task,) = tasks_of(stored(rt, eid))
            with anyio.fail_after(30):
                result = await rt.stop_agent_task(task.id)
            record = stored(rt, eid)
        released.set()
    assert not result.ok
    assert result.reason == "its worker's agent 'coder' is not registered here"
    assert record.workers[0].status == "running"


@pytest.mark.parametrize(
    ("status", "ok"),
    [
        ("starting", False),  # its process never recorded, and not searchable here
        ("assigned", True),  # no process was started for it
    ],
)
async def test_an_orphan_without_a_recorded_process(tmp_path: Path, status: str, ok: bool) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    async with orphaned(tmp_path, host) as eid:
        store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
        record = store.get(eid)
        assert record is not None
        raw = dict(ms.storage._seam.unstructure(record.workers[0]), status=status, process=None)
        if status == "starting":
            raw["session"] = "sess-1"
        again = ms.storage.SqliteStore(tmp_path / "again.sqlite3")
        stops = len(host.stops)
        again.create(attrs.evolve(record, workers=(raw,)))
        result, after = await _stop(tmp_path / "again.sqlite3", host, eid)
        released.set()
    assert result.ok is ok
    assert len(host.stops) == stops  # no process of it is stopped: none is known
    if ok:
        assert after.workers[0].status == "stopped"
    else:
        assert result.reason == "its worker was starting and its process cannot be looked for here"
        assert after.workers[0].status == "starting"


# ----------------------------------------------------------------------
# Stopping worker-backed steps served by real subprocesses: a pause is not a
# failure (it does not use up the task's starts), a stop-task from another runtime stops the
# orphaned process of a crashed runtime before anything is recorded stopped, and a repair to
# a worker that never reads its stdin does not block its caller forever.

#: Says busy, then waits for one line on stdin and delivers it; its pid goes to argv[1].
WAITS = """
import json, os, sys
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
print(json.dumps({"type": "busy"}), flush=True)
line = json.loads(sys.stdin.readline())
print(json.dumps({"type": "result", "output": {"got": line["text"]}}), flush=True)
"""


def worker(tmp_path: Path, source: str, *args: str, **options: Any) -> WorkerAgent:
    script = tmp_path / "worker.py"
    script.write_text(source)
    options.setdefault("grace", 0.2)
    return WorkerAgent([sys.executable, str(script), *args], **options)


def alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


async def busy(rt: ms.Runtime, execution_id: str, generation: int) -> ms.executions.WorkersView:
    """The run's worker of ``generation`` runs: its process is recorded (polls the store; a
    ``busy`` that changes nothing is not recorded)."""
    with anyio.fail_after(60):
        while True:
            seen = await rt.workers(execution_id)
            if any(w.generation == generation and w.status == "running" for w in seen.workers):
                return seen
            await anyio.sleep(0.02)


async def wrote_pids(pids: Path, count: int) -> list[int]:
    """Until ``count`` workers have written their pid to ``pids``: a worker is recorded
    running as soon as its process exists, before its interpreter has run a line (on a
    loaded machine a stop can come first, and nothing would be written)."""
    with anyio.fail_after(60):
        while True:
            file = anyio.Path(pids)
            written = (await file.read_text()).split() if await file.exists() else []
            if len(written) >= count:
                return [int(pid) for pid in written]
            await anyio.sleep(0.02)  # polls a file: no event says a process wrote it


async def test_W4_pauses_do_not_use_up_the_starts_of_a_task(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    agents = {"coder": worker(tmp_path, WAITS, str(pids), max_starts=1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        run = handle.execution_id
        for generation in (1, 2, 3):
            await busy(rt, run, generation)
            await wrote_pids(pids, generation)
            if generation == 3:
                break
            await rt.pause(run)
            seen = await rt.workers(run)
            assert (seen.workers[0].status, seen.workers[0].reason) == ("stopped", "pause")
            assert seen.tasks[0].state == "ready"
            handle = await rt.resume(run)
        seen = await rt.workers(run)
        await rt.repair_worker(run, seen.workers[0].id, "go")
        with anyio.fail_after(60):
            result = await handle.wait()
        seen = await rt.workers(run)
    assert result.status == "completed", result
    assert result.outputs["a"] == {"got": "go"}
    assert seen.tasks[0].attempts == 1
    assert not any(alive(pid) for pid in await wrote_pids(pids, 3))


#: Ignores SIGTERM, starts a grandchild that ignores it too (and outlives its parent: it is
#: re-parented), writes both pids to argv[1]/pids, says busy, runs forever.
STUBBORN_TREE = """
import json, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"])
with open(os.path.join(sys.argv[1], "pids"), "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
print(json.dumps({"type": "busy"}), flush=True)
while True:
    time.sleep(1000)
"""

CHILD = str(Path(__file__).parents[1] / "_orphan_child.py")
REPO = Path(__file__).resolve().parents[3]


def leftovers(session: str) -> list[int]:
    """Live processes whose environment names the worker session ``session``."""
    needle = f"MAINSPRING_WORKER_SESSION={session}".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                environ = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0") and alive(int(name)):
                found.append(int(name))
    return found


@pytest.mark.slow
async def test_W1_stop_task_from_another_runtime_stops_the_orphaned_worker_first(
    tmp_path: Path,
) -> None:
    from .._orphan_child import EXECUTION
    from .._orphan_child import agents as agents_of

    script = tmp_path / "worker.py"
    script.write_text(STUBBORN_TREE)
    store = tmp_path / "store.sqlite3"
    child = subprocess.Popen(  # noqa: ASYNC220 - a runtime we SIGKILL: not an anyio child
        [sys.executable, CHILD, str(store), str(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout is not None
        line = await anyio.to_thread.run_sync(child.stdout.readline)
        assert line == b"ready\n"
    finally:
        child.kill()  # SIGKILL: the runtime dies, its worker tree does not
        await anyio.to_thread.run_sync(child.wait)
        if child.stdout is not None:
            child.stdout.close()
    worker_pid, grandchild = map(int, (tmp_path / "pids").read_text().split())
    try:
        assert alive(worker_pid)
        assert alive(grandchild)
        # recover=False: an operator's runtime stopping the orphaned task, not one taking the
        # run over (L8 would resume it at once: its owner is a gone process of this host).
        async with ms.open_runtime(
            store=str(store),
            agents=agents_of(str(script), str(tmp_path)),
            lease_ttl=1.0,
            recover=False,
        ) as rt:
            (task,) = await rt.agent_tasks(EXECUTION)
            session = (await rt.workers(EXECUTION)).workers[0].session
            assert session is not None
            assert leftovers(session)
            with anyio.fail_after(60):
                while True:  # the dead runtime's lease lapses (1 s): the stop is ours to make
                    result = await rt.stop_agent_task(task.id)
                    if result.state != "stopping":
                        break
                    await anyio.sleep(0.1)
            seen = await rt.workers(EXECUTION)
            tasks = await rt.agent_tasks(EXECUTION)
        assert result.ok, result
        assert result.state == "cancelled"
        assert tasks[0].state == "cancelled"
        assert not alive(worker_pid)
        assert not alive(grandchild)
        assert leftovers(session) == []
    finally:  # a failed test leaves no process of its own behind
        for pid in (worker_pid, grandchild):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    (worker,) = seen.workers
    assert (worker.status, worker.reason) == ("stopped", "stop-task")
    assert seen.tasks[0].state == "blocked"
    assert seen.trail[-1].event == "stopped"


#: Says busy and never reads its stdin.
DEAF = """
import json, time
print(json.dumps({"type": "busy"}), flush=True)
while True:
    time.sleep(1000)
"""


async def test_W5_a_repair_to_a_worker_that_never_reads_does_not_block_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mainspring.executions._facade import workers as _worker_api

    monkeypatch.setattr(_worker_api, "REPAIR_SEND_TIMEOUT", 0.5)
    agents = {"coder": worker(tmp_path, DEAF)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        seen = await busy(rt, handle.execution_id, 1)
        refused = None
        with anyio.fail_after(60):
            for _ in range(64):  # 32 KiB a line: the pipe (64 KiB) fills within a few
                try:
                    await rt.repair_worker(handle.execution_id, seen.workers[0].id, "é" * 16_384)
                except ms.executions.WorkerNotLive as exc:
                    refused = exc
                    break
        assert refused is not None
        assert "stdin" in str(refused)
        await rt.cancel(handle.execution_id)


async def test_e11_a_pause_from_another_host_stops_a_real_worker_and_gives_its_start_back(
    tmp_path: Path,
) -> None:
    """The pause written by a second runtime (another host) records the subprocess worker
    stopped (reason ``pause``, a ``stopped`` history entry), as a pause issued here does:
    with ``max_starts=1`` the resumed step takes it over and delivers."""
    pids = tmp_path / "pids"
    agents = {"coder": worker(tmp_path, WAITS, str(pids), max_starts=1)}
    store = tmp_path / "store.sqlite3"
    async with runtime(store, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        run = handle.execution_id
        await busy(rt, run, 1)
        await wrote_pids(pids, 1)
        async with runtime(store, **FAST) as other:
            await other.pause(run)
        with anyio.fail_after(60):
            assert (await handle.wait()).status == "paused"
        seen = await rt.workers(run)
        assert (seen.workers[0].status, seen.workers[0].reason) == ("stopped", "pause")
        history = rt.store.history(run, after=0, limit=10_000)
        assert any(e.kind == "worker" and e.status == "stopped" for e in history)
        assert not any(alive(pid) for pid in await wrote_pids(pids, 1))
        handle = await rt.resume(run)
        await busy(rt, run, 2)
        seen = await rt.workers(run)
        await rt.repair_worker(run, seen.workers[0].id, "go")
        with anyio.fail_after(60):
            result = await handle.wait()
    assert result.status == "completed", result
    assert result.outputs["a"] == {"got": "go"}
