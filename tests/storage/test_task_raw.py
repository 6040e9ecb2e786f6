"""An agent task record as written, rebuilt from the one written before it: equal to
unstructuring it whole, whatever changed, and never touching what was handed out before."""

from __future__ import annotations

import copy
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.storage._task_raw import task_raw
from tests import strategies as strat
from tests._examples import SHRINKING, examples


@st.composite
def _changed(draw: st.DrawFn, task: ms.storage.AgentTaskRecord) -> ms.storage.AgentTaskRecord:
    """``task`` after what a save may carry: inner steps, findings, counters, a state..."""
    changes: dict[str, Any] = {}
    if draw(st.booleans()):  # inner steps appended (ctx.step)
        added = draw(st.lists(strat.observations, min_size=1, max_size=3))
        changes["inner_observations"] = task.inner_observations + tuple(added)
        changes["inner_completed"] = task.inner_completed + tuple(o.step_id for o in added)
    elif task.inner_observations and draw(st.booleans()):  # one replaced (a re-run, E10)
        replaced = list(task.inner_observations)
        replaced[draw(st.integers(0, len(replaced) - 1))] = draw(strat.observations)
        changes["inner_observations"] = tuple(replaced)
    elif draw(st.booleans()):  # restarted (R8): fewer than before
        changes["inner_observations"] = task.inner_observations[:1]
        changes["inner_completed"] = task.inner_completed[:1]
    if draw(st.booleans()) and len(task.findings) < 5:
        changes["findings"] = (*task.findings, draw(strat.findings))
    if draw(st.booleans()):
        changes["calls_used"] = draw(strat.counters)
        changes["updated_at"] = draw(strat.times)
    if draw(st.booleans()):
        changes["state"] = draw(st.sampled_from(["running", "queued", "completed"]))
        changes["interruption"] = None
    if draw(st.booleans()):
        changes["inner_checkpoint"] = draw(st.none() | strat.checkpoints)
    return attrs.evolve(task, **changes)


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@settings(max_examples=examples(100), deadline=None)
@given(data=st.data(), task=strat.agent_tasks)
def test_a_task_rebuilt_from_its_last_save_equals_it_unstructured_whole(
    data: st.DataObject, task: ms.storage.AgentTaskRecord
) -> None:
    raw = task_raw(task)
    assert raw == ms.storage._seam.unstructure(task)
    for _ in range(data.draw(st.integers(1, 5))):
        new = data.draw(_changed(task))
        before = copy.deepcopy(raw)
        new_raw = task_raw(new, task, raw)
        assert new_raw == ms.storage._seam.unstructure(new)
        assert raw == before  # nothing handed out before was changed
        task, raw = new, new_raw


def test_a_grown_task_reuses_what_was_stored_and_builds_new_lists() -> None:
    first = ms.storage.Observation(step_id="i0", ok=True, output=1)
    task = ms.storage.AgentTaskRecord(
        id="t1", agent_id="a", step_id="s", created_at=1.0, updated_at=1.0, execution_id="e",
        inner_completed=("i0",), inner_observations=(first,),
    )  # fmt: skip
    raw = task_raw(task)
    second = ms.storage.Observation(step_id="i1", ok=True, output=2)
    grown = attrs.evolve(
        task,
        inner_completed=(*task.inner_completed, "i1"),
        inner_observations=(*task.inner_observations, second),
        updated_at=2.0,
    )
    new = task_raw(grown, task, raw)
    assert new["inner_observations"][0] is raw["inner_observations"][0]  # not redone
    assert new["inner_observations"] is not raw["inner_observations"]  # a new list
    assert len(raw["inner_observations"]) == 1  # the old one is as it was
    assert new["interruption"] is None
    assert new["updated_at"] == 2.0
    assert new == ms.storage._seam.unstructure(grown)
    # Told that one inner step was appended (TaskSave.appended_to), the steps are not
    # compared, and the result is the same.
    assert task_raw(grown, task, raw, appended=True) == new
