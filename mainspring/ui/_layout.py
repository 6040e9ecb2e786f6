"""Where the run page draws each step of a plan: layers by dependency depth, rows within a
layer ordered to cross few edges, and the path of each edge between the boxes.

An edge that skips layers gets a waypoint in each layer it passes (a slot of that layer's
column no box takes), so the page draws it through the gaps between boxes, never across a
box. Rows are ordered by the barycenter of their neighbours, swept down and up a few
times; the order with the fewest crossings found is kept. Bounded: past
:data:`MOST_WAYPOINTS` waypoints, skipping edges are drawn straight (they may cross boxes)
and the rows keep the plan's order, so a huge plan costs no more than its size.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import attrs

from ..storage import Plan

#: The most waypoints (slots of edges that skip layers) a layout makes.
MOST_WAYPOINTS = 5_000
#: Down-and-up sweeps of the barycenter ordering.
SWEEPS = 4
#: Above this many edge segments, crossings are not counted (the last sweep's order stays).
MOST_COUNTED = 500


def depths(plan: Plan) -> dict[str, int]:
    """Each step's depth in the plan's graph: 0 for a step with no dependency, else one more
    than its deepest dependency (a dependency the plan lacks is ignored; a cycle, which a
    validated plan never has (P1), does not loop). Walked with a stack of its own, not by
    recursion: a chain of a thousand steps listed last step first is as fine as any."""
    needs = {step.id: tuple(step.depends_on) for step in plan.steps}
    found: dict[str, int] = {}
    for root in needs:
        if root in found:
            continue
        path = {root}
        stack = [(root, iter(needs[root]))]
        while stack:
            step_id, rest = stack[-1]
            below = next((d for d in rest if d in needs and d not in found and d not in path), None)
            if below is not None:
                path.add(below)
                stack.append((below, iter(needs[below])))
                continue
            found[step_id] = 1 + max((found[d] for d in needs[step_id] if d in found), default=-1)
            path.discard(step_id)
            stack.pop()
    return found


@attrs.frozen
class Layout:
    """``depth`` and ``row`` of each step; ``edges`` as the page draws them (``from``,
    ``to``, and ``via``: the row of the waypoint in each layer between them); ``columns``
    and ``rows``: the grid's size."""

    depth: dict[str, int]
    row: dict[str, int]
    edges: list[dict[str, Any]]
    columns: int
    rows: int


# A node of the layered graph: a step's id, or a waypoint ("", edge number, layer).
_Node = str | tuple[str, int, int]


def _crossings(
    upper: Sequence[_Node], lower: Sequence[_Node], links: list[tuple[_Node, _Node]]
) -> int:
    at_upper = {node: i for i, node in enumerate(upper)}
    at_lower = {node: i for i, node in enumerate(lower)}
    ends = sorted((at_upper[a], at_lower[b]) for a, b in links if a in at_upper and b in at_lower)
    count = 0
    for i, (a1, b1) in enumerate(ends):
        for a2, b2 in ends[i + 1 :]:
            if a2 > a1 and b2 < b1:
                count += 1
    return count


def layout(plan: Plan) -> Layout:
    """The layout of ``plan`` (see the module)."""
    depth = depths(plan)
    columns = 1 + max(depth.values(), default=-1)
    layers: list[list[_Node]] = [[] for _ in range(columns)]
    for step in plan.steps:
        layers[depth[step.id]].append(step.id)
    pairs = [
        (dep, step.id)
        for step in plan.steps
        for dep in dict.fromkeys(step.depends_on)
        if dep in depth
    ]
    span = sum(max(0, depth[to] - depth[dep] - 1) for dep, to in pairs)
    routed = span <= MOST_WAYPOINTS
    # Each edge as its chain of nodes, one per layer it reaches.
    chains: list[list[_Node]] = []
    for number, (dep, to) in enumerate(pairs):
        chain: list[_Node] = [dep]
        if routed:
            for layer in range(depth[dep] + 1, depth[to]):
                waypoint = ("", number, layer)
                layers[layer].append(waypoint)
                chain.append(waypoint)
        chain.append(to)
        chains.append(chain)
    # links[l]: the segments from layer l to layer l + 1 (both ends in adjacent layers).
    links: list[list[tuple[_Node, _Node]]] = [[] for _ in range(max(columns - 1, 0))]
    for chain in chains:
        for a, b in itertools.pairwise(chain):
            layer = depth[a] if isinstance(a, str) else a[2]
            if isinstance(b, str) and depth[b] != layer + 1:
                continue  # a skipping edge drawn straight (not routed)
            links[layer].append((a, b))
    segments = sum(len(group) for group in links)
    if routed:
        layers = _ordered(layers, links, counted=segments <= MOST_COUNTED)
    row = {}
    slot: dict[_Node, int] = {}
    for nodes in layers:
        for i, node in enumerate(nodes):
            slot[node] = i
            if isinstance(node, str):
                row[node] = i
    edges = [
        {"from": chain[0], "to": chain[-1], "via": [slot[node] for node in chain[1:-1]]}
        for chain in chains
    ]
    rows = max((len(nodes) for nodes in layers), default=0)
    return Layout(depth=depth, row=row, edges=edges, columns=columns, rows=rows)


def _total(layers: list[list[_Node]], links: list[list[tuple[_Node, _Node]]]) -> int:
    return sum(_crossings(layers[i], layers[i + 1], links[i]) for i in range(len(links)))


def _ordered(
    layers: list[list[_Node]], links: list[list[tuple[_Node, _Node]]], *, counted: bool
) -> list[list[_Node]]:
    """Rows ordered by the barycenter of each node's neighbours in the layer before (on the
    way down) or after (on the way up); ties keep the current order."""
    above: dict[_Node, list[_Node]] = {}
    below: dict[_Node, list[_Node]] = {}
    for group in links:
        for a, b in group:
            below.setdefault(a, []).append(b)
            above.setdefault(b, []).append(a)
    best = [list(nodes) for nodes in layers]
    fewest = _total(best, links) if counted else 0
    current = [list(nodes) for nodes in layers]

    def sort(layer: int, neighbours: dict[_Node, list[_Node]], beside: int) -> None:
        at = {node: i for i, node in enumerate(current[beside])}
        place = {node: i for i, node in enumerate(current[layer])}

        def key(node: _Node) -> tuple[float, int]:
            near = [at[n] for n in neighbours.get(node, ()) if n in at]
            return (sum(near) / len(near) if near else float(place[node]), place[node])

        current[layer].sort(key=key)

    for _ in range(SWEEPS):
        if fewest == 0 and counted:
            break
        for layer in range(1, len(current)):
            sort(layer, above, layer - 1)
        for layer in range(len(current) - 2, -1, -1):
            sort(layer, below, layer + 1)
        if not counted:
            best = [list(nodes) for nodes in current]
            continue
        now = _total(current, links)
        if now < fewest:
            fewest, best = now, [list(nodes) for nodes in current]
    return best
