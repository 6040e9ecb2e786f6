"""Recovery needs nobody: an open runtime takes over the runs nobody runs (L8), at once when
their owner was a process of this host that is gone (L7), once their lease lapses when the
owner is elsewhere; ``recover()`` says what it left alone and why."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.storage import open_store

from ._memory_kit import StoreSpec, store_spec

WORKER = Path(__file__).with_name("_recovery_worker.py")
REPO = Path(ms.__file__).resolve().parent.parent
#: An owner id of the form this library writes, of a host that is not this one.
FOREIGN = "elsewhere-host:4242:0123abcd:1.abc.1"
pytestmark = pytest.mark.anyio

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


def planted(
    spec: StoreSpec, execution_id: str, *, owner: str = "", ttl: float | None = None, **fields: Any
) -> ms.storage.Execution:
    """Store a run as a crashed process leaves it: ``running`` with its plan, the lease
    ``owner``'s for ``ttl`` s on the store's clock (released when ``owner`` is empty)."""
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
    with backend(spec) as opened:
        assert opened.create(record, lease_ttl=ttl if owner else None)
        stored = opened.get(execution_id)
    assert stored is not None
    return stored


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
        return ms.open_runtime(store=crash_store.target, tools=tools, lease_ttl=3)

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


async def test_l8_a_lease_of_another_host_is_not_taken_before_it_lapses_and_is_after(
    store: StoreSpec,
) -> None:
    far = await plant(store, "ex-far", owner=FOREIGN, ttl=2.0)
    assert far.lease is not None
    calls: list[str] = []
    taken_at: list[float] = []
    ran, tools = gate_tool(calls, stamps=taken_at, clock=lambda: store_clock(store))
    async with ms.open_runtime(store=store.target, tools=tools, lease_ttl=3) as rt:
        report = await rt.recover()
        if not taken_at:  # looked at before the lease lapsed: left alone, and why
            assert [s.reason for s in report.skipped if s.id == "ex-far"] in (
                [f"lease-live:{FOREIGN}"],
                [],  # the watcher took it between the listing and now
            )
        with anyio.fail_after(60):
            await ran.wait()
            await completed(rt, "ex-far")
    assert taken_at[0] >= far.lease.expires_at  # by the store's clock
    assert calls == [""]


async def test_l8_two_runtimes_racing_for_lapsed_runs_run_each_exactly_once(
    store: StoreSpec,
) -> None:
    calls: list[str] = []
    _, first = gate_tool(calls, "first")
    _, second = gate_tool(calls, "second")
    ids = [f"ex-race-{n}" for n in range(6)]
    async with (
        ms.open_runtime(store=store.target, tools=first, lease_ttl=3) as a,
        ms.open_runtime(store=store.target, tools=second, lease_ttl=3) as b,
    ):
        # Both runtimes are open (and sweeping) before the runs exist; both see the leases
        # and wake when they lapse, together.
        for execution_id in ids:
            await plant(store, execution_id, owner=FOREIGN, ttl=1.5)
        with anyio.fail_after(90):
            for execution_id in ids:
                await completed(a, execution_id)
        reported = [h.execution_id for h in await a.recover()] + [
            h.execution_id for h in await b.recover()
        ]
    assert len(calls) == len(ids)  # each ran once, by one of the two
    assert sorted(reported) == sorted(ids)  # each reported by the runtime that won it


async def test_l8_open_runtime_recover_false_takes_nothing_over_by_itself(
    store: StoreSpec,
) -> None:
    await plant(store, "ex-left")
    calls: list[str] = []
    ran, tools = gate_tool(calls)
    async with ms.open_runtime(store=store.target, tools=tools, lease_ttl=3, recover=False) as rt:
        with anyio.move_on_after(1.5):  # several sweeps of a recovering runtime
            await ran.wait()
        assert calls == []
        stored = await rt.get("ex-left")
        assert stored is not None
        assert stored.status == "running"
        assert rt.live() == []
        (handle,) = await rt.recover()  # only when asked
        assert (await handle.wait()).status == "completed"
    assert calls == [""]
    with pytest.raises(TypeError, match="recover must be True or False"):
        async with ms.open_runtime(store=store.target, recover="yes"):  # type: ignore[arg-type]
            pass


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
        assert isinstance(report, ms.executions._seam.RecoveryReport)
        assert [h.execution_id for h in report] == ["ex-orphan"]
        assert report.resumed == tuple(report)
        await report[0].wait()
        skipped = {s.id: s.reason for s in report.skipped}
        expected = {"ex-held": f"lease-live:{FOREIGN}", "ex-paused": "paused"}
        if store.kind != "postgres":
            expected["ex-broken"] = "unreadable"
        assert skipped == expected  # a finished run is not a skipped one
        again = await rt.recover()
        assert list(again) == []  # each handle is reported once
        assert {s.id for s in again.skipped} == set(expected)


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

    def acquire(self, *args: Any, **kwargs: Any) -> ms.storage._seam.LeaseResult:
        if self.fail_acquire:
            self.fail_acquire -= 1
            raise ms.storage.StorageError(f"acquire failed near {SECRET}")
        return super().acquire(*args, **kwargs)


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
        async with ms.open_runtime(store=flaky, tools=tools, lease_ttl=3) as rt:
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
    server): ``taken`` is set once it has landed."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.taken = threading.Event()

    def acquire(self, *args: Any, **kwargs: Any) -> ms.storage._seam.LeaseResult:
        result = super().acquire(*args, **kwargs)
        if not self.taken.is_set():
            self.taken.set()
            threading.Event().wait(5)  # the answer is late; the runtime closes meanwhile
        return result


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


async def test_l8_a_sweep_reads_only_unfinished_runs(tmp_path: Path) -> None:
    """Recovery sweeps every few seconds for as long as a runtime is open: it lists the
    unfinished runs only (``storage.Unfinished``), whatever number of finished ones the
    store keeps, and still takes an orphan over."""
    target = str(tmp_path / "big.db")
    spec = StoreSpec("sqlite", target, tmp_path, None)
    for n in range(20):
        await plant(spec, f"ex-done-{n}", status="completed")
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

    def acquire(self, *args: Any, **kwargs: Any) -> ms.storage._seam.LeaseResult:
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


async def test_l8_a_runtime_without_a_runs_tool_leaves_it_to_one_that_has_it(
    store: StoreSpec,
) -> None:
    """A runtime open on the store without the tool an orphan's next step needs neither
    takes it over (it crashed at the step with a bare ``KeyError`` and left it ``running``,
    and its watcher took it again and again, a new lease tenure each time) nor resumes it
    by hand (``InvalidPlan``, nothing changes); a runtime with the tool then runs it."""
    planted_run = await plant(store, "ex-other-tools")
    assert planted_run.lease is not None
    async with ms.open_runtime(store=store.target, tools={"other": lambda: 1}, lease_ttl=1) as c:
        report = await c.recover()
        assert list(report) == []
        assert [(s.id, s.reason) for s in report.skipped] == [
            ("ex-other-tools", "missing:tool:gate")
        ]
        await anyio.sleep(1.5)  # several of its watcher's sweeps: nothing is taken
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
