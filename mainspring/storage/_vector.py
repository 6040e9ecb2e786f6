"""An immutable sequence whose next version is the last one with a few items replaced or
appended, made and compared at the cost of what changed.

A run rebuilds its record on every commit: the plan's steps with one status changed, the
observations with one more (or one replaced, a retry), the completed steps with one more.
As tuples, each version copies the n items before it, and the previous record frees its own
n: a step costs the length of the plan. :class:`Vector` is a tree of 32-wide tuples (a
persistent vector): a new version copies the path to what changed (a few tuples of at most
32) and shares every other node with the version it came from, so

- :meth:`updated` (items replaced at some positions, some appended) costs what it changed;
- :meth:`changed_since` tells the positions where one version differs from an earlier one
  by walking only the nodes that are not shared: a journal's diff (``storage._journal``)
  costs what changed between the version stored and the one committed, however many
  versions lie between them;
- a version remembers what it changed since the version it was made from (:meth:`delta`)
  and which checks that version had passed (:meth:`passed`, :meth:`mark_passed`): a record
  validator checks only the items changed (``storage._validators``).

For every reader it is a tuple: ``==`` (with tuples and other versions), ordering, ``hash``,
iteration, ``len``, indexing, slicing (a slice is a tuple), ``+``, ``in``, ``index``,
``count``, ``repr``, pickling (as the tuple), and the storage converter and JSON encoder
write it as a list. It is not an instance of ``tuple``: code that tests ``type(x) is tuple``
must know it. Its items are never changed: every version is immutable, so any thread may
read any version while another makes the next.
"""

from __future__ import annotations

import copy
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar, cast, overload

from ._tuple_like import TupleLike

__all__ = ["Vector"]

T = TypeVar("T")

_BITS = 5
_WIDTH = 1 << _BITS  # items in a leaf, children in a node
_MASK = _WIDTH - 1

_EMPTY_CHECKS: frozenset[str] = frozenset()


def _replace(node: tuple[Any, ...], index: int, item: Any) -> tuple[Any, ...]:
    """``node`` with ``item`` at ``index`` (at most one past its end)."""
    return (*node[:index], item, *node[index + 1 :])


class Vector(TupleLike[T], Generic[T]):
    """A persistent sequence that reads as a tuple (see the module docstring).

    Layout: the last 1..32 items are the ``tail`` (a tuple); the others, a multiple of 32,
    are the leaves of a tree of tuples (``root``, ``shift`` = 5 x its height; None while
    empty). Item ``i`` of the tree is ``root[(i >> shift) & 31]...[i & 31]``.
    """

    __slots__ = ("_delta", "_from", "_hash", "_len", "_passed", "_root", "_shift", "_tail")

    _len: int
    _shift: int
    _root: tuple[Any, ...] | None
    _tail: tuple[Any, ...]
    #: What this version changed since the one it was made from: the positions replaced
    #: with the items they held there, and where the appended items start; None for a
    #: version built from items.
    _delta: tuple[tuple[tuple[int, Any], ...], int] | None
    #: The checks the version it was made from passed (that version's own set, so a check
    #: it passes later counts too, without keeping it alive).
    _from: set[str] | frozenset[str]
    _passed: set[str]
    _hash: int | None

    def __init__(self, items: Iterable[T] = ()) -> None:
        grown = _version(Vector, None, 0, (), 0, None, _EMPTY_CHECKS)._grow(list(items))
        self._root = grown._root
        self._shift = grown._shift
        self._tail = grown._tail
        self._len = grown._len
        self._delta = None
        self._from = _EMPTY_CHECKS
        self._passed = set()
        self._hash = None

    # -- new versions ---------------------------------------------------------------------

    def updated(
        self, replaced: Mapping[int, T] | None = None, appended: Iterable[T] = ()
    ) -> Vector[T]:
        """This sequence with the items of ``replaced`` at their positions (each within
        it) and ``appended`` after it; costs what it changes, not the length. The new
        version remembers what it changed (:meth:`delta`)."""
        root, shift, tail, n = self._root, self._shift, self._tail, self._len
        start = n - len(tail)
        before: list[tuple[int, Any]] = []
        tail_items: list[Any] | None = None
        for index, item in sorted(replaced.items()) if replaced else ():
            if not 0 <= index < n:
                raise IndexError(f"position {index} is not within a sequence of {n}")
            if index >= start:
                if tail_items is None:
                    tail_items = list(tail)
                before.append((index, tail_items[index - start]))
                tail_items[index - start] = item
            else:
                before.append((index, self._leaf(index)[index & _MASK]))
                root = self._assoc(root, shift, index, item)
        if tail_items is not None:
            tail = tuple(tail_items)
        made = _version(type(self), root, shift, tail, n, None, _EMPTY_CHECKS)
        made = made._grow(appended if type(appended) is list else list(appended))
        made._delta = (tuple(before), n)
        made._from = self._passed
        return made

    def appended(self, item: T) -> Vector[T]:
        """This sequence with ``item`` after it (see :meth:`updated`)."""
        tail = self._tail
        n = self._len
        if len(tail) < _WIDTH:  # the common case: room in the tail, nothing else copied
            return _version(
                type(self), self._root, self._shift, (*tail, item), n + 1, ((), n), self._passed
            )
        return self.updated(None, (item,))

    def replaced(self, index: int, item: T) -> Vector[T]:
        """This sequence with ``item`` at ``index`` (see :meth:`updated`)."""
        return self.updated({index: item})

    def _grow(self, new: list[Any]) -> Vector[T]:
        """This version with ``new`` appended, as a version of its own (no delta)."""
        if not new:
            return self
        root, shift, tail, n = self._root, self._shift, self._tail, self._len
        at = 0
        if len(tail) < _WIDTH:
            at = _WIDTH - len(tail)
            tail = (*tail, *new[:at])
            n = self._len - len(self._tail) + len(tail)
        while at < len(new):  # the tail is full: it becomes a leaf of the tree
            root, shift = self._push(root, shift, n - _WIDTH, tail)
            tail = tuple(new[at : at + _WIDTH])
            at += _WIDTH
            n += len(tail)
        return _version(type(self), root, shift, tail, n, None, _EMPTY_CHECKS)

    @staticmethod
    def _push(
        root: tuple[Any, ...] | None, shift: int, offset: int, leaf: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], int]:
        """The tree with ``leaf`` added at ``offset`` (the tree's length), and its shift."""
        if root is None:
            return leaf, 0
        if offset == 1 << (shift + _BITS):  # full: one level more
            branch: tuple[Any, ...] = leaf
            for _ in range(shift // _BITS):
                branch = (branch,)
            return (root, branch), shift + _BITS
        path: list[tuple[tuple[Any, ...], int]] = []
        node = root
        level = shift
        while True:  # down to the node that gets a new child (a leaf, or a new branch)
            index = (offset >> level) & _MASK
            path.append((node, index))
            if index == len(node):
                child: tuple[Any, ...] = leaf
                for _ in range(level // _BITS - 1):
                    child = (child,)
                break
            node = node[index]
            level -= _BITS
        for node, index in reversed(path):
            child = _replace(node, index, child)
        return child, shift

    @staticmethod
    def _assoc(root: Any, shift: int, index: int, item: Any) -> tuple[Any, ...]:
        """The tree with ``item`` at ``index``: the path to it copied, the rest shared."""
        path: list[tuple[tuple[Any, ...], int]] = []
        node = root
        level = shift
        while level > 0:
            at = (index >> level) & _MASK
            path.append((node, at))
            node = node[at]
            level -= _BITS
        child = _replace(node, index & _MASK, item)
        for node, at in reversed(path):
            child = _replace(node, at, child)
        return child

    def _leaf(self, index: int) -> tuple[Any, ...]:
        """The leaf (or the tail) that holds position ``index``."""
        if index >= self._len - len(self._tail):
            return self._tail
        node: Any = self._root
        level = self._shift
        while level > 0:
            node = node[(index >> level) & _MASK]
            level -= _BITS
        return cast(tuple[Any, ...], node)

    # -- what changed ---------------------------------------------------------------------

    def changed_since(self, old: Vector[Any]) -> list[int] | None:
        """The positions below ``len(old)`` whose item is not the very object ``old`` holds
        there (in order); the items past ``len(old)`` are appended. None if this version is
        shorter than ``old``. Nodes both share are skipped unvisited: between versions of
        one lineage this costs what changed; between unrelated ones, their length."""
        n_old = old._len
        if self._len < n_old:
            return None
        changed: list[int] = []
        is_not = operator.is_not
        old_start = n_old - len(old._tail)
        if old._root is not None:
            node: Any = self._root
            level = self._shift
            while level > old._shift:  # the subtree of ours that covers old's whole tree
                node = node[0]
                level -= _BITS
            stack: list[tuple[Any, Any, int, int]] = [(old._root, node, old._shift, 0)]
            while stack:
                a, b, level, base = stack.pop()
                if a is b:
                    continue
                differing = itertools.compress(range(len(a)), map(is_not, a, b))
                if level == 0:
                    changed.extend(base + i for i in differing)
                else:
                    step = 1 << level
                    below = level - _BITS
                    stack.extend((a[i], b[i], below, base + i * step) for i in differing)
            changed.sort()
        if old._tail:
            ours = self._leaf(old_start)
            differing = itertools.compress(range(len(old._tail)), map(is_not, old._tail, ours))
            changed.extend(old_start + i for i in differing)
        return changed

    def unchecked(self, check: str) -> Iterable[T] | None:
        """The items ``check`` must still look at: None if this version passed it, only
        those :meth:`delta` names if the version it was made from did, else all of them.
        (Mark it passed once they pass: :meth:`mark_passed`.)"""
        if check in self._passed:
            return None
        delta = self._delta
        if delta is None or check not in self._from:
            return self
        replaced, start = delta
        fresh = self[start:] if start < self._len else ()
        if not replaced:
            return fresh
        return itertools.chain((self[index] for index, _ in replaced), fresh)

    def delta(self) -> tuple[tuple[tuple[int, Any], ...], int] | None:
        """What this version changed since the one it was made from: each position
        replaced with the item it held there, and where the appended items start; None for
        a version built from items (nothing is known of it)."""
        return self._delta

    def passed(self, check: str) -> bool:
        """Whether this version is known to pass ``check`` (see :meth:`mark_passed`)."""
        return check in self._passed

    def passed_before(self, check: str) -> bool:
        """Whether the version this one was made from passed ``check``: then only what
        :meth:`delta` names needs checking."""
        return self._delta is not None and check in self._from

    def mark_passed(self, check: str) -> None:
        """Every item of this version passed ``check`` (a name of the caller's)."""
        self._passed.add(check)

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
            if step == 1 and start < stop:
                return tuple(itertools.islice(self._from_position(start), stop - start))
            return tuple(self[i] for i in range(start, stop, step))
        position = index.__index__()
        n = self._len
        if position < 0:
            position += n
        if not 0 <= position < n:
            raise IndexError("tuple index out of range")
        tail = self._tail
        start = n - len(tail)
        if position >= start:
            return tail[position - start]  # type: ignore[no-any-return]
        node: Any = self._root
        level = self._shift
        while level > 0:
            node = node[(position >> level) & _MASK]
            level -= _BITS
        return node[position & _MASK]  # type: ignore[no-any-return]

    def _leaves(self) -> Iterator[tuple[Any, ...]]:
        """The tree's leaves in order, then the tail."""
        nodes: Iterator[Any] = iter(() if self._root is None else (self._root,))
        for _ in range(self._shift // _BITS):
            nodes = itertools.chain.from_iterable(nodes)
        return itertools.chain(nodes, (self._tail,))

    def _from_position(self, start: int) -> Iterator[T]:
        first = start & ~_MASK
        items = itertools.chain.from_iterable(
            self._leaf(offset) for offset in range(first, self._len, _WIDTH)
        )
        return itertools.islice(items, start - first, None)

    def __iter__(self) -> Iterator[T]:
        return itertools.chain.from_iterable(self._leaves())

    def __reversed__(self) -> Iterator[T]:
        return reversed(self._tuple())

    def _tuple(self) -> tuple[T, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Vector):
            if other._len != self._len:
                return False
            if other._root is self._root and other._tail is self._tail:
                return True
            # Shared nodes are equal unvisited; the rest compares as tuples do (identity
            # first, then ==).
            changed = self.changed_since(other)
            assert changed is not None
            if len(changed) > _WIDTH:  # another lineage: compared as tuples, in C
                return self._tuple() == other._tuple()
            return all(self[i] == other[i] for i in changed)
        theirs = self._other(other)
        if theirs is None:
            return NotImplemented
        return len(theirs) == self._len and self._tuple() == theirs

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._tuple())
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._tuple(),))

    def __copy__(self) -> Vector[T]:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> Vector[T]:
        return type(self)(copy.deepcopy(self._tuple(), memo))


def _version(
    cls: type[Vector[Any]],
    root: tuple[Any, ...] | None,
    shift: int,
    tail: tuple[Any, ...],
    n: int,
    delta: tuple[tuple[tuple[int, Any], ...], int] | None,
    checks: set[str] | frozenset[str],
) -> Vector[Any]:
    """A version with these nodes (what :class:`Vector`'s methods make)."""
    made: Vector[Any] = object.__new__(cls)
    made._root = root
    made._shift = shift
    made._tail = tail
    made._len = n
    made._delta = delta
    made._from = checks
    made._passed = set()
    made._hash = None
    return made
