"""Review of issue #16 (agent memory): remembering again the id of a stored row that does not
read back answers that write's error alone, on every backend, with or without a conflict
group. Before, SQLite's one-statement path for a fact without a group (no savepoint) let the
error escape ``memory_apply``: the whole batch was rolled back and raised."""

from __future__ import annotations

from typing import Any

import pytest

from mainspring.storage._seam import RememberFact
from tests.storage._memory_kit import fact, memory_store, remember, tamper, wrong_values

__all__ = ["memory_store"]


@pytest.mark.parametrize("group", [None, "g"])
def test_a_replayed_id_of_an_unreadable_row_answers_its_error_alone(
    memory_store: Any, group: str | None
) -> None:
    remember(memory_store, fact("old", "lemon tart", conflict_group=group))
    (column, value), *_ = wrong_values(memory_store)
    tamper(memory_store, f"UPDATE memory_facts SET {column} = ? WHERE id = ?", value, "old")
    assert memory_store.memory_get("old") is None
    before, again, after = memory_store.memory_apply(
        [
            RememberFact(fact("a", "before")),
            RememberFact(fact("old", "lemon tart", conflict_group=group)),
            RememberFact(fact("b", "after")),
        ]
    )
    assert before == fact("a", "before")
    assert isinstance(again, ValueError)
    assert after == fact("b", "after")
    assert memory_store.memory_count() == 3
