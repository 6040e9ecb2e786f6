"""What a worker-backed step commits, and when (#17): phases with nothing outside the record
between them share one commit, and every phase a crash must resume from is durable before
the next side effect. ``starting`` (with the assignment) before the process starts, its
identity once it started, the handoff before the process is stopped; fenced and delivered
ride with the task's own save of the output, so a crash before that save resumes from the
handoff: confirmed dead again, delivered from the sealed evidence, never run again (E10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent, WorkerSpec
from mainspring.executions._workers import driver as driver_module
from mainspring.storage._seam import ProcessIdentity, parse_workers

from .._kit import FAST, agent, plan_of, runtime, stored
from .._worker_fake import FakeHost, Script

pytestmark = pytest.mark.anyio

RESULT = ("result", {"output": {"patch": "ok"}})
RUN = "r1"


class PeekingHost(FakeHost):
    """A FakeHost that reads the durable record as each process starts and stops."""

    def __init__(self, scripts: list[Script], store: ms.storage.Store) -> None:
        super().__init__(scripts)
        self.store = store
        self.on_disk: list[tuple[str, list[tuple[str, int]], list[str]]] = []
        self.on_stop = self._peek_stop

    def _peek(self, when: str) -> None:
        record = self.store.get(RUN)
        assert record is not None
        workers, _ = parse_workers(record.workers)
        events = [e.event for e in record.worker_trail]
        self.on_disk.append((when, [(w.status, w.generation) for w in workers], events))

    def _peek_stop(self, identity: ProcessIdentity) -> None:
        self._peek("stop")

    async def start(self, spec: WorkerSpec) -> Any:
        self._peek("start")
        return await super().start(spec)


def coder(host: FakeHost) -> dict[str, Any]:
    return {"coder": WorkerAgent(["fake-agent"], host=host, grace=0.1)}


def count_commits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    commits = [0]
    real = driver_module.Driver.commit

    async def counting(self: Any) -> bool:
        commits[0] += 1
        return await real(self)

    monkeypatch.setattr(driver_module.Driver, "commit", counting)
    return commits


async def test_a_delivered_step_commits_three_times_each_before_its_side_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = count_commits(monkeypatch)
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    host = PeekingHost([Script([("busy", {}), RESULT])], store)
    async with runtime(store, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")), execution_id=RUN)
        with anyio.fail_after(30):
            result = await handle.wait()
        final = stored(rt, RUN)
    assert result.status == "completed"
    assert commits[0] == 3  # starting, started, handoff (busy while running changes nothing)
    (at_start, at_stop) = host.on_disk
    # The assignment and starting in one commit, durable before the process starts.
    assert at_start[1] == [("starting", 1)]
    assert at_start[2] == ["assigned", "starting"]
    # The handoff (the stop intent) durable before the process is stopped.
    assert at_stop[1] == [("handing_off", 1)]
    # Fenced and delivered are durable with the step's output (the task's save).
    (worker,), _ = parse_workers(final.workers)
    assert worker.status == "delivered"
    assert [e.event for e in final.worker_trail][-3:] == ["handoff", "fenced", "delivered"]
    assert "a" in final.completed_steps


async def test_a_crash_before_the_output_is_saved_resumes_from_the_handoff(
    tmp_path: Path,
) -> None:
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    host = PeekingHost([Script([RESULT])], store)
    crashed: list[ms.storage.Execution] = []

    def at_stop(identity: ProcessIdentity) -> None:  # the record a crash here would leave
        record = store.get(RUN)
        assert record is not None
        crashed.append(record)

    host.on_stop = at_stop
    async with runtime(store, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")), execution_id=RUN)
        with anyio.fail_after(30):
            live = await handle.wait()
    assert live.status == "completed"
    (record,) = crashed
    (worker,), _ = parse_workers(record.workers)
    assert worker.status == "handing_off"  # fenced and delivered were never on disk alone
    assert worker.intent is not None
    store.delete(RUN)  # its evidence is kept
    store.create(attrs.evolve(record, lease=None, status="running"))
    host.on_stop = None
    async with runtime(store, agents=coder(host), **FAST) as rt:
        with anyio.fail_after(30):
            resumed = await (await rt.resume(RUN)).wait()
        seen = await rt.workers(RUN)
    assert resumed.status == "completed"
    assert resumed.outputs["a"] == live.outputs["a"]  # E10: the sealed delivery
    assert len(host.specs) == 1  # never run again
    (again,) = seen.workers
    assert again.status == "delivered"
    assert again.generation == 1
    assert [e.event for e in seen.trail][-2:] == ["fenced", "delivered"]
