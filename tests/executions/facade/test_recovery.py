"""Recovery needs nobody: an open runtime takes over the runs nobody runs (L8), at once when
their owner was a process of this host that is gone (L7), once their lease lapses when the
owner is elsewhere; ``recover()`` says what it left alone and why."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.storage import open_store
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

from .._crash_worker import ANSWER, ASKER, build_plan
from .._kit import linear
from .._memory_kit import StoreSpec, store_spec

WORKER = Path(__file__).parents[1] / "_recovery_worker.py"
REPO = Path(ms.__file__).resolve().parent.parent
#: An owner id of the form this library writes, of a host that is not this one.
FOREIGN = "elsewhere-host:4242:0123abcd:1.abc.1"

PLAN = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="gate", input={}),))


@pytest.fixture(params=["sqlite", "files", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreSpec]:
    yield from store_spec(request.param, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def crash_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreSpec]:
    yield from store_spec(request.param, tmp_path)


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[StoreSpec]:
    yield from store_spec("postgres", tmp_path)


@contextlib.contextmanager
def backend(spec: StoreSpec) -> Iterator[ms.storage.Store]:
    """A second handle on the test's store, for planting and reading records (blocking:
    use it in a worker thread)."""
    opened, close = open_store(spec.target)
    try:
        yield opened
    finally:
        close()


def store_clock(spec: StoreSpec) -> float:
    with backend(spec) as opened:
        return opened.now()


def stored(spec: StoreSpec, execution_id: str) -> ms.storage.Execution | None:
    with backend(spec) as opened:
        return opened.get(execution_id)


async def plant(spec: StoreSpec, execution_id: str, **options: Any) -> ms.storage.Execution:
    """:func:`planted`, off the event loop."""
    return await anyio.to_thread.run_sync(lambda: planted(spec, execution_id, **options))


def planted(spec: StoreSpec, execution_id: str, **options: Any) -> ms.storage.Execution:
    """Store a run as a crashed process leaves it: ``running`` with its plan, the lease
    ``owner``'s for ``ttl`` s on the store's clock (released when ``owner`` is empty)."""
    with backend(spec) as opened:
        return planted_in(opened, execution_id, **options)


async def plant_all(spec: StoreSpec, ids: list[str], **options: Any) -> None:
    """:func:`planted` for each of ``ids``, through one handle (one connection), off the loop."""

    def planting() -> None:
        with backend(spec) as opened:
            for execution_id in ids:
                planted_in(opened, execution_id, **options)

    await anyio.to_thread.run_sync(planting)


def planted_in(
    opened: ms.storage.Store,
    execution_id: str,
    *,
    owner: str = "",
    ttl: float | None = None,
    **fields: Any,
) -> ms.storage.Execution:
    """:func:`planted`, through the handle ``opened``."""
    now = time.time()
    record = ms.storage.Execution(
        id=execution_id,
        goal="g",
        status=fields.pop("status", "running"),
        plan=fields.pop("plan", PLAN),
        plan_version=fields.pop("plan_version", 1),
        lease=ms.storage.Lease(owner=owner, expires_at=0.0, epoch=1),
        created_at=now,
        updated_at=now,
        **fields,
    )
    assert opened.create(record, lease_ttl=ttl if owner else None)
    stored = opened.get(execution_id)
    assert stored is not None
    return stored


def last_heartbeat(spec: StoreSpec, execution_id: str, owner: str, ttl: float) -> ms.storage.Lease:
    """``owner``'s heartbeat of its live lease: it now lapses ``ttl`` s from now (store's
    clock); the lease as stored (blocking)."""
    with backend(spec) as opened:
        assert opened.heartbeat(execution_id, owner, ttl)
        stored = opened.get(execution_id)
    assert stored is not None
    assert stored.lease is not None
    assert stored.lease.owner == owner
    return stored.lease


def gate_tool(
    calls: list[str], who: str = "", stamps: list[float] | None = None, clock: Any = time.time
) -> tuple[anyio.Event, dict[str, Any]]:
    """The ``gate`` tool: here it returns at once, noting who ran it and when (``clock()``,
    called in a worker thread)."""
    ran = anyio.Event()

    async def gate(**_: Any) -> int:
        calls.append(who)
        if stamps is not None:
            stamps.append(await anyio.to_thread.run_sync(clock))
        ran.set()
        return 1

    gate.__qualname__ = "gate"  # the worker's, so that a resume here sees no drift (R6)
    return ran, {"gate": gate}


async def completed(rt: ms.Runtime, execution_id: str) -> None:
    """Until the run's completion is durable (the history says so)."""
    async with contextlib.aclosing(rt.events(execution_id, after=0, poll=0.1)) as stream:
        async for event in stream:
            if event.kind == "status" and event.status == "completed":
                return


async def start_and_kill(spec: StoreSpec, execution_id: str, ttl: float) -> ms.storage.Lease:
    """A worker process starts a run and is killed with SIGKILL mid-step; the lease it
    left on disk (still live: ``ttl`` s). Read while the worker still runs its step: a
    runtime open all along may take the run over (and finish it) as soon as the worker is
    gone, before a read after the kill."""
    command = [sys.executable, str(WORKER), spec.target, execution_id, "-", str(ttl)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    async with await anyio.open_process(command, env=env, stderr=None) as child:
        assert child.stdout is not None
        with anyio.fail_after(60):
            line = b""
            while b"ready" not in line:
                chunk = await child.stdout.receive()
                line += chunk
        left = await anyio.to_thread.run_sync(stored, spec, execution_id)
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert left is not None
    assert left.status == "running"
    assert left.lease is not None
    assert left.lease.owner
    return left.lease


@pytest.mark.anyio
@pytest.mark.parametrize("when", ["restart", "open-before"])
async def test_l8_a_run_of_a_killed_process_on_this_host_is_taken_over_without_recover(
    crash_store: StoreSpec, when: str
) -> None:
    """``kill -9`` of the process running a run: a runtime of this host (started after the
    kill, or open all along) takes it over long before the dead owner's lease lapses, and
    nobody calls ``recover()``."""
    calls: list[str] = []
    taken_at: list[float] = []
    ran, tools = gate_tool(calls, stamps=taken_at)

    def opening() -> Any:
        # A sweep at least every 0.2 s (its own lease, never needed this long, stays 3 s).
        options: dict[str, Any] = {"lease_ttl": 3, "heartbeat_interval": 0.2}
        return ms.open_runtime(store=crash_store.target, tools=tools, **options)

    async with contextlib.AsyncExitStack() as stack:
        if when == "open-before":  # its sweeps see the worker's live lease, then its death
            rt = await stack.enter_async_context(opening())
        lease = await start_and_kill(crash_store, "ex-killed", ttl=60)
        if when == "restart":  # at once, as systemd, Kubernetes or --reload would
            rt = await stack.enter_async_context(opening())
        with anyio.fail_after(45):
            await ran.wait()
        # L7: taken because its owner is gone, not because its lease lapsed.
        assert taken_at[0] < lease.expires_at
        assert calls == [""]
        with anyio.fail_after(30):
            await completed(rt, "ex-killed")
        stored = await rt.get("ex-killed")
        assert stored is not None
        assert stored.lease is not None
        assert stored.lease.epoch > lease.epoch  # a new tenure (L4)


@pytest.mark.anyio
async def test_l8_a_lease_of_another_host_is_not_taken_before_it_lapses_and_is_after(
    store: StoreSpec,
) -> None:
    # A long lease first, so that "before it lapses" is looked at whatever the machine's
    # load: then the other host's last heartbeat, after which it lapses soon.
    far = await plant(store, "ex-far", owner=FOREIGN, ttl=600)
    assert far.lease is not None
    calls: list[str] = []
    taken_at: list[float] = []
    ran, tools = gate_tool(calls, stamps=taken_at, clock=lambda: store_clock(store))
    # A sweep every 0.2 s (its own lease, never needed this long, stays 3 s).
    options: dict[str, Any] = {"lease_ttl": 3, "heartbeat_interval": 0.2}
    async with ms.open_runtime(store=store.target, tools=tools, **options) as rt:
        report = await rt.recover()
        # Looked at before the lease lapsed: left alone, and why.
        assert [s.reason for s in report.skipped if s.id == "ex-far"] == [f"lease-live:{FOREIGN}"]
        assert list(report) == []
        assert calls == []
        lease = await anyio.to_thread.run_sync(last_heartbeat, store, "ex-far", FOREIGN, 0.5)
        assert lease.epoch == far.lease.epoch
        with anyio.fail_after(60):
            await ran.wait()
            await completed(rt, "ex-far")
    assert taken_at[0] >= lease.expires_at  # by the store's clock
    assert calls == [""]


@pytest.mark.anyio
async def test_l8_two_runtimes_racing_for_lapsed_runs_run_each_exactly_once(
    store: StoreSpec,
) -> None:
    calls: list[str] = []
    _, first = gate_tool(calls, "first")
    _, second = gate_tool(calls, "second")
    ids = [f"ex-race-{n}" for n in range(6)]
    # Each sweeps every 0.2 s (their own leases, never needed this long, stay 3 s).
    options: dict[str, Any] = {"lease_ttl": 3, "heartbeat_interval": 0.2}
    async with (
        ms.open_runtime(store=store.target, tools=first, **options) as a,
        ms.open_runtime(store=store.target, tools=second, **options) as b,
    ):
        # Both runtimes are open (and sweeping) before the runs exist; both see the leases
        # and wake when they lapse, together.
        await plant_all(store, ids, owner=FOREIGN, ttl=0.6)
        with anyio.fail_after(90):
            for execution_id in ids:
                await completed(a, execution_id)
        reported = [h.execution_id for h in await a.recover()] + [
            h.execution_id for h in await b.recover()
        ]
    assert len(calls) == len(ids)  # each ran once, by one of the two
    assert sorted(reported) == sorted(ids)  # each reported by the runtime that won it


@pytest.mark.anyio
async def test_l8_open_runtime_recover_false_takes_nothing_over_by_itself(
    store: StoreSpec,
) -> None:
    await plant(store, "ex-left")
    calls: list[str] = []
    ran, tools = gate_tool(calls)
    async with contextlib.AsyncExitStack() as stack:
        opened, close = await anyio.to_thread.run_sync(open_store, store.target)
        stack.push_async_callback(anyio.to_thread.run_sync, close)
        listings = _Sweeps(opened)  # what this runtime lists of the store
        options: dict[str, Any] = {"tools": tools, "lease_ttl": 3, "recover": False}
        rt = await stack.enter_async_context(ms.open_runtime(store=opened, **options))
        # Meanwhile a recovering runtime on the same store (without the run's tool: it
        # leaves the run alone, "missing:tool:gate") sweeps several times, every 0.1 s: a
        # window counted in sweeps, not in seconds. This one has not swept once.
        other, close_other = await anyio.to_thread.run_sync(open_store, store.target)
        stack.push_async_callback(anyio.to_thread.run_sync, close_other)
        sweeps = _Sweeps(other)
        recovering: dict[str, Any] = {"lease_ttl": 3, "heartbeat_interval": 0.1}
        async with ms.open_runtime(store=other, tools={"other": lambda: 1}, **recovering):
            await sweeps.more(3)
        assert listings.count == 0
        assert not ran.is_set()
        assert calls == []
        stored = await rt.get("ex-left")
        assert stored is not None
        assert stored.status == "running"
        assert rt.live() == []
        (handle,) = await rt.recover()  # only when asked
        assert listings.count == 1
        assert (await handle.wait()).status == "completed"
    assert calls == [""]
    with pytest.raises(TypeError, match="recover must be True or False"):
        async with ms.open_runtime(store=store.target, recover="yes"):  # type: ignore[arg-type]
            pass


@pytest.mark.anyio
async def test_l8_recover_reports_what_it_took_and_what_it_skipped_and_why(
    store: StoreSpec,
) -> None:
    await plant(store, "ex-orphan")
    await plant(store, "ex-held", owner=FOREIGN, ttl=600)
    await plant(store, "ex-paused", status="paused")
    await plant(store, "ex-done", status="completed")
    if store.kind != "postgres":
        from tests._raw import write_garbage

        write_garbage(store.target, "ex-broken", b"{not json")
    calls: list[str] = []
    _, tools = gate_tool(calls)
    async with ms.open_runtime(store=store.target, tools=tools, recover=False) as rt:
        report = await rt.recover()
        assert isinstance(report, ms.executions.RecoveryReport)
        assert [h.execution_id for h in report] == ["ex-orphan"]
        assert report.resumed == tuple(report)
        await report[0].wait()
        skipped = {s.id: s.reason for s in report.skipped}
        expected = {"ex-held": f"lease-live:{FOREIGN}", "ex-paused": "paused"}
        if store.kind != "postgres":
            expected["ex-broken"] = "unreadable"
        assert skipped == expected  # a finished run is not a skipped one
        # each reason is plain text, as documented: a status is not handed out as its enum
        assert {type(s.reason) for s in report.skipped} == {str}
        assert "ExecutionStatus" not in repr(report.skipped)
        again = await rt.recover()
        assert list(again) == []  # each handle is reported once
        assert {s.id for s in again.skipped} == set(expected)


@pytest.mark.anyio
async def test_l8_on_postgresql_a_release_is_taken_over_at_its_notice(
    pg_store: StoreSpec,
) -> None:
    """A runtime that closes releases its runs' leases; another open on the same server
    hears of it (LISTEN/NOTIFY) and takes them over at once, not at its next sweep (its
    60 s lease: a sweep every 20 s)."""
    spec = pg_store
    parked = anyio.Event()

    async def gate(**_: Any) -> int:
        parked.set()
        await anyio.sleep_forever()
        return 0

    gate.__qualname__ = "gate"
    calls: list[str] = []
    ran, tools = gate_tool(calls, "second")
    async with ms.open_runtime(store=spec.target, tools=tools, lease_ttl=60) as second:
        async with ms.open_runtime(store=spec.target, tools={"gate": gate}, lease_ttl=60) as first:
            await first.start("g", PLAN, execution_id="ex-handed")
            with anyio.fail_after(30):
                await parked.wait()
        # ``first`` closed: the run stopped with Shutdown and its lease was released.
        with anyio.fail_after(15):
            await ran.wait()
            await completed(second, "ex-handed")
    assert calls == ["second"]


#: A credential of a shape ``redact`` masks, in a store error's text.
SECRET = "sk-ant-api03-" + "Q" * 40


class _Flaky(ms.storage.SqliteStore):
    """A SQLite store whose first listing and first acquire fail with an error whose text
    holds a credential (a store error quoting what it was given)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.fail_list = 1
        self.fail_acquire = 1

    def unfinished(self, skip: Any = ()) -> ms.storage._seam.Listing:  # what recovery lists
        if self.fail_list:
            self.fail_list -= 1
            raise ms.storage.StorageError(f"listing failed near {SECRET}")
        return super().unfinished(skip)

    def acquire(self, *args: Any, **kwargs: Any) -> ms.storage.LeaseResult:
        if self.fail_acquire:
            self.fail_acquire -= 1
            raise ms.storage.StorageError(f"acquire failed near {SECRET}")
        return super().acquire(*args, **kwargs)


@pytest.mark.anyio
async def test_l8_failed_sweeps_and_recoveries_are_logged_redacted_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = str(tmp_path / "flaky.db")
    spec = StoreSpec("sqlite", target, tmp_path, None)
    await plant(spec, "ex-flaky")
    flaky = _Flaky(target)
    calls: list[str] = []
    ran, tools = gate_tool(calls)
    caplog.set_level(logging.WARNING, logger="mainspring.executions")
    try:
        # It sweeps again every 0.1 s after a failure (its own lease, never needed this
        # long, stays 3 s).
        options: dict[str, Any] = {"lease_ttl": 3, "heartbeat_interval": 0.1}
        async with ms.open_runtime(store=flaky, tools=tools, **options) as rt:
            with anyio.fail_after(60):  # the watcher's first sweep fails, a later one takes it
                await ran.wait()
                await completed(rt, "ex-flaky")
            report = await rt.recover()
    finally:
        flaky.close()
    assert calls == [""]
    assert [h.execution_id for h in report] == ["ex-flaky"]
    logged = "\n".join(
        record.getMessage() + (caplog.handler.format(record) if record.exc_info else "")
        for record in caplog.records
    )
    assert "recovery sweep failed" in logged
    assert "could not recover ex-flaky" in logged
    assert "[redacted anthropic-key]" in logged
    assert SECRET not in logged
    assert SECRET not in caplog.text


class _SlowTake(ms.storage.SqliteStore):
    """A SQLite store whose first lease taken lands and then answers late (a loaded
    server): ``taken`` is set once it has landed; the answer comes once ``closing`` is set."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.taken = threading.Event()
        self.closing = threading.Event()

    def acquire(self, *args: Any, **kwargs: Any) -> ms.storage.LeaseResult:
        result = super().acquire(*args, **kwargs)
        if not self.taken.is_set():
            self.taken.set()
            self.closing.wait(60)  # the answer is late; the runtime closes meanwhile
        return result


@pytest.mark.anyio
async def test_l8_a_runtime_closing_mid_takeover_leaves_no_lease_held(tmp_path: Path) -> None:
    """The runtime closes while its recovery waits for the lease it took: the run is not
    started here, and its lease is let go at once, not held by a closed runtime for its
    ttl (another runtime, here or elsewhere, takes the run over without waiting)."""
    target = str(tmp_path / "slow.db")
    spec = StoreSpec("sqlite", target, tmp_path, None)
    await plant(spec, "ex-mid")
    slow = _SlowTake(target)
    calls: list[str] = []
    _, tools = gate_tool(calls)
    try:
        async with ms.open_runtime(store=slow, tools=tools, lease_ttl=60) as rt:
            with anyio.fail_after(60):
                await anyio.to_thread.run_sync(slow.taken.wait)
            owner = rt.owner
            # The answer is let go as the block ends: the runtime begins closing (its
            # recovery is cancelled) before its next step, so before the answer is read.
            slow.closing.set()
    finally:
        slow.close()
    left = await anyio.to_thread.run_sync(stored, spec, "ex-mid")
    assert left is not None
    assert left.status == "running"
    assert left.lease is not None
    assert left.lease.owner == ""  # released, not held by a closed runtime for 60 s
    assert left.lease.epoch == 2  # it had been taken once
    assert calls in ([], [""])
    assert owner


class _NoWholeListing(ms.storage.SqliteStore):
    """A SQLite store that refuses to be listed whole: a sweep must not read every run."""

    def list(self) -> ms.storage._seam.Listing:
        raise AssertionError("recovery listed the whole store")


@pytest.mark.anyio
async def test_l8_a_sweep_reads_only_unfinished_runs(tmp_path: Path) -> None:
    """Recovery sweeps every few seconds for as long as a runtime is open: it lists the
    unfinished runs only (``storage.Unfinished``), whatever number of finished ones the
    store keeps, and still takes an orphan over."""
    target = str(tmp_path / "big.db")
    spec = StoreSpec("sqlite", target, tmp_path, None)
    await plant_all(spec, [f"ex-done-{n}" for n in range(20)], status="completed")
    await plant(spec, "ex-orphan")
    quiet = _NoWholeListing(target)
    calls: list[str] = []
    ran, tools = gate_tool(calls)
    try:
        async with ms.open_runtime(store=quiet, tools=tools, lease_ttl=3) as rt:
            with anyio.fail_after(30):
                await ran.wait()
                await completed(rt, "ex-orphan")
            report = await rt.recover()
    finally:
        quiet.close()
    assert [h.execution_id for h in report] == ["ex-orphan"]
    assert report.skipped == ()  # finished runs are not looked at, nor reported


class _HeldResume(ms.storage.SqliteStore):
    """A SQLite store on which the first lease taken waits for ``gate`` (a hand resume under
    way), and whose clock read, which follows recovery's listing, sets ``listed``."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.acquiring = threading.Event()
        self.gate = threading.Event()
        self.listed = threading.Event()
        self.sweeping = False

    def acquire(self, *args: Any, **kwargs: Any) -> ms.storage.LeaseResult:
        if not self.acquiring.is_set():
            self.acquiring.set()
            self.gate.wait(60)
        return super().acquire(*args, **kwargs)

    def unfinished(self, skip: Any = ()) -> ms.storage._seam.Listing:
        self.sweeping = True
        return super().unfinished(skip)

    def now(self) -> float:
        if self.sweeping:
            self.listed.set()
        return super().now()


@pytest.mark.anyio
async def test_l8_a_run_resumed_by_hand_during_a_sweep_is_not_reported_as_recovered(
    tmp_path: Path,
) -> None:
    """``recover()`` lists a run nobody runs while a hand ``resume`` of it is under way: the
    resume wins, and the report does not claim the run as taken over by recovery (nor as
    left alone)."""
    target = str(tmp_path / "held.db")
    spec = StoreSpec("sqlite", target, tmp_path, None)
    await plant(spec, "ex-hand")
    held = _HeldResume(target)
    calls: list[str] = []
    ran, tools = gate_tool(calls)
    report: list[ms.executions._seam.RecoveryReport] = []
    try:
        async with ms.open_runtime(store=held, tools=tools, recover=False) as rt:
            handles: list[ms.ExecutionHandle] = []

            async def by_hand() -> None:
                handles.append(await rt.resume("ex-hand"))

            async def recovering() -> None:
                report.append(await rt.recover())

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(by_hand)
                    await anyio.to_thread.run_sync(held.acquiring.wait)
                    tg.start_soon(recovering)
                    await anyio.to_thread.run_sync(held.listed.wait)
                    held.gate.set()
                await ran.wait()
                assert (await handles[0].wait()).status == "completed"
    finally:
        held.gate.set()
        held.close()
    assert calls == [""]
    assert list(report[0]) == []
    assert report[0].skipped == ()


@pytest.mark.anyio
async def test_l8_a_run_paused_from_elsewhere_during_a_takeover_stays_paused(
    tmp_path: Path,
) -> None:
    """Runtime B pauses an orphan after runtime C's recovery read it as ``running`` and
    before C took its lease: C's takeover must not undo the pause (run it to the end);
    it reports the run skipped as ``paused`` and leaves no lease held."""
    path = tmp_path / "store.db"
    spec = StoreSpec("sqlite", str(path), tmp_path, None)
    await plant(spec, "ex-paused-mid")
    pauser: list[ms.Runtime] = []

    class PausedBeforeTheTake(ms.storage.SqliteStore):
        def acquire(self, execution_id: str, owner: str, ttl: float, **kw: Any) -> Any:
            if pauser:  # the pause from elsewhere lands just before the take
                anyio.from_thread.run(pauser.pop().pause, execution_id)
            return super().acquire(execution_id, owner, ttl, **kw)

    calls: list[str] = []
    _, tools = gate_tool(calls)
    async with (
        ms.open_runtime(store=str(path), tools=tools, recover=False) as b,
        ms.open_runtime(store=PausedBeforeTheTake(path), tools=tools, recover=False) as c,
    ):
        pauser.append(b)
        report = await c.recover()
        assert list(report) == []
        assert [(s.id, s.reason) for s in report.skipped] == [("ex-paused-mid", "paused")]
        assert c.live() == []
    assert calls == []
    left = await anyio.to_thread.run_sync(stored, spec, "ex-paused-mid")
    assert left is not None
    assert left.status == "paused"
    assert left.lease is None or not left.lease.owner


class _Sweeps:
    """Counts the listings of unfinished runs of a store (each sweep of a runtime's recovery,
    and each ``recover()``, makes one), so that a test waits for sweeps, not for a time."""

    def __init__(self, opened: ms.storage.Store) -> None:
        self.count = 0
        self._changed = threading.Condition()
        real = opened.unfinished

        def unfinished(*args: Any, **kwargs: Any) -> Any:
            listing = real(*args, **kwargs)
            with self._changed:
                self.count += 1
                self._changed.notify_all()
            return listing

        opened.unfinished = unfinished  # type: ignore[method-assign]

    async def more(self, n: int) -> None:
        """Until ``n`` more listings than so far (off the loop: they are made in threads)."""
        target = self.count + n

        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(lambda: self.count >= target, timeout=60)

        assert await anyio.to_thread.run_sync(wait), f"{self.count} listings, not {target}"


@pytest.mark.anyio
async def test_l8_a_runtime_without_a_runs_tool_leaves_it_to_one_that_has_it(
    store: StoreSpec,
) -> None:
    """A runtime open on the store without the tool an orphan's next step needs neither
    takes it over (it crashed at the step with a bare ``KeyError`` and left it ``running``,
    and its watcher took it again and again, a new lease tenure each time) nor resumes it
    by hand (``InvalidPlan``, nothing changes); a runtime with the tool then runs it."""
    planted_run = await plant(store, "ex-other-tools")
    assert planted_run.lease is not None
    opened, close = await anyio.to_thread.run_sync(open_store, store.target)
    sweeps = _Sweeps(opened)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(anyio.to_thread.run_sync, close)
        # A sweep every 0.1 s: its watcher's sweeps are counted, not waited for in seconds.
        options: dict[str, Any] = {
            "tools": {"other": lambda: 1},
            "lease_ttl": 1,
            "heartbeat_interval": 0.1,
        }
        c = await stack.enter_async_context(ms.open_runtime(store=opened, **options))
        report = await c.recover()
        assert list(report) == []
        assert [(s.id, s.reason) for s in report.skipped] == [
            ("ex-other-tools", "missing:tool:gate")
        ]
        await sweeps.more(3)  # several of its watcher's sweeps: nothing is taken
        left = await c.get("ex-other-tools")
        assert left is not None
        assert left.lease is not None
        assert left.lease.epoch == planted_run.lease.epoch
        with pytest.raises(ms.executions.InvalidPlan, match="unknown tool gate"):
            await c.resume("ex-other-tools")
        left = await c.get("ex-other-tools")
        assert left is not None
        assert left.status == "running"
        assert left.lease is not None
        assert not left.lease.owner  # the lease the resume took is given back
        assert c.live() == []
    calls: list[str] = []
    _, tools = gate_tool(calls)
    async with ms.open_runtime(store=store.target, tools=tools, lease_ttl=3) as rt:
        with anyio.fail_after(60):
            await completed(rt, "ex-other-tools")
    assert calls == [""]


@pytest.mark.anyio
async def test_l8_a_runtime_without_a_planner_leaves_an_unplanned_run_to_one_that_has_it(
    store: StoreSpec,
) -> None:
    """A run started with a planner whose runner died before its plan was made: a runtime
    without a planner does not take it over (it failed the run for good: "no plan was
    given and the runtime has no planner"); one with a planner then plans and runs it."""
    await plant(store, "ex-unplanned", status="planned", plan=None, plan_version=0)
    async with ms.open_runtime(store=store.target, tools={"gate": lambda: 1}, lease_ttl=1) as c:
        report = await c.recover()
        assert list(report) == []
        assert [(s.id, s.reason) for s in report.skipped] == [("ex-unplanned", "missing:planner")]
        left = await c.get("ex-unplanned")
        assert left is not None
        assert left.status == "planned"
        assert c.live() == []
    calls: list[str] = []
    _, tools = gate_tool(calls)

    def planner(goal: str, context: Any) -> ms.Plan:
        return PLAN

    async with ms.open_runtime(store=store.target, tools=tools, planner=planner, lease_ttl=3) as rt:
        with anyio.fail_after(60):
            await completed(rt, "ex-unplanned")
    assert calls == [""]


# ----------------------------------------------------------------------
# ``recover()`` returns the runs it took over, and only those: two hosts
# recovering at once must not both report a run one of them had already finished.


async def _inc(x: int = 0) -> int:
    return x + 1


class _FinishedMeanwhile(ms.storage.SqliteStore):
    """A store on which another host takes ``ex-gone`` over and finishes it right after
    this host listed it as recoverable."""

    def unfinished(self, skip: Any = ()) -> Any:  # what recovery lists
        listing = super().unfinished(skip)
        self.edit(
            "ex-gone", lambda stored, now: attrs.evolve(stored, status="completed", updated_at=now)
        )
        return listing


def _orphan(store: ms.storage.SqliteStore, execution_id: str) -> None:
    """A run left ``running`` by a host that died without a lease (lapsed long ago)."""
    record = ms.storage.Execution(
        id=execution_id,
        goal="g",
        status="running",
        plan=linear(1),
        created_at=1.0,
        updated_at=1.0,
    )
    assert store.create(record)


@pytest.mark.anyio
async def test_recover_leaves_out_a_run_another_host_finished_after_the_listing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.sqlite3"
    store = _FinishedMeanwhile(path)
    _orphan(store, "ex-gone")
    _orphan(store, "ex-mine")
    async with ms.open_runtime(store=store, tools={"inc": _inc}) as rt:
        handles = await rt.recover()
        # Before the fix, ex-gone came back too: resume returns a finished run's result (R4)
        # without running it here, and recover counted it as taken over.
        assert [handle.execution_id for handle in handles] == ["ex-mine"]
        assert (await handles[0].wait()).status == "completed"
    gone = store.get("ex-gone")
    assert gone is not None
    assert gone.status == "completed"
    store.close()


# ----------------------------------------------------------------------
# kill -9 of a run at a random moment, then a fresh process resumes it (slow).
#
# Each trial starts ``_crash_worker.py`` on a 30-step plan (27 tools, 3 agents with durable inner
# steps, one of which asks a question), SIGKILLs it after a seeded random delay, reads the store
# as the kill left it, and runs a fresh ``resume`` process until the execution is completed. The
# side-effect ledger the workers keep (one ``<kind> <name> begin|end`` line around every tool
# call and inner step) then shows:
#
# - no step or inner step whose completion was durable at the kill ran again (E1, R7, R8);
# - only the side effects in flight at the kill (begun by the killed process, not durable) ran
#   twice, and nothing ran more than twice;
# - the run ends ``completed``, every step succeeded, every side effect ran;
# - every record parses, right after the kill and at the end (E7, E8);
# - the agent that asked got the answer (R8), exactly once.
#
# The backends: SQLite, the file store and PostgreSQL (a schema of each trial's own on the test
# server; the processes are hosts sharing it). Trials per backend: ``--trials N`` (see
# conftest.py) or ``MAINSPRING_RUNTIME_CRASH_TRIALS``; the default, 50 each on SQLite and files
# and 16 on PostgreSQL (a process there also connects to a server), gives 116 per run.

WORKER_crash_resume = Path(__file__).parents[1] / "_crash_worker.py"
REPO_crash_resume = Path(ms.__file__).parent.parent
EXECUTION = "crash-ex"
SEED = 20261201
BACKENDS = ("sqlite", "file", "postgresql")
DEFAULT_TRIALS = {"sqlite": 50, "file": 50, "postgresql": 16}
#: Trials per test item: each stays well inside the per-test timeout.
BATCH = {"sqlite": 25, "file": 25, "postgresql": 8}
#: The kill lands uniformly within this many times an undisturbed run's length after the run
#: started (measured per batch, so a slower machine gets later kills): most kills land
#: mid-run, a few after it finished.
KILL_SPAN = 1.1

PLAN_crash_resume = build_plan()
TOOLS = [step.id for step in PLAN_crash_resume.steps if step.tool is not None]
AGENTS = {step.id: step.input for step in PLAN_crash_resume.steps if step.agent is not None}
INNER = [f"{sid}.i{i}" for sid, spec in AGENTS.items() for i in range(spec["inner"])]


def _trials(config: pytest.Config, backend: str) -> int:
    option = config.getoption("trials", default=None)
    if option is not None:
        return int(option)
    given = os.environ.get("MAINSPRING_RUNTIME_CRASH_TRIALS")
    return int(given) if given else DEFAULT_TRIALS[backend]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "batch" not in metafunc.fixturenames:
        return
    params = []
    for backend in BACKENDS:
        total, size = _trials(metafunc.config, backend), BATCH[backend]
        # A PostgreSQL trial's processes start slower (they connect): a loaded machine gets time.
        marks = [pytest.mark.timeout(300)] if backend == "postgresql" else []
        params += [
            pytest.param(backend, range(start, min(start + size, total)), marks=marks,
                         id=f"{backend}-trials{start}-{min(start + size, total) - 1}")
            for start in range(0, total, size)
        ]  # fmt: skip
    metafunc.parametrize(("backend", "batch"), params)


def _open(backend: str, path: Path | str) -> ms.storage.Store:
    if backend == "postgresql":
        return ms.storage.PostgresStore(str(path), read_only=True)
    return ms.storage.SqliteStore(path) if backend == "sqlite" else ms.storage.FileStore(path)


def _place(backend: str, where: Path, schemas: list[str]) -> Path | str:
    """Where a trial's store lives: a file or directory in ``where``, or a PostgreSQL schema
    of its own (noted in ``schemas``, dropped when the test ends)."""
    if backend == "postgresql":
        schemas.append(fresh_schema())
        return with_schema(require_server(), schemas[-1])
    return where / ("store.sqlite3" if backend == "sqlite" else "store")


def _read(
    backend: str, path: Path | str
) -> tuple[ms.storage.Execution, tuple[ms.storage._seam.Problem, ...]]:
    """The execution and the listing's problems, from a fresh handle (reading never writes)."""
    store = _open(backend, path)
    try:
        execution = store.get(EXECUTION)  # parses, or this raises
        problems = store.list().problems
    finally:
        if isinstance(store, ms.storage.SqliteStore | ms.storage.PostgresStore):
            store.close()
    assert execution is not None
    return execution, problems


def _ledger(path: Path) -> list[tuple[str, str, str]]:
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        kind, name, phase = line.split(" ")
        lines.append((kind, name, phase))
    return lines


def _lease_env(store: Path | str) -> dict[str, str]:
    """PostgreSQL: a 2 s lease. With 1 s a loaded machine (load 8-10, a trial's renewals
    queued behind its durable commits) once let a live run's lease lapse: the run stopped,
    the worker resumed it and re-ran the steps in flight in the process that was then killed,
    which this test counts as a step run twice before the kill."""
    return {"MAINSPRING_CRASH_LEASE_TTL": "2.0"} if isinstance(store, str) else {}


def _spawn(
    mode: str, store: Path | str, where: Path, seed: int, n: int = 0
) -> subprocess.Popen[bytes]:
    with (where / f"{mode}{n}.err").open("wb") as stderr:  # the child keeps its own copy
        return subprocess.Popen(
            [
                sys.executable,
                WORKER_crash_resume,
                mode,
                str(store),
                where / "ledger",
                EXECUTION,
                str(seed),
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(REPO_crash_resume), **_lease_env(store)},
        )


def _stderr(where: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(where.glob("*.err")))


def _wait_ready(child: subprocess.Popen[bytes], where: Path) -> None:
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 30.0)
    line = child.stdout.readline().strip() if readable else b""
    if line != b"ready":
        child.kill()
        child.communicate(timeout=10)
        pytest.fail(f"the start worker in {where} did not start ({line!r})\n{_stderr(where)}")


def _run_length(tmp_path: Path, backend: str, schemas: list[str]) -> float:
    """How long an undisturbed run takes here, from ``ready`` to completed."""
    where = tmp_path / "undisturbed"
    where.mkdir()
    store = _place(backend, where, schemas)
    child = _spawn("start", store, where, SEED)
    _wait_ready(child, where)
    began = time.monotonic()
    assert child.stdout is not None
    line = b"ready"
    while line.startswith((b"ready", b"resumed")):  # until it ends (b"" at end of file)
        readable, _, _ = select.select([child.stdout], [], [], 30.0)
        line = child.stdout.readline().strip() if readable else b"timed out"
    took = time.monotonic() - began
    out, _ = child.communicate(timeout=30)
    assert line == b"completed", (line, out, _stderr(where))
    assert child.returncode == 0, (out, _stderr(where))
    return took


def _trial(
    tmp_path: Path, backend: str, trial: int, run_length: float, schemas: list[str]
) -> dict[str, Any]:
    rng = random.Random(f"{SEED}:{backend}:{trial}")
    seed = rng.randrange(2**31)
    delay = rng.uniform(0.0, KILL_SPAN * run_length)
    where = tmp_path / f"t{trial}"
    where.mkdir()
    store = _place(backend, where, schemas)
    about = f"trial {trial} ({backend}, seed {seed}, kill after {delay * 1000:.0f} ms) in {where}"

    # 1. Start, and SIGKILL the run at a random moment.
    child = _spawn("start", store, where, seed)
    _wait_ready(child, where)
    time.sleep(delay)
    finished_first = child.poll() is not None
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert child.stdout is not None
    child.stdout.close()

    # 2. What was durable at the kill, and what the killed process had begun.
    at_kill, problems = _read(backend, store)
    assert problems == (), about
    tasks_at_kill, dropped = ms.storage._seam.parse_agent_tasks(at_kill)
    assert dropped == 0, about
    first = _ledger(where / "ledger")
    durable = {("tool", sid) for sid in at_kill.completed_steps if sid in TOOLS}
    durable |= {
        ("inner", f"{task.step_id}.{name}")
        for task in tasks_at_kill
        for name in task.inner_completed
        if not name.startswith("ask.")
    }
    durable_agents = set(at_kill.completed_steps) & set(AGENTS)

    # 3. Fresh processes resume it until it is completed.
    resumes = 0
    final = at_kill
    while final.status != "completed":
        assert resumes < 3, f"{about}: still {final.status} after {resumes} resumes"
        child = _spawn("resume", store, where, seed, resumes)
        try:
            out, _ = child.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            pytest.fail(f"{about}: the resume worker hung\n{_stderr(where)}")
        resumes += 1
        assert child.returncode == 0, f"{about}: resume exited {child.returncode}: {out!r}\n" + (
            _stderr(where)
        )
        final, problems = _read(backend, store)
        assert problems == (), about

    # 4. The ledger against what was durable.
    whole = _ledger(where / "ledger")
    after = whole[len(first) :]
    assert whole[: len(first)] == first, about
    begun_before = Counter((k, n) for k, n, p in first if p == "begin" and k in ("tool", "inner"))
    begun_after = Counter((k, n) for k, n, p in after if p == "begin" and k in ("tool", "inner"))
    ended = Counter((k, n) for k, n, p in whole if p == "end" and k in ("tool", "inner"))
    context = f"{about}\ndurable at kill: {sorted(durable)}\nledger:\n" + "\n".join(
        " ".join(line) for line in whole
    )
    for key in durable:
        # Durable at the kill: it ran exactly once, before the kill, and never again.
        assert (begun_before[key], begun_after[key], ended[key]) == (1, 0, 1), (key, context)
    reran = sorted(key for key in begun_before if begun_after[key])
    for key in {*begun_before, *begun_after}:
        assert begun_before[key] <= 1, (key, "ran twice in the killed process", context)
        assert begun_after[key] <= 1, (key, "ran twice after the resume", context)
    # What runs again is exactly what was in flight at the kill: begun by the killed process
    # and not durable when it died (at least once for those, at most once for the rest).
    assert set(reran) == set(begun_before) - durable, context
    for sid in durable_agents:
        assert ("agent", sid, "begin") not in after, (sid, "a completed agent ran again", context)
    # E1: a completion is durable before anything that depends on it starts. So whatever the
    # killed process began had its dependencies durable at the kill: the steps it depends
    # on, and for an inner step the inner step before it.
    depends = {step.id: step.depends_on for step in PLAN_crash_resume.steps}
    for kind, name, phase in first:
        if phase != "begin" or kind not in ("tool", "agent", "inner"):
            continue
        if kind == "inner":
            sid, _, inner = name.partition(".")
            previous = int(inner[1:]) - 1
            needed = {("inner", f"{sid}.i{previous}")} if previous >= 0 else set()
            assert needed <= durable, (name, "began before the inner step it follows was durable")
        else:
            missing = set(depends[name]) - set(at_kill.completed_steps)
            assert not missing, (name, "began before", missing, "was durable", context)
    every = {("tool", sid) for sid in TOOLS} | {("inner", name) for name in INNER}
    assert {key for key in every if ended[key] >= 1} == every, context

    # 5. The run: completed, every step succeeded, every record parses, the answer arrived.
    assert final.status == "completed", about
    assert final.plan is not None
    assert {step.status for step in final.plan.steps} == {"succeeded"}, about
    assert sorted(final.completed_steps) == sorted(step.id for step in PLAN_crash_resume.steps), (
        about
    )
    assert final.pending is None, about
    tasks, dropped = ms.storage._seam.parse_agent_tasks(final)
    assert dropped == 0, about
    assert sorted(task.step_id for task in tasks) == sorted(AGENTS), (about, "one task a step")
    assert {task.state for task in tasks} == {"completed"}, about
    inner_done = {f"{t.step_id}.{n}" for t in tasks for n in t.inner_completed if "." not in n}
    assert inner_done == set(INNER), about
    asker = next(task for task in tasks if task.step_id == ASKER)
    assert [n for n in asker.inner_completed if n.startswith("ask.")] == ["ask.0"], about
    outputs = {obs.step_id: obs.output for obs in final.observations if obs.ok}
    assert outputs[ASKER]["answer"] == ANSWER, about
    for sid in AGENTS:
        if sid != ASKER:
            assert outputs[sid]["answer"] is None, about
    answers = [(n, p) for k, n, p in whole if k == "answer"]
    assert answers, about
    assert set(answers) == {(ASKER, ANSWER)}, (about, answers)
    lease = final.lease
    if resumes:  # L3: the end of the run released the lease
        assert lease is None or not lease.owner or lease.expires_at <= time.time(), (about, lease)
    # else the killed process wrote ``completed`` but died before releasing: its lease lapses.
    return {
        "backend": backend,
        "killed_mid_run": at_kill.status != "completed" and not finished_first,
        "status_at_kill": at_kill.status
        + (" with the question open" if at_kill.pending and at_kill.status == "running" else ""),
        "durable_at_kill": len(durable),
        "reruns": len(reran),
        "resumes": resumes,
    }


@pytest.mark.slow
def test_kill_9_then_resume_reruns_only_what_was_in_flight(
    tmp_path: Path, backend: str, batch: range, crash_stats: list[dict[str, object]]
) -> None:
    schemas: list[str] = []
    try:
        run_length = _run_length(tmp_path, backend, schemas)
        for trial in batch:
            crash_stats.append(_trial(tmp_path, backend, trial, run_length, schemas))
    finally:
        for schema in schemas:
            drop_schema(schema)


@pytest.mark.anyio
async def test_V2_a_resume_after_kill_9_writes_one_crash_and_one_takeover_naming_both_owners(
    crash_store: StoreSpec,
) -> None:
    """The history says what the kill left unsaid: the owner that died (and when it was
    last seen), and who took the run over from it, and why."""
    calls: list[str] = []
    _, tools = gate_tool(calls)
    lease = await start_and_kill(crash_store, "ex-killed", ttl=60)
    async with ms.open_runtime(
        store=crash_store.target, tools=tools, lease_ttl=3, recover=False
    ) as rt:
        assert (await (await rt.resume("ex-killed")).wait()).status == "completed"
        history = await anyio.to_thread.run_sync(lambda: rt.store.history("ex-killed"))
    timeline = [(e.kind, e.owner, e.previous_owner, e.reason) for e in history]
    assert [t for t in timeline if t[0] in ("crash", "lapse", "takeover", "shutdown")] == [
        ("crash", lease.owner, None, "owner-gone"),
        ("takeover", rt.owner, lease.owner, "owner-gone"),
    ]
    crash = next(e for e in history if e.kind == "crash")
    assert crash.lapsed_at == lease.expires_at
    assert crash.last_seen is not None
    assert crash.last_seen <= crash.at
    # Every entry the killed owner wrote comes before it (V2).
    assert history[0].kind == "created"
    assert calls == [""]
