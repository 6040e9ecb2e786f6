"""Review of issue #16 (agent memory), rows that do not read back as facts: every backend
applies the same rule (``storage._memory``): such a row is never shown, but takes part in
the rules by its stored columns. Before, PostgreSQL marked one superseded when a new fact
joined its group and SQLite skipped it; and a damaged superseder hid a fact when it was the
direct one (the SQL check) but not further down the chain (the walk)."""

from __future__ import annotations

from typing import Any

import pytest

from mainspring.storage._seam import FactFilter
from tests.storage._memory_kit import fact, memory_store, remember, tamper, wrong_values

__all__ = ["memory_store"]

NOW = 10.0


def _damage(store: Any, fact_id: str) -> None:
    """Make the row unreadable through a column no rule looks at (its confidence)."""
    (column, value), *_ = wrong_values(store)
    assert column == "confidence"
    tamper(store, "UPDATE memory_facts SET confidence = ? WHERE id = ?", value, fact_id)
    assert store.memory_get(fact_id) is None


def _repair(store: Any, fact_id: str) -> None:
    tamper(store, "UPDATE memory_facts SET confidence = ? WHERE id = ?", 0.5, fact_id)


def _shown(store: Any) -> tuple[list[str], list[str]]:
    where = FactFilter(now=NOW)
    searched = [hit.fact.id for hit in store.memory_search(["lemon"], where, limit=10)]
    listed = [f.id for f in store.memory_list(where, limit=10)]
    return sorted(searched), sorted(listed)


def test_a_new_fact_of_its_group_supersedes_an_unreadable_row(memory_store: Any) -> None:
    remember(memory_store, fact("old", "lemon tart", conflict_group="g"))
    _damage(memory_store, "old")
    remember(memory_store, fact("new", "lemon cake", conflict_group="g", created_at=2.0))
    _repair(memory_store, "old")
    assert memory_store.memory_get("old").superseded_by == "new"
    assert _shown(memory_store) == (["new"], ["new"])


@pytest.mark.parametrize("superseder_expired", [False, True])
def test_an_unreadable_direct_superseder_hides(memory_store: Any, superseder_expired: bool) -> None:
    # Its stored expiry cannot be trusted (the row does not read): it counts as unexpired.
    until = 5.0 if superseder_expired else None
    remember(memory_store, fact("a", "lemon tart", conflict_group="g"))
    remember(
        memory_store,
        fact("c", "lemon cake", conflict_group="g", created_at=2.0, valid_until=until),
    )
    _damage(memory_store, "c")
    assert _shown(memory_store) == ([], [])


def test_an_unreadable_superseder_down_the_chain_hides(memory_store: Any) -> None:
    remember(memory_store, fact("a", "lemon tart", conflict_group="g"))
    remember(memory_store, fact("b", "lemon pie", conflict_group="g", valid_until=5.0))
    remember(memory_store, fact("c", "lemon cake", conflict_group="g", created_at=3.0))
    _damage(memory_store, "c")
    # b expired, so a is hidden only if c, further down, hides: as it would directly.
    assert _shown(memory_store) == ([], [])
    _repair(memory_store, "c")
    assert _shown(memory_store) == (["c"], ["c"])
