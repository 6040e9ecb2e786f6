"""Keys and comparisons for the journal's diff: how each part's items are keyed, and how
old and new versions of a part are compared so that a commit costs what changed."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .._validators import same_json
from .._vector import Vector

_ID = re.compile(r"[A-Za-z0-9._:-]{1,256}\Z")


def _id_key(raw: Any) -> str | None:
    """A worker's (or worker task's) key: its id, or None if it has none that is an id."""
    value = raw.get("id") if type(raw) is dict else None
    return value if type(value) is str and _ID.match(value) else None


def _seq_key(raw: Any) -> str | None:
    """A trail entry's key: ``str(seq)``, or None if its seq is not a whole number."""
    value = raw.get("seq") if type(raw) is dict else None
    return str(value) if type(value) is int and value >= 0 else None


_RAW_KEYS: dict[str, Callable[[Any], str | None]] = {
    "workers": _id_key,
    "worker_tasks": _id_key,
    "worker_trail": _seq_key,
}


def _raw_keyed(raws: Sequence[Any], key: Callable[[Any], str | None]) -> dict[str, Any]:
    """``key -> raw record``; if a key repeats or a record has none (it does not parse),
    the part is keyed by position (``#0``, ``#1``...) and stored as it is, like agent task
    records (E7): it reads back as it was, and is rewritten whole while it stays so."""
    keys = [key(raw) for raw in raws]
    if None in keys or len(set(keys)) != len(keys):
        return {f"#{index}": raw for index, raw in enumerate(raws)}
    return dict(zip(keys, raws, strict=True))  # type: ignore[arg-type]


def _by_position(entries: dict[str, Any]) -> bool:
    return bool(entries) and next(iter(entries)).startswith("#")


def _keyed(items: Sequence[Any], key: Callable[[Any], str]) -> dict[str, Any]:
    """``key -> item``; a part whose keys repeat (a record the runtime never writes, but a
    valid one) is keyed by position instead (``#0``, ``#1``...), so it reads back as it was."""
    keyed = {key(item): item for item in items}
    if len(keyed) != len(items):
        return {f"#{index}": item for index, item in enumerate(items)}
    return keyed


def _changed(old: Sequence[Any], new: Sequence[Any], lo: int, hi: int, out: list[int]) -> None:
    """Indexes in ``lo..hi`` where ``new`` differs from ``old``: halves that compare equal
    (in C, identity first) are skipped, so this costs what changed, not the length."""
    if hi - lo <= 16:
        out.extend(i for i in range(lo, hi) if old[i] is not new[i] and not _equal(old[i], new[i]))
        return
    mid = (lo + hi) // 2
    if old[lo:mid] != new[lo:mid]:
        _changed(old, new, lo, mid, out)
    if old[mid:hi] != new[mid:hi]:
        _changed(old, new, mid, hi, out)


def _equal(a: Any, b: Any) -> bool:
    # Records compare as stored (their value fields use the typed encoding); raw task data
    # is compared with its types, since Python's == takes 1 for True.
    if type(a) is dict or type(a) is list:
        return same_json(a, b)
    return bool(a == b)


_STRICT_UP_TO = 1_000


def _one_replaced(old: tuple[Any, ...], new: Sequence[Any], hint: int) -> list[int] | None:
    """The replaced indexes of ``new`` (as long as ``old``) if at most the item at ``hint``
    or the one after it is another object, else None. The rest is compared in C, identity
    first, in two slices: no Python ``__eq__`` runs for an item that is the same object,
    so a commit that replaced one plan step costs one pass of pointer compares, not a
    search by halves with a record comparison at each level."""
    at = hint if old[hint] is not new[hint] else hint + 1
    if at >= len(old) or old[at] is new[at]:
        return [] if old == new else None
    if old[:at] != new[:at] or old[at + 1 :] != new[at + 1 :]:
        return None  # more than one changed: the general search
    return [] if _equal(old[at], new[at]) else [at]


def _grown(
    old: Sequence[Any],
    new: Sequence[Any],
    key: Callable[[Any], str],
    hint: int | None = None,
) -> tuple[list[int], int] | None:
    """``(replaced indexes, first appended index)`` if ``new`` is ``old`` with some items
    replaced under the same key and some appended; None otherwise (the part is rewritten).
    ``hint``: where the last commit replaced an item (the next is likely there or just
    after it), tried first."""
    n_old = len(old)
    if len(new) < n_old:
        return None
    if type(old) is Vector and type(new) is Vector:
        # Versions of one persistent sequence (the run's plan steps, observations,
        # completed steps): the nodes they share are skipped unvisited, so this costs what
        # changed between them, however many commits lie between.
        changed = new.changed_since(old)
        assert changed is not None
        moved = [i for i in changed if not _equal(old[i], new[i])]
        if any(key(old[i]) != key(new[i]) for i in moved):
            return None
        return moved, n_old
    replaced: list[int] = []
    common = new[:n_old] if len(new) > n_old else new
    if hint is not None and type(old) is tuple and 0 <= hint < n_old:
        one = _one_replaced(old, common, hint)
        if one is not None:
            if one and key(old[one[0]]) != key(common[one[0]]):
                return None
            return one, n_old
    if n_old <= _STRICT_UP_TO and type(old) is list:
        # Raw data (agent tasks' inner steps): Python's == takes 1 for True, so a short list
        # is compared item by item, types included. A long one is compared with == by
        # halves (records compare as stored; the runtime writes a new attempt whole).
        replaced = [
            i for i in range(n_old) if old[i] is not common[i] and not _equal(old[i], common[i])
        ]
    elif common != old:
        _changed(old, common, 0, n_old, replaced)
    if any(key(old[i]) != key(common[i]) for i in replaced):
        return None
    return replaced, n_old


def _inner_key(part: str) -> Callable[[Any], str]:
    """The name of an inner item (what its key is made of), or "" for a malformed one."""
    if part == "inner_obs":
        return lambda item: str(item.get("step_id")) if type(item) is dict else ""
    return lambda item: item if type(item) is str else ""


def _same_raw(a: Any, b: Any) -> bool:
    return a is b or same_json(a, b)


def _same_raws(old: Sequence[Any], new: Sequence[Any]) -> bool:
    return old is new or (len(old) == len(new) and all(map(_same_raw, old, new)))


def _inner_names(items: Sequence[Any], part: str) -> list[str] | None:
    """The step names of inner items, or None if one is not an id (then: stored whole)."""
    names: list[str] = []
    for item in items:
        name = item.get("step_id") if part == "inner_obs" and type(item) is dict else item
        if part == "inner_obs" and type(item) is not dict:
            return None
        if type(name) is not str or not _ID.match(name):
            return None
        names.append(name)
    return names


def _step_key(step: Any) -> str:
    return str(step.id)


def _obs_key(obs: Any) -> str:
    return str(obs.step_id)
