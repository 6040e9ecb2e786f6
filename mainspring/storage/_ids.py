"""Id and path validation for storage: every id is checked before it touches a path or a
query, every workspace path a user declares before it touches the file system (X1).

The rule itself is the package's one rule, in ``mainspring._ids``; here it raises storage's
:class:`InvalidId`.
"""

from __future__ import annotations

import posixpath

from .._ids import ID_PATTERN, is_valid_id
from ._errors import InvalidId

__all__ = ["ID_PATTERN", "MAX_PATH", "check_id", "check_relative_path", "is_valid_id"]


def check_id(value: object) -> str:
    """Return ``value`` if it is a valid id; raise :class:`InvalidId` otherwise.

    ``.`` and ``..`` match the character class but would name directories, so they are refused.
    """
    if not is_valid_id(value):
        raise InvalidId(value)
    return value


#: The longest path a checkpoint looks at (longer strings in a step input are not paths).
MAX_PATH = 4096


def check_relative_path(path: str) -> str:
    """``path`` normalised (``a/./b`` is ``a/b``) if it names something inside a workspace:
    relative, without ``..``, NUL or backslash, at most 4096 characters. Raises ValueError
    otherwise (X1: before it touches the file system). Symlinks leading out are refused by
    ``ctx.step`` (against the workspace) and never followed when the path is hashed."""
    if type(path) is not str or not path or len(path) > MAX_PATH:
        raise ValueError(f"a workspace path must be a string of 1..{MAX_PATH} characters")
    parts = path.split("/")
    if "\0" in path or "\\" in path or path.startswith("/") or ".." in parts:
        raise ValueError(f"{path[:200]!r} is not a path inside the workspace")
    normal = posixpath.normpath(path)
    if normal == ".":
        raise ValueError("a workspace path must name a file, not the workspace itself")
    return normal
