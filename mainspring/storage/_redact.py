"""Redaction: secrets are masked before anything reaches disk, events, logs or the CLI (E5).

Two nets: values registered as secrets (exact text, wherever it appears) and the shapes of
well-known credentials. Masks say what kind of secret was there, never any of its characters.
The text rule itself (the shapes, the registered secrets) is ``mainspring._redaction``, which
the command uses without loading the stores; here values are walked with it.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable
from typing import Any

import attrs

from .._redaction import ANY_SHAPE as _ANY_SHAPE  # noqa: F401 (tests read it here)
from .._redaction import BEARER as _BEARER  # noqa: F401 (tests read it here)
from .._redaction import MIN_SECRET as _MIN_SECRET
from .._redaction import NO_EXTRA as _NO_EXTRA
from .._redaction import PATTERNS as PATTERNS
from .._redaction import SECRET_MASK as _SECRET_MASK
from .._redaction import Seen, register
from .._redaction import mask as _mask
from .._redaction import redact_text as _redact_text
from ._append_only import AppendOnly, AppendOnlyList
from ._entries import Entries
from ._vector import Vector

__all__ = ["PATTERNS", "redact", "redact_flagged", "register_secret"]

# Key names are compared as words: "accessToken", "ACCESS-TOKEN" and "access_token" all read
# access_token. A key is a secret's when its last word (or two) says so; a token that names
# a place in a listing (next_token, page_token, nextPageToken) is pagination, not a secret.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SECRET_WORDS = frozenset(
    {"password", "passwd", "pwd", "secret", "token", "apikey", "cookie", "authorization"}
)
_SECRET_PAIRS = frozenset(
    {("api", "key"), ("secret", "key"), ("private", "key"), ("access", "key")}
)
_PAGINATION = frozenset({"next", "page", "continuation", "pagination", "cursor", "sync"})


@functools.lru_cache(maxsize=4_096)  # keys repeat (the same inputs' names): read once each
def _secret_key(key: str) -> bool:
    words = _CAMEL.sub("_", key).lower().replace("-", "_").split("_")
    words = [word for word in words if word]
    if not words:
        return False
    last = words[-1]
    if last in _SECRET_WORDS:
        return not (last == "token" and len(words) > 1 and words[-2] in _PAGINATION)
    return len(words) > 1 and (words[-2], last) in _SECRET_PAIRS


_MAX_DEPTH = 200
#: Vectors, AppendOnly views and Entries read as the tuple (an AppendOnlyList: the list)
#: they stand for, and are walked as one: a secret inside a live record's sequence, or a
#: read one's, is masked too (E5).
_VIEWS = (Vector, AppendOnly, Entries)
_CONTAINERS = (dict, list, tuple, set, frozenset, *_VIEWS)


def register_secret(value: str) -> None:
    """Mask ``value`` wherever it appears from now on (process-wide). Needs 6+ characters."""
    register(value)


class _Changed(Seen):
    __slots__ = ()


def redact(value: Any, *, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``value`` with secrets masked, walking dicts (keys too), lists, tuples, sets,
    frozensets and attrs records, and the text inside bytes. A ``Vector`` or an ``AppendOnly``
    view (a live record's sequences) or ``Entries`` (a read one's) is walked and returned as
    the tuple it stands for (an ``AppendOnlyList`` as a list).

    Strings are scanned for registered secrets, ``secrets`` given here, and known token shapes
    (AWS, GitHub, OpenAI, Anthropic, Slack, Google keys, JWTs, ``Authorization: Bearer`` values,
    PEM private keys). Values under keys named like ``password`` or ``api_key`` are masked
    whole (pagination keys such as ``next_token`` or ``page_token`` are not secrets). Other
    values are returned as they are.
    """
    return redact_flagged(value, secrets=secrets)[0]


def redact_flagged(value: Any, *, secrets: Iterable[str] = ()) -> tuple[Any, bool]:
    """:func:`redact`, and whether it masked anything: the copy is not the value (E10)."""
    extra = (
        frozenset(s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET)
        if type(secrets) is not tuple or secrets
        else _NO_EXTRA
    )
    changed = _Changed()
    return _walk(value, extra, 0, changed), changed.seen


#: Values that hold no text: returned as they are, without the checks below.
_SCALARS = frozenset({int, float, bool, type(None)})


def _walk(value: Any, extra: frozenset[str], depth: int, changed: _Changed) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is str or isinstance(value, str):
        return _redact_text(value, extra, changed)
    if depth > _MAX_DEPTH and isinstance(value, _CONTAINERS):
        # Deeper than any value the typed encoding stores (a leaf may sit one level below
        # its deepest container); refuse rather than recurse forever.
        raise ValueError(f"value nested more than {_MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            seen, changed.seen = changed.seen, False
            if isinstance(key, str):
                new_key = _redact_text(key, extra, changed)
            else:
                new_key = _walk(key, extra, depth + 1, changed)
            masked, changed.seen = changed.seen, changed.seen or seen
            if masked:  # masked keys must not collapse into one and lose entries
                base, n = new_key if isinstance(new_key, str) else _mask("key"), 2
                while new_key in out or new_key in value:
                    new_key, n = f"{base} ({n})", n + 1
            # A key that was itself a secret is not a name that says its value is one.
            named = isinstance(key, str) and not masked and _secret_key(key)
            if named and item not in (None, ""):
                if not (type(item) is str and item == _SECRET_MASK):
                    changed.seen = True
                out[new_key] = _SECRET_MASK
            else:
                out[new_key] = _walk(item, extra, depth + 1, changed)
        return out
    if isinstance(value, list):
        return [_walk(item, extra, depth + 1, changed) for item in value]
    if isinstance(value, tuple):
        return tuple(_walk(item, extra, depth + 1, changed) for item in value)
    if isinstance(value, set | frozenset):
        make = frozenset if isinstance(value, frozenset) else set
        return make(_walk(item, extra, depth + 1, changed) for item in value)
    if isinstance(value, _VIEWS):  # E5: walked as the tuple (or list) it stands for
        walked = (_walk(item, extra, depth + 1, changed) for item in value)
        return list(walked) if isinstance(value, AppendOnlyList) else tuple(walked)
    if isinstance(value, bytes):
        # Bytes are scanned as text (undecodable bytes kept as they are): a secret must not
        # reach disk base64-encoded either.
        text = value.decode("utf-8", "surrogateescape")
        seen, changed.seen = changed.seen, False
        scanned = _redact_text(text, extra, changed)
        if not changed.seen:
            changed.seen = seen
            return value
        return scanned.encode("utf-8", "surrogateescape")
    if isinstance(value, dt.datetime | dt.time) and type(value.tzinfo) is dt.timezone:
        # A fixed offset's name is free text and is stored (E5): scanned like any string.
        zone = value.tzinfo
        seen, changed.seen = changed.seen, False
        zone_name = _redact_text(zone.tzname(None), extra, changed)
        if not changed.seen:
            changed.seen = seen
            return value
        return value.replace(tzinfo=dt.timezone(zone.utcoffset(None), zone_name))
    if depth > _MAX_DEPTH and attrs.has(type(value)):
        raise ValueError(f"value nested more than {_MAX_DEPTH} levels deep")
    if attrs.has(type(value)):
        changes = {
            field.name: _walk(getattr(value, field.name), extra, depth + 1, changed)
            for field in attrs.fields(type(value))
            if field.init
        }
        return attrs.evolve(value, **changes)
    return value
