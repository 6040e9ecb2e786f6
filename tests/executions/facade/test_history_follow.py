"""``Runtime.events(after=seq)``: the durable history (V2) replayed from a sequence number,
then followed as commits become durable here (the writer's ``Durable`` hook) or are made
by another process (polled); never an entry twice, never one skipped. Without ``after`` the
live events stay as they were, optionally of one execution."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.storage import HistoryEvent

from .._kit import linear, plan_of, runtime, tool

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["sqlite", "files"])
def store_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    # A suffix keeps the kit from putting a SQLite file inside the FileStore directory.
    return tmp_path / ("store.sqlite3" if request.param == "sqlite" else "store.files")


async def _history(store: ms.storage.Store, after: int = 0) -> list[HistoryEvent]:
    found: list[HistoryEvent] = []
    while page := await anyio.to_thread.run_sync(functools.partial(store.history, after=after)):
        found += page
        after = page[-1].seq
    return found


def _ended(event: HistoryEvent, execution_id: str) -> bool:
    return (
        event.execution_id == execution_id
        and event.kind == "status"
        and event.status == "completed"
    )


async def _until(stream: AsyncIterator[HistoryEvent], stop: Any, into: list[HistoryEvent]) -> None:
    async with contextlib.aclosing(stream):  # type: ignore[type-var]
        async for event in stream:
            into.append(event)
            if stop(event):
                return


def _gate() -> tuple[anyio.Event, dict[str, Any]]:
    released = anyio.Event()

    async def gate(**_: Any) -> int:
        await released.wait()
        return 0

    return released, {"gate": gate}


async def test_a_follower_started_mid_run_gets_exactly_the_entries_after_its_seq(
    store_path: Path,
) -> None:
    async with runtime(store_path) as rt:
        await (await rt.start("g", linear(6), execution_id="ex-a")).wait()
        full = await _history(rt.store)
        assert _ended(full[-1], "ex-a")
        for mid in (0, full[0].seq, full[len(full) // 2].seq, full[-2].seq):
            got: list[HistoryEvent] = []
            with anyio.fail_after(20):
                async with contextlib.aclosing(rt.events(after=mid)) as stream:
                    await _until(stream, lambda e: e == full[-1], got)
            assert got == [e for e in full if e.seq > mid]
        # Of one execution: the same entries, filtered by the store.
        await (await rt.start("g", linear(2), execution_id="ex-b")).wait()
        got = []
        with anyio.fail_after(20):
            async with contextlib.aclosing(rt.events("ex-a", after=0)) as stream:
                await _until(stream, lambda e: e == full[-1], got)
        assert got == full


async def test_a_restarted_follower_misses_nothing_while_the_run_commits(
    store_path: Path,
) -> None:
    """The first follower stops mid-run; the second starts from the last seq it saw while
    the run goes on. ``poll`` is long: what wakes them is this writer's durable flushes."""
    released, tools = _gate()
    plan = plan_of(
        tool("s0", x=0),
        tool("s1", "inc", "s0", x=1),
        tool("g", "gate", "s1"),
        *(tool(f"t{i}", "inc", "g" if i == 0 else f"t{i - 1}", x=i) for i in range(8)),
    )
    first: list[HistoryEvent] = []
    second: list[HistoryEvent] = []
    async with runtime(store_path, tools=tools) as rt:
        with anyio.fail_after(30):
            async with contextlib.aclosing(rt.events(after=0, poll=60)) as stream:
                handle = await rt.start("g", plan, execution_id="ex-r")
                await _until(stream, lambda e: e.step_id == "s1" and e.kind == "step", first)
            last = first[-1].seq
            async with anyio.create_task_group() as tg:
                stream = rt.events(after=last, poll=60)
                tg.start_soon(_until, stream, lambda e: _ended(e, "ex-r"), second)
                released.set()  # the run commits t0..t7 while the second one follows
                assert (await handle.wait()).status == "completed"
        full = await _history(rt.store)
    seqs = [e.seq for e in first + second]
    assert seqs == sorted(set(seqs))  # never twice
    assert first + second == full  # never skipped
    assert [e.step_id for e in second if e.kind == "step" and e.status == "succeeded"] == [
        "g",
        *(f"t{i}" for i in range(8)),
    ]


async def test_iteration_ends_when_the_runtime_closes_after_every_durable_entry(
    store_path: Path,
) -> None:
    got: list[HistoryEvent] = []

    async def follow(stream: AsyncIterator[HistoryEvent]) -> None:
        async for event in stream:
            got.append(event)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg, runtime(store_path) as rt:
            tg.start_soon(follow, rt.events(after=0, poll=60))
            await (await rt.start("g", linear(3), execution_id="ex-c")).wait()
            # The runtime is closed: the follower ended (the task group would hang if not).
    store, close = ms.storage.open_store(store_path)
    try:
        assert got == await _history(store)
    finally:
        close()
    async with runtime(store_path) as rt:
        closed_rt = rt
    got = []
    with anyio.fail_after(10):
        async for event in closed_rt.events(after=0):  # a runtime already closed: nothing
            got.append(event)
    assert got == []


_OTHER = """
import sys, anyio, mainspring as ms

async def inc(x=0):
    return x + 1

async def main(store):
    plan = ms.Plan(id="p", goal="g", steps=tuple(
        ms.PlanStep(id=f"s{i}", tool="inc", input={"x": i},
                    depends_on=(f"s{i - 1}",) if i else ()) for i in range(4)))
    async with ms.open_runtime(store=store, tools={"inc": inc}) as rt:
        await (await rt.start("elsewhere", plan, execution_id="ex-other")).wait()

anyio.run(main, sys.argv[1])
"""


def _run_elsewhere(store: Path) -> subprocess.Popen[bytes]:
    """Another process: its own runtime on the same store runs ``ex-other``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", _OTHER, str(store)], env=env)


@pytest.fixture
def other_process() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


async def test_a_follower_sees_a_run_committed_by_another_process(
    store_path: Path, other_process: list[subprocess.Popen[bytes]]
) -> None:
    got: list[HistoryEvent] = []
    async with runtime(store_path) as rt:
        await (await rt.start("g", linear(1), execution_id="ex-here")).wait()
        here = await _history(rt.store)
        with anyio.fail_after(60):
            async with contextlib.aclosing(rt.events(after=here[-1].seq, poll=0.05)) as stream:
                other_process.append(_run_elsewhere(store_path))
                await _until(stream, lambda e: _ended(e, "ex-other"), got)
        full = await _history(rt.store)
    assert got == full[len(here) :]
    assert {e.execution_id for e in got} == {"ex-other"}
    assert [e.step_id for e in got if e.kind == "step" and e.status == "succeeded"] == [
        f"s{i}" for i in range(4)
    ]


async def test_live_events_of_one_execution_and_the_arguments_checked(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        seen: list[object] = []

        async def collect() -> None:
            async with contextlib.aclosing(rt.events("ex-1")) as stream:  # type: ignore[type-var]
                async for event in stream:
                    seen.append(event)
                    if isinstance(event, ms.events.ExecutionCompleted):
                        return

        async with anyio.create_task_group() as tg:
            before = rt._bus.subscribers
            tg.start_soon(collect)
            while rt._bus.subscribers == before:  # subscribed: nothing published is missed
                await anyio.lowlevel.checkpoint()
            await (await rt.start("g", linear(2), execution_id="ex-2")).wait()
            await (await rt.start("g", linear(2), execution_id="ex-1")).wait()
        assert seen
        assert {getattr(e, "execution_id", None) for e in seen} == {"ex-1"}
        for bad in ({"after": -1}, {"after": 1.0}, {"after": True}, {"after": "3"}):
            with pytest.raises(ValueError, match="after"):
                rt.events(**bad)
        for poll in (0, -1.0, math.inf, math.nan, True, "1"):
            with pytest.raises(ValueError, match="poll"):
                rt.events(after=0, poll=poll)  # type: ignore[call-overload]
        with pytest.raises(ValueError, match="buffer"):
            rt.events(buffer=0)
        with pytest.raises(ms.storage.InvalidId):  # a ValueError
            rt.events("not/an/id", after=0)
        with pytest.raises(ms.storage.InvalidId):
            rt.events("")


async def test_the_durable_hook_counts_flushes_and_wakes_waiters() -> None:
    durable = ms.storage._seam.Durable()
    with anyio.fail_after(10):
        await durable.wait_past(-1)  # already past: returns at once
        async with anyio.create_task_group() as tg:
            woke: list[int] = []

            async def waiter() -> None:
                await durable.wait_past(0)
                woke.append(durable.count)

            tg.start_soon(waiter)
            while durable._event is None:  # the waiter is parked
                await anyio.lowlevel.checkpoint()
            durable.notify()
        assert woke == [1]
        durable.close()
        await durable.wait_past(100)  # closed: never waits


class _HeldHistory(ms.storage.SqliteStore):
    """Its first ``history`` read is held after it has read (so what it returns is stale)
    until ``release`` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered = threading.Event()
        self.release = threading.Event()

    def history(
        self, execution_id: str | None = None, *, after: int = 0, limit: int = 1_000
    ) -> tuple[HistoryEvent, ...]:
        found = super().history(execution_id, after=after, limit=limit)
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(timeout=30)
        return found


async def test_a_read_under_way_when_the_runtime_closes_is_followed_by_a_last_one(
    tmp_path: Path,
) -> None:
    """The follower's read saw nothing; the run then committed and the runtime began to
    close before that read returned: the follower reads once more before it ends."""
    store = _HeldHistory(tmp_path / "store.sqlite3")
    got: list[HistoryEvent] = []

    async def follow(stream: AsyncIterator[HistoryEvent]) -> None:
        async for event in stream:
            got.append(event)

    async def release_once_closing(rt: ms.Runtime) -> None:
        while not rt._followers._closing:
            await anyio.lowlevel.checkpoint()
        store.release.set()

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg, runtime(store) as rt:
                tg.start_soon(follow, rt.events(after=0, poll=60))
                await anyio.to_thread.run_sync(store.entered.wait)
                await (await rt.start("g", linear(2), execution_id="ex-h")).wait()
                tg.start_soon(release_once_closing, rt)
        full = await _history(store)
    finally:
        store.release.set()
        store.close()
    assert full
    assert got == full


async def _drain(stream: AsyncIterator[Any], into: list[Any], ended: anyio.Event) -> None:
    """Iterate ``stream`` to its end (no exception), then say so."""
    async with contextlib.aclosing(stream):  # type: ignore[type-var]
        async for event in stream:
            into.append(event)
    ended.set()


async def test_v4_every_stream_ends_when_the_runtime_starts_closing(tmp_path: Path) -> None:
    """Streams end as soon as the runtime begins to close, before its runs have stopped: a
    step here holds the runs' shutdown until both streams have ended, so streams that
    ended only once the runs stopped would make it wait out its 10 s and say so."""
    live_ended, follower_ended = anyio.Event(), anyio.Event()
    ended_before_the_runs_stopped: list[bool] = []
    entered = anyio.Event()

    async def hold(**_: Any) -> int:
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await live_ended.wait()
                await follower_ended.wait()
            ended_before_the_runs_stopped.append(live_ended.is_set() and follower_ended.is_set())
        return 0  # pragma: no cover - never reached

    live: list[Any] = []
    history: list[HistoryEvent] = []
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg, runtime(tmp_path, tools={"hold": hold}) as rt:
            before = rt._bus.subscribers
            tg.start_soon(_drain, rt.events(), live, live_ended)
            tg.start_soon(_drain, rt.events(after=0, poll=60), history, follower_ended)
            while rt._bus.subscribers == before:  # subscribed: nothing is missed
                await anyio.lowlevel.checkpoint()
            await rt.start("g", plan_of(tool("h", "hold")), execution_id="ex-s")
            await entered.wait()
            # Leaving the block closes the runtime while both consumers still iterate.
    assert ended_before_the_runs_stopped == [True]
    assert any(isinstance(e, ms.events.StepStarted) for e in live)
    assert [e.kind for e in history][:1] == ["created"]


async def test_v4_close_streams_ends_every_stream_and_the_runtime_goes_on(
    store_path: Path,
) -> None:
    """A server ends its clients' streams at its own shutdown, before its lifespan closes
    the runtime: the ``async for`` loops finish normally (a live one after what it already
    holds), streams asked for later end at once, and runs go on."""
    released, tools = _gate()
    live_ended, follower_ended, one_ended = anyio.Event(), anyio.Event(), anyio.Event()
    live: list[Any] = []
    history: list[HistoryEvent] = []
    of_one: list[HistoryEvent] = []
    with anyio.fail_after(60):
        async with runtime(store_path, tools=tools) as rt:
            async with anyio.create_task_group() as tg:
                before = rt._bus.subscribers
                tg.start_soon(_drain, rt.events(), live, live_ended)
                while rt._bus.subscribers == before:  # subscribed: nothing is missed
                    await anyio.lowlevel.checkpoint()
                handle = await rt.start("g", plan_of(tool("g", "gate")), execution_id="ex-k")
                tg.start_soon(_drain, rt.events(after=0, poll=60), history, follower_ended)
                tg.start_soon(_drain, rt.events("ex-k", after=0, poll=60), of_one, one_ended)
                while len(of_one) < 2 or len(history) < 2 or not live:  # all under way
                    await anyio.lowlevel.checkpoint()
                rt.close_streams()
                rt.close_streams()  # twice is harmless
            # The task group ended: every stream finished on its own.
            assert live_ended.is_set()
            assert follower_ended.is_set()
            assert one_ended.is_set()
            assert any(isinstance(e, ms.events.ExecutionStarted) for e in live)
            later: list[Any] = []
            async for event in rt.events():
                later.append(event)  # pragma: no cover - nothing comes
            async for entry in rt.events("ex-k", after=0):
                later.append(entry)  # what is durable now (one page), then the end
            assert later
            assert all(e.execution_id == "ex-k" for e in later)
            # The runtime still runs what it started.
            released.set()
            assert (await handle.wait()).status == "completed"
            full = await _history(rt.store)
    assert history == full[: len(history)]
    assert of_one == [e for e in history if e.execution_id == "ex-k"]


async def test_v4_a_live_stream_ends_after_what_it_held_when_streams_closed(
    store_path: Path,
) -> None:
    """``close_streams`` ends a live stream once it has yielded what it held then: events
    of runs that go on afterwards are not added to it, so a consumer that is slower than
    the runs (a stalled client) cannot keep its stream, and the server, going."""
    got: list[Any] = []
    go, ended = anyio.Event(), anyio.Event()

    async def consume() -> None:
        async with contextlib.aclosing(rt.events()) as stream:
            async for event in stream:
                got.append(event)
                await go.wait()  # a consumer busy elsewhere
        ended.set()

    with anyio.fail_after(60):
        async with runtime(store_path) as rt, anyio.create_task_group() as tg:
            before = rt._bus.subscribers
            tg.start_soon(consume)
            while rt._bus.subscribers == before:  # subscribed: nothing is missed
                await anyio.lowlevel.checkpoint()
            await (await rt.start("g", linear(2), execution_id="ex-a")).wait()
            rt.close_streams()
            await (await rt.start("g", linear(2), execution_id="ex-b")).wait()
            go.set()
            await ended.wait()
    ids = {e.execution_id for e in got if not isinstance(e, ms.actors.EventsDropped)}
    assert ids == {"ex-a"}
    assert isinstance(got[-1], ms.events.ExecutionCompleted)


async def test_v2_followers_stuck_in_store_reads_never_starve_the_runs_writes(
    store_path: Path,
) -> None:
    """A server's many clients follow runs (here 30, their reads stuck, as on a slow
    disk): the followers' reads take a few worker threads of their own, never the ones the
    runtime's writer commits and renews leases with, so the runs go on."""
    followers = 30
    release = threading.Event()
    in_flight = 0
    count = threading.Lock()
    threads = anyio.to_thread.current_default_thread_limiter()
    tokens = threads.total_tokens
    threads.total_tokens = 6  # a small pool makes starving it quick to see
    try:
        with anyio.fail_after(60):
            async with runtime(store_path) as rt:
                read = rt.store.history

                def stuck(*args: Any, **kwargs: Any) -> tuple[HistoryEvent, ...]:
                    nonlocal in_flight
                    with count:
                        in_flight += 1
                    release.wait(60)
                    return read(*args, **kwargs)

                rt.store.history = stuck  # type: ignore[method-assign]
                async with anyio.create_task_group() as tg:
                    try:
                        for _ in range(followers):
                            tg.start_soon(_drain, rt.events(after=0), [], anyio.Event())
                        while rt._followers._reads < followers or in_flight < 1:
                            await anyio.lowlevel.checkpoint()
                        handle = await rt.start("g", linear(3), execution_id="ex-w")
                        with anyio.fail_after(20):
                            assert (await handle.wait()).status == "completed"
                        rt.close_streams()
                    finally:
                        release.set()  # the stuck reads end, and the followers with them
    finally:
        threads.total_tokens = tokens


async def test_v2_a_follower_of_one_run_resumes_after_a_restart_from_its_last_seq(
    store_path: Path,
) -> None:
    """A server's client follows one run, the server stops (its streams end, the run stops
    with it), another server resumes the run and the client comes back with ``after=`` the
    last seq it got (its ``Last-Event-ID``): every entry of that run, none twice."""
    released, tools = _gate()
    plan = plan_of(tool("s0", x=0), tool("g", "gate", "s0"), tool("s1", "inc", "g", x=1))
    first: list[HistoryEvent] = []
    second: list[HistoryEvent] = []
    with anyio.fail_after(60):
        async with runtime(store_path, tools=tools) as rt:
            async with contextlib.aclosing(rt.events("ex-1", after=0, poll=60)) as stream:
                await rt.start("g", plan, execution_id="ex-1")
                await rt.start("g", linear(2), execution_id="ex-2")  # another run's entries
                await _until(stream, lambda e: e.step_id == "s0" and e.status == "succeeded", first)
            rt.close_streams()  # the server stops: its clients' streams end first
        released.set()
        async with runtime(store_path, tools=tools) as rt:
            stream = rt.events("ex-1", after=first[-1].seq, poll=60)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_until, stream, lambda e: _ended(e, "ex-1"), second)
                assert (await (await rt.resume("ex-1")).wait()).status == "completed"
            full = [e for e in await _history(rt.store) if e.execution_id == "ex-1"]
    assert first + second == full[: len(first) + len(second)]
    assert second[-1] == next(e for e in full if _ended(e, "ex-1"))
