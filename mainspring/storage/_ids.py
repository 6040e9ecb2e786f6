"""Id validation: every id is checked before it touches a path or a query (invariant X1)."""

from __future__ import annotations

import re

from ._errors import InvalidId

__all__ = ["ID_PATTERN", "check_id"]

ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,256}")


def check_id(value: object) -> str:
    """Return ``value`` if it is a valid id; raise :class:`InvalidId` otherwise.

    ``.`` and ``..`` match the character class but would name directories, so they are refused.
    """
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None or value in {".", ".."}:
        raise InvalidId(value)
    return value
