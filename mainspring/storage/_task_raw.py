"""An agent task record as it is written, rebuilt from the one written before it.

An agent task is saved after every inner step, and its record holds every inner step so
far: unstructuring it whole on each save makes step n cost n. Here only what changed is
unstructured again: a field whose value is the very object it was is taken from the previous
raw record as it is, and a field that grew by appending (inner steps, their observations,
findings) is the previous list plus the new items: for inner steps an ``AppendOnlyList`` view
sharing the previous one's list (O(1) an inner step), for findings a new list. Nothing
handed out before is ever changed (a view keeps its length while its list grows): the store
may keep the previous record to compare with.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from ._append_only import AppendOnly, AppendOnlyList
from ._codec import raw_form
from ._records import AgentTaskRecord

__all__ = ["task_raw"]

#: Fields that grow by appending while a task runs (``ctx.step``, ``report_finding``).
_APPENDED = frozenset({"inner_completed", "inner_observations", "findings"})
#: The two an inner step appends to (``appended``): they may hold up to 100,000 items.
_INNER = frozenset({"inner_completed", "inner_observations"})


def _plain(value: Any) -> Any:
    """One field's value as the converter writes it (tuples become lists)."""
    raw = raw_form(value)
    return list(raw) if type(raw) is tuple else raw


def _grow(before: Any, new: list[Any]) -> AppendOnlyList[Any]:
    """``before`` (a stored list, or a view of one) with ``new`` appended; ``before`` is left
    as it is (copied once into a view the first time it is a plain list)."""
    if type(before) is AppendOnlyList:
        return before.extended(new)  # type: ignore[return-value]
    return AppendOnlyList([*before, *new])


def _shares(value: Any, old: Any) -> bool:
    return type(value) is AppendOnly and type(old) is AppendOnly and value.shares(old)


@functools.cache
def _names() -> tuple[str, ...]:
    return tuple(field.name for field in attrs.fields(AgentTaskRecord))


def task_raw(
    task: AgentTaskRecord,
    base: AgentTaskRecord | None = None,
    base_raw: dict[str, Any] | None = None,
    *,
    appended: bool = False,
) -> dict[str, Any]:
    """``unstructure(task)``, reusing ``base_raw``, which must be what ``base`` was
    unstructured to (by this function or by ``unstructure``), never a record as read from
    disk: that may be in an older form the parser accepts but the converter never writes.

    ``appended`` says ``task`` was made from ``base`` by appending one inner step (its name
    and its observation) and nothing else in those two fields, so they are not compared; it
    is also known without being said when the task's inner steps are views of the list the
    base's are (``AppendOnly.shares``: the base's are a prefix of the task's).
    """
    if base is None or base_raw is None:
        raw: dict[str, Any] = raw_form(task)
        return raw
    raw = {}
    for name in _names():
        value = getattr(task, name)
        old = getattr(base, name)
        if value is old or (name not in base_raw and value == old):
            if name in base_raw:  # a field left out while unset stays out
                raw[name] = base_raw[name]
        elif name in _APPENDED and len(value) > len(old):
            if name in _INNER and (appended or _shares(value, old)):
                # The stored list grows as the record did, shared with the raw record before
                # (AppendOnly): an inner step costs what it added, not the steps before it.
                raw[name] = _grow(base_raw[name], _plain(value[len(old) :]))
            elif value[: len(old)] == old:
                # (Compared in C, element by element: identical objects compare at once.)
                raw[name] = base_raw[name] + _plain(value[len(old) :])
            else:
                raw[name] = _plain(value)
        else:
            raw[name] = _plain(value)
    return raw
