"""Sealed evidence: a JSON document stored once under the sha256 of its canonical bytes.

What a worker delivered, its diagnostics, a repair instruction: text the execution's
records never hold (V1, E5). They keep the digest; the document is sealed here, in the
store beside them:

- **canonical**: :func:`canonical_json` (JSON types only, finite numbers, sorted keys, no
  whitespace), so one document has one digest;
- **bounded**: at most :data:`MAX_EVIDENCE_BYTES` (4 MiB), refused before anything is
  written, and never read past it (X2);
- **written once**: storing a digest again leaves what is stored as it is (after checking
  it); a file is written whole (temp file, fsync, rename, directory fsync) or not at all;
- **validated on read, failing closed**: what is read back is hashed again; missing, too
  large, not canonical or not matching its digest is an :class:`EvidenceError`, never a
  partial or repaired document.

The digest is checked (:func:`~mainspring.storage.check_digest`) before any path or query
is made of it (X1). Each backend stores evidence its own way (``evidence/<digest>.json``
under a FileStore, an ``evidence`` table in SQLite and PostgreSQL: each backend folder's
``evidence`` module) through the methods of :class:`EvidenceStore`, synchronous, called off
the event loop (``Committer.seal_evidence``); this module is what they share.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Protocol, runtime_checkable

import orjson

from ._errors import StorageError
from ._workers import check_digest

__all__ = [
    "MAX_EVIDENCE_BYTES",
    "EvidenceError",
    "EvidenceStore",
    "canonical_json",
    "check_evidence",
    "checked_digest",
    "load_evidence",
    "not_stored",
    "parse_evidence",
    "seal",
    "seal_into",
]

#: The largest sealed document, in canonical bytes.
MAX_EVIDENCE_BYTES = 4 * 1024 * 1024
_MAX_DEPTH = 200  # orjson's own limit is 254: refused here with a clear message first


class EvidenceError(StorageError, ValueError):
    """Evidence that cannot be sealed or read back as sealed: a bad digest, a document
    over the bound or not canonical, one missing, or one whose bytes do not match its
    digest (tampered). Nothing partial is ever returned (fail closed)."""


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of ``value``: sorted keys, no whitespace, UTF-8. JSON types
    only (a dict with string keys, a list, a string, an int, a finite float, a bool, None);
    anything else (a tuple, NaN, a set, bytes...) is a ValueError, never coerced."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict:
            if depth >= _MAX_DEPTH:
                raise ValueError(f"evidence nests deeper than {_MAX_DEPTH} levels")
            for key, inner in item.items():
                if type(key) is not str:
                    raise ValueError(f"evidence keys must be strings, not {type(key).__name__}")
                stack.append((inner, depth + 1))
        elif kind is list:
            if depth >= _MAX_DEPTH:
                raise ValueError(f"evidence nests deeper than {_MAX_DEPTH} levels")
            stack.extend((inner, depth + 1) for inner in item)
        elif kind is float:
            if not math.isfinite(item):
                raise ValueError("evidence numbers must be finite (no NaN or infinity)")
        elif kind is int:
            if not -(2**63) <= item < 2**64:
                raise ValueError("evidence integers must fit in 64 bits")
        elif kind not in (str, bool, type(None)):
            raise ValueError(f"evidence must be JSON data, not {kind.__name__}")
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:  # e.g. a string that is not valid UTF-8
        raise ValueError(f"evidence is not representable as JSON: {exc}") from None


def seal(document: Any) -> tuple[str, bytes]:
    """``(digest, body)`` of ``document``: its canonical bytes and their sha256. A document
    that is not JSON data is a ValueError; one over :data:`MAX_EVIDENCE_BYTES` an
    :class:`EvidenceError`."""
    body = canonical_json(document)
    if len(body) > MAX_EVIDENCE_BYTES:
        raise EvidenceError(
            f"evidence of {len(body):,} bytes is over the {MAX_EVIDENCE_BYTES:,}-byte limit"
        )
    return hashlib.sha256(body).hexdigest(), body


def seal_into(store: EvidenceStore, document: Any) -> str:
    """Seal ``document`` and store it in ``store`` (synchronously); its digest."""
    digest, body = seal(document)
    store.put_evidence(digest, body)
    return digest


def checked_digest(digest: Any) -> str:
    """``digest`` if it is a well-formed evidence digest (X1), :class:`EvidenceError` if not."""
    try:
        return check_digest(digest, "an evidence digest")
    except ValueError as exc:
        raise EvidenceError(str(exc)) from None


def check_evidence(digest: str, body: Any, *, canonical: bool = False) -> bytes:
    """``body`` if it is the evidence sealed under ``digest``: bytes, within the bound,
    hashing to ``digest`` (and, with ``canonical``, in canonical form: what is about to be
    stored); :class:`EvidenceError` otherwise."""
    if type(body) is memoryview:
        body = bytes(body)
    if type(body) is not bytes:
        raise EvidenceError(f"evidence {digest}: stored as {type(body).__name__}, not bytes")
    if len(body) > MAX_EVIDENCE_BYTES:
        raise EvidenceError(
            f"evidence {digest}: {len(body):,} bytes, over the {MAX_EVIDENCE_BYTES:,}-byte limit"
        )
    if hashlib.sha256(body).hexdigest() != digest:
        raise EvidenceError(f"evidence {digest}: its bytes do not match its digest (tampered)")
    if canonical:
        try:
            again = canonical_json(orjson.loads(body))
        except (orjson.JSONDecodeError, ValueError):
            again = b""
        if again != body:
            raise EvidenceError(f"evidence {digest}: not canonical JSON")
    return body


def parse_evidence(digest: str, body: bytes) -> Any:
    """The document of ``body`` (checked by :func:`check_evidence` already)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise EvidenceError(f"evidence {digest}: not JSON") from None


def load_evidence(store: object, digest: str) -> Any:
    """The document sealed under ``digest`` in ``store``, read synchronously (for the CLI;
    on an event loop use ``Committer.read_evidence``): checked and parsed, failing closed
    (:class:`EvidenceError`); ``TypeError`` if the store keeps no evidence."""
    if not isinstance(store, EvidenceStore):
        raise TypeError(f"{type(store).__name__} keeps no sealed evidence")
    return parse_evidence(digest, store.get_evidence(digest))


def not_stored(digest: str) -> EvidenceError:
    """The error for evidence that is not stored under ``digest``."""
    return EvidenceError(f"evidence {digest}: not stored")


@runtime_checkable
class EvidenceStore(Protocol):
    """A store that keeps sealed evidence (every backend of this package). Synchronous:
    call it off the event loop (``Committer.seal_evidence`` does)."""

    def put_evidence(self, digest: str, body: bytes) -> None:
        """Store ``body`` under ``digest`` once: it must be canonical JSON hashing to
        ``digest``, within the bound; if the digest is stored already, what is stored is
        checked and left as it is. :class:`EvidenceError` for anything else."""

    def get_evidence(self, digest: str) -> bytes:
        """The bytes sealed under ``digest``, checked again (size, then hash);
        :class:`EvidenceError` if missing or not what was sealed."""
