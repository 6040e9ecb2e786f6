"""Hosts on one PostgreSQL store: separate processes, each with its own runtime and owner.

Host A runs; host B pauses, cancels or stops one agent task through its own runtime. A's
heartbeat is a minute long, so A stopping within seconds proves the control came through the
store's notice (LISTEN/NOTIFY), not the heartbeat backstop; what A's tool is told names B
(V3). Then B resumes and finishes, and B's ``events(after=)`` follows the history A wrote.
"""

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

from .._postgres import postgres_url  # noqa: F401 - a fixture
from . import _shared
from ._kit import statuses, tasks_of

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
_RUN_A = (
    "import sys, anyio; from tests.executions import _shared; "
    "anyio.run(_shared.main, *sys.argv[1:])"
)
#: Well below A's 60 s heartbeat: only a notice can have told A this soon.
SOON = 20.0


class _HostA:
    def __init__(self, store: str, execution_id: str, plan: str = "cross") -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MAINSPRING_TEST_BLOCK": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUN_A, store, execution_id, "slow-heartbeat", plan],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            text=True,
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    async def next_line(self) -> str:
        with anyio.fail_after(60):
            return await anyio.to_thread.run_sync(self.line)

    def finish(self) -> None:
        self.proc.wait(timeout=60)
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    async def exited(self) -> None:
        await anyio.to_thread.run_sync(self.finish)


@pytest.fixture
def host_a(postgres_url: str) -> Iterator[_HostA]:  # noqa: F811
    a = _HostA(postgres_url, "ex-hosts")
    yield a
    if a.proc.poll() is None:
        a.proc.kill()
    a.finish()


@pytest.fixture
def asking_host_a(postgres_url: str) -> Iterator[_HostA]:  # noqa: F811
    a = _HostA(postgres_url, "ex-hosts", plan="asking")
    yield a
    if a.proc.poll() is None:
        a.proc.kill()
    a.finish()


def _host_b(url: str) -> AbstractAsyncContextManager[ms.Runtime]:
    return ms.open_runtime(
        store=url, tools=_shared.TOOLS, agents=_shared.AGENTS, **_shared.SLOW_HEARTBEAT
    )


async def test_a_pause_on_host_B_reaches_the_runner_on_host_A_through_the_notice(
    postgres_url: str,  # noqa: F811
    host_a: _HostA,
) -> None:
    async with _host_b(postgres_url) as b:
        assert await host_a.next_line() == "entered"
        asked = time.monotonic()
        paused = await b.pause("ex-hosts", reason="from B")
        assert paused.status == "paused"
        assert await host_a.next_line() == "reason Pause"
        assert time.monotonic() - asked < SOON  # not the 60 s heartbeat
        assert await host_a.next_line() == f"root Pause {b.owner} | from B"  # V3
        assert await host_a.next_line() == "ended paused Pause"
        await host_a.exited()
        record = await b.get("ex-hosts")
        assert record is not None
        assert record.lease is not None
        assert record.lease.owner == ""  # A released it (it did not lapse: 120 s ttl)
        result = await (await b.resume("ex-hosts")).wait()
        assert result.status == "completed"
        assert result.outputs["a"] == "not blocked"
        # B follows the durable history A wrote, then its own, in one sequence (V2).
        seen = []
        async with contextlib.aclosing(b.events("ex-hosts", after=0)) as events:
            async for event in events:
                seen.append(event)
                if event.kind == "status" and event.status == "completed":
                    break
    seqs = [event.seq for event in seen]
    assert seqs == sorted(set(seqs))
    assert [e.status for e in seen if e.kind == "status"][-2:] == ["running", "completed"]


async def test_a_cancel_on_host_B_stops_host_A_for_good(
    postgres_url: str,  # noqa: F811
    host_a: _HostA,
) -> None:
    async with _host_b(postgres_url) as b:
        assert await host_a.next_line() == "entered"
        asked = time.monotonic()
        cancelled = await b.cancel("ex-hosts", reason="from B")
        assert cancelled.status == "cancelled"
        assert await host_a.next_line() == "reason ParentCancel"
        assert time.monotonic() - asked < SOON
        assert await host_a.next_line() == f"root Cancel {b.owner} | from B"
        assert await host_a.next_line() == "ended cancelled Cancel"
        await host_a.exited()
        record = await b.get("ex-hosts")
        assert record is not None
        (task,) = tasks_of(record)
        assert task.state == "cancelled"
        again = await (await b.resume("ex-hosts")).wait()
    assert again.status == "cancelled"


async def test_stopping_one_agent_task_on_host_B_stops_it_on_host_A(
    postgres_url: str,  # noqa: F811
    host_a: _HostA,
) -> None:
    async with _host_b(postgres_url) as b:
        assert await host_a.next_line() == "entered"
        (task,) = await b.agent_tasks("ex-hosts")
        asked = time.monotonic()
        stop = await b.stop_agent_task(task.id)
        assert (stop.ok, stop.state) == (True, "stopping")
        assert await host_a.next_line() == "reason Cancel"
        assert time.monotonic() - asked < SOON
        assert await host_a.next_line() == (
            f"root Cancel {b.owner} | agent task stopped ({stop.operation_id})"
        )
        assert await host_a.next_line() == "ended completed Stop"  # the run went on
        await host_a.exited()
        record = await b.get("ex-hosts")
        assert record is not None
    assert statuses(record) == {"a": "stopped", "after": "succeeded", "free": "succeeded"}
    (stopped,) = tasks_of(record)
    assert stopped.state == "cancelled"


async def test_two_hosts_recovering_at_once_each_win_different_runs(
    postgres_url: str,  # noqa: F811
) -> None:
    """A host that died left 12 runs leased to it: its leases lapse on the server's clock,
    and two hosts calling ``recover()`` at once take over each run exactly once."""
    ids = [f"ex-orphan-{n}" for n in range(12)]

    def leave_orphans() -> None:
        store = ms.storage.PostgresStore(postgres_url)
        plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="inc", input={"x": 1}),))
        for execution_id in ids:
            record = ms.storage.Execution(
                id=execution_id,
                goal="g",
                status="running",
                plan=plan,
                created_at=1.0,
                updated_at=1.0,
            )
            assert store.create(record)
            assert store.acquire(execution_id, "dead-host:1:x", 0.2).acquired
        store.close()

    await anyio.to_thread.run_sync(leave_orphans)
    await anyio.sleep(0.5)  # the dead host's leases lapse (0.2 s ttl, on the server's clock)
    won: dict[str, list[ms.ExecutionHandle]] = {}
    async with _host_b(postgres_url) as one, _host_b(postgres_url) as two:

        async def recover(rt: ms.Runtime) -> None:
            won[rt.owner] = await rt.recover()

        async with anyio.create_task_group() as tg:
            tg.start_soon(recover, one)
            tg.start_soon(recover, two)
        results = [await handle.wait() for handles in won.values() for handle in handles]
        recovered = [handle.execution_id for handles in won.values() for handle in handles]
    assert sorted(recovered) == sorted(ids)  # each once: no run taken by both
    assert all(result.status == "completed" for result in results)


async def test_an_answer_on_host_B_reaches_the_run_live_on_host_A(
    postgres_url: str,  # noqa: F811
    asking_host_a: _HostA,
) -> None:
    """A's agent asked while another step keeps A's run live (and its lease held): B's
    answer is written for A's runner, which takes it through the notice and goes on."""
    a = asking_host_a
    async with _host_b(postgres_url) as b:
        assert await a.next_line() == "entered"  # the other step keeps A's run live
        with anyio.fail_after(60):
            while True:
                tasks = await b.agent_tasks("ex-hosts")
                if tasks and tasks[0].state == "waiting_for_clarification":
                    break
                await anyio.sleep(0.05)
        asked = time.monotonic()
        handle = await b.resume("ex-hosts", answer="Lisbon")
        assert await a.next_line() == "answered Lisbon"  # A's agent got B's answer
        assert time.monotonic() - asked < SOON
        now = await handle.wait()
        assert now.status == "running"  # it goes on, on host A
        # A's agent printed before its completion was committed: read until it is.
        with anyio.fail_after(60):
            while True:
                record = await b.get("ex-hosts")
                assert record is not None
                (task,) = tasks_of(record)
                if task.state != "running":
                    break
                await anyio.sleep(0.05)
        assert task.state == "completed"
        assert [c.action for c in record.controls].count("answer") == 1  # audited once
        assert record.controls[-1].by == b.owner or "answer" in [
            c.action for c in record.controls if c.by == b.owner
        ]
        await b.cancel("ex-hosts", reason="done")
        await a.exited()
