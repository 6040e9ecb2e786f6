"""Review of issue #16 (agent memory), supersession and organizations: a fact remembered in
a conflict group supersedes the group's current facts of every scope, but never the
organization facts of another organization (the writer could not see them). Every backend."""

from __future__ import annotations

from typing import Any

import pytest

from mainspring.storage import Scope
from mainspring.storage._seam import FactFilter, RememberFact
from tests.storage._memory_kit import fact, memory_store, remember

__all__ = ["memory_store"]


def _org(fact_id: str, organization: str, **fields: Any) -> Any:
    return fact(
        fact_id, scope=Scope.ORGANIZATION, organization=organization, conflict_group="g", **fields
    )


@pytest.mark.parametrize("writer", [None, "org-b"])
def test_a_writer_never_supersedes_another_organizations_facts(
    memory_store: Any, writer: str | None
) -> None:
    # Before: org-a's fact was marked superseded by a runtime of org-b (or of none), and
    # org-a could no longer see it (its superseder it cannot even read).
    remember(memory_store, _org("a1", "org-a", text="deploys on friday"))
    remember(memory_store, fact("u1", text="deploys on monday", conflict_group="g"))
    memory_store.memory_apply(
        [
            RememberFact(
                fact("u2", text="deploys on sunday", conflict_group="g", created_at=2.0),
                organization=writer,
            )
        ]
    )
    assert memory_store.memory_get("a1").superseded_by is None
    assert memory_store.memory_get("u1").superseded_by == "u2"  # other scopes: crossed
    seen_by_a = memory_store.memory_search(
        ["deploys"], FactFilter(organization="org-a", now=10.0), limit=10
    )
    assert {hit.fact.id for hit in seen_by_a} == {"a1", "u2"}


def test_a_writer_supersedes_its_own_organizations_facts(memory_store: Any) -> None:
    remember(memory_store, _org("a1", "org-a"), _org("b1", "org-b"))
    memory_store.memory_apply(
        [RememberFact(fact("u2", conflict_group="g", created_at=2.0), organization="org-a")]
    )
    assert memory_store.memory_get("a1").superseded_by == "u2"
    assert memory_store.memory_get("b1").superseded_by is None
    remember(memory_store, _org("b2", "org-b", created_at=3.0))  # its writer: org-b
    assert memory_store.memory_get("b1").superseded_by == "b2"
    assert memory_store.memory_get("u2").superseded_by == "b2"
    assert memory_store.memory_get("a1").superseded_by == "u2"


def test_the_writers_organization_is_checked() -> None:
    with pytest.raises(ValueError, match="its own organization"):
        RememberFact(_org("a1", "org-a"), organization="org-b")
    with pytest.raises(ValueError, match="its own organization"):
        RememberFact(_org("a1", "org-a"), organization=None)
    with pytest.raises(ValueError, match="organization must"):
        RememberFact(fact("u1"), organization="not an id!")
    assert RememberFact(_org("a1", "org-a")).organization == "org-a"  # its own by default
    assert RememberFact(fact("u1")).organization is None


def test_a_forged_writer_organization_is_refused_by_every_backend(memory_store: Any) -> None:
    write = RememberFact(_org("a1", "org-a"))
    object.__setattr__(write, "organization", "org-b")
    (answer,) = memory_store.memory_apply([write])
    assert isinstance(answer, ValueError)
    assert memory_store.memory_count() == 0
