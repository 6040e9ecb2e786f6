"""The typed JSON encoding of user values: step results and plan step inputs (E10).

A value a step returns is stored so that it comes back exactly, or it is refused, naming the
path: never coerced. Plain JSON values (None, bool, str, ints that fit 64 bits, finite floats,
lists, dicts with string keys) are stored as they are. Other values that can come back as
themselves are stored as a tagged object ``{"$ms": <tag>, "v": ...}``:

=============  ===================================================================
tag            ``v`` (and extra keys)
=============  ===================================================================
``tuple``      list of the items
``set``        list of the items, sorted by their stored JSON (so equal sets store
``frozenset``  equal bytes and hash alike)
``dict``       list of ``[key, value]`` pairs, sorted by the key's stored JSON: a dict
               with a key that is not a string, or with the key ``"$ms"`` itself
``bytes``      base64 (standard alphabet, padded)
``int``        hex (``"0x..."``, ``"-0x..."``) for ints outside -2**63..2**64-1
``float``      ``"nan"``, ``"inf"`` or ``"-inf"``
``datetime``   ``isoformat()`` of the wall time without its zone; ``offset``
``time``       (microseconds) and ``name`` (if not the default) for a fixed-offset
               ``datetime.timezone``, or ``zone`` (an IANA key) for a ``ZoneInfo``;
               ``fold: 1`` when set
``date``       ``isoformat()``
``timedelta``  ``[days, seconds, microseconds]``
``decimal``    ``str()`` of the Decimal (sign, digits and exponent kept)
``uuid``       the canonical string
=============  ===================================================================

Types must be exact: a subclass (a namedtuple, an ``IntEnum``, an ``OrderedDict``) is refused,
because it would come back as its base type. Dict keys come back sorted, as every stored JSON
object's do. Decoding is strict: a malformed tag is an error naming its path, never a guess.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import re
import uuid
import zoneinfo
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["MAX_DEPTH", "TAG", "Encoded", "Malformed", "decode_value", "encode_value"]

#: The key that marks a tagged object.
TAG = "$ms"
#: How deeply a value may nest, as stored (a tuple counts twice: a tag object and its list).
MAX_DEPTH = 200
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1  # what orjson writes and reads back as an int
_SUPPORTED = (
    "None, bool, int, float, str, list, dict, tuple, set, frozenset, bytes, datetime, date, "
    "time, timedelta, Decimal and UUID"
)


class Malformed(ValueError):
    """A stored value that does not decode: a bad tag, naming where it is in the value."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where.removeprefix('.') or '(top level)'}: {problem}")
        self.where = where
        self.problem = problem


class _Refused(ValueError):
    # Raised deep in the encoder; each level adds its segment on the way up, so a value
    # that encodes pays nothing for paths.
    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.segments: list[str] = []


# -- encoding ------------------------------------------------------------------------------


class Encoded:
    """A value's stored form as bytes: the canonical JSON of its typed encoding, made once
    where the value was made (a step's output, ``executions/_steps/outputs.py``) and carried
    beside its observation to the store (``storage._carried``), which writes these bytes
    instead of encoding the value again (``storage._record_codec.stored_observation``) and
    lets them go: a run that keeps its records in memory does not keep every output twice.

    It holds the very object it encodes and stands for it only while a record still holds
    that object (``is``): a record evolved to another value is encoded afresh, and so is
    one written a second time (a failed write's retry, a store's compaction). The bytes are
    the value as it was when they were made (a step's output as the step returned it).
    """

    __slots__ = ("data", "size", "value")

    def __init__(self, value: Any, data: bytes) -> None:
        self.value: Any = value
        self.data: bytes | None = data
        #: How many bytes the value takes as stored (kept once the bytes are let go).
        self.size = len(data)

    @classmethod
    def made(cls, value: Any, typed: Any) -> Encoded:
        """``value`` with ``typed``, its typed encoding (``encode_value(value)``), as the
        canonical JSON the stores write (sorted keys, compact: ``storage.canonical_json``).
        The typed encoding holds no NaN or infinity (they are tagged), so nothing is lost."""
        return cls(value, orjson.dumps(typed, option=orjson.OPT_SORT_KEYS))

    def take(self, value: Any) -> bytes | None:
        """The bytes, once, if they encode ``value`` itself; None for any other object, or
        once taken (the caller then encodes ``value`` as usual)."""
        data = self.data
        if data is None or value is not self.value:
            return None
        self.data = self.value = None
        return data


def encode_value(value: Any) -> Any:
    """The stored form of ``value``: itself if it is plain JSON, else with tagged objects.

    Raises ``ValueError`` naming the path (``rows[3].when: ...``) for anything that could not
    come back exactly.
    """
    if _is_plain(value):
        return value  # the common case, on every commit: one walk, no copy
    try:
        return _encode(value, 0)
    except _Refused as exc:
        where = "".join(reversed(exc.segments)).removeprefix(".") or "(top level)"
        raise ValueError(f"{where}: {exc.problem}") from None


def _is_plain(value: Any) -> bool:
    kind = type(value)
    if kind is dict or kind is list:
        stack = [(value, 0)]  # (container, how many containers enclose it)
        pop = stack.pop
        push = stack.append
        while stack:
            current, depth = pop()
            items: Any = current
            if type(current) is dict:
                if TAG in current:
                    return False
                for key in current:
                    if type(key) is not str or not _valid_text(key):
                        return False
                items = current.values()
            for item in items:
                kind = type(item)
                if kind is str:
                    if not _valid_text(item):
                        return False
                    continue
                if item is None or kind is bool:
                    continue
                if kind is int:
                    if not _INT_MIN <= item <= _INT_MAX:
                        return False
                elif kind is float:
                    if item - item != 0.0:  # NaN or an infinity
                        return False
                elif kind is dict or kind is list:
                    if depth >= MAX_DEPTH:
                        return False
                    push((item, depth + 1))
                else:
                    return False
        return True
    if kind is str:
        return _valid_text(value)
    if value is None or kind is bool:
        return True
    if kind is int:
        return bool(_INT_MIN <= value <= _INT_MAX)
    if kind is float:
        return bool(value - value == 0.0)
    return False


def _valid_text(text: str) -> bool:
    # Every str is Unicode, but a lone surrogate ("\ud800") has no UTF-8 form: JSON on disk
    # cannot hold it. ASCII, the common case, is checked in C without encoding.
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(text: str) -> str:
    if not _valid_text(text):
        raise _Refused("text with a lone surrogate (no UTF-8 form) cannot be stored")
    return text


def _label(value: Any) -> str:
    # A path segment names a key or a member without copying it into an error (X2) and
    # without converting a huge int to text (which Python refuses past 4,300 digits).
    if type(value) is int and value.bit_length() > 200:
        return f"<int of {value.bit_length()} bits>"
    try:
        text = repr(value)
    except Exception:  # pragma: no cover - a repr that fails
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= 60 else f"{text[:57]}..."


def _tagged(tag: str, v: Any, **extra: Any) -> dict[str, Any]:
    return {TAG: tag, "v": v, **extra}


def _items(values: Any, depth: int, label: Callable[[int, Any], str]) -> list[Any]:
    out: list[Any] = []
    append = out.append
    for index, item in enumerate(values):
        kind = type(item)
        if (
            (kind is str and item.isascii())
            or item is None
            or kind is bool
            or (kind is int and _INT_MIN <= item <= _INT_MAX)
        ):
            append(item)  # a plain leaf: no call
            continue
        try:
            append(_encode(item, depth))
        except _Refused as exc:
            exc.segments.append(label(index, item))
            raise
    return out


def _sort_key(encoded: Any) -> bytes:
    return orjson.dumps(encoded, option=orjson.OPT_SORT_KEYS)


def _encode(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise _Refused(f"nested more than {MAX_DEPTH} levels deep (as stored)")
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is str:
        return _text(value)
    if kind is int:
        return value if _INT_MIN <= value <= _INT_MAX else _tagged("int", hex(value))
    if kind is float:
        if value - value == 0.0:
            return value
        return _tagged("float", "nan" if value != value else ("inf" if value > 0 else "-inf"))
    if kind is list:
        return _items(value, depth + 1, lambda i, _: f"[{i}]")
    if kind is dict:
        if TAG not in value and all(type(key) is str for key in value):
            out = {}
            for key, item in value.items():
                if not _valid_text(key):
                    exc = _Refused("a key with a lone surrogate (no UTF-8 form) cannot be stored")
                    exc.segments.append(f"[key {_label(key)}]")
                    raise exc
                kind = type(item)
                if (
                    (kind is str and item.isascii())
                    or item is None
                    or kind is bool
                    or (kind is int and _INT_MIN <= item <= _INT_MAX)
                ):
                    out[key] = item
                    continue
                try:
                    out[key] = _encode(item, depth + 1)
                except _Refused as exc:
                    exc.segments.append(f".{key}" if len(key) <= 60 else f".{key[:57]}...")
                    raise
            return out
        pairs = []
        for key, item in value.items():
            try:
                stored_key = _encode(key, depth + 3)
            except _Refused as exc:
                exc.segments.append(f"[key {_label(key)}]")
                raise
            try:
                pairs.append([stored_key, _encode(item, depth + 3)])
            except _Refused as exc:
                exc.segments.append(f"[{_label(key)}]")
                raise
        pairs.sort(key=lambda pair: _sort_key(pair[0]))
        return _tagged("dict", pairs)
    if kind is tuple:
        return _tagged("tuple", _items(value, depth + 2, lambda i, _: f"[{i}]"))
    if kind is set or kind is frozenset:
        items = _items(value, depth + 2, lambda _, item: f"{{{_label(item)}}}")
        items.sort(key=_sort_key)
        return _tagged(kind.__name__, items)
    if kind is bytes:
        return _tagged("bytes", base64.b64encode(value).decode("ascii"))
    if kind is dt.datetime or kind is dt.time:
        tag = "datetime" if kind is dt.datetime else "time"
        extra = _zone(value.tzinfo)
        if value.fold:
            extra["fold"] = 1
        return _tagged(tag, value.replace(tzinfo=None, fold=0).isoformat(), **extra)
    if kind is dt.date:
        return _tagged("date", value.isoformat())
    if kind is dt.timedelta:
        return _tagged("timedelta", [value.days, value.seconds, value.microseconds])
    if kind is decimal.Decimal:
        return _tagged("decimal", str(value))
    if kind is uuid.UUID:
        return _tagged("uuid", str(value))
    raise _Refused(_why_not(value))


def _zone(tz: dt.tzinfo | None) -> dict[str, Any]:
    if tz is None:
        return {}
    if type(tz) is dt.timezone:
        offset = tz.utcoffset(None)
        extra: dict[str, Any] = {"offset": offset // dt.timedelta(microseconds=1)}
        name = tz.tzname(None)
        if name != dt.timezone(offset).tzname(None):
            extra["name"] = _text(name)
        return extra
    if type(tz) is zoneinfo.ZoneInfo and tz.key is not None:
        return {"zone": tz.key}
    raise _Refused(
        f"a time zone of type {type(tz).__qualname__} cannot be stored exactly; use "
        "datetime.timezone (a fixed offset) or zoneinfo.ZoneInfo (by key)"
    )


_BASES = (
    bool, int, float, str, bytes, list, dict, tuple, set, frozenset,
    dt.datetime, dt.date, dt.time, dt.timedelta, decimal.Decimal, uuid.UUID,
)  # fmt: skip


def _why_not(value: Any) -> str:
    name = type(value).__qualname__
    for base in _BASES:
        if isinstance(value, base):
            return (
                f"a value of type {name} (a subclass of {base.__name__}) cannot be stored "
                f"exactly: it would come back as a plain {base.__name__}; convert it first"
            )
    return f"a value of type {name} cannot be stored exactly; storable values are {_SUPPORTED}"


# -- decoding ------------------------------------------------------------------------------


def decode_value(raw: Any) -> Any:
    """The value that ``raw`` (as read from disk) stands for; :class:`Malformed` if a tagged
    object in it is not one this encoding writes."""
    if not _has_tags(raw):
        return raw
    try:
        return _decode(raw, 0)
    except _Bad as exc:
        raise Malformed("".join(reversed(exc.segments)), exc.problem) from None


class _Bad(ValueError):
    # As _Refused: the path is built on the way up, only when something is wrong.
    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.segments: list[str] = []


_MARK = b'"' + TAG.encode() + b'"'


def _has_tags(value: Any) -> bool:
    if type(value) is not dict and type(value) is not list:
        return False
    try:
        # One C pass: JSON without the string "$ms" anywhere holds no tag. (The string can
        # only appear whole: inside other strings its quotes would be escaped.)
        return _MARK in orjson.dumps(value)
    except TypeError:  # not JSON: built in memory, not read from disk
        pass
    stack = [value]
    pop = stack.pop
    push = stack.append
    while stack:
        current = pop()
        if type(current) is dict:
            if TAG in current:
                return True
            items: Any = current.values()
        else:
            items = current
        for item in items:
            if type(item) is dict or type(item) is list:
                push(item)
    return False


def _decode(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise _Bad(f"nested more than {MAX_DEPTH} levels deep")
    if type(value) is list:
        return _decode_items(value, depth + 1, "")
    if type(value) is not dict:
        return value
    if TAG not in value:
        out = {}
        for key, item in value.items():
            if type(item) is dict or type(item) is list:
                try:
                    item = _decode(item, depth + 1)
                except _Bad as exc:
                    exc.segments.append(f".{key}")
                    raise
            out[key] = item
        return out
    tag = value[TAG]
    decoder = _DECODERS.get(tag) if type(tag) is str else None
    if decoder is None:
        raise _Bad(f"unknown tag {tag!r}")
    allowed = _EXTRA_KEYS.get(tag, frozenset())
    extra = set(value) - {TAG, "v"} - allowed
    if extra or "v" not in value:
        problem = f"unexpected keys {sorted(extra)}" if extra else "missing v"
        raise _Bad(f"tag {tag!r}: {problem}")
    try:
        return decoder(value, depth)
    except _Bad:
        raise
    except (ValueError, TypeError, OverflowError, KeyError, binascii.Error) as exc:
        raise _Bad(f"tag {tag!r}: {exc}") from None


def _decode_items(items: list[Any], depth: int, prefix: str) -> list[Any]:
    out: list[Any] = []
    append = out.append
    for index, item in enumerate(items):
        if type(item) is dict or type(item) is list:
            try:
                item = _decode(item, depth)
            except _Bad as exc:
                exc.segments.append(f"{prefix}[{index}]")
                raise
        append(item)
    return out


def _need(value: Any, kind: type, what: str) -> Any:
    if type(value) is not kind:
        raise ValueError(f"{what} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def _list(raw: dict[str, Any], depth: int) -> list[Any]:
    return _decode_items(_need(raw["v"], list, "v"), depth + 2, ".v")


def _collection(make: type[set[Any]] | type[frozenset[Any]]) -> Any:
    def decode(raw: dict[str, Any], depth: int) -> Any:
        items = _list(raw, depth)
        out = make(items)
        if len(out) != len(items):
            raise ValueError("v holds equal items twice")
        return out

    return decode


def _dict(raw: dict[str, Any], depth: int) -> dict[Any, Any]:
    out = {}
    for i, pair in enumerate(_need(raw["v"], list, "v")):
        if type(pair) is not list or len(pair) != 2:
            raise ValueError(f"v[{i}] must be a [key, value] pair")
        key, item = _decode_items(pair, depth + 3, f".v[{i}]")
        if key in out:
            raise ValueError(f"v[{i}] repeats a key")
        out[key] = item
    return out


_HEX = re.compile(r"-?0x[0-9a-f]+")
_FLOATS = frozenset({"nan", "inf", "-inf"})


def _int(raw: dict[str, Any], depth: int) -> int:
    text = _need(raw["v"], str, "v")
    if not _HEX.fullmatch(text):
        raise ValueError("v must be a hex integer (0x...)")
    return int(text, 16)


def _float(raw: dict[str, Any], depth: int) -> float:
    text = _need(raw["v"], str, "v")
    if text not in _FLOATS:
        raise ValueError("v must be one of 'nan', 'inf', '-inf'")
    # A new object each time: two NaNs of one set (or two NaN keys) are distinct objects,
    # and must come back so, or the set would seem to hold one item twice.
    return float(text)


def _bytes(raw: dict[str, Any], depth: int) -> bytes:
    return base64.b64decode(_need(raw["v"], str, "v").encode("ascii"), validate=True)


def _tz(raw: dict[str, Any]) -> dt.tzinfo | None:
    if "offset" in raw and "zone" in raw:
        raise ValueError("offset and zone exclude each other")
    if "zone" in raw:
        if "name" in raw:
            raise ValueError("name goes with offset, not zone")
        key = _need(raw["zone"], str, "zone")
        try:
            return zoneinfo.ZoneInfo(key)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {key!r}") from None
    if "offset" in raw:
        offset = dt.timedelta(microseconds=_need(raw["offset"], int, "offset"))
        if "name" in raw:
            return dt.timezone(offset, _need(raw["name"], str, "name"))
        return dt.timezone(offset)
    if "name" in raw:
        raise ValueError("name goes with offset")
    return None


def _fold(raw: dict[str, Any]) -> int:
    if "fold" not in raw:
        return 0
    if type(raw["fold"]) is not int or raw["fold"] != 1:
        raise ValueError("fold must be 1 when present")
    return 1


def _datetime(raw: dict[str, Any], depth: int) -> dt.datetime:
    value = dt.datetime.fromisoformat(_need(raw["v"], str, "v"))
    if value.tzinfo is not None:
        raise ValueError("v must be a wall time without an offset")
    return value.replace(tzinfo=_tz(raw), fold=_fold(raw))


def _time(raw: dict[str, Any], depth: int) -> dt.time:
    value = dt.time.fromisoformat(_need(raw["v"], str, "v"))
    if value.tzinfo is not None:
        raise ValueError("v must be a wall time without an offset")
    return value.replace(tzinfo=_tz(raw), fold=_fold(raw))


def _date(raw: dict[str, Any], depth: int) -> dt.date:
    return dt.date.fromisoformat(_need(raw["v"], str, "v"))


def _timedelta(raw: dict[str, Any], depth: int) -> dt.timedelta:
    parts = _need(raw["v"], list, "v")
    if len(parts) != 3 or any(type(part) is not int for part in parts):
        raise ValueError("v must be [days, seconds, microseconds]")
    days, seconds, micros = parts
    if not (0 <= seconds < 86_400 and 0 <= micros < 1_000_000):
        raise ValueError("v must be normalised: 0 <= seconds < 86400, 0 <= microseconds < 10**6")
    return dt.timedelta(days=days, seconds=seconds, microseconds=micros)


def _decimal(raw: dict[str, Any], depth: int) -> decimal.Decimal:
    try:
        return decimal.Decimal(_need(raw["v"], str, "v"))
    except decimal.InvalidOperation:
        raise ValueError("v is not a decimal number") from None


def _uuid(raw: dict[str, Any], depth: int) -> uuid.UUID:
    return uuid.UUID(_need(raw["v"], str, "v"))


_DECODERS: dict[str, Callable[[dict[str, Any], int], Any]] = {
    "tuple": lambda raw, depth: tuple(_list(raw, depth)),
    "set": _collection(set),
    "frozenset": _collection(frozenset),
    "dict": _dict,
    "bytes": _bytes,
    "int": _int,
    "float": _float,
    "datetime": _datetime,
    "time": _time,
    "date": _date,
    "timedelta": _timedelta,
    "decimal": _decimal,
    "uuid": _uuid,
}
_ZONE_KEYS = frozenset({"offset", "name", "zone", "fold"})
_EXTRA_KEYS = {"datetime": _ZONE_KEYS, "time": _ZONE_KEYS}
