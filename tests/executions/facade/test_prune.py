"""``Runtime.prune``: finished executions older than the cut-off go, with their history;
anything that may still run stays whatever its age; a dry run changes nothing; it goes
through the persistence actor (``Committer.delete``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import Execution, FileStore, Lease, SqliteStore, Store
from mainspring.storage._seam import encode_frame

from .._kit import FAST, linear

pytestmark = pytest.mark.anyio

OLD = 1_000.0  # a long time ago


@pytest.fixture(params=["sqlite", "files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        sqlite = SqliteStore(tmp_path / "store.sqlite3")
        yield sqlite
        sqlite.close()
    else:
        yield FileStore(tmp_path / "store")


def old(id: str, status: Any, **changes: Any) -> Execution:
    fields: dict[str, Any] = {"goal": "g", "created_at": OLD, "updated_at": OLD}
    return Execution(id=id, status=status, **(fields | changes))


def seed(store: Store) -> None:
    for execution in (
        old("old-done", "completed"),
        old("old-failed", "failed"),
        old("old-cancelled", "cancelled"),
        old("old-paused", "paused"),
        # a run whose owner died long ago: its lease lapsed, it may still be recovered
        old("old-running", "running", lease=Lease(owner="gone", expires_at=OLD, epoch=1)),
        old("old-waiting", "waiting_for_clarification"),
        old("new-done", "completed", updated_at=time.time() + 3_600),
    ):
        assert store.create(execution)


async def test_prune_deletes_old_finished_runs_with_their_history_and_nothing_else(
    store: Store,
) -> None:
    seed(store)
    # recover=False: the seeded unfinished runs are what prune must leave alone, not runs
    # for this runtime to take over (L8).
    async with ms.open_runtime(store=store, tools={"inc": inc}, recover=False, **FAST) as rt:
        done = await (await rt.start("count", linear(2), execution_id="fresh")).wait()
        assert done.status == "completed"
        assert store.history("fresh")
        assert store.history("old-done")
        report = await rt.prune(older_than=60)
        assert report == ms.executions.PruneReport(
            dry_run=False, deleted=("old-cancelled", "old-done", "old-failed")
        )
        remaining = sorted(e.id for e in await rt.executions())
        assert remaining == ["fresh", "new-done", "old-paused", "old-running", "old-waiting"]
        assert store.history("old-done") == ()  # its history went with it
        # Only ``completed`` now, and with no age limit: the fresh run goes too.
        second = await rt.prune(older_than=0, statuses=["completed"])
        assert second.deleted == ("fresh",)  # new-done was updated "later" than now
    assert store.get("old-paused") is not None
    assert store.get("old-running") is not None


async def test_a_dry_run_names_what_would_go_and_deletes_nothing(store: Store) -> None:
    seed(store)
    before = store.list()
    history = store.history()
    async with ms.open_runtime(store=store, recover=False, **FAST) as rt:
        report = await rt.prune(older_than=60, statuses=("failed", "completed"), dry_run=True)
    assert report.dry_run
    assert report.deleted == ("old-done", "old-failed")
    assert store.list() == before
    assert store.history() == history


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"statuses": ("running",)}, ValueError),
        ({"statuses": ("completed", "paused")}, ValueError),
        ({"statuses": ("nonsense",)}, ValueError),
        ({"statuses": ()}, ValueError),
        ({"statuses": "completed"}, TypeError),
        ({"older_than": -1}, ValueError),
        ({"older_than": float("nan")}, ValueError),
        ({"older_than": True}, ValueError),
    ],
)
async def test_prune_refuses_statuses_that_are_not_finished_and_bad_ages(
    store: Store, options: dict[str, Any], error: type[Exception]
) -> None:
    seed(store)
    before = store.list()
    async with ms.open_runtime(store=store, recover=False, **FAST) as rt:
        with pytest.raises(error):
            await rt.prune(**({"older_than": 60} | options))
    assert store.list() == before


async def test_unreadable_records_are_skipped_never_deleted(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    seed(store)
    (tmp_path / "store" / "broken.journal").write_bytes(encode_frame(b"{not json"))
    async with ms.open_runtime(store=store, recover=False, **FAST) as rt:
        report = await rt.prune(older_than=60)
    assert [s.id for s in report.skipped] == ["broken"]
    assert "never deleted" in report.skipped[0].reason
    assert (tmp_path / "store" / "broken.journal").exists()


async def test_the_committer_deletes_only_finished_executions(store: Store) -> None:
    seed(store)
    async with ms.open_system("t") as system:
        committer = await ms.storage._seam.open_committer(system, store)
        assert await committer.delete("old-done")
        assert not await committer.delete("old-paused")
        assert not await committer.delete("missing")
    assert store.get("old-done") is None
    assert store.get("old-paused") is not None


async def inc(x: int = 0) -> int:
    return x + 1
