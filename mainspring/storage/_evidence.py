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
under a FileStore, an ``evidence`` table in SQLite and PostgreSQL) through the methods of
:class:`EvidenceStore`, synchronous, called off the event loop (``Committer.seal_evidence``).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import orjson

from ._backends.file.frames import replace_file
from ._errors import StorageError
from ._platform import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK
from ._workers import check_digest

if TYPE_CHECKING:
    import sqlite3

    from ._backends.postgres.connect import Connections

__all__ = [
    "MAX_EVIDENCE_BYTES",
    "EvidenceError",
    "EvidenceStore",
    "FileEvidence",
    "PgEvidence",
    "SqliteEvidence",
    "canonical_json",
    "check_evidence",
    "load_evidence",
    "parse_evidence",
    "seal",
    "seal_into",
]

T = TypeVar("T")

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


def _digest(digest: Any) -> str:
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


def _missing(digest: str) -> EvidenceError:
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


# -- FileStore: evidence/<digest>.json ------------------------------------------------------


class FileEvidence:
    """A FileStore's evidence: ``evidence/<digest>.json`` under the store (0700 directory,
    0600 files)."""

    if TYPE_CHECKING:
        path: Path
        read_only: bool

    def _evidence_file(self, digest: str) -> Path:
        return self.path / "evidence" / f"{_digest(digest)}.json"  # X1: checked first

    def put_evidence(self, digest: str, body: bytes) -> None:
        target = self._evidence_file(digest)
        check_evidence(digest, body, canonical=True)
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only")
        with contextlib.suppress(EvidenceError):
            self.get_evidence(digest)
            return  # written once: left as it is
        if target.exists():  # there, but not what was sealed: never overwritten (fail closed)
            self.get_evidence(digest)
        folder = target.parent
        if not folder.is_dir():
            folder.mkdir(mode=0o700, exist_ok=True)
            os.chmod(folder, 0o700)
            _fsync_directory(self.path)
        replace_file(target, body)

    def get_evidence(self, digest: str) -> bytes:
        target = self._evidence_file(digest)
        try:
            fd = os.open(target, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        except FileNotFoundError:
            raise _missing(digest) from None
        except OSError as exc:
            raise EvidenceError(f"evidence {digest}: cannot be read ({exc.strerror})") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise EvidenceError(f"evidence {digest}: not a regular file")
            with os.fdopen(os.dup(fd), "rb") as handle:
                body = handle.read(MAX_EVIDENCE_BYTES + 1)  # X2: never past the bound
        finally:
            os.close(fd)
        return check_evidence(digest, body)


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- SqliteStore: the evidence table ---------------------------------------------------------


class SqliteEvidence:
    """A SqliteStore's evidence: rows of ``evidence (digest, body, created_at)``."""

    if TYPE_CHECKING:
        _db: sqlite3.Connection
        _lock: threading.Lock
        _clock: Callable[[], float]
        read_only: bool
        path: Path

    def put_evidence(self, digest: str, body: bytes) -> None:
        digest = _digest(digest)
        check_evidence(digest, body, canonical=True)
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO evidence (digest, body, created_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (digest) DO NOTHING",
                    (digest, body, self._clock()),
                )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        self.get_evidence(digest)  # one stored before: checked, left as it is

    def get_evidence(self, digest: str) -> bytes:
        digest = _digest(digest)
        with self._lock:
            try:
                row = self._db.execute(
                    "SELECT length(body), CASE WHEN length(body) <= ? THEN body END "
                    "FROM evidence WHERE digest = ?",
                    (MAX_EVIDENCE_BYTES, digest),
                ).fetchone()
            except Exception as exc:  # a store opened read-only before the table existed
                if "no such table" in str(exc):
                    raise _missing(digest) from None
                raise
        if row is None:
            raise _missing(digest)
        if row[1] is None:  # X2: a row over the bound is not fetched
            raise EvidenceError(f"evidence {digest}: {row[0]} bytes, over the limit")
        return check_evidence(digest, row[1])


# -- PostgresStore: the evidence table (schema version 4) ------------------------------------


class PgEvidence:
    """A PostgresStore's evidence: rows of ``evidence`` (schema version 4), each insert
    committed on its own (``ON CONFLICT DO NOTHING``: written once, safe to retry)."""

    if TYPE_CHECKING:
        _connections: Connections
        _s: str
        read_only: bool

        def _retrying(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def put_evidence(self, digest: str, body: bytes) -> None:
        digest = _digest(digest)
        check_evidence(digest, body, canonical=True)
        if self.read_only:
            raise StorageError("this PostgreSQL store was opened read-only")
        self._retrying(self._put_evidence, digest, body)
        self.get_evidence(digest)  # one stored before: checked, left as it is

    def _put_evidence(self, digest: str, body: bytes) -> None:
        with self._connections.reading() as conn:
            conn.execute(
                f"INSERT INTO {self._s}.evidence (digest, body, created_at) VALUES "
                "(%s, %s, extract(epoch FROM clock_timestamp())::float8) "
                "ON CONFLICT (digest) DO NOTHING",
                (digest, body),
            )

    def get_evidence(self, digest: str) -> bytes:
        digest = _digest(digest)
        row = self._retrying(self._get_evidence, digest)
        if row is None:
            raise _missing(digest)
        if row[1] is None:  # X2: a row over the bound is not fetched
            raise EvidenceError(f"evidence {digest}: {row[0]} bytes, over the limit")
        return check_evidence(digest, row[1])

    def _get_evidence(self, digest: str) -> Any:
        with self._connections.reading() as conn:  # autocommit: an error leaves no transaction
            try:
                return conn.execute(
                    "SELECT octet_length(body), CASE WHEN octet_length(body) <= %s THEN body END "
                    f"FROM {self._s}.evidence WHERE digest = %s",
                    (MAX_EVIDENCE_BYTES, digest),
                ).fetchone()
            except Exception as exc:  # a schema older than 4, opened read-only: none stored
                if getattr(exc, "sqlstate", None) == "42P01":  # undefined_table
                    return None
                raise
