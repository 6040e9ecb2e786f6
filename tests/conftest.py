"""Shared fixtures: every async test runs once on asyncio and once on trio, and fails if it
blocked the event loop (STYLE.md, habit 10).

The guard (``tests/_loop_guard.py``) charges each asyncio callback and trio task step with its
thread's CPU time and its time asleep, so a test that calls ``time.sleep`` or spins fails,
while a test merely slowed by another process or by coverage's tracing passes.
``MAINSPRING_LOOP_GUARD_LIMIT`` (seconds, default 0.25) sets the limit.

Property tests draw a quarter of their examples in the default run (Hypothesis profile
``quick``) and all of them with ``HYPOTHESIS_PROFILE=thorough``, which ``.ci/run`` uses; see
``tests/_examples.py``, which also says why the default run does not explain a failure and
which tests get a longer timeout.

A test whose size is the point (thousands of steps, every byte of a journal, a plan of 8,200
steps) is marked ``untraced``: coverage is stopped while it runs. It runs lines that smaller
tests cover too, and coverage's tracing took two to three times its CPU time in a run with
coverage (``.ci/run``'s, or ``pytest --cov=mainspring``). (pytest-cov's own ``no_cover``
does not do it under xdist: a worker holds two coverage instances, and stopping one resumes
the other.)
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests import _bytecode as _bytecode  # addopts' ``-p`` loads it first: see its docstring
from tests import _examples, _loop_guard


def _temp_in_memory() -> None:
    """Keep the run's temporary files (``tmp_path``, ``tempfile``) in memory where the machine
    has a memory file system with room to spare.

    Every store a test opens fsyncs its commits (SQLite's ``synchronous=FULL``, the file
    store's journal and directory syncs): on a virtual machine's disk those syncs cost about a
    tenth of the default run's wall time and CPU. What the tests prove does not rest on them:
    a crash test kills a process, and a killed process loses nothing the kernel holds, synced
    or not. The library calls fsync exactly as it does on a disk; the file system answers at
    once. ``MAINSPRING_TEST_TMPDIR`` names another directory (``MAINSPRING_TEST_TMPDIR=/tmp``:
    the disk, to see what the syncs cost); a ``TMPDIR`` the user set is left as it is. A test
    that needs a disk's own behaviour asks for ``disk_tmp_path``.
    """
    if _DISK_TEMP in os.environ:  # chosen by the run's first process: workers inherit it
        return
    os.environ[_DISK_TEMP] = tempfile.gettempdir()
    chosen = os.environ.get("MAINSPRING_TEST_TMPDIR")
    if not chosen and os.environ.get("TMPDIR"):
        return  # the user's own choice of temporary directory stands
    chosen = chosen or _memory_file_system()
    if chosen is None:
        return
    if not os.path.isdir(chosen) or not os.access(chosen, os.W_OK | os.X_OK):
        raise pytest.UsageError(
            f"MAINSPRING_TEST_TMPDIR={chosen!r} is not a directory this user may write"
        )
    # Absolute: a child process started in another directory (cwd=) resolves the same one.
    os.environ["TMPDIR"] = os.path.abspath(chosen)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def _memory_file_system(at: str = "/dev/shm", room: int = 2 << 30) -> str | None:
    """``at`` if it is a tmpfs this process may write, with ``room`` bytes free; else None
    (no such mount, as on macOS; a container's 64 MB one)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            kinds = {fields[1]: fields[2] for fields in map(str.split, mounts) if len(fields) > 2}
        stat = os.statvfs(at)
    except OSError:
        return None
    if kinds.get(at) != "tmpfs" or not os.access(at, os.W_OK | os.X_OK):
        return None
    return at if stat.f_bavail * stat.f_frsize >= room else None


_DISK_TEMP = "MAINSPRING_TESTS_DISK_TEMP"
_temp_in_memory()


@pytest.fixture
def disk_tmp_path() -> Iterator[Path]:
    """A directory on the machine's own temporary file system (a disk, as a rule) even when
    the run keeps ``tmp_path`` in memory: for a test of what a disk's file system does."""
    path = Path(tempfile.mkdtemp(prefix="mainspring-disk-", dir=os.environ[_DISK_TEMP]))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


settings.register_profile("quick", max_examples=_examples.FULL // 4, phases=_examples.QUICK_PHASES)
settings.register_profile("thorough", max_examples=_examples.FULL)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))

_loop_guard.install_asyncio_hook()
_TRIO_STEPS = _loop_guard.trio_instrument()


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"loop_factory": asyncio.new_event_loop}), id="asyncio"),
        pytest.param(("trio", {"instruments": [_TRIO_STEPS]}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend: tuple[str, dict[str, Any]] = request.param
    return backend


#: Loaded on first use by the library (``import mainspring`` loads the kernel only): imported
#: here, before any test, so no test's first event-loop step pays for an import (the first
#: async test of a worker could exceed the loop guard's limit on a loaded machine).
_LAZY = (
    "mainspring.supervision",
    "mainspring.storage",
    "mainspring.executions",
    "mainspring.cli",
    "psycopg",
    "psycopg_pool",
)
#: The same for the web view's server (the ``ui`` extra), where it is installed: the first
#: test to serve the view on each loop imported hypercorn's loop module on that loop.
_LAZY_IF_INSTALLED = ("mainspring.ui", "hypercorn.asyncio", "hypercorn.trio")


def pytest_collection_finish(session: pytest.Session) -> None:
    for name in _LAZY:
        importlib.import_module(name)
    for name in _LAZY_IF_INSTALLED:
        with contextlib.suppress(ImportError):  # not installed: those tests skip
            importlib.import_module(name)
    # The records' converter hooks, made on first use too (storage._codec.make_hooks).
    from mainspring.storage._codec import make_hooks

    make_hooks()
    # Everything imported and collected so far (the test modules, hypothesis, psycopg...)
    # lives until the end: moved out of the collector's generations, a full collection
    # during a test scans what the tests make, not the whole suite's heap. Without it a
    # collection on a loaded machine can hold one step past the loop guard's limit.
    gc.collect()
    gc.freeze()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "loop_guard(limit): a test whose steps are heavy on purpose gets a higher limit (s)",
    )
    config.addinivalue_line(
        "markers", "untraced: coverage is stopped while the test runs (its size is the point)"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if item.get_closest_marker("untraced") is None:
        return (yield)
    try:
        import coverage
    except ImportError:
        return (yield)
    stopped = []  # every running instance, the one tracing first
    while (current := coverage.Coverage.current()) is not None:
        current.stop()
        stopped.append(current)
    try:
        return (yield)
    finally:
        for instance in reversed(stopped):  # started again in the order they were
            instance.start()


@pytest.fixture(autouse=True)
def _fail_if_the_event_loop_was_blocked(request: pytest.FixtureRequest) -> Iterator[None]:
    if "anyio_backend" not in request.fixturenames:
        yield
        return
    backend = request.getfixturevalue("anyio_backend")
    name, options = (backend, {}) if isinstance(backend, str) else backend
    if name == "trio" and _TRIO_STEPS not in options.get("instruments", ()):
        pytest.fail(
            "this test's anyio_backend runs trio without the loop guard's instrument: use "
            "the conftest's anyio_backend (mark heavy tests with @pytest.mark.loop_guard)"
        )
    marker = request.node.get_closest_marker("loop_guard")
    limit = float(marker.args[0]) if marker is not None else _loop_guard.configured_limit()
    _loop_guard.arm(_loop_guard.StepMeter(limit=limit))
    try:
        yield
    finally:
        meter = _loop_guard.disarm()
    if meter is not None and meter.flagged:
        pytest.fail("the event loop was blocked: " + "; ".join(meter.flagged[:3]))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a core, at least two and at most four. The suite waits on
    subprocesses, timers and a PostgreSQL server, so a worker per core leaves the cores
    idle. On 2 cores without coverage 4 workers took 3 min 31 s and 3 min 34 s, 3 workers
    3 min 53 s and 4 min 06 s (the same hour); with coverage, 3 had been best (tracing made
    the run CPU-bound)."""
    cores = os.cpu_count() or 1
    return max(2, min(4, cores * 2))
