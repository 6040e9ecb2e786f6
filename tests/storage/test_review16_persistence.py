"""Review of issue #16 (agent memory), the writer: memory batches through the persistence
actor when the store fails."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import StorageError
from mainspring.storage._backends.postgres.store import CommitUnknown
from mainspring.storage._persistence import PersistenceFailed, open_committer
from mainspring.storage._seam import RememberFact
from tests.storage._memory_kit import fact

pytestmark = pytest.mark.anyio


class _UnknownOutcome:
    """A store whose memory batch is applied, then its COMMIT's answer is lost."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def memory_apply(self, writes: Sequence[Any]) -> Any:
        self.inner.memory_apply(writes)
        raise CommitUnknown("the connection was lost during COMMIT")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_memory_batch_of_unknown_outcome_is_not_said_to_be_unapplied(
    tmp_path: Path,
) -> None:
    # The caller was told "nothing in it was applied" while the batch may well have been
    # (here it was): a caller that trusts it remembers again, and stores the fact twice.
    store = ms.storage.SqliteStore(tmp_path / "store.db")
    try:
        async with ms.open_system() as system:
            committer = await open_committer(system, _UnknownOutcome(store))
            with pytest.raises(PersistenceFailed) as info:
                await committer.memory([RememberFact(fact("maybe"))])
            assert "nothing in it was applied" not in str(info.value)
            assert "unknown" in str(info.value)
            assert isinstance(info.value.__cause__, CommitUnknown)
            with pytest.raises(PersistenceFailed, match="stopped after a failed write"):
                await committer.memory([RememberFact(fact("later"))])
        assert store.memory_get("maybe") is not None
    finally:
        store.close()


class _RefusesOnce:
    """A store whose first memory batch is refused with ``error`` (nothing applied)."""

    def __init__(self, inner: Any, error: Exception) -> None:
        self.inner = inner
        self.error: Exception | None = error

    def memory_apply(self, writes: Sequence[Any]) -> Any:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.inner.memory_apply(writes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_refused_memory_batch_says_the_writer_goes_on_and_it_does(
    tmp_path: Path,
) -> None:
    # PersistenceFailed said "the writer has stopped", but a batch the store refused
    # without a disk error (here StorageError, as a read-only store raises) stops nothing.
    store = ms.storage.SqliteStore(tmp_path / "store.db")
    try:
        async with ms.open_system() as system:
            refusing = _RefusesOnce(store, StorageError("memory was opened read-only"))
            committer = await open_committer(system, refusing)
            with pytest.raises(PersistenceFailed) as info:
                await committer.memory([RememberFact(fact("refused"))])
            assert "the writer goes on" in str(info.value)
            assert "stopped" not in str(info.value)
            (answer,) = await committer.memory([RememberFact(fact("later"))])
            assert answer == fact("later")
        assert PersistenceFailed.__doc__ is not None
        assert "goes on" in PersistenceFailed.__doc__
    finally:
        store.close()


async def test_a_memory_batch_failing_on_disk_says_the_writer_has_stopped(
    tmp_path: Path,
) -> None:
    store = ms.storage.SqliteStore(tmp_path / "store.db")
    try:
        async with ms.open_system() as system:
            committer = await open_committer(system, _RefusesOnce(store, OSError("disk full")))
            with pytest.raises(PersistenceFailed, match="the writer has stopped"):
                await committer.memory([RememberFact(fact("refused"))])
            with pytest.raises(PersistenceFailed, match="stopped after a failed write"):
                await committer.memory([RememberFact(fact("later"))])
    finally:
        store.close()
