"""``Vector`` behaves as the tuple it stands for, for every reader, whichever version of a
lineage it is: a new version replaces and appends without touching the versions before it;
what changed between two versions is found by the nodes they do not share; and the record
validators and the journal's diff that take what changed from it decide as they do for
tuples."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainspring.storage import Execution, Observation, Plan, PlanStep
from mainspring.storage._codec import canonical_json
from mainspring.storage._journal.keys import _grown
from mainspring.storage._plain import plain_record
from mainspring.storage._seam import (
    AppendOnly,
    AppendOnlyList,
    Checkpoint,
    Vector,
    encode,
    structure,
    unstructure,
)
from tests._examples import examples

items = st.integers(-3, 3) | st.text(max_size=2)


#: A history of versions: each made from one of the versions before it (the newest,
#: mostly), with some positions replaced and some items appended. Lengths cross the trees'
#: 32-wide leaves and nodes.
def edits_of(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(
        st.tuples(
            st.integers(0, 12),
            st.lists(st.tuples(st.integers(0, 2000), values), max_size=4),
            st.lists(values, max_size=40),
        ),
        min_size=1,
        max_size=10,
    )


edits = edits_of(items)


def _versions(
    first: list[Any], steps: list[tuple[int, list[tuple[int, Any]], list[Any]]]
) -> list[tuple[Vector[Any], tuple[Any, ...]]]:
    """Every version made, each with the tuple it must equal."""
    versions: list[tuple[Vector[Any], tuple[Any, ...]]] = [(Vector(first), tuple(first))]
    for pick, replacing, new in steps:
        vector, plain = versions[-1] if pick >= len(versions) else versions[pick]
        replaced = {at % len(plain): item for at, item in replacing} if plain else {}
        listed = list(plain)
        for at, item in replaced.items():
            listed[at] = item
        versions.append((vector.updated(replaced, new), (*listed, *new)))
    return versions


#: Short and long first versions: a long one has a tree of two and three levels.
firsts = st.lists(items, max_size=40) | st.integers(0, 1100).map(
    lambda n: [str(i % 50) if i % 3 else i % 4 for i in range(n)]
)


@settings(max_examples=examples(60), deadline=None)
@given(firsts, edits)
def test_every_version_reads_as_its_tuple(first: list[Any], steps: Any) -> None:
    for vector, plain in _versions(first, steps):
        assert vector == plain
        assert plain == vector
        assert not vector != plain  # noqa: SIM202
        assert len(vector) == len(plain)
        assert tuple(vector) == plain
        assert list(reversed(vector)) == list(reversed(plain))
        assert hash(vector) == hash(plain)
        assert repr(vector) == repr(plain)
        for index in (0, 1, 31, 32, 33, 1023, 1024, len(plain) - 1, -1, -len(plain)):
            if -len(plain) <= index < len(plain):
                assert vector[index] == plain[index]
        for index in (len(plain), -len(plain) - 1):
            with pytest.raises(IndexError):
                vector[index]
        for start in (None, 0, 1, 33, -40):
            for stop in (None, 2, 64, -1):
                for step in (None, 1, 3, -1):
                    got = vector[start:stop:step]
                    assert type(got) is tuple
                    assert got == plain[start:stop:step]
        assert vector + (9,) == plain + (9,)  # noqa: RUF005
        assert (9,) + vector == (9,) + plain  # noqa: RUF005
        assert vector * 2 == plain * 2
        assert vector < (*plain, 0)
        assert vector <= plain
        assert vector >= plain
        assert not vector > plain
        for value in (*plain[:3], 99, "zz"):
            assert (value in vector) == (value in plain)
            assert vector.count(value) == plain.count(value)
        assert vector != list(plain)
        assert (vector == list(plain)) is False
        assert vector == AppendOnly(plain)
        assert AppendOnly(plain) == vector
        assert pickle.loads(pickle.dumps(vector)) == plain
        assert copy.deepcopy(vector) == plain
        assert copy.copy(vector) is vector
        assert orjson.loads(canonical_json({"x": vector})) == {"x": list(plain)}


numbers = st.lists(st.integers(-3, 3), max_size=40) | st.integers(0, 1100).map(
    lambda n: [i % 5 - 2 for i in range(n)]
)
number_edits = edits_of(st.integers(-3, 3))


@settings(max_examples=examples(60), deadline=None)
@given(numbers, number_edits)
def test_versions_compare_with_each_other_as_their_tuples(first: list[Any], steps: Any) -> None:
    versions = _versions(first, steps)
    for a, plain_a in versions:
        for b, plain_b in versions:
            assert (a == b) == (plain_a == plain_b)
            assert (a < b) == (plain_a < plain_b)
            assert (a != b) == (plain_a != plain_b)


@settings(max_examples=examples(60), deadline=None)
@given(firsts, edits)
def test_what_changed_between_two_versions_is_where_they_hold_other_objects(
    first: list[Any], steps: Any
) -> None:
    versions = _versions(first, steps)
    for new, _ in versions:
        for old, _ in versions:
            changed = new.changed_since(old)
            if len(new) < len(old):
                assert changed is None
                continue
            assert changed == [i for i in range(len(old)) if new[i] is not old[i]]


@settings(max_examples=examples(60), deadline=None)
@given(firsts, edits)
def test_a_version_knows_what_it_changed_since_the_one_it_was_made_from(
    first: list[Any], steps: Any
) -> None:
    versions = _versions(first, steps)
    assert versions[0][0].delta() is None  # built from items: nothing known
    for made_at, (pick, _, _) in enumerate(steps, start=1):
        made = versions[made_at][0]
        parent = versions[made_at - 1 if pick >= made_at else pick]
        delta = made.delta()
        assert delta is not None
        replaced, start = delta
        assert start == len(parent[1])
        for index, before in replaced:
            assert before is parent[0][index] or before == parent[0][index]
        untouched = {index for index, _ in replaced}
        for index in range(start):
            if index not in untouched:
                assert made[index] is parent[0][index]


def test_an_older_version_keeps_its_items_when_a_newer_one_is_made() -> None:
    first = Vector(range(100))
    second = first.updated({5: "five", 99: "last"}, ["more"])
    assert tuple(first) == tuple(range(100))
    assert (second[5], second[99], second[100]) == ("five", "last", "more")
    assert second.changed_since(first) == [5, 99]
    assert first.changed_since(second) is None  # shorter: not a later version


def test_what_changed_is_found_when_the_newer_version_grew_its_tree_by_levels() -> None:
    # 100 items fit a tree of one level; 40,000 need three: the walk starts in the newer
    # tree's subtree that covers the whole older tree.
    first = Vector(range(100))
    grown = first.updated({7: "seven"}, range(100, 40_000))
    assert grown.changed_since(first) == [7]
    later = grown.updated({39_999: "last", 8: "eight"}, [])
    assert later.changed_since(first) == [7, 8]
    assert later.changed_since(grown) == [8, 39_999]


def test_checks_passed_carry_to_the_next_version_only_as_what_it_changed() -> None:
    first = Vector(["a", "b"])
    assert not first.passed("x")
    second = first.appended("c")
    assert not second.passed_before("x")  # its source had not passed it when made
    first.mark_passed("x")
    assert second.passed_before("x")  # ...and passed it since: it counts
    assert not second.passed("x")
    assert second.delta() == ((), 2)
    assert list(second.unchecked("x")) == ["c"]  # only what it appended
    assert list(second.unchecked("y")) == ["a", "b", "c"]  # its source never passed "y"
    third = second.updated({0: "A"}, ["d"])
    second.mark_passed("x")
    assert list(third.unchecked("x")) == ["A", "d"]  # what it replaced and appended
    third.mark_passed("x")
    assert third.unchecked("x") is None


# -- the records that hold them ----------------------------------------------------------


def _step(step_id: str, status: Any = "pending") -> PlanStep:
    return PlanStep(id=step_id, tool="t", status=status)


def test_a_plan_on_a_vector_refuses_a_repeated_id_made_by_a_replacement() -> None:
    steps = Vector([_step(f"s{i}") for i in range(100)])
    plan = Plan(id="p", goal="g", steps=steps)  # type: ignore[arg-type]
    moved = steps.replaced(7, _step("s7", "running"))
    assert Plan(id="p", goal="g", steps=moved).steps == moved  # type: ignore[arg-type]
    repeated = moved.replaced(8, _step("s9"))
    with pytest.raises(ValueError, match="unique"):
        attrs.evolve(plan, steps=repeated)
    appended = moved.appended(_step("s3"))
    with pytest.raises(ValueError, match="unique"):
        attrs.evolve(plan, steps=appended)


def test_completed_steps_on_a_vector_refuse_a_bad_id_replaced_or_appended() -> None:
    done = Vector([f"s{i}" for i in range(50)])
    Checkpoint(at=0.0, plan_version=1, completed_steps=done)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="completed_steps"):
        Checkpoint(at=0.0, plan_version=1, completed_steps=done.appended("no/slash"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="completed_steps"):
        Checkpoint(at=0.0, plan_version=1, completed_steps=done.replaced(3, ""))  # type: ignore[arg-type]
    fine = done.appended("s50")
    Checkpoint(at=0.0, plan_version=1, completed_steps=fine)  # type: ignore[arg-type]


def test_a_record_on_vectors_is_stored_and_read_back_as_the_one_on_tuples() -> None:
    steps = [_step(f"s{i}", "succeeded") for i in range(70)]
    done = [f"s{i}" for i in range(70)]
    on_tuples = Execution(
        id="e",
        goal="g",
        plan=Plan(id="p", goal="g", steps=tuple(steps)),
        plan_version=1,
        completed_steps=tuple(done),
        created_at=0.0,
        updated_at=0.0,
    )
    on_vectors = attrs.evolve(
        on_tuples,
        plan=Plan(id="p", goal="g", steps=Vector(steps)),  # type: ignore[arg-type]
        completed_steps=Vector(done),
    )
    assert on_vectors == on_tuples
    assert encode(on_vectors) == encode(on_tuples)
    assert unstructure(on_vectors) == unstructure(on_tuples)
    assert structure(unstructure(on_vectors), Execution) == on_tuples
    assert pickle.loads(pickle.dumps(on_vectors)) == on_tuples


@settings(max_examples=examples(60), deadline=None)
@given(numbers, edits)
def test_the_journal_finds_what_changed_between_versions_as_between_tuples(
    first: list[Any], steps: Any
) -> None:
    versions = _versions(first, steps)
    for new, plain_new in versions:
        for old, plain_old in versions:
            # Keyed by position, as a record's items are by id: a replaced item keeps it.
            found = _grown(old, new, str)
            assert found == _grown(plain_old, plain_new, str)


def test_E10_attrs_asdict_of_a_record_on_vectors_equals_that_of_the_record_on_tuples() -> None:
    # A live record holds Vectors where the record read back from a store holds tuples (a
    # planner's ``previous_plan`` on a live replan and on one after a resume, a custom
    # store's commit and its get). attrs.asdict recurses into tuples only (a Vector cannot
    # be one), so the runtime hands user code its records made plain (``plain_record``:
    # tests/executions/facade/test_runtime.py checks the hand-overs), and a custom store converts
    # with ``tuple(x)``: either way asdict/astuple equal those of the record on tuples.
    steps = (PlanStep(id="a", tool="t", input={"x": 1}), PlanStep(id="b", tool="t"))
    on_tuples = Plan(id="p", goal="g", steps=steps)
    on_vectors = Plan(id="p", goal="g", steps=Vector(steps))
    assert on_vectors == on_tuples
    for made in (plain_record(on_vectors), attrs.evolve(on_vectors, steps=tuple(on_vectors.steps))):
        assert type(made.steps) is tuple
        assert attrs.asdict(made) == attrs.asdict(on_tuples)
        assert attrs.astuple(made) == attrs.astuple(on_tuples)
    assert plain_record(on_tuples) is on_tuples  # nothing to make plain: nothing copied


def test_plain_record_makes_every_view_in_a_record_plain() -> None:
    inner = AppendOnly([Observation(step_id="i", ok=True, output=[1])])
    raw = AppendOnlyList([{"id": "i"}])
    made = plain_record((Vector([inner]), raw, Vector([Plan(id="p", goal="g", steps=Vector())])))
    assert type(made) is tuple
    assert type(made[0]) is tuple
    assert type(made[0][0]) is tuple
    assert made[0][0][0] is inner[0]  # records without views are kept, not copied
    assert type(made[1]) is list
    assert made[1] == [{"id": "i"}]
    assert type(made[2][0].steps) is tuple
