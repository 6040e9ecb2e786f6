"""``AppendOnly`` behaves as the tuple it stands for (``AppendOnlyList``: as the list), for
every reader, whichever version of a shared list it is; growing the newest version never
copies what came before, and an older version keeps its items when a newer one grows."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mainspring.storage import AgentTaskRecord
from mainspring.storage._codec import canonical_json
from mainspring.storage._seam import (
    AppendOnly,
    AppendOnlyList,
    appended,
    encode,
    structure,
    unstructure,
)
from mainspring.storage._validators import same_json

items = st.lists(st.integers(-3, 3) | st.text(max_size=2), max_size=12)
#: A history of versions: each grows one of the versions before it (the newest, mostly).
growths = st.lists(st.tuples(st.integers(0, 20), items), min_size=1, max_size=8)


def _versions(
    kind: type[AppendOnly[Any]], first: list[Any], steps: list[tuple[int, list[Any]]]
) -> list[tuple[AppendOnly[Any], tuple[Any, ...]]]:
    """Every version made, each with the tuple it must equal."""
    versions = [(kind(first), tuple(first))]
    for pick, new in steps:
        view, plain = versions[-1] if pick >= len(versions) else versions[pick]
        versions.append((view.extended(new), (*plain, *new)))
    return versions


@given(items, growths)
def test_every_version_reads_as_its_tuple(first: list[Any], steps: Any) -> None:
    for view, plain in _versions(AppendOnly, first, steps):
        assert view == plain
        assert plain == view
        assert not view != plain  # noqa: SIM202
        assert len(view) == len(plain)
        assert list(view) == list(plain)
        assert list(reversed(view)) == list(reversed(plain))
        assert hash(view) == hash(plain)
        assert repr(view) == repr(plain)
        for index in range(-len(plain) - 1, len(plain) + 1):
            if -len(plain) <= index < len(plain):
                assert view[index] == plain[index]
            else:
                with pytest.raises(IndexError):
                    view[index]
        for start in (None, 0, 1, -2):
            for stop in (None, 2, -1):
                for step in (None, 1, 2, -1):
                    got = view[start:stop:step]
                    assert type(got) is tuple
                    assert got == plain[start:stop:step]
        assert view + (9,) == plain + (9,)  # noqa: RUF005
        assert (9,) + view == (9,) + plain  # noqa: RUF005
        assert view * 2 == plain * 2
        assert view < (*plain, 0)
        assert view <= plain
        assert view >= plain
        assert not view > plain
        for value in (*plain[:3], 99, "zz"):
            assert (value in view) == (value in plain)
        assert view != list(plain)
        assert (view == list(plain)) is False
        assert pickle.loads(pickle.dumps(view)) == plain
        assert copy.deepcopy(view) == plain
        assert copy.copy(view) is view
        assert orjson.loads(canonical_json({"x": view})) == {"x": list(plain)}


numbers = st.lists(st.integers(-3, 3), max_size=12)


@given(numbers, st.lists(st.tuples(st.integers(0, 20), numbers), min_size=1, max_size=8))
def test_versions_compare_with_each_other_as_their_tuples(first: list[Any], steps: Any) -> None:
    versions = _versions(AppendOnly, first, steps)
    for a, plain_a in versions:
        for b, plain_b in versions:
            assert (a == b) == (plain_a == plain_b)
            assert (a < b) == (plain_a < plain_b)
        assert a != AppendOnlyList(plain_a)  # a tuple never equals a list


@given(items, growths)
def test_a_list_view_reads_as_its_list(first: list[Any], steps: Any) -> None:
    for view, plain in _versions(AppendOnlyList, first, steps):
        as_list = list(plain)
        assert view == as_list
        assert as_list == view
        assert view != plain
        assert type(view[1:]) is list
        assert view[1:] == as_list[1:]
        assert view + [9] == [*as_list, 9]  # noqa: RUF005
        assert [9] + view == [9, *as_list]  # noqa: RUF005
        assert same_json(view, as_list)
        assert same_json(as_list, view)
        assert orjson.loads(canonical_json(view)) == as_list
        with pytest.raises(TypeError):
            hash(view)


def test_growing_the_newest_version_shares_its_list_and_an_older_one_copies() -> None:
    first = AppendOnly([1, 2])
    second = first.appended(3)
    third = second.appended(4)
    assert first.shares(second)  # nothing copied
    assert second.shares(third)
    assert (first, second, third) == ((1, 2), (1, 2, 3), (1, 2, 3, 4))
    branch = second.appended(5)  # an older version grows: its own list from here
    assert not branch.shares(third)
    assert (second, third, branch) == ((1, 2, 3), (1, 2, 3, 4), (1, 2, 3, 5))


def test_what_was_checked_of_a_list_holds_for_every_version() -> None:
    view = AppendOnly(["a", "b"])
    view.mark_checked("id")
    grown = view.extended(["c", "d"])
    assert grown.checked("id") == 2
    assert view.checked("id") == 2
    grown.mark_checked("id")
    assert view.checked("id") == 2  # never more than a version holds
    assert grown.appended("e").checked("id") == 4
    short = AppendOnly(["a"])
    short.appended("b").mark_checked("id")
    assert short.appended("c").checked("id") == 1  # a branch copies: its prefix stays known


def test_appended_takes_a_tuple_and_the_converter_writes_a_list() -> None:
    grown = appended(("a",), "b")
    assert isinstance(grown, AppendOnly)
    assert grown == ("a", "b")
    assert appended(grown, "c") == ("a", "b", "c")
    record = AgentTaskRecord(
        id="t", agent_id="a", step_id="s", execution_id="e", created_at=0.0, updated_at=0.0
    )
    record = attrs.evolve(record, inner_completed=grown)
    assert unstructure(record)["inner_completed"] == ["a", "b"]
    assert orjson.loads(encode(record))["inner_completed"] == ["a", "b"]
    assert structure(unstructure(record), AgentTaskRecord) == record
