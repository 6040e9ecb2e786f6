"""Field validators of the persisted records (``_records.py``), kept apart so the records
read as what they hold. Every check runs whenever a record is built, from code or from disk
(X1 for ids, bounds for counters and lists); the ones that see whole runs (ids of completed
and inner steps, a plan's step ids) check only what changed since the last record built.
"""

from __future__ import annotations

import enum
import math
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from ._append_only import AppendOnly, AppendOnlyList
from ._ids import check_relative_path, is_valid_id
from ._values import encode_value
from ._vector import Vector

_E = TypeVar("_E", bound=enum.StrEnum)

MAX_COUNTER = 1_000_000
MAX_TOUCHED_PATHS = 200


def _id(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    # The rule itself (``is_valid_id``, which remembers recent verdicts), called directly:
    # every record checks its ids each time it is built, several per step.
    if not is_valid_id(value):
        raise ValueError(f"{attribute.name} must match [A-Za-z0-9._:-]{{1,256}}")


def _optional_id(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _id(instance, attribute, value)


_ID_CHECK = "ids"  # a Vector whose items are ids (X1)
_UNIQUE_STEPS = "unique step ids"  # a Vector of plan steps whose ids are unique (P1)

#: Per field, the last tuple of ids found valid. Records are rebuilt on every commit with
#: the same ids plus a few appended (completed steps, inner steps): only what was appended
#: is checked then, so building a record does not cost the length of the run.
_checked_ids: dict[str, tuple[str, ...]] = {}


def _ids(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    # The shortcuts compare with ``==``: a ``str`` subclass equal to a checked id passes as
    # that id. Code in this process can do worse than that; what X1 guards, a stored id
    # reaching a path or a query, is checked again there (``check_id``).
    if type(value) is tuple and not value:
        return  # most such fields are empty (no findings, no approvals): nothing to check
    if type(value) is Vector:
        # A run's completed steps: a version made from one whose ids were checked needs
        # only what it replaced and appended checked (X1), whatever other runs checked.
        fresh = value.unchecked(_ID_CHECK)
        if fresh is not None:
            for item in fresh:
                _id(instance, attribute, item)
            value.mark_passed(_ID_CHECK)
        return
    if type(value) is AppendOnly:
        # An agent's inner steps grow by appending to one shared list: only the items no
        # view of that list was checked for yet are checked (X1), whatever ran between.
        for index in range(value.checked("id"), len(value)):
            _id(instance, attribute, value[index])
        value.mark_checked("id")
        return
    last = _checked_ids.get(attribute.name, ())
    if value is last:
        return
    start = 0
    if type(value) is tuple and last:
        if len(value) <= len(last) and last[: len(value)] == value:
            return  # an earlier version of the checked one (a writer thread lags behind)
        if len(last) <= len(value) and value[: len(last)] == last:
            start = len(last)  # equal strings compare in C; the prefix was checked already
    for index in range(start, len(value)):
        _id(instance, attribute, value[index])
    if type(value) is tuple:
        _checked_ids[attribute.name] = value


def _optional_digest(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (len(value) != 64 or value.strip("0123456789abcdef")):
        raise ValueError(f"{attribute.name} must be a sha256 in hex")


#: A W3C traceparent: version, trace id, parent span id, flags (lower-case hex).
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z")


def _optional_traceparent(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (type(value) is not str or not _TRACEPARENT.match(value)):
        raise ValueError(f"{attribute.name} must be a W3C traceparent")


def _counter(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or not 0 <= value <= MAX_COUNTER:
        raise ValueError(f"{attribute.name} must be a whole number in 0..{MAX_COUNTER:,}")


def _unit(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be within 0..1, not {value!r}")


def _at_most(limit: int) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if len(value) > limit:
            raise ValueError(f"{attribute.name} holds {len(value)} items, more than {limit}")

    return check


def _counter_field(default: int = 0) -> Any:
    return attrs.field(default=default, validator=_counter)


def _paths(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if len(value) > MAX_TOUCHED_PATHS:
        raise ValueError(
            f"{attribute.name} holds {len(value)} paths, more than {MAX_TOUCHED_PATHS}"
        )
    for path in value:
        check_relative_path(path)


def _kind(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not str or not 1 <= len(value) <= 64:
        raise ValueError(f"{attribute.name} must be a word of 1..64 characters, not {value!r}")


def _absent(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    allowed = ("git", "git_head", "config")
    if any(item not in allowed for item in value) or len(set(value)) != len(value):
        raise ValueError(f"{attribute.name} lists each of {', '.join(allowed)} at most once")


#: The last plan steps found to have unique ids. A plan is rebuilt on every step's status
#: change with the same steps but the changed ones: then only those are compared.
checked_steps: list[tuple[Any, ...]] = [()]


def same_step_ids(steps: Sequence[Any]) -> bool:
    """True if ``steps`` has the ids of the last steps found unique, in the same places
    (for a :class:`Vector`: of the version it was made from, found by what it replaced)."""
    if type(steps) is Vector:
        if steps.passed(_UNIQUE_STEPS):
            return True
        delta = steps.delta()
        if delta is None or not steps.passed_before(_UNIQUE_STEPS) or delta[1] != len(steps):
            return False  # nothing known of it, or steps appended: checked whole
        if all(getattr(steps[i], "id", None) == old.id for i, old in delta[0]):
            steps.mark_passed(_UNIQUE_STEPS)
            return True
        return False
    last = checked_steps[0]
    if steps is last:
        return True
    if type(steps) is not tuple or len(steps) != len(last) or not last:
        return False
    changed: list[int] = []
    _differing(last, steps, 0, len(steps), changed)
    if all(getattr(steps[i], "id", None) == last[i].id for i in changed):
        checked_steps[0] = steps
        return True
    return False


def steps_unique(steps: Sequence[Any]) -> None:
    """``steps`` were found to have unique ids: a plan rebuilt from them (or, for a
    :class:`Vector`, from a version made from them) compares only what changed."""
    if type(steps) is Vector:
        steps.mark_passed(_UNIQUE_STEPS)
    elif type(steps) is tuple:
        checked_steps[0] = steps


def _differing(
    old: tuple[Any, ...], new: tuple[Any, ...], lo: int, hi: int, out: list[int]
) -> None:
    # Halves that are the same objects compare equal in C without a call: this costs what
    # changed, not the length of the plan.
    if hi - lo <= 16:
        out.extend(i for i in range(lo, hi) if old[i] is not new[i])
        return
    mid = (lo + hi) // 2
    if not _identical(old, new, lo, mid):
        _differing(old, new, lo, mid, out)
    if not _identical(old, new, mid, hi):
        _differing(old, new, mid, hi, out)


def _identical(old: tuple[Any, ...], new: tuple[Any, ...], lo: int, hi: int) -> bool:
    return old[lo:hi] == new[lo:hi]  # in C, identity first: equal steps have equal ids


def one_of(
    literal: Any, *, optional: bool = False
) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A validator for a ``Literal`` field (or an optional one): a record with a status or a
    code the format does not have is never built, so never stored (E8)."""
    allowed: set[Any] = set()
    for arg in typing.get_args(literal):
        allowed.update(typing.get_args(arg) if typing.get_origin(arg) is typing.Literal else (arg,))
    allowed.discard(type(None))

    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if type(value) is not str or value not in allowed:
            raise ValueError(f"{attribute.name} must be one of {sorted(allowed)}, not {value!r}")

    return check


def same_value(a: Any, b: Any) -> bool:
    """Equality as stored (E10): the same typed encoding, so ``1`` and ``True``, ``1`` and
    ``1.0``, ``0.0`` and ``-0.0``, a set and a frozenset differ. Only values that are not the
    same object get here; what cannot be encoded compares by type and value."""
    if a is b:
        return True
    try:
        encoded_a, encoded_b = encode_value(a), encode_value(b)
    except (ValueError, TypeError):
        return type(a) is type(b) and bool(a == b)
    return same_json(encoded_a, encoded_b)


_ARRAYS = (list, AppendOnlyList)


def same_json(a: Any, b: Any) -> bool:
    # Plain JSON data alike in type too: Python's == takes 1 for True and 1.0 for 1.
    if type(a) is AppendOnlyList or type(b) is AppendOnlyList:  # a JSON array, as stored
        if type(a) not in _ARRAYS or type(b) not in _ARRAYS or len(a) != len(b):
            return False
        if type(a) is type(b) and a.shares(b):
            return True  # the same prefix of one list
        return all(map(same_json, a, b))
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(map(same_json, a, b))
    if type(a) is tuple:  # a record's tuples of plain data (ids, paths)
        return len(a) == len(b) and all(map(same_json, a, b))
    if type(a) is float:
        if a != a:  # NaN
            return bool(b != b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def _member(cls: type[_E], value: object, name: str) -> _E:
    """``value`` as a member of the state enum ``cls``: a member, or exactly one of its
    values (a str); anything else is a ValueError naming the field (E8: never coerced)."""
    if type(value) is cls:
        return value
    if type(value) is str:
        try:
            return cls(value)
        except ValueError:
            pass
    choices = ", ".join(member.value for member in cls)
    raise ValueError(f"{name} must be one of {choices}, not {value!r}")
