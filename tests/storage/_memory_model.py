"""A reference model of memory's rules (``storage._memory``'s docstring), in plain Python.

Facts live in a dict; nothing here uses the contract's helpers (``hidden``,
``relink``) or any SQL, so a backend and the model agree only if
both follow the written rules. Matching is word membership: a fact matches a term when
the term is one of the words of its text. That equals a full-text index's matching only
for words its stemmer leaves alone, which is what the property tests draw (``VOCABULARY``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs

from mainspring.storage import Fact, Scope
from mainspring.storage._seam import FactFilter, ForgetFact, RememberFact

#: Words every backend's stemmer keeps as they are (checked by the property tests).
VOCABULARY = (
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "harbor",
    "indigo",
    "jasper",
    "kelp",
    "lumen",
    "nectar",
)


def words(text: str) -> set[str]:
    return set(re.findall(r"[^\W_]+", text.lower()))


class MemoryModel:
    """The facts as the rules say they should be, and in which order they were remembered."""

    def __init__(self) -> None:
        self.facts: dict[str, Fact] = {}
        self.order: dict[str, int] = {}  # id -> when it was (last) remembered
        self._clock = 0

    def apply(self, writes: Sequence[Any]) -> list[Any]:
        """Each write's answer: a Fact, a bool, or the exception type a backend must answer."""
        return [self._one(write) for write in writes]

    def _one(self, write: Any) -> Any:
        if isinstance(write, RememberFact):
            new = write.fact
            if new.superseded_by is not None:
                return ValueError
            if new.id in self.facts:
                return self.facts[new.id]
            if new.conflict_group is not None:
                for old in list(self.facts.values()):
                    if (
                        old.conflict_group == new.conflict_group
                        and old.superseded_by is None
                        # never another organization's facts (the writer could not see them)
                        and (
                            old.scope is not Scope.ORGANIZATION
                            or old.organization == write.organization
                        )
                    ):
                        self.facts[old.id] = attrs.evolve(old, superseded_by=new.id)
            self.facts[new.id] = new
            self._clock += 1
            self.order[new.id] = self._clock
            return new
        if isinstance(write, ForgetFact):
            gone = self.facts.pop(write.fact_id, None)
            if gone is None:
                return False
            del self.order[gone.id]
            for other in list(self.facts.values()):
                if other.superseded_by == gone.id:
                    heir = gone.superseded_by if gone.superseded_by != other.id else None
                    self.facts[other.id] = attrs.evolve(other, superseded_by=heir)
            return True
        return TypeError

    def _admitted(self, fact: Fact, where: FactFilter) -> bool:
        if where.scopes is not None:
            scopes = set(where.scopes)
        else:
            scopes = {Scope.USER, Scope.PROJECT, Scope.REPOSITORY}
            if where.organization is not None:
                scopes.add(Scope.ORGANIZATION)
        if fact.scope not in scopes:
            return False
        if fact.scope is Scope.ORGANIZATION and fact.organization != where.organization:
            return False
        if where.execution_id is not None and fact.execution_id != where.execution_id:
            return False
        return where.domain is None or fact.domain == where.domain

    def _live(self, fact: Fact, now: float) -> bool:
        return fact.valid_until is None or fact.valid_until > now

    def _hidden(self, fact: Fact, now: float) -> bool:
        seen = {fact.id}
        current = fact.superseded_by
        while current is not None and current not in seen and current in self.facts:
            seen.add(current)
            newer = self.facts[current]
            if self._live(newer, now):
                return True
            current = newer.superseded_by
        return False

    def visible(self, where: FactFilter, now: float) -> list[Fact]:
        """What a search may show (and a default listing), oldest first."""
        shown = [
            fact
            for fact in self.facts.values()
            if self._admitted(fact, where)
            and fact.confidence >= where.min_confidence
            and self._live(fact, now)
            and not self._hidden(fact, now)
        ]
        return sorted(shown, key=lambda fact: (fact.created_at, fact.id))

    def listing(
        self, where: FactFilter, now: float, limit: int, after: tuple[float, str] | None
    ) -> list[Fact]:
        if where.include_hidden:
            chosen = sorted(
                (fact for fact in self.facts.values() if self._admitted(fact, where)),
                key=lambda fact: (fact.created_at, fact.id),
            )
        else:
            chosen = self.visible(where, now)
        if after is not None:
            chosen = [fact for fact in chosen if (fact.created_at, fact.id) > after]
        return chosen[:limit]

    def matches(self, terms: Sequence[str], where: FactFilter, now: float) -> set[str]:
        """Ids of the visible facts having any of ``terms`` among their words."""
        wanted = set(terms)
        return {fact.id for fact in self.visible(where, now) if wanted & words(fact.text)}
