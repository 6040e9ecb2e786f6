"""``recover()`` returns the runs it took over, and only those (found by a review of #14:
two hosts recovering at once both reported a run one of them had already finished)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

import mainspring as ms

from ._kit import linear

pytestmark = pytest.mark.anyio


async def _inc(x: int = 0) -> int:
    return x + 1


class _FinishedMeanwhile(ms.storage.SqliteStore):
    """A store on which another host takes ``ex-gone`` over and finishes it right after
    this host listed it as recoverable."""

    def unfinished(self, skip: Any = ()) -> Any:  # what recovery lists
        listing = super().unfinished(skip)
        self.edit(
            "ex-gone", lambda stored, now: attrs.evolve(stored, status="completed", updated_at=now)
        )
        return listing


def _orphan(store: ms.storage.SqliteStore, execution_id: str) -> None:
    """A run left ``running`` by a host that died without a lease (lapsed long ago)."""
    record = ms.storage.Execution(
        id=execution_id,
        goal="g",
        status="running",
        plan=linear(1),
        created_at=1.0,
        updated_at=1.0,
    )
    assert store.create(record)


async def test_recover_leaves_out_a_run_another_host_finished_after_the_listing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.sqlite3"
    store = _FinishedMeanwhile(path)
    _orphan(store, "ex-gone")
    _orphan(store, "ex-mine")
    async with ms.open_runtime(store=store, tools={"inc": _inc}) as rt:
        handles = await rt.recover()
        # Before the fix, ex-gone came back too: resume returns a finished run's result (R4)
        # without running it here, and recover counted it as taken over.
        assert [handle.execution_id for handle in handles] == ["ex-mine"]
        assert (await handles[0].wait()).status == "completed"
    gone = store.get("ex-gone")
    assert gone is not None
    assert gone.status == "completed"
    store.close()
