"""Review #17: evidence read from a store written before evidence existed is "not stored"
(EvidenceError, failing closed) on every backend, as SQLite already said: a PostgreSQL
schema of version 3 opened read-only answered a raw StorageError about a missing table."""

from __future__ import annotations

import psycopg
import pytest

import mainspring as ms
from mainspring.storage._backends.postgres.schema import upgrade
from mainspring.storage._backends.postgres.store import PostgresStore
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema


def test_evidence_of_a_version_3_schema_read_only_is_not_stored() -> None:
    url = require_server()
    name = fresh_schema()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            assert upgrade(conn, name, to=3) == 3
        reader = PostgresStore(with_schema(url, name), read_only=True)
        try:
            with pytest.raises(ms.storage._seam.EvidenceError, match="not stored"):
                reader.get_evidence("a" * 64)
            assert reader.get("ex-1") is None  # and the store is still usable
        finally:
            reader.close()
    finally:
        drop_schema(name)
