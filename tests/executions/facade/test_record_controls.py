"""Two real processes on one store: A runs; B pauses, cancels or stops one agent task through
its own runtime; A stops within one heartbeat (long before its lease could lapse) and
releases; B resumes and finishes (E2, E3, R1, R2, S1, L3)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import pytest

import mainspring as ms

from .. import _shared
from .._kit import statuses, tasks_of

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
# Imported, not run as __main__: the tools' declarations must hash alike in both processes.
_RUN_A = (
    "import sys, anyio; from tests.executions import _shared; "
    "anyio.run(_shared.main, *sys.argv[1:])"
)


class _ProcessA:
    def __init__(self, store: Path, execution_id: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MAINSPRING_TEST_BLOCK": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUN_A, str(store), execution_id],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            text=True,
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    async def next_line(self) -> str:
        with anyio.fail_after(30):
            return await anyio.to_thread.run_sync(self.line)

    def finish(self) -> None:
        self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    async def exited(self) -> None:
        """Wait, off the event loop, for A to exit (waiting on it is a blocking call)."""
        await anyio.to_thread.run_sync(self.finish)


@pytest.fixture
def process_a(tmp_path: Path) -> Iterator[_ProcessA]:
    a = _ProcessA(tmp_path / "store.sqlite3", "ex-cross")
    yield a
    if a.proc.poll() is None:
        a.proc.kill()
    a.finish()


def _runtime_b(tmp_path: Path) -> AbstractAsyncContextManager[ms.Runtime]:
    """Process B: this test's own runtime on A's store, with the same tools."""
    store = tmp_path / "store.sqlite3"
    return ms.open_runtime(
        store=store, tools=_shared.TOOLS, agents=_shared.AGENTS, **_shared.OPTIONS
    )


async def _lease_owner(rt: ms.Runtime) -> str:
    record = await rt.get("ex-cross")
    assert record is not None
    assert record.lease is not None
    return record.lease.owner


async def test_pause_from_another_process_stops_the_run_which_B_then_finishes(
    tmp_path: Path, process_a: _ProcessA
) -> None:
    async with _runtime_b(tmp_path) as b:
        assert await process_a.next_line() == "entered"
        paused = await b.pause("ex-cross", reason="from B")
        assert paused.status == "paused"
        # V3: A's tool is told B's pause, with its detail and who issued it.
        assert await process_a.next_line() == "reason Pause"
        assert await process_a.next_line() == f"root Pause {b.owner} | from B"
        assert await process_a.next_line() == "ended paused Pause"
        await process_a.exited()
        # A released its lease itself: it did not just let it lapse (5 s ttl).
        assert await _lease_owner(b) == ""
        record = await b.get("ex-cross")
        assert record is not None
        (task,) = tasks_of(record)
        assert task.state == "queued"
        assert task.interruption is not None
        assert task.interruption.kind == "pause"
        result = await (await b.resume("ex-cross")).wait()
    assert result.status == "completed"
    assert result.outputs["a"] == "not blocked"


async def test_cancel_from_another_process_stops_the_run_for_good(
    tmp_path: Path, process_a: _ProcessA
) -> None:
    async with _runtime_b(tmp_path) as b:
        assert await process_a.next_line() == "entered"
        cancelled = await b.cancel("ex-cross", reason="from B")
        assert cancelled.status == "cancelled"
        # V3: A's tool sees ParentCancel(Cancel), B's cancel, never LeaseLost.
        assert await process_a.next_line() == "reason ParentCancel"
        assert await process_a.next_line() == f"root Cancel {b.owner} | from B"
        assert await process_a.next_line() == "ended cancelled Cancel"
        await process_a.exited()
        assert await _lease_owner(b) == ""
        record = await b.get("ex-cross")
        assert record is not None
        (task,) = tasks_of(record)
        assert task.state == "cancelled"
        again = await (await b.resume("ex-cross")).wait()
    assert again.status == "cancelled"


async def test_stopping_one_agent_task_from_another_process(
    tmp_path: Path, process_a: _ProcessA
) -> None:
    async with _runtime_b(tmp_path) as b:
        assert await process_a.next_line() == "entered"
        (task,) = await b.agent_tasks("ex-cross")
        stop = await b.stop_agent_task(task.id)
        assert (stop.ok, stop.state) == (True, "stopping")
        assert "within one heartbeat" in stop.reason
        assert await process_a.next_line() == "reason Cancel"
        assert await process_a.next_line() == (
            f"root Cancel {b.owner} | agent task stopped ({stop.operation_id})"
        )
        assert await process_a.next_line() == "ended completed Stop"  # the run went on
        await process_a.exited()
        record = await b.get("ex-cross")
        assert record is not None
    # S2: the stopped step counts as done without a result, so its dependent ran.
    assert statuses(record) == {"a": "stopped", "after": "succeeded", "free": "succeeded"}
    (stopped,) = tasks_of(record)
    assert stopped.state == "cancelled"
    assert record.controls[-1].action == "stop-task"


@pytest.fixture
def asking_a(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Process A running a plan whose agent asks while another step keeps the run live."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MAINSPRING_TEST_BLOCK": "1"}
    store = tmp_path / "store.sqlite3"
    a = subprocess.Popen(
        [sys.executable, "-c", _RUN_A, str(store), "ex-cross", "other-host", "asking"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        text=True,
    )
    yield a
    if a.poll() is None:
        a.kill()
    a.wait(timeout=30)
    assert a.stdout is not None
    a.stdout.close()


async def test_an_answer_for_a_run_whose_host_died_is_kept_and_given_by_the_resume(
    tmp_path: Path, asking_a: subprocess.Popen[str]
) -> None:
    """A (on another host, as far as its lease says) asks while another step keeps its run
    live, then dies (SIGKILL) holding the lease. B's answer is kept on the record for A's
    runner (B is told the run is busy); once A's lease lapses, B's resume gives the stored
    answer to the task, once (R8). The lapse is B's store clock moved past A's lease (5 s),
    not 5 s waited: a lease's times are the store's (L1)."""
    a = asking_a
    assert a.stdout is not None
    with anyio.fail_after(60):
        assert (await anyio.to_thread.run_sync(a.stdout.readline)).strip() == "entered"
    ahead = [0.0]

    def clock() -> float:
        return time.time() + ahead[0]

    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3", clock=clock)
    options = {"tools": _shared.TOOLS, "agents": _shared.AGENTS, **_shared.OPTIONS}
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(store.close)
        b = await stack.enter_async_context(ms.open_runtime(store=store, **options))
        with anyio.fail_after(60):
            while True:
                if [t for t in await b.agent_tasks("ex-cross") if t.pending_question]:
                    break
                await anyio.sleep(0.05)
        a.kill()  # A dies with the question open and its lease live (5 s)
        await anyio.to_thread.run_sync(a.wait)
        with pytest.raises(ms.ExecutionBusy, match="the answer is kept"):
            await b.resume("ex-cross", answer="Lisbon")
        ahead[0] = _shared.OPTIONS["lease_ttl"] + 1  # A's lease has lapsed, by the store
        handle = await b.resume("ex-cross")  # the resume gives the stored answer
        result = await handle.wait()
        record = await b.get("ex-cross")
    assert result.status == "completed", result
    assert result.outputs == {"ask": "Lisbon", "busy": "not blocked"}
    assert record is not None
    assert [c.action for c in record.controls].count("answer") == 1
    (task,) = tasks_of(record)
    assert task.inner_completed.count("ask.0") == 1
