"""An execution's read-one-by-one entries (agent tasks; external workers, the tasks they
serve, their trail) between their records and what is stored of them.

Reading parses each stored entry once (:func:`read_entries`) into its record or an
:class:`Unreadable` (E8). Writing needs each entry's stored form (:func:`stored_raw`): an
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
from collections.abc import Callable
from typing import Any, TypeVar

from ._codec import raw_form, structure
from ._errors import RecordError
from ._records import AgentTaskRecord
from ._task_raw import task_raw
from ._unreadable import Unreadable, entry_key

__all__ = ["read_entries", "read_entry", "stored_raw"]

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
