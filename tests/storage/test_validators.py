"""Review of storage v2 (issue 13): the record validators' shortcuts (``_ids`` checks only
what was appended since the last tuple it found valid) must not let an invalid id in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mainspring as ms


class Lying(str):
    """A str subclass that compares equal to anything (ids must be exact ``str``, X1)."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


def execution(**changes: Any) -> ms.storage.Execution:
    fields: dict[str, Any] = {"id": "ex-1", "goal": "g", "created_at": 1.0, "updated_at": 1.0}
    return ms.storage.Execution(**(fields | changes))


def _plan_with_step_status(status: Any) -> ms.storage.Plan:
    step = ms.storage.PlanStep(id="s1", tool="t", status=status)
    return ms.storage.Plan(id="p", goal="g", steps=(step,))


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: execution(status="bogus"), id="execution-status"),
        pytest.param(lambda: execution(plan=_plan_with_step_status("bogus")), id="step-status"),
        pytest.param(
            lambda: execution(
                observations=(ms.storage.Observation(step_id="s1", ok=True, code="bogus"),)
            ),
            id="observation-code",
        ),
        pytest.param(
            lambda: execution(
                controls=(ms.storage._seam.Control(action="bogus", by="me", at=1.0),)
            ),
            id="control-action",
        ),
    ],
)
@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_E10_a_record_that_builds_and_is_acknowledged_reads_back(
    tmp_path: Path, build: Any, kind: str
) -> None:
    """The records say "every field is validated when a record is built ... an invalid record cannot
    exist in memory" (storage/_records.py): fields typed as a Literal are not, so the record
    is built, the store acknowledges it, and then cannot read it back (E8 refuses it)."""

    def store() -> Any:
        if kind == "file":
            return ms.storage.FileStore(tmp_path / "store")
        return ms.storage.SqliteStore(tmp_path / "store" / "db")

    try:
        record = build()
    except ValueError:
        return  # refused when built: fine
    try:
        acknowledged = store().create(record)
    except (ms.storage.StorageError, ValueError):
        return  # refused when written: fine
    assert acknowledged
    assert store().get("ex-1") is not None
