"""What one step of a plan costs does not grow with the plan's length (issue #29: a plan
step costs the same at step 10,000 as at step 20), counted rather than timed, in a window of
steps late in a plan of 10,000 and in the middle of one of 40: the Python calls the event
loop's thread makes (``sys.setprofile``: a walk over the plan in Python shows as calls), the
ids the record validators check, and the memory a step allocates above what it keeps
(``tracemalloc``'s peak: a copy of the plan's steps, observations or completed steps, made
in C where no call shows, is 8 bytes an item). The store takes every commit through the
journal's diff (``storage._journal``), as a real backend does, so what a commit stores is
counted too: it must cost what changed.
"""

from __future__ import annotations

import collections
import sys
import tracemalloc
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import _validators
from mainspring.storage._journal.model import Base, diff, snapshot_changes

from ._kit import MemoryStore, linear, runtime

pytestmark = pytest.mark.anyio

SHORT, LONG = 40, 10_000
WINDOW = 20  # steps counted: from step 10 of the short plan, 40 before the end of the long
#: How much more a step of the long plan may cost than one of the short: what is left once
#: nothing grows with the plan is noise of a few calls, never a walk. (Before issue #29's
#: persistent sequences a step of the long plan made 9-14% more calls: the plan validator's
#: search by halves, the journal's; and copied 160-400 KB.)
SLACK = 1.05
#: A step's transient memory may exceed the short plan's by this much (a copy of the long
#: plan's steps alone is 80 KB; a path of the persistent sequences' trees is below 2 KB).
MEMORY_SLACK = 8 * 1024


class _WindowStore(MemoryStore):
    """A store that diffs every commit against the last one it stored (the journal's model:
    what a backend would write), and counts what the commits ``first`` to ``first +
    WINDOW`` cost, on the loop's thread (this store never blocks: its calls run there)."""

    def __init__(self, first: int) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self._first = first
        self._commits = 0
        self._base: Base | None = None
        self._floor = 0
        self.peaks: list[int] = []
        self._active = False

    def _store(self, base: Any, execution: ms.storage.Execution) -> None:
        super()._store(base, execution)
        mine = self._base
        if mine is None or mine.execution.id != execution.id:
            snapshot_changes(execution)
            self._base = Base.of(execution, 1, window=[])
        else:
            mine.advance(execution, diff(mine, execution))
        self._commits += 1
        if self._commits == self._first:
            self._start()
        elif self._first < self._commits <= self._first + WINDOW:
            current, peak = tracemalloc.get_traced_memory()
            self.peaks.append(peak - self._floor)
            self._floor = current
            tracemalloc.reset_peak()
            if self._commits == self._first + WINDOW:
                self._stop()

    def _start(self) -> None:
        counts = self.counts
        checked = _validators._id

        def id_checked(*args: Any) -> None:
            counts["ids checked"] += 1
            checked(*args)

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                counts["calls"] += 1

        self._checked = checked
        self._active = True
        _validators._id = id_checked  # type: ignore[assignment]
        tracemalloc.start()
        self._floor = tracemalloc.get_traced_memory()[0]
        sys.setprofile(profile)

    def _stop(self) -> None:
        if not self._active:
            return
        self._active = False
        sys.setprofile(None)
        tracemalloc.stop()
        _validators._id = self._checked  # type: ignore[assignment]


async def _run(steps: int, first: int) -> _WindowStore:
    store = _WindowStore(first)
    try:
        # No heartbeat or renewal falls inside the run, nor a recovery sweep: what is
        # counted is the steps' own cost.
        async with runtime(store, lease_ttl=600.0, heartbeat_interval=300.0, recover=False) as rt:
            handle = await rt.start("count", linear(steps))
            result = await handle.wait()
    finally:
        store._stop()  # if the run failed inside the window
    assert result.status == "completed"
    assert len(store.peaks) == WINDOW, "the window of steps was not counted whole"
    return store


@pytest.mark.loop_guard(5.0)
async def test_a_plan_step_costs_the_same_at_step_10_000_as_in_a_plan_of_40() -> None:
    short = await _run(SHORT, 10)
    long = await _run(LONG, LONG - 40)
    grew = {
        name: (long.counts[name] / WINDOW, short.counts[name] / WINDOW)
        for name in ("calls", "ids checked")
        if long.counts[name] > short.counts[name] * SLACK
    }
    assert not grew, f"a step costs more the longer its plan: {grew}"
    # The median step's transient memory: a copy of anything as long as the plan shows.
    short_peak = sorted(short.peaks)[WINDOW // 2]
    long_peak = sorted(long.peaks)[WINDOW // 2]
    assert long_peak <= short_peak + MEMORY_SLACK, (
        f"a step of the long plan allocates {long_peak:,} bytes above what it keeps, "
        f"one of the short {short_peak:,}: something as long as the plan is copied"
    )
