"""An execution's read-one-by-one entries (agent tasks; external workers, the tasks they
serve, their trail) between their records and what is stored of them.

Reading holds an execution's stored entries as they were read, in :class:`Entries`
(:func:`held_entries`), each parsed once, the first time it is looked at (:func:`read_entry`),
into its record or an :class:`Unreadable` (E8): a read costs what is looked at, not every
inner step of every agent task. Writing needs each entry's stored form (:func:`stored_raw`,
:func:`stored_raws`): an entry of an ``Entries`` is what was read for it, parsed or not; an
``Unreadable`` is its ``raw``; a record is what was read for it, if it was read and is the
very object (so a store written before reads back and is written back byte-equal, E7), or
what it was unstructured to last time; otherwise it is unstructured, for an agent task
from the form of the version it was made from (``_task_raw``: a save costs what it added,
not the inner steps before it).

The forms are kept beside the records, outside them (as ``_carried`` keeps an output's
bytes): a table keyed by the record object, checked through a weak reference, whose entry
leaves when its record is freed. Any thread may read or add one: each is one dict
operation, atomic under the interpreter lock; two threads making the same form make equal
ones.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ._codec import _strict_sequence, raw_form, structure
from ._entries import Entries
from ._errors import RecordError
from ._records import AgentTaskRecord
from ._task_raw import task_raw
from ._unreadable import Unreadable, entry_key
from ._workers import ENTRY_KINDS

__all__ = ["held_entries", "read_entries", "read_entry", "stored_raw", "stored_raws"]

R = TypeVar("R")

# id(record) -> (a weak reference to it, its stored form, whether this library wrote that
# form: only a written one is a base to rebuild from, ``_task_raw``).
_forms: dict[int, tuple[weakref.ref[Any], dict[str, Any], bool]] = {}


def _remember(record: Any, raw: dict[str, Any], *, written: bool) -> None:
    key = id(record)
    forget = functools.partial(_forms.pop, key)
    _forms[key] = (weakref.ref(record, forget), raw, written)


def _form(record: Any) -> tuple[dict[str, Any], bool] | None:
    entry = _forms.get(id(record))
    if entry is None or entry[0]() is not record:
        return None
    return entry[1], entry[2]


def read_entry(raw: Any, kind: type[R], key_field: str = "id") -> R | Unreadable:
    """``raw`` parsed into ``kind`` once, or an :class:`Unreadable` holding it (E8: fail
    closed, never coerced); anything but an object is refused (the whole record then does
    not parse: it is no entry at all)."""
    if type(raw) is not dict:
        raise TypeError(f"expected an object, got {type(raw).__name__}")
    try:
        record = structure(raw, kind)
    except RecordError as exc:
        return Unreadable(raw=raw, key=entry_key(raw, key_field), reason=str(exc))
    _remember(record, raw, written=False)
    return record


def read_entries(raws: Any, kind: type[R], key_field: str = "id") -> tuple[R | Unreadable, ...]:
    """Every item of ``raws`` (a JSON array) through :func:`read_entry`."""
    return tuple(read_entry(raw, kind, key_field) for raw in raws)


#: Each record kind read one by one (an agent task; a worker, a worker task, a trail
#: entry) and the key an unreadable one is known by.
_KEYS: dict[type[Any], str] = {AgentTaskRecord: "id", **dict(ENTRY_KINDS.values())}
#: The one reader of each kind: ``Entries`` made with it hold that kind.
_READERS: dict[type[Any], Callable[[dict[str, Any]], Any]] = {
    kind: functools.partial(read_entry, kind=kind, key_field=key) for kind, key in _KEYS.items()
}


def held_entries(value: Iterable[Any], kind: type[Any]) -> Any:
    """``value`` as an execution holds its entries of ``kind``: stored objects (all of
    them) in :class:`Entries`, each parsed when first looked at; records and
    ``Unreadable`` as they are, a stored object among them parsed now (E8). A run's
    persistent sequence (``Vector``) and ``Entries`` of this kind are kept as they are."""
    read = _READERS[kind]
    if type(value) is Entries and value.read is read:
        return value
    items = value if type(value) is tuple else tuple(value)
    kinds = set(map(type, items))  # (in C: an evolve costs no Python loop)
    if dict not in kinds:
        return items
    if len(kinds) == 1:
        return Entries(items, read)
    return tuple(read(item) if type(item) is dict else item for item in items)


_DICT = frozenset({dict})


def entries_hook(kind: type[Any]) -> Callable[[Any, Any], Any]:
    """A converter structure hook for ``tuple[kind | Unreadable, ...]``: a JSON array of
    objects is held as read (:func:`held_entries`); anything else goes through the strict
    sequence hook, which names the item that is not an object (the whole record then does
    not parse) and takes records as they are."""
    strict: Callable[[Any, Any], Any] | None = None

    def structure_entries(value: Any, tp: Any) -> Any:
        nonlocal strict
        if (type(value) is list or type(value) is tuple) and set(map(type, value)) <= _DICT:
            return held_entries(value, kind)
        if strict is None:
            strict = _strict_sequence(tp)
        return strict(value, tp)

    return structure_entries


def stored_raws(entries: Iterable[Any]) -> list[dict[str, Any]]:
    """The stored form of every entry (:func:`stored_raw`); for :class:`Entries`, what
    was read, without parsing any (an entry of them, parsed or not, is stored as read)."""
    if type(entries) is Entries:
        return list(entries.raws)
    return [stored_raw(entry) for entry in entries]


def stored_raw(entry: Any, prev: Any = None) -> dict[str, Any]:
    """What is stored of ``entry`` (see the module docstring); ``prev``: the version of the
    same entry stored before it, if known (an agent task's form is rebuilt from it)."""
    if type(entry) is Unreadable:
        return entry.raw
    known = _form(entry)
    if known is not None:
        return known[0]
    raw: dict[str, Any]
    if type(entry) is AgentTaskRecord:
        base = _form(prev) if type(prev) is AgentTaskRecord and prev.id == entry.id else None
        raw = task_raw(entry, prev, base[0]) if base is not None and base[1] else task_raw(entry)
    else:
        raw = raw_form(entry)
    _remember(entry, raw, written=True)
    return raw


def hook(kind: type[Any], key_field: str = "id") -> Callable[[Any, Any], Any]:
    """A converter structure hook for ``kind | Unreadable``."""

    def structure_entry(value: Any, _: Any) -> Any:
        if type(value) is Unreadable or type(value) is kind:
            return value
        return read_entry(value, kind, key_field)

    return structure_entry


def forms() -> int:
    """How many stored forms are kept now (for tests)."""
    return len(_forms)
