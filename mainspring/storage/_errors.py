"""Storage errors: whose fault, and what data is involved (STYLE.md, habit 7)."""

from __future__ import annotations

from ..actors import MainspringError

__all__ = ["InvalidId", "RecordError", "StorageError", "TooLarge"]


class StorageError(MainspringError):
    """Root of the storage errors."""


class InvalidId(StorageError, ValueError):
    """An id that does not match ``[A-Za-z0-9._:-]{1,256}``; nothing was read or written (X1)."""

    def __init__(self, value: object) -> None:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        super().__init__(f"invalid id {shown}: ids match [A-Za-z0-9._:-]{{1,256}}")
        self.value = value


class TooLarge(StorageError):
    """A read would exceed the size bound; refused before parsing (X2)."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size:,} bytes, over the {limit:,}-byte limit")
        self.what = what
        self.size = size
        self.limit = limit


class RecordError(StorageError, ValueError):
    """Stored data that does not parse as the record it claims to be.

    ``problems`` lists each one with its path, e.g. ``agent_tasks[3].state: ...``.
    """

    def __init__(self, kind: str, problems: list[str]) -> None:
        shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
        super().__init__(f"invalid {kind}: {shown}")
        self.kind = kind
        self.problems = problems
