"""An immutable sequence that grows by appending without copying what came before.

An agent task's inner steps (and their raw, stored form) are rebuilt on every inner step
with one item more: as tuples, step n copies (and the old record frees) the n before it.
:class:`AppendOnly` is a view of the first ``len`` items of one list that successive
versions share: appending to the newest view appends to the list (O(1)) and returns a view
one longer; an older view keeps its prefix, and appending to it copies that prefix into a
list of its own (correct always, O(n) only on that rare branch). Items at a position a view
covers are never changed, so what a check found true of a prefix stays true (``checked``).

For every reader it is a tuple: ``==`` (with tuples and other views), ordering, ``hash``,
iteration, ``len``, indexing, slicing (a slice is a tuple), ``+``, ``in``, ``index``,
``count``, ``repr``, pickling, and the storage converter and JSON encoder write it as a list.
It is not an instance of ``tuple``: code that tests ``type(x) is tuple`` must know it.
:class:`AppendOnlyList` is the same for a list (the raw, stored form of those steps).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar, cast, overload

__all__ = ["AppendOnly", "AppendOnlyList", "appended", "plain_list"]

T = TypeVar("T")


class _Items(list[Any]):
    """The list views share, and what was checked of its items (by check name: how many
    items from the start passed it). Positions below a view's length never change."""

    __slots__ = ("checked",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        super().__init__(items)
        self.checked: dict[str, int] = {}


class AppendOnly(Sequence[T], Generic[T]):
    """The first ``len(self)`` items of a list shared with the views it grew from and into
    (see the module docstring)."""

    __slots__ = ("_items", "_len")

    _items: _Items
    _len: int
    #: What this sequence stands for: what it equals, what its slices and sums are.
    _as: type[tuple[Any, ...]] | type[list[Any]] = tuple

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._items = _Items(items)
        self._len = len(self._items)

    @classmethod
    def _view(cls, items: _Items, length: int) -> AppendOnly[T]:
        view: AppendOnly[T] = cls.__new__(cls)
        view._items = items
        view._len = length
        return view

    # -- growing --------------------------------------------------------------------------

    def extended(self, new: Iterable[T]) -> AppendOnly[T]:
        """This sequence with ``new`` after it: O(len(new)) when this is the newest view of
        its list, else this view's items are copied first (an older version branched)."""
        items = self._items
        if len(items) != self._len:
            marks = items.checked
            items = _Items(itertools.islice(items, self._len))
            items.checked = {check: min(n, self._len) for check, n in marks.items()}
        items.extend(new)
        return self._view(items, len(items))

    def appended(self, item: T) -> AppendOnly[T]:
        """This sequence with ``item`` after it (see :meth:`extended`)."""
        return self.extended((item,))

    def shares(self, other: AppendOnly[Any]) -> bool:
        """Whether ``other`` and this view are prefixes of the same list: the shorter one is
        then a prefix of the longer one, known without comparing an item."""
        return self._items is other._items

    def checked(self, check: str) -> int:
        """How many items from the start are known to pass ``check`` (by this view or any
        other of its list): a check of what was appended starts there."""
        return min(self._items.checked.get(check, 0), self._len)

    def mark_checked(self, check: str) -> None:
        """Every item of this view passed ``check``."""
        marks = self._items.checked
        if marks.get(check, 0) < self._len:
            marks[check] = self._len

    # -- a tuple for every reader ---------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step == 1:
                return self._as(self._items[start:stop])  # type: ignore[return-value]
            items = self._items
            return self._as(items[i] for i in range(start, stop, step))  # type: ignore[return-value]
        position = index.__index__()
        if position < 0:
            position += self._len
        if not 0 <= position < self._len:
            raise IndexError("tuple index out of range")
        return cast(T, self._items[position])

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self._len)

    def __reversed__(self) -> Iterator[T]:
        items = self._items
        return (items[i] for i in range(self._len - 1, -1, -1))

    def __contains__(self, item: object) -> bool:
        return any(x is item or x == item for x in self)

    def _tuple(self) -> tuple[T, ...]:
        return tuple(itertools.islice(self._items, self._len))

    def _plain(self) -> Any:
        """A tuple (or a list, for :class:`AppendOnlyList`) of the items."""
        return self._as(itertools.islice(self._items, self._len))

    def _other(self, other: object) -> Any:
        """``other`` as plain data of this sequence's kind, or None if it is of another."""
        if isinstance(other, AppendOnly):
            return other._plain() if other._as is self._as else None
        if isinstance(other, self._as):
            return other
        return None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AppendOnly):
            if other._as is not self._as:
                return False  # as a tuple never equals a list
            if other._len != self._len:
                return False
            if other._items is self._items:
                return True
            return self._items[: self._len] == other._items[: other._len]
        if isinstance(other, self._as):
            return len(other) == self._len and self._plain() == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __lt__(self, other: object) -> bool:
        theirs = self._other(other)
        return NotImplemented if theirs is None else bool(self._plain() < theirs)

    def __le__(self, other: object) -> bool:
        theirs = self._other(other)
        return NotImplemented if theirs is None else bool(self._plain() <= theirs)

    def __gt__(self, other: object) -> bool:
        theirs = self._other(other)
        return NotImplemented if theirs is None else bool(self._plain() > theirs)

    def __ge__(self, other: object) -> bool:
        theirs = self._other(other)
        return NotImplemented if theirs is None else bool(self._plain() >= theirs)

    def __hash__(self) -> int:
        return hash(self._tuple())

    def __add__(self, other: object) -> Any:
        theirs = self._other(other)
        if theirs is None:
            return NotImplemented
        return self._plain() + theirs

    def __radd__(self, other: object) -> Any:
        theirs = self._other(other)
        if theirs is None:
            return NotImplemented
        return theirs + self._plain()

    def __mul__(self, times: int) -> Any:
        return self._plain() * times

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return repr(self._plain())

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._tuple(),))

    def __copy__(self) -> AppendOnly[T]:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> AppendOnly[T]:
        return type(self)(copy.deepcopy(self._tuple(), memo))


class AppendOnlyList(AppendOnly[T]):
    """An :class:`AppendOnly` that stands for a list (an agent task's inner steps in a raw,
    stored record): it equals lists (never tuples), its slices and sums are lists, and it is
    unhashable, as a list is. Plain JSON data for every reader but ``type(x) is list``."""

    __slots__ = ()
    _as = list

    __hash__ = None  # type: ignore[assignment]


def appended(items: tuple[T, ...], *new: T) -> tuple[T, ...]:
    """``(*items, *new)`` without copying ``items`` when it is an :class:`AppendOnly` (the
    first time it is a plain tuple, it is copied once into one). Typed as the tuple it stands
    for: every reader may take it as one (see the module docstring)."""
    grown: Any = items
    if isinstance(grown, AppendOnly):
        return cast(tuple[T, ...], grown.extended(new))
    return cast(tuple[T, ...], cast(Any, AppendOnly(itertools.chain(items, new))))


def plain_list(value: Any) -> list[Any]:
    """A list of ``value``'s items (a view, a tuple, a list), for an encoder."""
    return list(value)
