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


def plain_record(value: R) -> R:
    """``value`` with every Vector and AppendOnly view in it, in its attrs records and in
    the tuples they hold, made the tuple (or list) it stands for; ``value`` itself when it
    holds none. User values (dicts, lists, an output) are left as they are: none of the
    runtime's sequences are in them."""
    return _plain(value)  # type: ignore[no-any-return]


def _plain(value: Any) -> Any:
    if isinstance(value, _VIEWS):
        items = [_plain(item) for item in value]
        return items if isinstance(value, AppendOnlyList) else tuple(items)
    if type(value) is tuple:
        made = tuple(_plain(item) for item in value)
        return value if all(a is b for a, b in zip(made, value, strict=True)) else made
    if attrs.has(type(value)):
        changes = {}
        for field in attrs.fields(type(value)):
            if not field.init:
                continue
            item = getattr(value, field.name)
            made = _plain(item)
            if made is not item:
                changes[field.alias] = made
        return attrs.evolve(value, **changes) if changes else value
    return value
