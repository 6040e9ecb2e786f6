"""Id validation for storage: every id is checked before it touches a path or a query (X1).

The rule itself is the package's one rule, in ``mainspring._ids``; here it raises storage's
:class:`InvalidId`.
"""

from __future__ import annotations

from .._ids import ID_PATTERN, is_valid_id
from ._errors import InvalidId

__all__ = ["ID_PATTERN", "check_id"]


def check_id(value: object) -> str:
    """Return ``value`` if it is a valid id; raise :class:`InvalidId` otherwise.

    ``.`` and ``..`` match the character class but would name directories, so they are refused.
    """
    if not is_valid_id(value):
        raise InvalidId(value)
    return value
