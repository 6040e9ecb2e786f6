"""The blocked-loop guard (tests/_loop_guard.py) against what a skeptical review threw at it:
sleeping while worker threads compute, joining threads, CPU and sleep in one step, nested
loops, descriptors, modules with their own backend fixture, async fixtures.

The meter is driven directly here (these are sync tests, so the conftest does not arm one of
its own), or through pytester with the repo's conftest for the fixture-level behaviour."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

import anyio
import pytest

from tests import _loop_guard

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFTEST = pathlib.Path(__file__).with_name("conftest.py").read_text()
BACKENDS = ["asyncio", "trio"]

_loop_guard.install_asyncio_hook()


def _metered(backend: str, fn: Callable[[], Awaitable[None]]) -> list[str]:
    """Run ``fn`` on ``backend`` under an armed meter (the conftest's limits); the flags."""
    limit = _loop_guard.DEFAULT_LIMIT
    meter = _loop_guard.StepMeter(limit=limit)
    _loop_guard.arm(meter)
    try:
        options = {"instruments": [_loop_guard.trio_instrument()]} if backend == "trio" else {}
        anyio.run(fn, backend=backend, backend_options=options)
    finally:
        _loop_guard.disarm()
    return meter.flagged


def _hash_for(seconds: float) -> None:
    """CPU-bound work that releases the GIL, as hashlib/zlib/numpy/sqlite do."""
    data = b"x" * (1 << 20)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        hashlib.sha256(data).digest()


def _hashers(seconds: float, count: int = 3) -> list[threading.Thread]:
    threads = [threading.Thread(target=_hash_for, args=(seconds,)) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


# -- false negatives ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_sleeping_on_the_loop_while_worker_threads_compute_is_flagged(backend: str) -> None:
    """``other_threads_cpu = process_time - cpu`` is subtracted from the step's off-CPU time
    as if it were GIL waiting. But threads that do not need the GIL (or that take it while
    the loop thread sleeps) run *in parallel*: a 0.6 s ``time.sleep`` on the loop while any
    worker computes (a to_thread hash, a zlib, a sqlite query) is never flagged.
    Fixed: only forgive off-CPU time the loop thread spent *waiting for the GIL* (unknowable
    from schedstat), i.e. do not subtract other threads' CPU from a sleeping step; at most
    cap the credit at the step's own CPU (GIL hand-offs happen only while it runs)."""

    async def step() -> None:
        workers = _hashers(1.0)
        await anyio.lowlevel.checkpoint()
        time.sleep(0.6)  # noqa: ASYNC251 - blocks the loop for 0.6 s
        await anyio.lowlevel.checkpoint()
        for worker in workers:
            await anyio.to_thread.run_sync(worker.join)

    assert _metered(backend, step), "a 0.6 s time.sleep on the loop went unnoticed"


@pytest.mark.parametrize("backend", BACKENDS)
def test_joining_a_busy_thread_on_the_loop_is_flagged(backend: str) -> None:
    """The classic loop blocker: waiting synchronously (``thread.join()``,
    ``future.result()``, a lock held by a worker) for a thread that is computing. The loop
    is frozen for 0.8 s, and the worker's CPU is charged to "the GIL's holders"."""

    async def step() -> None:
        workers = _hashers(0.8)
        await anyio.lowlevel.checkpoint()
        for worker in workers:
            worker.join()  # blocks the loop until the workers are done
        await anyio.lowlevel.checkpoint()

    assert _metered(backend, step), "a 0.8 s thread.join() on the loop went unnoticed"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_that_blocks_on_cpu_and_in_sleep_is_flagged(backend: str) -> None:
    """CPU and sleep are judged against separate budgets: a step that spins 0.2 s and then
    sleeps 0.2 s held the loop 0.4 s (not preempted) yet is under both. The old wall-clock
    rule flagged it. Fixed: flag ``cpu + asleep > limit`` (the time the loop was held, minus
    preemption), keeping the CPU-only rule as the message."""

    async def step() -> None:
        started = time.thread_time()
        while time.thread_time() - started < 0.2:
            pass
        time.sleep(0.2)  # noqa: ASYNC251 - the blocking this guard must catch
        await anyio.lowlevel.checkpoint()

    assert _metered(backend, step), "a step holding the loop 0.4 s went unnoticed"


def test_a_trio_step_that_runs_a_nested_asyncio_loop_is_still_judged() -> None:
    """One meter per thread, not re-entrant: a trio task that calls sync code which runs
    its own asyncio loop (``asyncio.run``, ``anyio.run``, a sync SDK wrapper; e.g. calling
    ``mainspring.cli.main`` for a control command from a trio test) has every inner
    Handle call ``meter.start()``/``stop()``, which leaves ``_open`` False: the outer trio
    step's ``stop`` returns without judging. The trio loop was blocked 0.6 s here.
    Fixed: keep a depth counter (or a stack of start snapshots) so nested steps do not
    clobber the outer one; ignore inner steps while an outer one is open."""

    async def step() -> None:
        time.sleep(0.6)  # noqa: ASYNC251 - the blocking this guard must catch
        asyncio.run(asyncio.sleep(0))
        await anyio.lowlevel.checkpoint()

    assert _metered("trio", step), "a 0.6 s sleep in a trio step went unnoticed"


# -- state leaking between tests ---------------------------------------------------------------


def test_arming_a_meter_leaks_no_file_descriptor() -> None:
    """``_schedstat_reader`` opens /proc/self/task/<tid>/schedstat and never closes it: one
    descriptor leaks per guarded test (414 async test items in the suite today; more under
    tests/stress.sh or ``--count``). Where RLIMIT_NOFILE is 1024 (a common default) a long
    session hits EMFILE, and from then on every new meter silently falls back to the
    imprecise 4x rule (the OSError is swallowed) before asyncio itself fails to make its
    self-pipe. Fixed: open the fd once per thread at module level (cache by native id), or
    give StepMeter a close() that disarm() calls."""
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        _loop_guard.arm(_loop_guard.StepMeter(limit=0.25))
        _loop_guard.disarm()
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) - before < 5


def _run_inner(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest("-p", "anyio", "-q", "-p", "no:cacheprovider", "--no-cov")


def test_a_module_that_overrides_anyio_backend_is_refused_on_trio_rather_than_unguarded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trio meter is an instrument passed only in the conftest's ``anyio_backend``
    options; the asyncio one is a global patch. A module that overrides ``anyio_backend``
    (tests/actors/test_soak.py, tests/runtime/test_scale.py and tests/supervision/
    test_soak.py do, with plain "asyncio"/"trio") is armed and metered on asyncio but
    silently unmetered on trio: the same time.sleep fails one backend and passes the other.
    Fixed: in the autouse fixture, fail (or add the instrument) when the backend is trio and
    its options lack _TRIO_STEPS; or install it via trio.lowlevel.add_instrument in the
    first step."""
    monkeypatch.delenv("MAINSPRING_LOOP_GUARD_LIMIT", raising=False)
    result = _run_inner(
        pytester,
        """
import time
import anyio
import pytest

pytestmark = pytest.mark.anyio

@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param

async def test_blocks() -> None:
    time.sleep(0.4)
    await anyio.sleep(0)
""",
    )
    # asyncio: guarded (the call passes, teardown fails); trio: refused before it runs.
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*runs trio without the loop guard's instrument*"])


# -- behaviour that held up ------------------------------------------------------------


def test_blocking_in_async_fixture_setup_and_teardown_is_flagged(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MAINSPRING_LOOP_GUARD_LIMIT", raising=False)
    result = _run_inner(
        pytester,
        """
import time
import anyio
import pytest

pytestmark = pytest.mark.anyio

@pytest.fixture
async def blocks_in_setup():
    time.sleep(0.4)
    yield

@pytest.fixture
async def blocks_in_teardown():
    yield
    time.sleep(0.4)

async def test_setup(blocks_in_setup) -> None:
    await anyio.sleep(0)

async def test_teardown(blocks_in_teardown) -> None:
    await anyio.sleep(0)

async def test_blocks_in_a_to_thread_done_callback_free() -> None:
    await anyio.to_thread.run_sync(time.sleep, 0.4)  # off the loop: fine

async def test_portal_loops_in_other_threads_are_not_charged() -> None:
    def in_thread():
        with anyio.from_thread.start_blocking_portal() as portal:
            portal.call(anyio.sleep, 0.01)
            portal.call(lambda: time.sleep(0.4))  # that loop's business, not this one's
    await anyio.to_thread.run_sync(in_thread)

def test_sync_with_anyio_run() -> None:
    async def main():
        time.sleep(0.4)  # noqa: ASYNC251 - the same pause, outside a collection
    anyio.run(main)  # a sync test is not guarded: no crash either
""",
    )
    result.assert_outcomes(passed=9, errors=4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gc_callbacks_do_not_grow_and_nothing_stays_armed(backend: str) -> None:
    callbacks = len(gc.callbacks)

    async def step() -> None:
        await anyio.to_thread.run_sync(time.sleep, 0.3)  # off the loop: not flagged
        for _ in range(3):
            gc.collect()
            await anyio.lowlevel.checkpoint()

    for _ in range(5):
        assert _metered(backend, step) == []
    assert len(gc.callbacks) == callbacks
    assert _loop_guard._armed is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_held_up_by_garbage_collection_is_not_flagged(backend: str) -> None:
    """A full collection runs inside whichever step allocated last and lasts as long as the
    heap every earlier test left behind: it is charged to no step (it failed a supervisor
    test once, 0.27 s of a 0.27 s step being the collector). Here the collection is made
    slow by a callback of its own; the same pause outside a collection is flagged."""

    def slow_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            time.sleep(0.4)

    async def collects() -> None:
        gc.callbacks.append(slow_collection)  # after the meter's own: inside its window
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(slow_collection)

    async def sleeps() -> None:
        time.sleep(0.4)  # noqa: ASYNC251 - the same pause, outside a collection

    assert _metered(backend, collects) == []
    assert _metered(backend, sleeps) != []


# ----------------------------------------------------------------------
# The conftest's guard fails an async test that blocks the event loop, on both backends, and
# passes one that another process merely slowed down.


@pytest.fixture(autouse=True)
def _default_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAINSPRING_LOOP_GUARD_LIMIT", raising=False)


def test_a_test_that_sleeps_on_the_loop_fails(pytester: pytest.Pytester) -> None:
    result = _run_inner(
        pytester,
        """
import time
import anyio
import pytest

pytestmark = pytest.mark.anyio

async def test_blocks() -> None:
    time.sleep(0.4)  # blocking work on the event loop
    await anyio.sleep(0)

async def test_behaves() -> None:
    await anyio.sleep(0.01)
""",
    )
    # The blocking test passes its call and errors in teardown, on each backend.
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(["*test_blocks?asyncio?*", "*test_blocks?trio?*"])
    result.stdout.fnmatch_lines(["*the event loop was blocked*slept 0.4* in blocking calls*"])


def test_a_test_that_spins_the_cpu_on_the_loop_fails(pytester: pytest.Pytester) -> None:
    result = _run_inner(
        pytester,
        """
import time
import anyio
import pytest

pytestmark = pytest.mark.anyio

async def test_spins() -> None:
    started = time.thread_time()
    while time.thread_time() - started < 0.4:  # 0.4 s of CPU without yielding
        pass
    await anyio.sleep(0)
""",
    )
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(["*the event loop was blocked*ran 0.4* of CPU without yielding*"])


@pytest.fixture
def cpu_hogs() -> Iterator[None]:
    """Two busy processes per core, for the length of the test."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


# A load test: its hogs take every core for seconds, which slows every other test running
# beside it in the default run's workers; CI's slow suite runs it alone.
@pytest.mark.slow
@pytest.mark.skipif(
    not _loop_guard.StepMeter(limit=1).precise,
    reason="needs /proc/<tid>/schedstat to tell preemption from sleep",
)
@pytest.mark.usefixtures("cpu_hogs")
def test_a_healthy_test_passes_while_every_core_is_hogged(
    pytester: pytest.Pytester, tmp_path: pathlib.Path
) -> None:
    walls = tmp_path / "walls"
    result = _run_inner(
        pytester,
        f"""
import time
import anyio
import pytest

pytestmark = pytest.mark.anyio

async def test_works_hard_but_yields() -> None:
    # Steps of 0.15 s of CPU each, under the limit; the hogs stretch each one's wall time.
    for _ in range(4):
        wall, started = time.perf_counter(), time.thread_time()
        while time.thread_time() - started < 0.15:
            pass
        with open({str(walls)!r}, "a") as out:
            out.write(f"{{time.perf_counter() - wall}}\\n")
        await anyio.sleep(0.01)
""",
    )
    result.assert_outcomes(passed=2)
    # The hogs did preempt the test: by the wall clock alone its steps would have looked
    # blocked (the old rule); measured by CPU and sleep, they are not.
    longest = max(float(line) for line in walls.read_text().split())
    assert longest > _loop_guard.DEFAULT_LIMIT


LIMITS = {"limit": 0.25}


def test_the_rule_flags_cpu_burnt_in_one_step() -> None:
    why = _loop_guard.judge(wall=0.6, cpu=0.5, runnable=0.1, other_threads_cpu=0.0, **LIMITS)
    assert why is not None
    assert "ran 0.500 s of CPU" in why


def test_the_rule_flags_sleeping_in_one_step() -> None:
    why = _loop_guard.judge(wall=0.5, cpu=0.001, runnable=0.0, other_threads_cpu=0.0, **LIMITS)
    assert why is not None
    assert "slept 0.499 s" in why
    # CPU and sleep add up: neither alone is over the limit, together they held the loop.
    why = _loop_guard.judge(wall=0.4, cpu=0.2, runnable=0.0, other_threads_cpu=0.0, **LIMITS)
    assert why is not None
    assert "held the event loop 0.400 s" in why


def test_the_rule_does_not_credit_parallel_work_of_other_threads_to_a_sleeper() -> None:
    # 0.6 s asleep while three threads hashed in parallel: at most the GIL slack is credited.
    why = _loop_guard.judge(wall=0.6, cpu=0.0, runnable=0.0, other_threads_cpu=1.8, **LIMITS)
    assert why is not None


def test_the_rule_forgives_preemption() -> None:
    # Runnable but waiting for a core (another process had it): not this step's fault.
    assert (
        _loop_guard.judge(wall=2.0, cpu=0.2, runnable=1.8, other_threads_cpu=0.0, **LIMITS) is None
    )


def test_the_rule_forgives_waiting_for_the_gil_while_other_threads_run() -> None:
    assert (
        _loop_guard.judge(wall=0.4, cpu=0.15, runnable=0.05, other_threads_cpu=0.6, **LIMITS)
        is None
    )


def test_without_schedstat_only_a_long_time_off_the_cpu_is_flagged() -> None:
    assert (
        _loop_guard.judge(wall=0.9, cpu=0.05, runnable=None, other_threads_cpu=0.0, **LIMITS)
        is None
    )
    assert (
        _loop_guard.judge(wall=1.5, cpu=0.05, runnable=None, other_threads_cpu=0.0, **LIMITS)
        is not None
    )
    why = _loop_guard.judge(wall=0.4, cpu=0.3, runnable=None, other_threads_cpu=0.0, **LIMITS)
    assert why is not None


def test_the_limit_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _loop_guard.configured_limit() == _loop_guard.DEFAULT_LIMIT
    monkeypatch.setenv("MAINSPRING_LOOP_GUARD_LIMIT", "0.5")
    assert _loop_guard.configured_limit() == 0.5
    monkeypatch.setenv("MAINSPRING_LOOP_GUARD_LIMIT", "0")
    with pytest.raises(ValueError, match="must be positive"):
        _loop_guard.configured_limit()
