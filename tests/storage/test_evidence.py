"""Sealed evidence (#17) on every backend: canonical JSON stored once under its sha256, at
most 4 MiB, checked again on read and failing closed; the digest checked before any path or
query (X1); files 0600 in a 0700 directory; PostgreSQL's schema upgraded from 3 to 4."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

import mainspring as ms
from mainspring.storage._backends.file.store import FileStore
from mainspring.storage._backends.postgres.schema import PG_SCHEMA_VERSION, upgrade
from mainspring.storage._backends.postgres.store import PostgresStore
from mainspring.storage._backends.sqlite.store import SqliteStore
from mainspring.storage._evidence import seal
from mainspring.storage._persistence import open_committer
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

Factory = Callable[[], Any]
DOCUMENT = {"verdict": "pass", "checks": [{"id": "unit", "ok": True, "n": 3}], "cost": 0.25}


@pytest.fixture(params=["file", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    made: list[Any] = []
    schema = ""
    url = ""
    if request.param == "postgres":
        url = require_server()
        schema = fresh_schema()

    def make() -> Any:
        store: Any
        if request.param == "file":
            store = FileStore(tmp_path / "store")
        elif request.param == "postgres":
            store = PostgresStore(with_schema(url, schema))
        else:
            store = SqliteStore(tmp_path / "store" / "mainspring.db")
        made.append(store)
        return store

    make.kind = request.param  # type: ignore[attr-defined]
    yield make
    for store in made:
        if isinstance(store, SqliteStore | PostgresStore):
            store.close()
    if schema:
        drop_schema(schema)


def tamper(store: Any, digest: str, body: bytes) -> None:
    """Replace what is stored under ``digest`` behind the store's back."""
    if isinstance(store, FileStore):
        path = store.path / "evidence" / f"{digest}.json"
        os.chmod(path, 0o600)
        path.write_bytes(body)
    elif isinstance(store, SqliteStore):
        store._db.execute("UPDATE evidence SET body = ? WHERE digest = ?", (body, digest))
    else:
        with store._connections.reading() as conn:
            conn.execute(
                f"UPDATE {store._s}.evidence SET body = %s WHERE digest = %s",
                (body, digest),
            )


# -- canonical JSON --------------------------------------------------------------------------


def test_canonical_json_is_sorted_compact_and_json_only() -> None:
    assert ms.storage._seam.canonical_json({"b": 1, "a": [True, None, 1.5, "é"]}) == (
        '{"a":[true,null,1.5,"é"],"b":1}'.encode()
    )
    for bad in (
        float("nan"),
        float("inf"),
        {"x": float("-inf")},
        (1, 2),
        {1: "int key"},
        {"s": {1, 2}},
        b"bytes",
        2**70,
        object(),
    ):
        with pytest.raises(ValueError, match="evidence"):
            ms.storage._seam.canonical_json(bad)
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(ValueError, match="nests"):
        ms.storage._seam.canonical_json(deep)


# -- every backend ---------------------------------------------------------------------------


def test_evidence_is_written_once_and_read_back_checked(make_store: Factory) -> None:
    store = make_store()
    digest, body = seal(DOCUMENT)
    assert digest == hashlib.sha256(body).hexdigest()
    store.put_evidence(digest, body)
    store.put_evidence(digest, body)  # the same digest again: fine, left as it is
    assert store.get_evidence(digest) == body
    assert ms.storage._seam.load_evidence(make_store(), digest) == DOCUMENT  # another store object
    missing = "0" * 64
    with pytest.raises(ms.storage._seam.EvidenceError, match="not stored"):
        store.get_evidence(missing)


def test_tampered_evidence_fails_closed(make_store: Factory) -> None:
    store = make_store()
    digest, body = seal(DOCUMENT)
    store.put_evidence(digest, body)
    tamper(store, digest, body.replace(b"pass", b"fail"))
    with pytest.raises(ms.storage._seam.EvidenceError, match="tampered"):
        store.get_evidence(digest)
    with pytest.raises(ms.storage._seam.EvidenceError, match="tampered"):
        ms.storage._seam.load_evidence(make_store(), digest)
    with pytest.raises(ms.storage._seam.EvidenceError, match="tampered"):
        store.put_evidence(digest, body)  # what is stored is checked, never overwritten


def test_bad_bodies_and_digests_are_refused_before_anything_is_written(
    make_store: Factory, tmp_path: Path
) -> None:
    store = make_store()
    digest, body = seal(DOCUMENT)
    with pytest.raises(ms.storage._seam.EvidenceError, match="digest"):
        store.put_evidence(hashlib.sha256(b"other").hexdigest(), body)
    loose = orjson.dumps(DOCUMENT, option=orjson.OPT_INDENT_2)  # JSON, not canonical
    with pytest.raises(ms.storage._seam.EvidenceError, match="canonical"):
        store.put_evidence(hashlib.sha256(loose).hexdigest(), loose)
    nan = b'{"x":NaN}'
    with pytest.raises(ms.storage._seam.EvidenceError, match="canonical"):
        store.put_evidence(hashlib.sha256(nan).hexdigest(), nan)
    huge = b'"' + b"x" * ms.storage._seam.MAX_EVIDENCE_BYTES + b'"'
    with pytest.raises(ms.storage._seam.EvidenceError, match="limit"):
        store.put_evidence(hashlib.sha256(huge).hexdigest(), huge)
    for bad in ("../" + "a" * 61, "A" * 64, "a" * 63, "", None, "a" * 63 + "/"):
        with pytest.raises(ms.storage._seam.EvidenceError, match="sha256"):
            store.put_evidence(bad, body)
        with pytest.raises(ms.storage._seam.EvidenceError, match="sha256"):
            store.get_evidence(bad)
    if isinstance(store, FileStore):
        assert not (store.path / "evidence").exists()  # nothing made of a refused one
    with pytest.raises(ms.storage._seam.EvidenceError, match="not stored"):
        store.get_evidence(digest)


def test_a_document_over_the_bound_is_refused_when_sealed() -> None:
    with pytest.raises(ms.storage._seam.EvidenceError, match="limit"):
        seal("x" * ms.storage._seam.MAX_EVIDENCE_BYTES)
    with pytest.raises(ValueError, match="finite"):
        seal({"x": float("nan")})


def test_evidence_files_are_0600_in_a_0700_directory(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = FileStore(tmp_path / "store")
        digest, body = seal(DOCUMENT)
        store.put_evidence(digest, body)
    finally:
        os.umask(old)
    folder = tmp_path / "store" / "evidence"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / f"{digest}.json").stat().st_mode) == 0o600
    assert [p.name for p in folder.iterdir()] == [f"{digest}.json"]  # no temp file left


def test_an_oversized_or_odd_evidence_file_fails_closed(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    digest, body = seal(DOCUMENT)
    store.put_evidence(digest, body)
    path = tmp_path / "store" / "evidence" / f"{digest}.json"
    path.write_bytes(b"x" * (ms.storage._seam.MAX_EVIDENCE_BYTES + 10))
    with pytest.raises(ms.storage._seam.EvidenceError, match="limit"):
        store.get_evidence(digest)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ms.storage._seam.EvidenceError):
        store.get_evidence(digest)


# -- through the committer (asyncio and trio) ------------------------------------------------


@pytest.fixture
def store(make_store: Factory) -> Any:
    return make_store()  # opened before the loop runs (connecting blocks)


@pytest.mark.anyio
async def test_the_committer_seals_and_reads_evidence_off_the_loop(store: Any) -> None:
    async with ms.open_system() as system:
        committer = await open_committer(system, store)
        digest = await committer.seal_evidence(DOCUMENT)
        assert digest == hashlib.sha256(ms.storage._seam.canonical_json(DOCUMENT)).hexdigest()
        assert await committer.seal_evidence(DOCUMENT) == digest  # written once
        assert await committer.read_evidence(digest) == DOCUMENT
        with pytest.raises(ValueError, match="finite"):
            await committer.seal_evidence({"x": float("nan")})
        with pytest.raises(ms.storage._seam.EvidenceError):
            await committer.read_evidence("f" * 64)
        with pytest.raises(ms.storage._seam.EvidenceError, match="sha256"):
            await committer.read_evidence("../etc/passwd")


# -- PostgreSQL: version 3 to 4 --------------------------------------------------------------


def test_a_version_3_schema_is_upgraded_to_4_keeping_its_data() -> None:
    url = require_server()
    name = fresh_schema()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            assert upgrade(conn, name, to=3) == 3  # as mainspring left it before workers
        older = ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)
        reader = PostgresStore(with_schema(url, name), read_only=True)
        try:
            assert reader.get("ex-1") is None  # a v3 schema reads (its worker parts: none)
        finally:
            reader.close()
        store = PostgresStore(with_schema(url, name))
        try:
            assert store.create(older)
            digest, body = seal(DOCUMENT)
            store.put_evidence(digest, body)
            assert store.get_evidence(digest) == body
        finally:
            store.close()
        assert PG_SCHEMA_VERSION == 5  # 5: storage v3's values (no table changes)
        with psycopg.connect(url) as conn:
            version = conn.execute(
                f"SELECT value FROM \"{name}\".meta WHERE key = 'schema_version'"
            ).fetchone()
            tables = {
                row[0]
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (name,),
                )
            }
        assert version == ("5",)
        assert {"workers", "worker_tasks", "worker_trail", "evidence"} <= tables
    finally:
        drop_schema(name)


# ----------------------------------------------------------------------
# Evidence read from a store written before evidence existed is "not stored"
# (EvidenceError, failing closed) on every backend, as SQLite already said: a PostgreSQL
# schema of version 3 opened read-only answered a raw StorageError about a missing table.


def test_E7_evidence_of_a_version_3_schema_read_only_is_not_stored() -> None:
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
