"""What one inner step of an agent costs does not grow with how many came before it (issue
#29: inner steps appended, never copied), counted rather than timed: the Python calls the
event loop's thread makes per inner step (``sys.setprofile``: a walk over the earlier steps
in Python shows as calls), the ids the record validators check per inner step, and the
copies of the inner-step sequences (none: every save's record, and the stored form a store
makes of it, are versions of one shared list, ``AppendOnly``). An agent of 10N inner
steps is compared with one of N.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import _validators
from mainspring.storage._seam import AppendOnly

from ._kit import MemoryStore, agent, plan_of, runtime, stored, tasks_of

pytestmark = pytest.mark.anyio

N = 40
#: How much more an inner step of the long agent may cost than one of the short (the runs'
#: start and end are shared; what is left is noise of a few calls, never a walk).
SLACK = 1.15


@contextmanager
def _counting(monkeypatch: pytest.MonkeyPatch, counts: collections.Counter[str]) -> Iterator[None]:
    checked = _validators._id
    extended = AppendOnly.extended

    def id_checked(*args: Any) -> None:
        counts["ids checked"] += 1
        checked(*args)

    def grown(self: AppendOnly[Any], new: Any) -> AppendOnly[Any]:
        if len(self._items) != len(self):  # an older version grew: its items are copied
            counts["copies"] += 1
        return extended(self, new)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            counts["calls"] += 1

    with monkeypatch.context() as patch:
        patch.setattr(_validators, "_id", id_checked)
        patch.setattr(AppendOnly, "extended", grown)
        sys.setprofile(profile)
        try:
            yield
        finally:
            sys.setprofile(None)


async def _run(steps: int, monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    async def work(ctx: ms.AgentContext, input: Any) -> int:
        total = 0
        for i in range(steps):
            total += await ctx.step(f"i{i}", lambda i=i: i)
        return total

    counts: collections.Counter[str] = collections.Counter()
    # No heartbeat or renewal falls inside the run: what is counted is the steps' own cost.
    async with runtime(
        MemoryStore(), agents={"work": work}, lease_ttl=600.0, heartbeat_interval=300.0
    ) as rt:
        with _counting(monkeypatch, counts):
            handle = await rt.start("count", plan_of(agent("a", "work")))
            result = await handle.wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed"
    assert result.outputs["a"] == sum(range(steps))
    # The stored record's inner steps are one shared list's view (a store makes their
    # stored form from it, as views of one list too: test_stored_form.py).
    [task] = tasks_of(record)
    assert type(task.inner_completed) is AppendOnly
    assert type(task.inner_observations) is AppendOnly
    assert task.inner_completed == tuple(f"i{i}" for i in range(steps))
    return counts


async def test_an_inner_step_costs_the_same_at_step_n_and_step_10n(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = await _run(N, monkeypatch)
    long = await _run(10 * N, monkeypatch)
    assert short["copies"] == long["copies"] == 0, "an inner-step sequence was copied"
    per_step = {name: (long[name] / (10 * N), short[name] / N) for name in ("calls", "ids checked")}
    grew = {name: costs for name, costs in per_step.items() if costs[0] > costs[1] * SLACK}
    assert not grew, f"an inner step costs more the more came before it: {grew}"
