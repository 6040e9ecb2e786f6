"""Hosts on one PostgreSQL store: separate processes, each with its own runtime and owner.

Host A runs; host B pauses, cancels or stops one agent task through its own runtime. A's
heartbeat is a minute long, so A stopping within seconds proves the control came through the
store's notice (LISTEN/NOTIFY), not the heartbeat backstop; what A's tool is told names B
(V3). Then B resumes and finishes, and B's ``events(after=)`` follows the history A wrote.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.storage import PostgresStore
from tests._postgres import require_server
from tests._tcp_proxy import TcpProxy

from ..._postgres import postgres_url
from .. import _cut_worker, _shared
from .._kit import statuses, tasks_of

__all__ = ["postgres_url"]
pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
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
def host_a(postgres_url: str) -> Iterator[_HostA]:
    a = _HostA(postgres_url, "ex-hosts")
    yield a
    if a.proc.poll() is None:
        a.proc.kill()
    a.finish()


@pytest.fixture
def asking_host_a(postgres_url: str) -> Iterator[_HostA]:
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
    postgres_url: str,
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
    postgres_url: str,
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
    postgres_url: str,
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
    postgres_url: str,
) -> None:
    """A host that died left 12 runs leased to it: its leases lapse on the server's clock,
    and two hosts calling ``recover()`` at once take over each run exactly once."""
    ids = [f"ex-orphan-{n}" for n in range(12)]

    def leave_orphans() -> None:
        store = ms.storage.PostgresStore(postgres_url)
        plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="inc", input={"x": 1}),))
        expires = 0.0
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
            taken = store.acquire(execution_id, "dead-host:1:x", 0.2)
            assert taken.acquired
            assert taken.lease is not None
            expires = max(expires, taken.lease.expires_at)
        # The dead host's leases lapse (0.2 s ttl), on the server's clock: polled, bounded.
        deadline = time.monotonic() + 60
        while store.now() <= expires and time.monotonic() < deadline:
            time.sleep(0.02)
        store.close()

    await anyio.to_thread.run_sync(leave_orphans)
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
    postgres_url: str,
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


# ----------------------------------------------------------------------
# Runtimes on PostgreSQL under connection faults, against the real server.
#
# * The server restarted while 50 runs are in flight: every run completes, every step done
#   exactly once, nothing lost (PostgresStore retries while the server is away, for up to its
#   ``reconnect_timeout``; the restart is far shorter than the lease).
# * The network between a host and the server cut: its leases lapse on the server's clock,
#   another host takes the run over and finishes it, and the first host, once its network is
#   back, never writes again (L4: its tenure is over).
CLUSTER = ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main"]

# -- the server restarted during 50 in-flight runs -------------------------------------------

RUNS = 50
STEPS = 8


def _server_up() -> bool:
    import psycopg

    try:
        with psycopg.connect(require_server(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


@pytest.fixture
def restartable_server() -> Iterator[None]:
    """The server is up again after the test, whatever happened in it."""
    require_server()
    try:
        yield
    finally:
        if not _server_up():
            subprocess.run([*CLUSTER, "start"], check=False, timeout=60)
        deadline = time.monotonic() + 60
        while not _server_up() and time.monotonic() < deadline:
            time.sleep(0.2)


def _plan(n: int) -> ms.Plan:
    steps = tuple(
        ms.PlanStep(
            id=f"s{k}",
            tool="slow",
            input={"run": n, "step": k},
            depends_on=(f"s{k - 1}",) if k else (),
        )
        for k in range(STEPS)
    )
    return ms.Plan(id=f"p{n}", goal="restart", steps=steps)


def _check_stored(url: str) -> None:
    """Read back by a store of its own: each run completed, each step's entry once."""
    store = PostgresStore(url)
    try:
        for n in range(RUNS):
            stored = store.get(f"ex-{n}")
            assert stored is not None
            assert stored.status == "completed"
            assert sorted(stored.completed_steps) == [f"s{k}" for k in range(STEPS)]
            history = store.history(f"ex-{n}", limit=10_000)
            keys = [event.execution_seq for event in history]
            assert keys == sorted(keys)
            done = [e.step_id for e in history if e.kind == "step" and e.status == "succeeded"]
            assert sorted(done) == [f"s{k}" for k in range(STEPS)]  # each once
    finally:
        store.close()


@pytest.mark.slow
async def test_the_server_restarted_during_50_in_flight_runs_loses_nothing(
    postgres_url: str, restartable_server: None
) -> None:
    calls: collections.Counter[tuple[int, int]] = collections.Counter()
    enough = anyio.Event()

    async def slow(run: int, step: int) -> dict[str, int]:
        calls[(run, step)] += 1
        if sum(calls.values()) >= RUNS:  # every run has started its first step at least
            enough.set()
        await anyio.sleep(0.5)  # a step's own length: runs are in flight across the restart
        return {"run": run, "step": step}

    lease_ttl = 20.0
    async with ms.open_runtime(store=postgres_url, tools={"slow": slow}, lease_ttl=lease_ttl) as rt:
        handles = [await rt.start("restart", _plan(n), execution_id=f"ex-{n}") for n in range(RUNS)]
        with anyio.fail_after(60):
            await enough.wait()
        began = time.monotonic()
        restart = await anyio.run_process([*CLUSTER, "restart"], check=False)
        restarted_in = time.monotonic() - began
        assert restart.returncode == 0, restart.stderr.decode()
        # The premise: the server was away for less than a lease (and a reconnect_timeout).
        assert restarted_in < lease_ttl, restarted_in
        # Runs were in flight across it: steps began after the server was back.
        after_restart = sum(calls.values())
        assert after_restart < RUNS * STEPS, restarted_in
        with anyio.fail_after(90):
            results = [await handle.wait() for handle in handles]
    for n, result in enumerate(results):
        assert result.status == "completed", (n, result.status, result.error)
        assert result.outputs == {f"s{k}": {"run": n, "step": k} for k in range(STEPS)}
    # Every step ran exactly once: nothing lost, nothing re-run.
    assert calls == {(n, k): 1 for n in range(RUNS) for k in range(STEPS)}
    await anyio.to_thread.run_sync(_check_stored, postgres_url)


# -- the network cut between a host and the server -------------------------------------------

_RUN_A_postgres_hosts_faults = (
    "import sys, anyio; from tests.executions import _cut_worker; "
    "anyio.run(_cut_worker.main, *sys.argv[1:])"
)
CUT_ID = "ex-cut"
OWNER_A = "host-a:1:cut"


def _through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition("@")
    userinfo = netloc[0] + "@" if netloc[1] else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}127.0.0.1:{port}"))


def _upstream(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


class _HostA_postgres_hosts_faults:
    def __init__(self, url: str, ledger: Path) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "MAINSPRING_TEST_LEDGER": str(ledger),
            "MAINSPRING_TEST_HOST": "A",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUN_A_postgres_hosts_faults, url, CUT_ID, OWNER_A],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            text=True,
        )

    async def next_line(self) -> str:
        assert self.proc.stdout is not None
        with anyio.fail_after(60):
            return (await anyio.to_thread.run_sync(self.proc.stdout.readline)).strip()

    async def exited(self) -> int:
        with anyio.fail_after(60):
            return await anyio.to_thread.run_sync(self.proc.wait)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    tcp = TcpProxy(_upstream(require_server()))
    yield tcp
    tcp.close()


def _seq_and_history(url: str) -> tuple[int, list[Any]]:
    store = PostgresStore(url)
    try:
        events = list(store.history(CUT_ID, limit=10_000))
        with store._connections.reading() as conn:
            (seq,) = conn.execute(
                f'SELECT seq FROM "{store.schema}".executions WHERE id = %s', (CUT_ID,)
            ).fetchone()
        return int(seq), events
    finally:
        store.close()


@pytest.mark.slow
async def test_a_host_cut_off_loses_its_lease_another_takes_over_and_it_never_writes_again(
    postgres_url: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    host_a = _HostA_postgres_hosts_faults(_through(postgres_url, proxy.port), ledger)
    try:
        for _ in range(3):  # A is running, through the proxy
            assert (await host_a.next_line()).startswith("step ")
        proxy.cut()
        _cut_worker.LEDGER, _cut_worker.HOST = str(ledger), "B"
        async with ms.open_runtime(
            store=postgres_url, tools=_cut_worker.TOOLS, lease_ttl=_cut_worker.LEASE_TTL
        ) as b:
            with anyio.fail_after(60):  # A's lease lapses on the server's clock
                while True:
                    try:
                        handle = await b.resume(CUT_ID)
                        break
                    except ms.ExecutionBusy:
                        await anyio.sleep(0.2)
            taken = await b.get(CUT_ID)
            assert taken is not None
            assert taken.lease is not None
            assert taken.lease.owner == b.owner
            assert taken.lease.epoch == 2  # a new tenure: A's (1) is fenced off (L4)
            with anyio.fail_after(60):
                result = await handle.wait()
            assert result.status == "completed", result.error
        seq, history = await anyio.to_thread.run_sync(_seq_and_history, postgres_url)
        ran = [tuple(line.split()) for line in ledger.read_text().splitlines()]
        # The network comes back: A's writes held by the cut, and any it makes now, meet a
        # tenure that is over and are refused; A stops.
        proxy.restore()
        rest = []
        while (line := await host_a.next_line()) and not line.startswith("ended"):
            rest.append(line)
        assert line.startswith("ended "), (line, rest)
        assert line.split()[2] == "LeaseLost", line  # refused: its tenure is over (E3)
        assert rest == [], rest  # no step of A's ran after the network came back
        assert await host_a.exited() == 0
    finally:
        if host_a.proc.poll() is None:
            host_a.proc.kill()
            host_a.proc.wait()
        assert host_a.proc.stdout is not None
        host_a.proc.stdout.close()
    # Nothing of A's was committed after B took over: the record and its history are as B
    # left them, and every step B did not run A had run (and committed) before the cut.
    seq_after, history_after = await anyio.to_thread.run_sync(_seq_and_history, postgres_url)
    assert (seq_after, history_after) == (seq, history)
    steps = [f"s{k:02d}" for k in range(_cut_worker.STEPS)]
    final = await anyio.to_thread.run_sync(_stored, postgres_url)
    assert final.status == "completed"
    assert final.lease is not None
    assert final.lease.epoch == 2
    assert sorted(final.completed_steps) == steps
    # A ran the first steps, up to the cut; B the rest (from the step in flight at the
    # cut, which both may have run: it was never committed by A); A none after B began.
    hosts = [host for host, _ in ran]
    first_b = hosts.index("B")
    assert hosts == ["A"] * first_b + ["B"] * (len(ran) - first_b), ran
    assert first_b >= 3
    assert [step for _, step in ran[first_b:]] == steps[len(steps) - len(ran) + first_b :]
    assert {step for _, step in ran} == set(steps)


def _stored(url: str) -> ms.storage.Execution:
    store = PostgresStore(url)
    try:
        stored = store.get(CUT_ID)
        assert stored is not None
        return stored
    finally:
        store.close()
