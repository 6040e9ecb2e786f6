"""Memory against its reference model (``_memory_model.py``): random remember / forget /
batch / search / list sequences run on every backend with memory at once, and after each
step every backend holds exactly the model's facts (``superseded_by`` links included).

What the rules imply, asserted after every step on what the backends store: every
``superseded_by`` names a stored fact of the same group remembered later (so there are no
cycles); a fact without a group is never
superseded. With one writer in one scope, the surviving facts of a group form one chain in
the order they were remembered (each superseded by the next, the last one current).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mainspring.storage import Fact, Scope
from mainspring.storage._seam import FactFilter, ForgetFact, RememberFact
from tests._examples import SHRINKING, examples
from tests.storage._memory_kit import MEMORY_BACKENDS, open_memory, usable_backends
from tests.storage._memory_model import VOCABULARY, MemoryModel

IDS = tuple(f"f{i}" for i in range(8))
WORDS = VOCABULARY[:5]  # few words: searches often match
NOWS = (100.0, 200.0, 300.0, 400.0)


@st.composite
def facts(draw: st.DrawFn, superseded: bool = False) -> Fact:
    fact_id = draw(st.sampled_from(IDS))
    scope = draw(st.sampled_from(list(Scope)))
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    return Fact(
        id=fact_id,
        text=" ".join(words),
        scope=scope,
        organization=draw(st.sampled_from(["org-a", "org-b"]))
        if scope is Scope.ORGANIZATION
        else None,
        domain=draw(st.sampled_from(["general", "build"])),
        confidence=draw(st.sampled_from([0.0, 0.3, 0.5, 1.0])),
        valid_until=draw(st.sampled_from([None, None, 150.0, 250.0, 350.0])),
        conflict_group=draw(st.sampled_from([None, "g1", "g1", "g2"])),
        created_at=float(draw(st.integers(0, 4))),
        superseded_by=draw(st.sampled_from([i for i in IDS if i != fact_id]))
        if superseded
        else None,
    )


@st.composite
def remembers(draw: st.DrawFn, superseded: bool = False) -> RememberFact:
    """A fact and its writer's organization (its own for an organization fact; any for one
    of another scope): whose organization facts it may supersede."""
    fact = draw(facts(superseded))
    if fact.scope is Scope.ORGANIZATION:
        return RememberFact(fact)
    return RememberFact(fact, organization=draw(st.sampled_from([None, "org-a", "org-b"])))


writes = st.one_of(
    remembers(),
    remembers(),
    st.sampled_from(IDS).map(ForgetFact),
    remembers(superseded=True),  # refused: a new fact names no superseder
)


@st.composite
def narrow_filters(draw: st.DrawFn) -> FactFilter:
    organization = draw(st.sampled_from([None, "org-a", "org-b"]))
    scopes = draw(st.none() | st.frozensets(st.sampled_from(list(Scope))))
    if scopes is not None and Scope.ORGANIZATION in scopes and organization is None:
        organization = "org-a"
    return FactFilter(
        scopes=scopes,
        domain=draw(st.sampled_from([None, "general", "build"])),
        min_confidence=draw(st.sampled_from([0.0, 0.5])),
        organization=organization,
        now=draw(st.sampled_from(NOWS)),
        include_hidden=draw(st.booleans()),
    )


# Half the time everything a caller may see at some moment: the chain rules at work.
broad = st.builds(FactFilter, organization=st.just("org-a"), now=st.sampled_from(NOWS))
filters = st.one_of(broad, narrow_filters())
terms = st.lists(st.sampled_from((*WORDS, "zebra")), max_size=3, unique=True)


def check_links(stored: dict[str, Fact], order: dict[str, int]) -> None:
    """Writers of several organizations (no single chain per group): each link names a
    later fact of the same group. (That no writer supersedes another organization's facts
    is the model's rule, which every backend matches.)"""
    for fact in stored.values():
        if fact.superseded_by is None:
            continue
        newer = stored[fact.superseded_by]
        assert newer.conflict_group == fact.conflict_group is not None, fact
        assert order[newer.id] > order[fact.id], (fact, newer)


def check_chains(stored: dict[str, Fact], order: dict[str, int]) -> None:
    groups: dict[str, list[Fact]] = {}
    for fact in stored.values():
        if fact.conflict_group is None:
            assert fact.superseded_by is None, fact
        else:
            groups.setdefault(fact.conflict_group, []).append(fact)
    for members in groups.values():
        members.sort(key=lambda fact: order[fact.id])
        links = [fact.superseded_by for fact in members]
        assert links == [fact.id for fact in members[1:]] + [None], members


class MemoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = MemoryModel()
        self.root = Path(tempfile.mkdtemp(prefix="memory-machine-"))
        self.exits = contextlib.ExitStack()
        self.stores: list[Any] = []
        for kind in usable_backends():
            (self.root / kind).mkdir()
            self.stores.append(self.exits.enter_context(open_memory(kind, self.root / kind)))

    def _apply(self, batch: list[Any]) -> None:
        expected = self.model.apply(batch)
        for store in self.stores:
            answers = store.memory_apply(batch)
            assert len(answers) == len(expected)
            for answer, wanted in zip(answers, expected, strict=True):
                if isinstance(wanted, type):
                    assert isinstance(answer, wanted), (store, answer)
                else:
                    assert answer == wanted, (store, answer, wanted)

    @rule(write=writes)
    def write_one(self, write: Any) -> None:
        self._apply([write])

    @rule(batch=st.lists(writes, min_size=2, max_size=5))
    def write_a_batch(self, batch: list[Any]) -> None:
        self._apply(batch)

    @rule(words=terms, where=filters, limit=st.sampled_from([1, 2, 3, 1000]))
    def search(self, words: list[str], where: FactFilter, limit: int) -> None:
        assert where.now is not None
        expected = self.model.matches(words, where, where.now)
        for store in self.stores:
            every = store.memory_search(words, where, limit=1000)
            assert {hit.fact.id for hit in every} == expected, store
            keys = [(-hit.score, hit.fact.id) for hit in every]
            assert keys == sorted(keys)  # best first, ties by id
            for hit in every:
                assert hit.fact == self.model.facts[hit.fact.id]
            assert store.memory_search(words, where, limit=limit) == every[:limit]

    @rule(where=filters, limit=st.sampled_from([1, 2, 5, 1000]), data=st.data())
    def list_facts(self, where: FactFilter, limit: int, data: st.DataObject) -> None:
        assert where.now is not None
        keys = sorted((f.created_at, f.id) for f in self.model.facts.values())
        after = data.draw(st.none() | st.sampled_from(keys)) if keys else None
        expected = self.model.listing(where, where.now, limit, after)
        for store in self.stores:
            assert store.memory_list(where, limit=limit, after=after) == expected, store

    @invariant()
    def every_backend_holds_the_models_facts(self) -> None:
        for store in self.stores:
            assert store.memory_count() == len(self.model.facts)
            stored = {fact_id: store.memory_get(fact_id) for fact_id in self.model.facts}
            assert stored == self.model.facts, store
            check_links(stored, self.model.order)
            assert store.memory_dropped == 0

    def teardown(self) -> None:
        self.exits.close()
        shutil.rmtree(self.root, ignore_errors=True)


TestMemoryAgainstTheModel = pytest.mark.timeout(SHRINKING)(MemoryMachine.TestCase)
TestMemoryAgainstTheModel.settings = settings(
    max_examples=examples(100), stateful_step_count=25, deadline=None
)


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@pytest.mark.parametrize("kind", MEMORY_BACKENDS)
@settings(max_examples=examples(60), deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(IDS), st.sampled_from(["g1", "g2"]), st.booleans()),
        min_size=1,
        max_size=40,
    )
)
def test_each_group_is_one_chain_in_remembering_order_whose_head_is_shown(
    kind: str, steps: list[tuple[str, str, bool]]
) -> None:
    """Many facts in few groups, remembered and forgotten in any order, nothing expiring:
    each group is one chain in remembering order, and a search shows its last fact only."""
    with tempfile.TemporaryDirectory() as root, open_memory(kind, Path(root)) as store:
        check_one_chain_per_group(store, steps)


def check_one_chain_per_group(memory_store: Any, steps: list[tuple[str, str, bool]]) -> None:
    model = MemoryModel()
    for fact_id, group, remembering in steps:
        if remembering:
            batch: list[Any] = [
                RememberFact(
                    Fact(id=fact_id, text=f"ember {group}", scope=Scope.USER, conflict_group=group)
                )
            ]
        else:
            batch = [ForgetFact(fact_id)]
        model.apply(batch)
        memory_store.memory_apply(batch)
    stored = {f.id: f for f in memory_store.memory_list(FactFilter(include_hidden=True), limit=100)}
    assert stored == model.facts
    check_chains(stored, model.order)
    heads = {
        group: max(
            (f for f in stored.values() if f.conflict_group == group),
            key=lambda f: model.order[f.id],
        )
        for group in {f.conflict_group for f in stored.values()}
    }
    shown = memory_store.memory_search(["ember"], FactFilter(), limit=100)
    assert sorted(hit.fact.id for hit in shown) == sorted(f.id for f in heads.values())
