"""A SqliteStore's sealed evidence: rows of ``evidence (digest, body, created_at)`` on the
store's connection. What is shared by every backend (sealing, checking) is
``storage._evidence``'s."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from ..._errors import StorageError
from ..._evidence import (
    MAX_EVIDENCE_BYTES,
    EvidenceError,
    check_evidence,
    checked_digest,
    not_stored,
)

__all__ = ["SqliteEvidence"]


class SqliteEvidence:
    """The evidence table of the SqliteStore at ``path``, on its connection ``db`` used
    under its ``lock``: ``put`` and ``get`` as the ``EvidenceStore`` methods
    ``put_evidence`` and ``get_evidence`` describe."""

    def __init__(
        self,
        db: sqlite3.Connection,
        lock: threading.Lock,
        *,
        clock: Callable[[], float],
        read_only: bool,
        path: Path,
    ) -> None:
        self.db = db
        self.lock = lock
        self.clock = clock
        self.read_only = read_only
        self.path = path

    def put(self, digest: str, body: bytes) -> None:
        digest = checked_digest(digest)
        check_evidence(digest, body, canonical=True)
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only")
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute(
                    "INSERT INTO evidence (digest, body, created_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (digest) DO NOTHING",
                    (digest, body, self.clock()),
                )
                self.db.execute("COMMIT")
            except BaseException:  # any way out: rolled back, re-raised
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        self.get(digest)  # one stored before: checked, left as it is

    def get(self, digest: str) -> bytes:
        digest = checked_digest(digest)
        with self.lock:
            try:
                row = self.db.execute(
                    "SELECT length(body), CASE WHEN length(body) <= ? THEN body END "
                    "FROM evidence WHERE digest = ?",
                    (MAX_EVIDENCE_BYTES, digest),
                ).fetchone()
            except Exception as exc:  # a store opened read-only before the table existed
                if "no such table" in str(exc):
                    raise not_stored(digest) from None
                raise
        if row is None:
            raise not_stored(digest)
        if row[1] is None:  # X2: a row over the bound is not fetched
            raise EvidenceError(f"evidence {digest}: {row[0]} bytes, over the limit")
        return check_evidence(digest, row[1])
