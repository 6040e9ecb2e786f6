"""A PostgresStore's sealed evidence: rows of ``evidence`` (schema version 4), each insert
committed on its own (``ON CONFLICT DO NOTHING``: written once, safe to retry). What is
shared by every backend (sealing, checking) is ``storage._evidence``'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._errors import StorageError
from ..._evidence import (
    MAX_EVIDENCE_BYTES,
    EvidenceError,
    check_evidence,
    checked_digest,
    not_stored,
)
from .connect import Connections

__all__ = ["PgEvidence"]


class PgEvidence:
    """The evidence table in schema ``s`` (quoted), read and written on ``connections``,
    each call through ``retrying`` (the store's: retried while the server is away):
    ``put`` and ``get`` as the ``EvidenceStore`` methods ``put_evidence`` and
    ``get_evidence`` describe."""

    def __init__(
        self,
        connections: Connections,
        s: str,
        *,
        read_only: bool,
        retrying: Callable[..., Any],
    ) -> None:
        self._connections = connections
        self._s = s
        self.read_only = read_only
        self._retrying = retrying

    def put(self, digest: str, body: bytes) -> None:
        digest = checked_digest(digest)
        check_evidence(digest, body, canonical=True)
        if self.read_only:
            raise StorageError("this PostgreSQL store was opened read-only")
        self._retrying(self._put, digest, body)
        self.get(digest)  # one stored before: checked, left as it is

    def _put(self, digest: str, body: bytes) -> None:
        with self._connections.reading() as conn:
            conn.execute(
                f"INSERT INTO {self._s}.evidence (digest, body, created_at) VALUES "
                "(%s, %s, extract(epoch FROM clock_timestamp())::float8) "
                "ON CONFLICT (digest) DO NOTHING",
                (digest, body),
            )

    def get(self, digest: str) -> bytes:
        digest = checked_digest(digest)
        row = self._retrying(self._get, digest)
        if row is None:
            raise not_stored(digest)
        if row[1] is None:  # X2: a row over the bound is not fetched
            raise EvidenceError(f"evidence {digest}: {row[0]} bytes, over the limit")
        return check_evidence(digest, row[1])

    def _get(self, digest: str) -> Any:
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
