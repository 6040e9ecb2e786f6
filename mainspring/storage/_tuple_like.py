"""What a sequence that stands for a tuple shares: it orders, adds, repeats, tests membership
and prints as the tuple of its items, and takes a tuple, another such sequence or a view
standing for a tuple as its equal.

A run's sequences (``_vector.Vector``, versions of one persistent vector) and a stored
record's entries read one by one (``_entries.Entries``) are both read by user code as the
tuples they stand for; each says how it makes that tuple (``_tuple``), how it compares for
equality and how it hashes, and inherits the rest from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, cast

__all__ = ["TupleLike"]

T = TypeVar("T", covariant=True)


class TupleLike(Sequence[T]):
    """A sequence read as the tuple of its items (see the module docstring)."""

    __slots__ = ()

    def _tuple(self) -> tuple[T, ...]:
        """The tuple this sequence stands for."""
        raise NotImplementedError

    def _other(self, other: object) -> tuple[Any, ...] | None:
        """``other`` as a tuple if it stands for one, else None."""
        if isinstance(other, tuple):
            return other
        if isinstance(other, TupleLike):
            return other._tuple()
        plain = getattr(other, "_plain", None)  # an AppendOnly view standing for a tuple
        if plain is not None and getattr(other, "_as", None) is tuple:
            return cast(tuple[Any, ...], plain())
        return None

    def __contains__(self, item: object) -> bool:
        return any(x is item or x == item for x in self)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __lt__(self, other: object) -> bool:
        theirs = self._other(other)
        return NotImplemented if theirs is None else self._tuple() < theirs

    def __le__(self, other: object) -> bool:
        theirs = self._other(other)
        return NotImplemented if theirs is None else self._tuple() <= theirs

    def __gt__(self, other: object) -> bool:
        theirs = self._other(other)
        return NotImplemented if theirs is None else self._tuple() > theirs

    def __ge__(self, other: object) -> bool:
        theirs = self._other(other)
        return NotImplemented if theirs is None else self._tuple() >= theirs

    def __add__(self, other: object) -> Any:
        theirs = self._other(other)
        return NotImplemented if theirs is None else self._tuple() + theirs

    def __radd__(self, other: object) -> Any:
        theirs = self._other(other)
        return NotImplemented if theirs is None else theirs + self._tuple()

    def __mul__(self, times: int) -> Any:
        return self._tuple() * times

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return repr(self._tuple())
