"""The conftest's guard fails an async test that blocks the event loop, on both backends, and
passes one that another process merely slowed down."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests import _loop_guard

pytest_plugins = ["pytester"]

CONFTEST = pathlib.Path(__file__).with_name("conftest.py").read_text()


def _run_inner(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest("-p", "anyio", "-q", "-p", "no:cacheprovider", "--no-cov")


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
