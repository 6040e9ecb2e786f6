"""``same(a, b)``: equal as a replayed value must be (E10): the same types all the way down,
``==``, NaN equal to NaN, ``-0.0`` not ``0.0``, the same time zone and fold."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any


def _same_zone(a: dt.tzinfo | None, b: dt.tzinfo | None) -> bool:
    if type(a) is not type(b):
        return False
    if a is None or b is None:
        return True
    return (
        a.utcoffset(None) == b.utcoffset(None)
        and a.tzname(None) == b.tzname(None)
        and (getattr(a, "key", None) == getattr(b, "key", None))
    )


def _match_all(a: list[Any], b: list[Any]) -> bool:
    # Members of sets and keys of dicts, which may hold NaN: paired up one by one.
    rest = list(b)
    for item in a:
        for index, other in enumerate(rest):
            if same(item, other):
                del rest[index]
                break
        else:
            return False
    return not rest


def same(a: Any, b: Any) -> bool:
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is float:
        if math.isnan(a):
            return math.isnan(b)
        return bool(a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    if kind is decimal.Decimal:
        return str(a) == str(b)  # sign, digits, exponent and NaN alike
    if kind is list or kind is tuple:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if kind is dict:
        return len(a) == len(b) and _match_all(list(a.items()), list(b.items()))
    if kind is set or kind is frozenset:
        return len(a) == len(b) and _match_all(list(a), list(b))
    if kind is dt.datetime or kind is dt.time:
        return (
            a.replace(tzinfo=None) == b.replace(tzinfo=None)
            and a.fold == b.fold
            and _same_zone(a.tzinfo, b.tzinfo)
        )
    return bool(a == b)
