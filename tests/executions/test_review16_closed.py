"""Review of issue #16 (agent memory): ``rt.memory`` after the runtime exited raises
StorageError on every store kind (a FileStore opened its memory file again, and left the
connection open)."""

from __future__ import annotations

import pytest

import mainspring as ms
from mainspring.storage import StorageError

from ._memory_kit import StoreSpec

pytestmark = pytest.mark.anyio


async def test_memory_after_the_runtime_exited_raises(memory_store: StoreSpec) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        fact = await rt.memory.remember("the build uses tox")
        memory = rt.memory
    with pytest.raises(StorageError):
        await memory.search("build")
    with pytest.raises(StorageError):
        await memory.get(fact.id)
    store = rt.store
    if isinstance(store, ms.storage.FileStore):
        assert store._memory._memory is None  # nothing opened again
