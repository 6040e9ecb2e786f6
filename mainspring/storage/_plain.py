"""A live record as the plain data a record read back from a store is: its ``Vector`` and
``AppendOnly`` sequences become the tuples (an ``AppendOnlyList``: the list) they stand for.

A run keeps its records' sequences as Vectors and AppendOnly views (a step costs what it
changed, not the plan's length), which read as tuples but are not ``tuple`` instances:
``attrs.asdict``/``astuple`` and ``json`` do not take them as sequences. What the runtime
hands to user code (a planner's ``previous_plan``, a result) goes through :func:`plain_record`
once at that hand-over (E10: the same plain data a record read back holds), in O(its size),
never on a step's path.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from ._append_only import AppendOnly, AppendOnlyList
from ._vector import Vector

__all__ = ["plain_record"]

R = TypeVar("R")

_VIEWS = (Vector, AppendOnly)
#: Values that hold no sequence of the runtime's: returned as they are, unvisited (user
#: values, dicts and lists, included: see :func:`plain_record`).
_LEAVES = frozenset({str, int, float, bool, type(None), bytes, dict, list})
#: A record class's fields a copy is made with: (attribute name, argument name).
_FIELDS: dict[type[Any], tuple[tuple[str, str], ...]] = {}


def plain_record(value: R) -> R:
    """``value`` with every Vector and AppendOnly view in it, in its attrs records and in
    the tuples they hold, made the tuple (or list) it stands for; ``value`` itself when it
    holds none. User values (dicts, lists, an output) are left as they are: none of the
    runtime's sequences are in them."""
    return _plain(value)  # type: ignore[no-any-return]


def _fields(kind: type[Any]) -> tuple[tuple[str, str], ...]:
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(
            (field.name, field.alias) for field in attrs.fields(kind) if field.init
        )
    return fields


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is tuple:
        made = tuple(item if type(item) in _LEAVES else _plain(item) for item in value)
        return value if all(a is b for a, b in zip(made, value, strict=True)) else made
    if isinstance(value, _VIEWS):
        items = [item if type(item) in _LEAVES else _plain(item) for item in value]
        return items if isinstance(value, AppendOnlyList) else tuple(items)
    if attrs.has(kind):
        changes = {}
        for name, alias in _fields(kind):
            item = getattr(value, name)
            if type(item) in _LEAVES:
                continue
            made = _plain(item)
            if made is not item:
                changes[alias] = made
        return attrs.evolve(value, **changes) if changes else value
    return value
