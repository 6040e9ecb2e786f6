"""One strict converter for everything persisted, plus canonical JSON and hashing.

Strict means: unknown keys are rejected, nothing is coerced (``"5"`` is not an int, ``true`` is
not ``1``), and every error names the path of the bad value (``agent_tasks[3].state``), so a
record that does not match is refused, never repaired.
"""

from __future__ import annotations

import enum
import hashlib
import math
import os
import threading
import typing
from collections.abc import Callable, Set
from typing import Any, TypeVar

import cattrs
import cattrs.errors
import cattrs.v
import orjson
from cattrs.preconf.orjson import OrjsonConverter, configure_converter

from ._append_only import AppendOnly, AppendOnlyList, plain_list
from ._errors import RecordError, TooLarge
from ._values import Malformed
from ._vector import Vector

__all__ = [
    "DEFAULT_MAX_BYTES",
    "canonical_json",
    "converter",
    "decode",
    "dumps_checked",
    "encode",
    "hooks_made",
    "make_hooks",
    "on_first_use",
    "sha256_hex",
    "structure",
    "unstructure",
]

T = TypeVar("T")

#: Reads larger than this are refused before parsing (X2); every reader can lower or raise it.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024

#: What makes the records' hooks (``storage._record_codec``), not yet run: the converter runs
#: it when first used, so that importing storage does not generate them.
_hook_makers: list[Callable[[], None]] = []
_hooks_lock = threading.RLock()
_making = False
# A fork waits until no other thread is making the hooks (as for an import): a child forked
# meanwhile would hold a lock that no thread of it ever releases, and hooks half made.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_hooks_lock.acquire,
        after_in_parent=_hooks_lock.release,
        after_in_child=_hooks_lock.release,
    )


def on_first_use(maker: Callable[[], None]) -> None:
    """Run ``maker`` (which registers hooks) once, when the converter is first used: before
    any value is structured or unstructured and before any hook is handed out."""
    with _hooks_lock:
        _hook_makers.append(maker)


def make_hooks() -> None:
    """Make the hooks now, if they are not made yet (as :func:`open_store` does off the event
    loop). Thread-safe: a thread that uses the converter meanwhile waits until every hook is
    made; the maker itself, which uses the converter, is let through. The hooks are
    registered in the order they would have been at import, so what they write is the same."""
    global _making
    with _hooks_lock:
        if _making:  # the maker itself (the lock is this thread's): let through
            return
        _making = True
        try:
            while _hook_makers:
                _hook_makers[0]()
                del _hook_makers[0]  # only once it ran: the others wait until then
        finally:
            _making = False


def hooks_made() -> bool:
    """Whether every hook is made (for tests: importing storage makes none)."""
    return not _hook_makers


class _Converter(OrjsonConverter):
    """The orjson converter (``cattrs.preconf.orjson.make_converter``), which makes the
    records' hooks when it is first used."""

    def structure(self, obj: Any, cl: type[T]) -> T:
        if _hook_makers:
            make_hooks()
        return super().structure(obj, cl)

    def unstructure(self, obj: Any, unstructure_as: Any = None) -> Any:
        if _hook_makers:
            make_hooks()
        return super().unstructure(obj, unstructure_as)

    def get_structure_hook(self, type: Any, cache_result: bool = True) -> Any:
        if _hook_makers:
            make_hooks()
        return super().get_structure_hook(type, cache_result)

    def get_unstructure_hook(self, type: Any, cache_result: bool = True) -> Any:
        if _hook_makers:
            make_hooks()
        return super().get_unstructure_hook(type, cache_result)


# As ``make_converter(forbid_extra_keys=True)`` makes it, of the class above.
converter = _Converter(forbid_extra_keys=True, unstruct_collection_overrides={Set: list})
configure_converter(converter)


def _strict_int(value: Any, _: type) -> int:
    if type(value) is not int:
        raise TypeError(f"expected a whole number, got {type(value).__name__}")
    return value


def _strict_float(value: Any, _: type) -> float:
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


def _strict_str(value: Any, _: type) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _strict_bool(value: Any, _: type) -> bool:
    if type(value) is not bool:
        raise TypeError(f"expected true or false, got {type(value).__name__}")
    return value


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Literal


def _strict_literal(value: Any, tp: Any) -> Any:
    for allowed in typing.get_args(tp):
        if type(value) is type(allowed) and value == allowed:
            return value
    choices = ", ".join(repr(a) for a in typing.get_args(tp))
    raise ValueError(f"expected one of {choices}, got {value!r}")


def _is_str_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.StrEnum)


def _strict_str_enum(value: Any, tp: Any) -> Any:
    # A state is stored as its value, in one spelling: nothing else (no int, no other
    # spelling) becomes a member.
    if type(value) is str:
        try:
            return tp(value)
        except ValueError:
            pass
    choices = ", ".join(repr(m.value) for m in tp)
    raise ValueError(f"expected one of {choices}, got {value!r}")


def _is_homogeneous_sequence(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    return origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis)


def _strict_sequence(tp: Any) -> Any:
    # cattrs would take any iterable (a dict's keys, a string's characters): only a JSON
    # array is a sequence here.
    element = typing.get_args(tp)[0]
    make = tuple if typing.get_origin(tp) is tuple else list

    def hook(value: Any, _: Any) -> Any:
        if type(value) not in (list, tuple, AppendOnly, AppendOnlyList, Vector):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        handler = converter.get_structure_hook(element)
        items: list[Any] = []
        errors: list[Exception] = []
        for index, item in enumerate(value):
            try:
                items.append(handler(item, element))
            except Exception as exc:  # whatever a hook raised: raised together below
                exc.__notes__ = [
                    *getattr(exc, "__notes__", []),
                    cattrs.errors.IterableValidationNote(
                        f"Structuring {tp} @ index {index}", index, element
                    ),
                ]
                errors.append(exc)
        if errors:
            raise cattrs.errors.IterableValidationError(f"While structuring {tp}", errors, tp)
        return make(items)

    return hook


converter.register_structure_hook_factory(_is_homogeneous_sequence, _strict_sequence)
converter.register_structure_hook(int, _strict_int)
converter.register_structure_hook(float, _strict_float)
converter.register_structure_hook(str, _strict_str)
converter.register_structure_hook(bool, _strict_bool)
converter.register_structure_hook_func(_is_literal, _strict_literal)
converter.register_structure_hook_func(_is_str_enum, _strict_str_enum)
# Unstructured as the plain value: a raw record holds what a read of it would hold.
converter.register_unstructure_hook(enum.StrEnum, lambda member: member.value)


def _path(message: str) -> str:
    # cattrs says "... @ $.agent_tasks[3].state"; we say "agent_tasks[3].state: ...".
    text, _, where = message.rpartition(" @ ")
    if not text:
        return message
    where = where.removeprefix("$").removeprefix(".") or "(top level)"
    return f"{where}: {text}"


def _describe(exc: BaseException, tp: type | None) -> str:
    if isinstance(exc, Malformed):  # a stored value's bad tag: say where inside the value
        return f"malformed stored value at {exc}"
    return cattrs.v.format_exception(exc, tp)


def structure(raw: Any, cls: type[T], *, kind: str | None = None) -> T:
    """Build ``cls`` from plain data, strictly; raise :class:`RecordError` naming each path."""
    name = kind or cls.__name__
    try:
        return converter.structure(raw, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        if isinstance(exc, cattrs.BaseValidationError):
            problems = [_path(m) for m in cattrs.transform_error(exc, format_exception=_describe)]
        else:
            problems = [f"(top level): {exc}"]
        raise RecordError(name, problems) from None


def raw_form(record: Any) -> Any:
    """Plain data for ``record``, sharing what the stores keep: each agent task's, worker's,
    worker task's and trail entry's stored form (``storage._stored_form``) is the very dict
    that is written for it. Only for storage's own use, which never changes it: anything
    handed to a caller goes through :func:`unstructure`."""
    return converter.unstructure(record)


def unstructure(record: Any) -> Any:
    """Plain data (dicts, lists, strings, numbers) for ``record``: the form it is stored in,
    as a copy the caller owns. Changing it (slimming or annotating a JSON view) changes
    nothing that is written: the records it was made of are still stored as they hold (E7)."""
    return _detached(converter.unstructure(record))


def _detached(value: Any) -> Any:
    # Every dict and list copied, all the way down (what they hold otherwise is immutable).
    if type(value) is dict:
        return {key: _detached(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_detached(item) for item in value]
    return value


def dumps_checked(raw: Any) -> bytes:
    """Canonical JSON of plain data, refusing NaN and infinity with the path of the first
    (orjson would write ``null``: the value could never be read back)."""
    if _has_non_finite(raw):
        _check_finite(raw, "")
    return canonical_json(raw)


def encode(record: Any) -> bytes:
    """Canonical JSON bytes for a record (sorted keys, compact).

    Raises ValueError for NaN or infinity anywhere in it: JSON has no such numbers (orjson
    would write ``null``), so the record could never be read back.
    """
    raw = raw_form(record)
    if _has_non_finite(raw):
        _check_finite(raw, "")  # walks again, this time naming the path in the error
    return canonical_json(raw)


_INFINITIES = (math.inf, -math.inf)


def _has_non_finite(value: Any) -> bool:
    # Runs on every commit: one pass without building paths; a float is non-finite if it is
    # NaN (not equal to itself) or an infinity.
    if type(value) is not dict and type(value) is not list:
        return type(value) is float and not math.isfinite(value)
    stack = [value]
    pop = stack.pop
    push = stack.append
    while stack:
        current = pop()
        for item in current.values() if type(current) is dict else current:
            kind = type(item)
            if kind is float:
                if item != item or item in _INFINITIES:
                    return True
            elif kind is dict or kind is list or kind is AppendOnlyList:
                push(item)
    return False


def _check_finite(value: Any, path: str) -> None:
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError(f"{path or '(top level)'}: {value!r} cannot be stored as JSON")
    elif type(value) is dict:
        for key, item in value.items():
            if type(item) in (float, dict, list, AppendOnlyList):
                _check_finite(item, f"{path}.{key}" if path else str(key))
    elif type(value) is list or type(value) is AppendOnlyList:
        for index, item in enumerate(value):
            if type(item) in (float, dict, list, AppendOnlyList):
                _check_finite(item, f"{path}[{index}]")


def decode(
    data: bytes, cls: type[T], *, kind: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> T:
    """Parse JSON bytes into ``cls``; refuse oversize input before parsing (X2)."""
    name = kind or cls.__name__
    if len(data) > max_bytes:
        raise TooLarge(name, len(data), max_bytes)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordError(name, [f"(top level): not JSON ({exc})"]) from None
    return structure(raw, cls, kind=name)


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: equal values give equal bytes, so equal hashes."""
    try:
        return orjson.dumps(value, default=_sequence, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise ValueError(f"not representable as JSON: {exc}") from None


def _sequence(value: Any) -> list[Any]:
    # An append-only sequence (an agent task's inner steps, as stored) or a persistent one
    # (a record's steps, observations, completed steps) is a JSON array.
    if isinstance(value, AppendOnly | Vector):
        return plain_list(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def sha256_hex(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``: the one hash the runtime compares."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
