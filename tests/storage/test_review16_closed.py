"""Review of issue #16 (agent memory): a closed store's memory stays closed. FileStore
opened ``memory.sqlite3`` again on the next memory call (a connection nobody closes, e.g.
``rt.memory.search`` after the runtime exited), where SqliteStore raised StorageError."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import StorageError
from mainspring.storage._seam import FactFilter, ForgetFact, RememberFact
from tests.storage._memory_kit import fact, open_memory, remember

CALLS: dict[str, Callable[[Any], object]] = {
    "get": lambda store: store.memory_get("a"),
    "list": lambda store: store.memory_list(FactFilter(), limit=10),
    "search": lambda store: store.memory_search(["fact"], FactFilter(), limit=10),
    "count": lambda store: store.memory_count(),
    "remember": lambda store: store.memory_apply([RememberFact(fact("b"))]),
    "forget": lambda store: store.memory_apply([ForgetFact("a")]),
}


@pytest.mark.parametrize("used", [True, False])
@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_closed_store_refuses_memory_calls(
    kind: str, call: str, used: bool, tmp_path: Path
) -> None:
    with open_memory(kind, tmp_path) as store:
        if used:  # its memory opened before the close, or never
            remember(store, fact("a"))
        store.close()
        with pytest.raises(StorageError):
            CALLS[call](store)
        if isinstance(store, ms.storage.FileStore):
            assert store._memory._memory is None  # nothing opened again
