"""Review of issue #16 (agent memory): forgetting a stored row that does not read back
deletes it by its stored columns, the same on every backend (``storage._memory``: such rows
take part in the rules by their stored columns): what it superseded passes to its stored
superseder. Before, PostgreSQL deleted it and SQLite refused (``ValueError``), so a damaged
row that hid its group's facts could not be forgotten there at all."""

from __future__ import annotations

from typing import Any

import pytest

from mainspring.storage._seam import FactFilter
from tests.storage._memory_kit import fact, forget, memory_store, remember, tamper, wrong_values

__all__ = ["memory_store"]


def _damage(store: Any, fact_id: str) -> None:
    (column, value), *_ = wrong_values(store)
    assert column == "confidence"  # a column no rule looks at
    tamper(store, "UPDATE memory_facts SET confidence = ? WHERE id = ?", value, fact_id)
    assert store.memory_get(fact_id) is None


@pytest.mark.parametrize("with_heir", [False, True])
def test_forgetting_an_unreadable_row_deletes_it_and_relinks(
    memory_store: Any, with_heir: bool
) -> None:
    remember(memory_store, fact("a", "lemon tart", conflict_group="g"))
    remember(memory_store, fact("b", "lemon pie", conflict_group="g", created_at=2.0))
    if with_heir:
        remember(memory_store, fact("c", "lemon cake", conflict_group="g", created_at=3.0))
        remember(memory_store, fact("a2", "lemon curd", created_at=4.0))  # no group
    _damage(memory_store, "b")
    assert forget(memory_store, "b") is True
    assert memory_store.memory_count() == (3 if with_heir else 1)
    assert memory_store.memory_get("a").superseded_by == ("c" if with_heir else None)
    shown = memory_store.memory_list(FactFilter(now=10.0), limit=10)
    assert [f.id for f in shown] == (["c", "a2"] if with_heir else ["a"])
    assert forget(memory_store, "b") is False
