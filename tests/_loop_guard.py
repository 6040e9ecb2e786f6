"""The blocked-loop guard: tells a step that blocked the event loop from one that was merely
slowed down (by another process on the same cores, or by coverage's tracing).

Every asyncio callback and every trio task step is metered. A step is flagged when what it
cost the loop by itself — its thread's CPU time (a busy loop, heavy work that never yields)
plus its time asleep in blocking calls (``time.sleep``, blocking I/O, joining a thread) —
exceeds the limit.

Wall time alone cannot tell these apart from preemption. On Linux the thread's
``/proc/.../schedstat`` splits wall time into time on a CPU, time runnable but waiting in the
run queue (preemption: another process had the core), and the rest (asleep). Waiting for the
GIL while other threads of this process run is credited, up to about the step's own CPU
time (see :func:`judge`). Where ``schedstat`` is missing, CPU time comes from
``time.thread_time()``; a step is flagged for CPU above the limit, or for more than four
limits off the CPU: preemption cannot be told from sleep there, so the rule is looser rather
than noisy.

Known limit: a worker thread preempted while it holds the GIL (several hogs per core) makes
the loop thread wait asleep, and that wait is charged to the step.

The fast path (a step shorter than both limits by the wall clock, which is nearly every step)
costs two clock reads and one ``pread``: nothing is parsed unless the step was long.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable

#: The default limit, in seconds; ``MAINSPRING_LOOP_GUARD_LIMIT`` overrides it.
DEFAULT_LIMIT = 0.25


def configured_limit() -> float:
    raw = os.environ.get("MAINSPRING_LOOP_GUARD_LIMIT")
    if raw is None:
        return DEFAULT_LIMIT
    value = float(raw)
    if not value > 0:
        raise ValueError(f"MAINSPRING_LOOP_GUARD_LIMIT must be positive, not {raw!r}")
    return value


#: What waiting for the GIL may add to a step beyond its own CPU time: the GIL changes
#: hands every switch interval (5 ms), so this thread's waits alternate with its own work.
GIL_SLACK = 0.05


def judge(
    *,
    wall: float,
    cpu: float,
    runnable: float | None,
    other_threads_cpu: float,
    limit: float,
) -> str | None:
    """Say why one step counts as blocking the loop, or ``None`` if it does not.

    ``runnable`` is the time the thread waited in the run queue (``None`` when unknown);
    ``other_threads_cpu`` is CPU the rest of the process used meanwhile. Only part of it is
    credited as waiting for the GIL: about as much as this thread ran itself. A thread that
    only sleeps (``time.sleep``, joining a busy thread) gets next to no credit, however hard
    the others work in parallel.
    """
    gil = min(other_threads_cpu, cpu + GIL_SLACK)
    if runnable is None:
        off_cpu = wall - cpu - gil
        if cpu > limit:
            return f"ran {cpu:.3f} s of CPU without yielding (wall {wall:.3f} s)"
        if off_cpu > 4 * limit:
            return f"was off the CPU for {off_cpu:.3f} s in one step (wall {wall:.3f} s)"
        return None
    asleep = max(0.0, wall - cpu - runnable - gil)
    held = cpu + asleep  # what the step itself cost the loop: preemption is not its fault
    if held <= limit:
        return None
    return (
        f"held the event loop {held:.3f} s: ran {cpu:.3f} s of CPU without yielding and "
        f"slept {asleep:.3f} s in blocking calls (wall {wall:.3f} s, preempted {runnable:.3f} s)"
    )


_schedstat_fds: dict[int, int | None] = {}  # one descriptor per thread, kept for the session


def _schedstat_reader() -> Callable[[], bytes] | None:
    """A reader of the calling thread's schedstat line, or None where there is none."""
    thread = threading.get_native_id()
    if thread not in _schedstat_fds:
        try:
            fd = os.open(f"/proc/self/task/{thread}/schedstat", os.O_RDONLY)
            os.pread(fd, 128, 0)
        except OSError:
            _schedstat_fds[thread] = None
        else:
            _schedstat_fds[thread] = fd
    fd_or_none = _schedstat_fds[thread]
    if fd_or_none is None:
        return None
    fd = fd_or_none
    return lambda: os.pread(fd, 128, 0)


class StepMeter:
    """Meters the steps of the event loop running in one thread; collects the flagged ones.

    ``start()`` and ``stop(describe)`` bracket one step; ``describe`` is called only for a
    flagged step, to name it. Not thread-safe: one meter per loop thread.
    """

    def __init__(self, *, limit: float) -> None:
        self.limit = limit
        self.flagged: list[str] = []
        self._depth = 0  # a step that runs a loop of its own (anyio.run in a step) nests
        self._thread = threading.get_native_id()
        self._read = _schedstat_reader()
        self._wall = 0.0
        self._process = 0.0
        self._sched = b""
        self._cpu = 0.0
        self._open = False
        self._gc_started = 0.0
        self._gc = 0.0

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # Garbage collection runs inside whatever step allocated last; say so when it counts.
        if not self._open or not self.belongs_to_this_thread():
            return
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self._gc += time.perf_counter() - self._gc_started

    def start(self) -> None:
        self._depth += 1
        if self._depth > 1:
            return  # an inner loop's step: the outer step is being measured
        self._open = True
        self._gc = 0.0
        if self._read is not None:
            self._sched = self._read()
        else:
            self._cpu = time.thread_time()
        self._process = time.process_time()
        self._wall = time.perf_counter()

    def stop(self, describe: Callable[[], str]) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth:
            return
        # Garbage collection is charged to no step: it runs inside whichever step allocated
        # last, and how long a full collection takes depends on the heap every earlier test
        # left behind, not on the step (it is not a blocking call or a spin of the code).
        collected = self._gc
        wall = time.perf_counter() - self._wall - collected
        if wall <= self.limit or not self._open:
            self._open = False
            return
        self._open = False
        process = time.process_time() - self._process
        runnable: float | None
        if self._read is not None:
            on_cpu0, queued0, *_ = self._sched.split()
            on_cpu1, queued1, *_ = self._read().split()
            cpu = max(0.0, (int(on_cpu1) - int(on_cpu0)) / 1e9 - collected)
            runnable = (int(queued1) - int(queued0)) / 1e9
        else:
            cpu = max(0.0, time.thread_time() - self._cpu - collected)
            runnable = None
        why = judge(
            wall=wall,
            cpu=cpu,
            runnable=runnable,
            other_threads_cpu=max(0.0, process - collected - cpu),
            limit=self.limit,
        )
        if why is not None:
            gc_note = f" (and {collected:.3f} s of garbage collection)" if collected > 0.01 else ""
            self.flagged.append(f"{describe()} {why}{gc_note}")

    @property
    def precise(self) -> bool:
        """Whether preemption can be told from sleep here (schedstat is readable)."""
        return self._read is not None

    def belongs_to_this_thread(self) -> bool:
        return threading.get_native_id() == self._thread


# One meter is armed at a time, for the thread running the test's event loop. The hooks below
# are installed once per process and stay cheap no-ops while nothing is armed.
_armed: StepMeter | None = None
_outer: list[StepMeter | None] = []  # meters armed around this one (a guarded run inside one)


def arm(meter: StepMeter) -> None:
    global _armed
    _outer.append(_armed)
    _armed = meter
    gc.callbacks.append(meter._on_gc)


def disarm() -> StepMeter | None:
    """Disarm the meter armed last (the one around it, if any, is armed again)."""
    global _armed
    meter = _armed
    _armed = _outer.pop() if _outer else None
    if meter is not None and meter._on_gc in gc.callbacks:
        gc.callbacks.remove(meter._on_gc)
    return meter


def install_asyncio_hook() -> None:
    """Meter every asyncio callback (``Handle._run``; task steps are callbacks too)."""
    import asyncio.events

    handle = asyncio.events.Handle
    if getattr(handle._run, "_mainspring_metered", False):
        return
    original = handle._run

    def _run(self: asyncio.events.Handle) -> None:
        meter = _armed
        if meter is None or not meter.belongs_to_this_thread():
            original(self)
            return
        meter.start()
        try:
            original(self)
        finally:
            meter.stop(lambda: f"asyncio callback {self!r}")

    _run._mainspring_metered = True  # type: ignore[attr-defined]
    handle._run = _run  # type: ignore[method-assign]


def trio_instrument() -> object:
    """A trio instrument metering every task step into the armed meter."""
    import trio

    class _TrioSteps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            meter = _armed
            if meter is not None and meter.belongs_to_this_thread():
                meter.start()

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            meter = _armed
            if meter is not None and meter.belongs_to_this_thread():
                meter.stop(lambda: f"trio task {task.name!r}")

    return _TrioSteps()
