"""A stored entry that did not parse, kept as it was (E7, E8).

An execution holds lists of records that are read one by one (its agent tasks, the external
workers, the tasks they serve, their trail). Each item is parsed once, when it is first
looked at (``_entries``), into its record or, if it does not parse, into an
:class:`Unreadable`: the stored data
verbatim, its key if one can be read, and why it did not parse. So one bad entry fails
closed on its own (E8: never coerced, never taken for absent) and is written back exactly as
it was read (E7: reading never writes, never loses).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from ._validators import same_json

__all__ = ["MAX_REASON", "Unreadable", "entry_key"]

#: How long an :class:`Unreadable`'s reason may be (characters): the parse errors, cut.
MAX_REASON = 1_000
_ID = re.compile(r"[A-Za-z0-9._:-]{1,256}\Z")


def _clamp(value: str) -> str:
    return value if len(value) <= MAX_REASON else value[: MAX_REASON - 1] + "…"


def _raw(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not dict:
        raise TypeError(f"{attribute.name} must be the stored object (a dict)")


def entry_key(raw: dict[str, Any], field: str = "id") -> str | None:
    """``raw[field]`` if it is a valid id (X1) or, for ``seq``, a whole number; else None."""
    value = raw.get(field)
    if field == "seq":
        return str(value) if type(value) is int and value >= 0 else None
    return value if type(value) is str and _ID.match(value) else None


@attrs.frozen(kw_only=True, eq=False)
class Unreadable:
    """A stored entry that did not parse (E8): ``raw`` is the stored object exactly as read
    (bounded as every read is, X2) and is written back as it is (E7); ``key`` is its id (a
    trail entry: its sequence number) when that much can be read, else None; ``reason`` says
    why it did not parse (the parse errors with their paths, at most ``MAX_REASON``
    characters). Readers report it and leave it alone: it is neither dropped nor taken for
    an absent record. Two compare equal when their stored objects are alike, types
    included."""

    raw: dict[str, Any] = attrs.field(validator=_raw)
    key: str | None = None
    reason: str = attrs.field(default="", converter=_clamp)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Unreadable:
            return NotImplemented
        return (
            self.key == other.key and self.reason == other.reason and same_json(self.raw, other.raw)
        )

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]
