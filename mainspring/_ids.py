"""The one id rule of the whole package (invariant X1): actor names and stored ids alike.

An id is 1 to 256 of ``A-Z a-z 0-9 . _ : -``, and not ``.`` or ``..`` (those match the
character class but name directories). The kernel refuses actor names that break it with a
``ValueError``; storage refuses ids with ``InvalidId`` (``mainspring.storage``). This module
imports nothing of mainspring, so every layer can use it.
"""

from __future__ import annotations

import functools
import re
from typing import TypeGuard

__all__ = ["ID_PATTERN", "ID_RULE", "is_valid_id"]

ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,256}")

#: The rule in words, for error messages.
ID_RULE = "match [A-Za-z0-9._:-]{1,256} and be neither '.' nor '..'"


def is_valid_id(value: object) -> TypeGuard[str]:
    """True if ``value`` is a ``str`` (exactly, not a subclass) that follows the id rule."""
    return type(value) is str and _valid(value)


# Records are rebuilt on every commit and re-check the same ids each time; remembering the
# verdict for recent strings keeps that cheap. Only exact str instances reach the cache.
@functools.lru_cache(maxsize=65_536)
def _valid(value: str) -> bool:
    return ID_PATTERN.fullmatch(value) is not None and value not in {".", ".."}
