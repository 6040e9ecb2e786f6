"""Where the run page draws a plan's steps and edges: no edge passes through a box, rows
are ordered to cross few edges, and a huge plan costs no more than its size."""

from __future__ import annotations

import itertools
from typing import Any

import mainspring as ms
from mainspring.ui._layout import MOST_WAYPOINTS, Layout, layout


def plan_of(*steps: tuple[str, tuple[str, ...]]) -> ms.Plan:
    return ms.Plan(
        id="p",
        goal="g",
        steps=tuple(ms.PlanStep(id=i, tool="t", depends_on=deps) for i, deps in steps),
    )


#: The docs' picture: lint -> publish skips the layer review is in.
RESEARCH = plan_of(
    ("fetch", ()),
    ("count", ("fetch",)),
    ("lint", ("fetch",)),
    ("review", ("count",)),
    ("publish", ("lint", "review")),
)


def segments(drawn: Layout) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Each edge's pieces between adjacent layers, as ((layer, row), (layer + 1, row))."""
    found = []
    for edge in drawn.edges:
        first = drawn.depth[edge["from"]]
        points = [
            (first, drawn.row[edge["from"]]),
            *((first + 1 + i, row) for i, row in enumerate(edge["via"])),
            (drawn.depth[edge["to"]], drawn.row[edge["to"]]),
        ]
        found += list(itertools.pairwise(points))
    return found


def crossings(drawn: Layout) -> int:
    pieces = segments(drawn)
    return sum(
        1
        for (a, b), (c, d) in itertools.combinations(pieces, 2)
        if a[0] == c[0] and (a[1] - c[1]) * (b[1] - d[1]) < 0
    )


def boxes(drawn: Layout) -> set[tuple[int, int]]:
    return {(drawn.depth[s], drawn.row[s]) for s in drawn.row}


def test_an_edge_that_skips_a_layer_passes_a_slot_no_box_takes() -> None:
    drawn = layout(RESEARCH)
    (skipping,) = [e for e in drawn.edges if (e["from"], e["to"]) == ("lint", "publish")]
    assert len(skipping["via"]) == 1  # one waypoint: in review's layer
    assert (2, skipping["via"][0]) not in boxes(drawn)
    assert all(e["via"] == [] for e in drawn.edges if e is not skipping)
    for edge in drawn.edges:  # every waypoint is a free slot of its layer
        first = drawn.depth[edge["from"]]
        for i, row in enumerate(edge["via"]):
            assert (first + 1 + i, row) not in boxes(drawn)
    assert len(boxes(drawn)) == 5  # no two steps share a slot
    assert crossings(drawn) == 0
    assert (drawn.columns, drawn.rows) == (4, 2)


def test_rows_are_ordered_to_uncross_edges_the_plans_order_would_cross() -> None:
    crossed = plan_of(("x", ()), ("y", ()), ("p", ("y",)), ("q", ("x",)))
    drawn = layout(crossed)
    assert crossings(drawn) == 0
    assert drawn.row["q"] < drawn.row["p"]  # q follows x, which is above y
    wide = plan_of(
        *((f"a{i}", ()) for i in range(6)),
        *((f"b{i}", (f"a{5 - i}",)) for i in range(6)),
        ("end", tuple(f"b{i}" for i in range(6))),
    )
    assert crossings(layout(wide)) == 0


def test_a_plan_past_the_waypoint_bound_keeps_its_order_and_draws_skips_straight() -> None:
    count = 200  # the last step depends on every other: about count**2 / 2 waypoints
    steps: list[tuple[str, tuple[str, ...]]] = [("s0", ())]
    steps += [(f"s{i}", (f"s{i - 1}",)) for i in range(1, count)]
    steps.append(("last", tuple(f"s{i}" for i in range(count))))
    assert count * count // 2 > MOST_WAYPOINTS
    drawn = layout(plan_of(*steps))
    assert all(edge["via"] == [] for edge in drawn.edges)
    assert drawn.rows == 1
    assert drawn.depth["last"] == count


def test_a_missing_dependency_is_left_out_and_a_repeated_one_is_one_edge() -> None:
    drawn: Any = layout(plan_of(("a", ()), ("b", ("a", "a", "gone"))))
    assert [(e["from"], e["to"]) for e in drawn.edges] == [("a", "b")]
