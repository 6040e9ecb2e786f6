"""Id validation: every id is checked before it touches a path or a query (invariant X1)."""

from __future__ import annotations

import functools
import re

from ._errors import InvalidId

__all__ = ["ID_PATTERN", "check_id"]

ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,256}")


def check_id(value: object) -> str:
    """Return ``value`` if it is a valid id; raise :class:`InvalidId` otherwise.

    ``.`` and ``..`` match the character class but would name directories, so they are refused.
    """
    if type(value) is not str or not _valid(value):
        raise InvalidId(value)
    return value


# Records are rebuilt on every commit and re-check the same ids each time; remembering the
# verdict for recent strings keeps that cheap. Only exact str instances reach the cache.
@functools.lru_cache(maxsize=65_536)
def _valid(value: str) -> bool:
    return ID_PATTERN.fullmatch(value) is not None and value not in {".", ".."}
