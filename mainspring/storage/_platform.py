"""What the operating system offers the stores. POSIX has all of it; Windows lacks ``flock``
and some ``open()`` flags, so only FileStore (which needs ``flock`` for compare-and-set across
processes) is unavailable there, and everything else degrades to what the platform has."""

from __future__ import annotations

import os
import sys
from types import ModuleType

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
O_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)
#: Windows opens files in text mode unless told otherwise; bytes must be read as they are.
O_BINARY: int = getattr(os, "O_BINARY", 0)
#: 0 where the platform cannot refuse a symlink at open(): callers check ``is_symlink`` first.
O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)

PLATFORM = sys.platform


def require_flock(what: str) -> ModuleType:
    """The ``fcntl`` module, or a clear error naming the platform that lacks it."""
    if fcntl is None:
        from ._errors import StorageError

        raise StorageError(
            f"{what} needs POSIX file locks (fcntl.flock), which {PLATFORM} does not have; "
            "use SqliteStore (a path ending in .sqlite3) instead"
        )
    return fcntl
