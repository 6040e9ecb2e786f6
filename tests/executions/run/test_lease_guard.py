"""L5: a runner honours its lease itself, on its own clock, before it starts anything.

The store fences writes (L4), but a tool call is not a write: a runner whose answer from the
store came after its lease could have lapsed must not start its next step, whoever holds the
lease now. These tests drive the holder's clock by hand (``open_runtime(lease_clock=...)``)
and a SQLite store whose answers "arrive late" by moving that clock while it writes: nothing
here depends on how long anything takes.
"""

from __future__ import annotations

import collections
import contextlib
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import mainspring as ms
from mainspring.executions._run.lease_guard import MIN_MARGIN, LeaseWatch, lease_margin
from mainspring.storage import RetryPolicy

from ..._postgres import postgres_url, require_server, server_url
from ..._tcp_proxy import TcpProxy
from .._answer_host import Host
from .._kit import Ledger, plan_of, runtime, tool

__all__ = ["postgres_url"]
pytestmark = pytest.mark.anyio

TTL = 5.0
#: No heartbeat during a test: every renewal the run makes is the one the test provokes.
QUIET = {"lease_ttl": TTL, "heartbeat_interval": 4.9}


class FakeClock:
    """Monotonic seconds that move only when told to."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def moving_with(clock: FakeClock) -> Any:
    """A store clock (wall seconds) that moves as the holder's does: a late answer is late
    for everyone (a frozen host, a held network), so a lease lapses on the store too."""
    start = time.time() - clock.now

    def now() -> float:
        return start + clock.now

    return now


class LateAnswers(ms.storage.SqliteStore):
    """A SqliteStore whose next answer (to a commit or a heartbeat, once armed) reaches the
    runner ``delay`` seconds of the runner's clock after its request: the write lands, the
    answer comes late, as with a network that held it or a frozen host."""

    def __init__(self, path: Path, clock: FakeClock, *, store_clock: Any = time.time) -> None:
        super().__init__(path, clock=store_clock)
        self.runner_clock = clock
        self.late_commit = 0.0
        self.late_renewal = 0.0
        self.late_final = 0.0  # the answer to the commit that completes the run
        self.renewals = 0

    def commit_runs(
        self, commits: Sequence[tuple[ms.storage.Execution, str]]
    ) -> tuple[ms.storage._seam.CommitOutcome | Exception, ...]:
        results = super().commit_runs(commits)
        delay, self.late_commit = self.late_commit, 0.0
        if any(execution.status == "completed" for execution, _ in commits):
            delay, self.late_final = delay + self.late_final, 0.0
        self.runner_clock.advance(delay)
        return results

    def renew_many(self, renewals: Any) -> Any:
        results = super().renew_many(renewals)
        self.renewals += 1
        delay, self.late_renewal = self.late_renewal, 0.0
        self.runner_clock.advance(delay)
        return results


def chain() -> ms.Plan:
    return plan_of(
        tool("first", "mark", step="first"), tool("second", "mark", "first", step="second")
    )


def marking(ledger: Ledger, on_first: Any = None) -> dict[str, Any]:
    async def mark(step: str) -> str:
        ledger.add("tool", step)
        if step == "first" and on_first is not None:
            on_first()
        return step

    return {"mark": mark}


def test_l5_the_margin_is_a_fifth_of_the_lease_and_at_least_a_quarter_second() -> None:
    assert lease_margin(15.0) == 3.0
    assert lease_margin(1.0) == MIN_MARGIN
    assert lease_margin(600.0) == 120.0


def test_l5_a_renewal_counts_from_when_it_was_sent_and_a_late_answer_counts_not_at_all() -> None:
    clock = FakeClock()
    watch = LeaseWatch(10.0, clock)
    assert not watch.fresh()  # nothing confirmed yet: the first commit confirms it
    sent = watch.sent()
    clock.advance(1.0)
    assert watch.confirmed(sent)
    clock.advance(6.9)  # 7.9 s after it was sent: within 10 - 2
    assert watch.fresh()
    clock.advance(0.2)  # 8.1 s: stale, a renewal is needed before new work
    assert not watch.fresh()
    sent = watch.sent()
    clock.advance(8.0)  # the answer took the whole usable lease
    assert not watch.confirmed(sent)
    assert not watch.fresh()  # and it confirms nothing


async def test_l5_a_commit_answered_after_the_lease_could_lapse_stops_the_run_before_its_next_step(
    tmp_path: Path,
) -> None:
    """The completion of ``first`` lands, but its answer comes a whole lease later: the run
    stops with LeaseLost and ``second`` never starts here; another runtime that takes the
    run over runs ``second`` once and ``first`` not again."""
    clock = FakeClock()
    store = LateAnswers(tmp_path / "store.sqlite3", clock, store_clock=moving_with(clock))
    ledger = Ledger()

    def answer_late() -> None:
        store.late_commit = TTL  # the commit of first's completion

    async with runtime(
        store, ledger, tools=marking(ledger, answer_late), lease_clock=clock, **QUIET
    ) as rt:
        handle = await rt.start("late", chain(), execution_id="ex-late")
        with anyio.fail_after(30):
            result = await handle.wait()
    assert isinstance(result.stopped_by, ms.LeaseLost), result.stopped_by
    assert "answer came" in result.stopped_by.detail
    assert ledger.names() == ["first"]  # second never started on a lease not known live
    record = store.get("ex-late")
    assert record is not None
    assert record.completed_steps == ("first",)  # what was committed stays committed
    store.close()

    # Another host, on a store whose clock is past the old lease, takes the run over.
    later = ms.storage.SqliteStore(tmp_path / "store.sqlite3", clock=lambda: time.time() + 60)
    async with runtime(later, ledger, tools=marking(ledger)) as other:
        with anyio.fail_after(30):
            resumed = await (await other.resume("ex-late")).wait()
    assert resumed.status == "completed", resumed.error
    assert ledger.names() == ["first", "second"]  # each step ran once


async def test_l5_a_late_answer_to_the_commit_that_ends_the_run_lets_it_end_as_committed(
    tmp_path: Path,
) -> None:
    """The final commit lands and its answer comes late: nothing more starts after it, so
    the run ends as committed (completed, stopped by Stop), not with LeaseLost."""
    clock = FakeClock()
    store = LateAnswers(tmp_path / "store.sqlite3", clock)
    store.late_final = TTL
    ledger = Ledger()
    async with runtime(store, ledger, tools=marking(ledger), lease_clock=clock, **QUIET) as rt:
        handle = await rt.start("late end", chain(), execution_id="ex-end")
        with anyio.fail_after(30):
            result = await handle.wait()
    assert result.status == "completed", result.stopped_by
    assert isinstance(result.stopped_by, ms.Stop), result.stopped_by
    assert store.late_final == 0.0  # the late answer did happen
    assert ledger.names() == ["first", "second"]
    store.close()


async def test_l5_a_heartbeat_answered_too_late_stops_the_run_and_its_running_step(
    tmp_path: Path,
) -> None:
    """A step runs; a heartbeat's answer comes a whole lease after it was sent. The run
    stops with LeaseLost at once: the running step is cancelled and its dependent never
    starts."""
    clock = FakeClock()
    store = LateAnswers(tmp_path / "store.sqlite3", clock, store_clock=moving_with(clock))
    ledger = Ledger()
    entered = anyio.Event()
    reasons: list[ms.CancelReason | None] = []

    async def park(**_: Any) -> str:
        ledger.add("tool", "park")
        store.late_renewal = TTL
        entered.set()
        try:
            await anyio.sleep_forever()
        except BaseException:
            reasons.append(ms.cancel_reason())
            raise
        return "unreachable"  # pragma: no cover

    plan = plan_of(tool("park", "park"), tool("after", "inc", "park", x=1))
    async with runtime(
        store,
        ledger,
        tools={"park": park},
        lease_clock=clock,
        lease_ttl=TTL,
        heartbeat_interval=0.05,
    ) as rt:
        handle = await rt.start("late heartbeat", plan, execution_id="ex-hb")
        with anyio.fail_after(30):
            await entered.wait()
            result = await handle.wait()
    assert isinstance(result.stopped_by, ms.LeaseLost), result.stopped_by
    assert ledger.names() == ["park"]
    assert len(reasons) == 1
    root = reasons[0].root if reasons[0] is not None else None
    assert isinstance(root, ms.LeaseLost), reasons
    store.close()


async def test_l5_a_lease_gone_stale_between_steps_is_renewed_before_the_next_step_starts(
    tmp_path: Path,
) -> None:
    """A step waits to be retried while no heartbeat comes (the holder's clock jumps past
    the lease meanwhile, as after a long pause): before the retry starts, the lease is
    renewed, on time, and the run goes on to complete."""
    clock = FakeClock()
    store = LateAnswers(tmp_path / "store.sqlite3", clock)
    ledger = Ledger()
    calls = 0
    renewals_before: list[int] = []

    async def flaky(**_: Any) -> str:
        nonlocal calls
        calls += 1
        ledger.add("tool", f"flaky:{calls}")
        if calls == 1:
            raise ConnectionError("boom")
        return "ok"

    async def advance_on_retry(rt: ms.Runtime) -> None:
        async with contextlib.aclosing(rt.events()) as stream:  # type: ignore[type-var]
            async for event in stream:
                if type(event).__name__ == "StepRetrying":
                    renewals_before.append(store.renewals)
                    clock.advance(10 * 600.0)  # between the failure's commit and the retry
                    return

    plan = plan_of(ms.PlanStep(id="f", tool="flaky"))
    # The watcher moves the clock before the retry whatever the machine's load: the
    # StepRetrying that wakes it is published before the backoff's timer is even set, so
    # the watcher (one step of a task already runnable) runs well before the timer fires
    # and its message reaches the runner (several steps later); the backoff (0.25 s) only
    # has to outlast one pass of the event loop.
    policy = RetryPolicy(max_attempts=2, base_delay=0.25, max_delay=0.25, jitter=0.0)
    async with (
        runtime(
            store,
            ledger,
            tools={"flaky": flaky},
            lease_clock=clock,
            retries={"tool": policy},
            lease_ttl=600.0,
            heartbeat_interval=500.0,
        ) as rt,
        anyio.create_task_group() as tg,
    ):
        before = rt._bus.subscribers
        tg.start_soon(advance_on_retry, rt)
        while rt._bus.subscribers == before:  # subscribed: nothing published is missed
            await anyio.lowlevel.checkpoint()
        handle = await rt.start("stale", plan, execution_id="ex-stale")
        with anyio.fail_after(60):
            result = await handle.wait()
    assert result.status == "completed", (result.status, result.stopped_by)
    assert ledger.names() == ["flaky:1", "flaky:2"]
    assert renewals_before, "the retry was announced"
    assert store.renewals > renewals_before[0]  # the lease was renewed before the retry
    store.close()


# -- on PostgreSQL: the answer to a COMMIT held by the network -------------------------------

STEPS = [f"s{k:02d}" for k in range(4)]


def _through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition("@")
    userinfo = netloc[0] + "@" if netloc[1] else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}127.0.0.1:{port}"))


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    parts = urllib.parse.urlsplit(require_server())
    tcp = TcpProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    yield tcp
    tcp.close()


async def test_l5_a_commit_answered_after_another_host_took_over_never_runs_a_step_twice(
    postgres_url: str,
    proxy: TcpProxy,
) -> None:
    """Host A (2 s lease) commits step s01's completion; the COMMIT lands, but the network
    holds its answer. A's lease lapses, host B takes the run over and finishes it; then A
    gets its "ok". Before L5, A took it and started s02 again (6 of 6 in the report): a
    committed step ran twice. Now A stops with LeaseLost and every step ran once."""
    ran: collections.Counter[str] = collections.Counter()

    async def mark(step: str) -> str:
        ran[step] += 1
        return f"{step}:done"

    tools = {"mark": mark}
    plan = ms.Plan(
        id="held",
        goal="held answer",
        steps=tuple(
            ms.PlanStep(
                id=step,
                tool="mark",
                input={"step": step},
                depends_on=(STEPS[k - 1],) if k else (),
            )
            for k, step in enumerate(STEPS)
        ),
    )
    proxy.hold_answer(b"s01:done")  # the commit of s01's output, by A (through the proxy)
    async with ms.open_runtime(
        store=_through(postgres_url, proxy.port), tools=tools, lease_ttl=2.0, owner="host-a"
    ) as a:
        handle_a = await a.start("held answer", plan, execution_id="ex-held")
        assert await anyio.to_thread.run_sync(proxy.holding.wait, 60)
        # B's lease is long: only A's has to lapse, and B must not lose its own to a
        # loaded machine before it finishes.
        async with ms.open_runtime(store=postgres_url, tools=tools, lease_ttl=10.0) as b:
            with anyio.fail_after(60):  # A's lease lapses on the server's clock
                while True:
                    try:
                        handle_b = await b.resume("ex-held")
                        break
                    except ms.ExecutionBusy:
                        await anyio.sleep(0.1)
                result_b = await handle_b.wait()
        assert result_b.status == "completed", result_b.error
        proxy.release()  # A's "ok" arrives, a whole lease late
        with anyio.fail_after(60):
            result_a = await handle_a.wait()
    assert isinstance(result_a.stopped_by, ms.LeaseLost), result_a.stopped_by
    assert ran == dict.fromkeys(STEPS, 1)  # nothing committed ran twice


async def test_l5_a_commit_is_no_renewal_so_a_step_never_starts_after_the_stores_lease_lapsed(
    tmp_path: Path,
) -> None:
    """A commit keeps the lease on disk as it is (only a heartbeat extends it), so its answer
    proves nothing of the lease's end. A step fails 3 s into a 5 s lease (its failure is
    committed on time); its retry waits until the lease lapsed on the store's clock too. The
    retry must not start: before L5 counted commits as renewals it ran on a lapsed lease."""
    clock = FakeClock()
    store_clock = moving_with(clock)
    store = LateAnswers(tmp_path / "store.sqlite3", clock, store_clock=store_clock)
    ledger = Ledger()
    live_at_start: list[bool] = []

    async def flaky(**_: Any) -> str:
        record = store.get("ex-commit")
        assert record is not None
        live_at_start.append(ms.storage._seam.holder(record.lease, store_clock()) is not None)
        ledger.add("tool", f"flaky:{len(live_at_start)}")
        if len(live_at_start) == 1:
            clock.advance(3.0)  # a slow first attempt, well within the lease
            raise ConnectionError("boom")
        return "ok"

    async def advance_on_retry(rt: ms.Runtime) -> None:
        async with contextlib.aclosing(rt.events()) as stream:  # type: ignore[type-var]
            async for event in stream:
                if type(event).__name__ == "StepRetrying":
                    clock.advance(2.5)  # the backoff outlasts the lease (5 s from its renewal)
                    return

    plan = plan_of(ms.PlanStep(id="f", tool="flaky"))
    # The backoff runs on the real clock; the lease on the fake one, which the watcher
    # moves before the retry (see the test above: it is woken before the backoff's timer
    # is set, so 0.25 s is one pass of the event loop many times over).
    policy = RetryPolicy(max_attempts=2, base_delay=0.25, max_delay=0.25, jitter=0.0)
    async with (
        runtime(
            store,
            ledger,
            tools={"flaky": flaky},
            lease_clock=clock,
            retries={"tool": policy},
            **QUIET,
        ) as rt,
        anyio.create_task_group() as tg,
    ):
        before = rt._bus.subscribers
        tg.start_soon(advance_on_retry, rt)
        while rt._bus.subscribers == before:
            await anyio.lowlevel.checkpoint()
        handle = await rt.start("commit", plan, execution_id="ex-commit")
        with anyio.fail_after(60):
            result = await handle.wait()
    assert all(live_at_start), live_at_start  # no attempt ever started on a lapsed lease
    assert isinstance(result.stopped_by, ms.LeaseLost), (result.status, result.stopped_by)
    assert ledger.names() == ["flaky:1"]
    store.close()


async def test_l5_a_late_answer_while_the_store_still_holds_the_lease_lets_the_run_go_on(
    tmp_path: Path,
) -> None:
    """The answer to first's commit reaches a busy holder a whole lease after it was sent
    (a blocked event loop, a loaded machine), but on the store's clock the lease never
    lapsed. A renewal, fenced by the lease's epoch, proves nobody took the run meanwhile:
    the run goes on and completes instead of failing with a LeaseLost nobody caused."""
    clock = FakeClock()
    store = LateAnswers(tmp_path / "store.sqlite3", clock)  # the store's clock: wall time
    ledger = Ledger()

    def answer_late() -> None:
        store.late_commit = TTL  # the commit of first's completion

    async with runtime(
        store, ledger, tools=marking(ledger, answer_late), lease_clock=clock, **QUIET
    ) as rt:
        handle = await rt.start("busy", chain(), execution_id="ex-busy")
        with anyio.fail_after(30):
            result = await handle.wait()
    assert result.status == "completed", (result.status, result.stopped_by)
    assert ledger.names() == ["first", "second"]
    store.close()


async def test_l5_answers_that_keep_coming_late_stop_the_run_with_lease_lost(
    tmp_path: Path,
) -> None:
    """Every renewal is answered a whole lease late (the holder's clock only): the store
    grants them, but none can be counted on, so after a few tries the run stops with
    LeaseLost before its next step; it never loops on renewals."""
    clock = FakeClock()
    store = LateAnswers(tmp_path / "store.sqlite3", clock)
    ledger = Ledger()

    def answer_late() -> None:
        store.late_commit = TTL

    original = store.renew_many

    def late_renewals(renewals: Any) -> Any:
        if store.late_commit == 0.0 and ledger.names():  # after first's late commit
            store.late_renewal = TTL
        return original(renewals)

    store.renew_many = late_renewals  # type: ignore[method-assign]
    async with runtime(
        store, ledger, tools=marking(ledger, answer_late), lease_clock=clock, **QUIET
    ) as rt:
        handle = await rt.start("late", chain(), execution_id="ex-always")
        with anyio.fail_after(30):
            result = await handle.wait()
    assert isinstance(result.stopped_by, ms.LeaseLost), (result.status, result.stopped_by)
    assert "answer came" in result.stopped_by.detail
    assert ledger.names() == ["first"]
    store.close()


@pytest.mark.parametrize("call", ["tool", "skill", "step"])
async def test_l5_an_agent_starts_no_side_effect_after_its_runs_lease_lapsed(
    tmp_path: Path, call: str
) -> None:
    """An agent's first tool call takes longer than the lease (no save meanwhile, no
    heartbeat): the lease lapses on the store's clock too. Its next tool call, model call
    or durable step must not start; the run stops with LeaseLost. Before, nothing between
    an agent's saves looked at the lease."""
    clock = FakeClock()
    store = LateAnswers(tmp_path / "store.sqlite3", clock, store_clock=moving_with(clock))
    ledger = Ledger()

    async def slow(**_: Any) -> str:
        ledger.add("tool", "slow")
        clock.advance(TTL + 1.0)  # a long call: the lease lapses on every clock
        return "slow"

    async def after(**_: Any) -> str:
        ledger.add("tool", "after")
        return "after"

    async def worker(ctx: ms.AgentContext, _input: Any) -> str:
        await ctx.call_tool("slow")
        if call == "tool":
            await ctx.call_tool("after")
        elif call == "skill":
            await ctx.call_skill("after")
        else:
            await ctx.step("after", after)
        return "done"

    plan = plan_of(ms.PlanStep(id="a", agent="worker"))
    async with runtime(
        store,
        ledger,
        tools={"slow": slow, "after": after},
        skills={"after": after},
        agents={"worker": worker},
        lease_clock=clock,
        **QUIET,
    ) as rt:
        handle = await rt.start("agent", plan, execution_id="ex-agent")
        with anyio.fail_after(30):
            result = await handle.wait()
    assert ledger.names() == ["slow"], ledger.names()  # nothing started on the lapsed lease
    assert isinstance(result.stopped_by, ms.LeaseLost), (result.status, result.stopped_by)
    store.close()


@pytest.mark.parametrize(
    "clock",
    [lambda: None, lambda: "1.0", lambda: float("nan"), lambda: True, 5],
    ids=["none", "text", "nan", "bool", "not-callable"],
)
async def test_l5_a_lease_clock_that_does_not_answer_seconds_is_refused_at_open(
    tmp_path: Path, clock: Any
) -> None:
    """A lease clock that answers something other than a finite number of seconds (a
    datetime, None, NaN) is refused when the runtime opens; before, only its type was
    checked (callable), and every run crashed at its first renewal."""
    with pytest.raises(TypeError, match="lease_clock"):
        async with runtime(tmp_path, lease_clock=clock):
            pass  # pragma: no cover - refused before


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="no CLOCK_BOOTTIME here")
async def test_l5_the_default_lease_clock_goes_on_while_the_machine_is_suspended(
    tmp_path: Path,
) -> None:
    """time.monotonic stands still through a suspend: a laptop or VM resumed an hour later
    would find its lease "fresh" and start its next step on a lease that lapsed an hour
    ago. The runtime's default lease clock is CLOCK_BOOTTIME, which counts the suspend."""
    from mainspring.executions._run import lease_guard as _lease_guard

    stamp = _lease_guard.lease_clock()
    assert abs(stamp - time.clock_gettime(time.CLOCK_BOOTTIME)) < 5.0
    assert LeaseWatch(5.0)._clock is _lease_guard.lease_clock
    async with runtime(tmp_path) as rt:
        assert rt._cfg.lease_clock is _lease_guard.lease_clock


# ----------------------------------------------------------------------
# Leases on the server's clock, never a host's (L4: "whatever the writer's clock says").


async def test_L4_a_host_whose_clock_is_an_hour_behind_can_still_run_a_plan(
    postgres_url: str,
) -> None:
    """Host A's wall clock is an hour slow; the server's is right. A starts a three-step plan
    of instant tools: nothing else touches the store, so it must complete. ``rt.start``
    writes the first lease as ``time.time() + lease_ttl`` on A's clock
    (executions/_runtime.py ``Lease(owner=..., expires_at=now + cfg.lease_ttl)``), which the
    server's clock sees as lapsed an hour ago: A's first commit is refused as a lost lease."""
    a = Host(postgres_url, "ex-skew", skew=-3600.0, block=False)
    try:
        line = await a.next_line()
    finally:
        await anyio.to_thread.run_sync(a.finish)
    assert line == "ended completed Stop"  # as every run that ends by itself


async def test_L4_a_host_whose_clock_is_an_hour_ahead_leaves_no_hour_long_lease_behind(
    postgres_url: str,
) -> None:
    """Host A's clock is an hour fast. It starts a run and dies before its first heartbeat
    (SIGKILL while its first step is parked; a 60 s heartbeat). On the server's clock its
    lease must lapse after ``lease_ttl`` (120 s) — but the lease was written on A's clock, so
    it is live for an hour and two minutes: no ``recover()`` can take the orphan for an hour."""
    a = Host(postgres_url, "ex-ahead", skew=3600.0)
    try:
        assert await a.next_line() == "entered"
    finally:
        await anyio.to_thread.run_sync(a.finish)  # SIGKILL: A is gone

    def read() -> tuple[ms.storage.Execution | None, float]:
        store = ms.storage.PostgresStore(postgres_url)
        try:
            return store.get("ex-ahead"), server_clock()
        finally:
            store.close()

    record, server_now = await anyio.to_thread.run_sync(read)
    assert record is not None
    assert record.lease is not None
    # The lease may not outlive its ttl (120 s) on the server's clock.
    assert record.lease.expires_at <= server_now + 120.0 + 5.0


def server_clock() -> float:
    import psycopg

    with psycopg.connect(server_url()) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def _doctor(url: str, skew: float) -> tuple[int, str]:
    import subprocess
    import sys

    script = (
        "import sys, time; real = time.time; "
        f"time.time = lambda: real() + {skew!r}; "
        "from mainspring.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "doctor", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


async def test_L4_mainspring_doctor_on_a_host_with_a_fast_clock_does_not_call_a_live_run_orphaned(
    postgres_url: str,
) -> None:
    """Host A runs (its lease live on the server's clock for two minutes). ``mainspring
    doctor`` run on a host whose clock is an hour fast decides liveness on its own clock
    (cli/_reads.py ``_doctor``: ``holder(e.lease, time.time())``) and reports A's live run
    "orphaned", advising to resume it elsewhere."""
    a = Host(postgres_url, "ex-live")
    try:
        assert await a.next_line() == "entered"
        _, right = await anyio.to_thread.run_sync(_doctor, postgres_url, 0.0)
        _, fast = await anyio.to_thread.run_sync(_doctor, postgres_url, 3600.0)
    finally:
        await anyio.to_thread.run_sync(a.finish)
    assert "orphaned" not in right, right
    assert "orphaned" not in fast, fast
