"""An execution's read-one-by-one entries as read from a store, each parsed when it is
first looked at.

A stored execution holds lists of entries that are parsed one by one (its agent tasks, the
external workers, the tasks they serve, their trail: ``storage._stored_form``). Most reads
look at few of them (a listing shows statuses and goals), and an agent task holds every
inner step it ran: parsing every entry on every read made reads two to three times slower
and kept each entry twice in memory. :class:`Entries` holds what was stored, as read, and
parses an entry the first time it is asked for (indexing, iterating, comparing), once: the
record (or the :class:`~._unreadable.Unreadable`) made then is the one every later access
returns, so identity holds as it does for a tuple's items.

Nothing is given up: an entry is validated when it is read, by the same strict parse, and
one that does not parse is an ``Unreadable`` whoever reads it (E8: fail closed, never
coerced); writing an execution back writes each entry's stored form, which for an entry of
an ``Entries`` is what was read, parsed or not (E7: byte-equal, never lost).

For every reader it is a tuple: ``==`` (with tuples, ``Vector`` and ``AppendOnly`` views
and other ``Entries``), ordering, ``hash``, iteration, ``len``, indexing, slicing (a slice
is a tuple), ``+``, ``in``, ``index``, ``count``, ``repr``, copying and pickling (as the
tuple), and the storage converter writes it as the list of its stored forms. It is not an
instance of ``tuple``: code that tests ``type(x) is tuple`` must know it. Any thread may
read it: an entry parsed by two threads at once is kept once (``dict.setdefault``, atomic
under the interpreter lock) and both get that one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

from ._append_only import AppendOnly
from ._tuple_like import TupleLike
from ._vector import Vector

__all__ = ["Entries"]

E = TypeVar("E")


class Entries(TupleLike[E], Generic[E]):
    """Stored entries, each parsed by ``read`` when first looked at (see the module
    docstring). ``raws`` are the stored objects as read; nothing changes them."""

    __slots__ = ("_all", "_done", "_raws", "_read")

    _raws: tuple[dict[str, Any], ...]
    _read: Callable[[dict[str, Any]], E]
    #: The entries parsed so far, by position.
    _done: dict[int, E]
    #: Every entry, once each was parsed (what iterating and comparing use then).
    _all: tuple[E, ...] | None

    def __init__(
        self, raws: tuple[dict[str, Any], ...], read: Callable[[dict[str, Any]], E]
    ) -> None:
        self._raws = raws
        self._read = read
        self._done = {}
        self._all = None

    @property
    def raws(self) -> tuple[dict[str, Any], ...]:
        """The stored objects, as read: each entry's stored form, whether it was parsed or
        not (what the execution is written back with, E7)."""
        return self._raws

    @property
    def read(self) -> Callable[[dict[str, Any]], E]:
        """What parses one stored object into its entry."""
        return self._read

    def parsed(self) -> int:
        """How many entries were parsed so far."""
        return len(self._done)

    def _at(self, position: int) -> E:
        entry = self._done.get(position)
        if entry is None:
            # Parsed outside any lock; if another thread parsed it meanwhile, its entry is
            # the one kept and returned.
            entry = self._done.setdefault(position, self._read(self._raws[position]))
        return entry

    def _tuple(self) -> tuple[E, ...]:
        every = self._all
        if every is None:
            every = self._all = tuple(map(self._at, range(len(self._raws))))
        return every

    def __len__(self) -> int:
        return len(self._raws)

    @overload
    def __getitem__(self, index: int) -> E: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[E, ...]: ...

    def __getitem__(self, index: int | slice) -> E | tuple[E, ...]:
        n = len(self._raws)
        if isinstance(index, slice):
            return tuple(map(self._at, range(*index.indices(n))))
        position = index.__index__()
        if position < 0:
            position += n
        if not 0 <= position < n:
            raise IndexError("tuple index out of range")
        return self._at(position)

    def __iter__(self) -> Iterator[E]:
        every = self._all
        if every is not None:
            return iter(every)
        return map(self._at, range(len(self._raws)))

    def __reversed__(self) -> Iterator[E]:
        return map(self._at, reversed(range(len(self._raws))))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Entries) and other._raws is self._raws and other._read is self._read:
            return True  # the same stored objects, parsed the same way
        if not isinstance(other, tuple | Entries | Vector | AppendOnly):
            return NotImplemented
        if len(other) != len(self._raws):
            return False  # nothing parsed: above all, compared with an unset field's ()
        theirs = self._other(other)
        return theirs is not None and self._tuple() == theirs

    def __hash__(self) -> int:
        return hash(self._tuple())

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (self._tuple(),))

    def __copy__(self) -> Entries[E]:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[E, ...]:
        return copy.deepcopy(self._tuple(), memo)
