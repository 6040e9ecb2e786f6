"""PostgresStore's schema: created and upgraded by the library, one transaction per version;
a newer schema, a foreign one and a bad address are refused clearly, changing nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

import mainspring as ms
from mainspring.storage._backends.postgres.schema import PG_SCHEMA_VERSION, parse_address, upgrade
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema


@pytest.fixture
def schema() -> Iterator[tuple[str, str]]:
    """A schema name nobody uses, and the server URL; dropped afterwards."""
    url = require_server()
    name = fresh_schema()
    yield url, name
    drop_schema(name)


def _q(schema: str) -> str:
    return f'"{schema}"'


def _version(url: str, schema: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            f"SELECT value FROM {_q(schema)}.meta WHERE key = 'schema_version'"
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_a_new_schema_is_created_at_the_newest_version(schema: tuple[str, str]) -> None:
    url, name = schema
    store = ms.storage.PostgresStore(with_schema(url, name))
    store.close()
    assert _version(url, name) == str(PG_SCHEMA_VERSION)


def test_an_older_schema_is_upgraded_one_version_at_a_time(schema: tuple[str, str]) -> None:
    url, name = schema
    with psycopg.connect(url, autocommit=True) as conn:
        assert upgrade(conn, name, to=1) == 1  # as an older mainspring left it
        conn.execute(f'INSERT INTO "{name}".counters (name, value) VALUES (%s, 7)', ("probe",))
    assert _version(url, name) == "1"
    store = ms.storage.PostgresStore(with_schema(url, name))
    try:
        assert store.create(
            ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)
        )
        assert [e.kind for e in store.history("ex-1")] == ["created"]
    finally:
        store.close()
    assert _version(url, name) == str(PG_SCHEMA_VERSION)
    with psycopg.connect(url) as conn:  # the data of the older version is kept
        assert conn.execute(
            f"SELECT value FROM {_q(name)}.counters WHERE name = 'probe'"
        ).fetchone() == (7,)


def test_a_newer_schema_is_refused_and_left_as_it_is(schema: tuple[str, str]) -> None:
    url, name = schema
    ms.storage.PostgresStore(with_schema(url, name)).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"UPDATE {_q(name)}.meta SET value = '99' WHERE key = 'schema_version'")
    for read_only in (False, True):
        with pytest.raises(ms.storage.StorageError, match="upgrade mainspring"):
            ms.storage.PostgresStore(with_schema(url, name), read_only=read_only)
    assert _version(url, name) == "99"


def test_a_schema_holding_other_tables_is_not_taken_over(schema: tuple[str, str]) -> None:
    url, name = schema
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(f'CREATE TABLE "{name}".orders (id int)')
    with pytest.raises(ms.storage.StorageError, match="not a mainspring store"):
        ms.storage.PostgresStore(with_schema(url, name))
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (name,)
        ).fetchall()
    assert tables == [("orders",)]


def test_hosts_creating_one_schema_at_once_all_succeed(schema: tuple[str, str]) -> None:
    url, name = schema
    errors: list[BaseException] = []
    stores: list[ms.storage.PostgresStore] = []
    gate = threading.Barrier(6)

    def open_one() -> None:
        try:
            gate.wait(timeout=30)
            stores.append(ms.storage.PostgresStore(with_schema(url, name)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for store in stores:
        store.close()
    assert errors == []
    assert len(stores) == 6
    assert _version(url, name) == str(PG_SCHEMA_VERSION)


def test_a_read_only_store_refuses_writes_and_a_missing_store() -> None:
    url = require_server()
    name = fresh_schema()
    try:
        with pytest.raises(ms.storage.StorageError, match="no mainspring store"):
            ms.storage.PostgresStore(with_schema(url, name), read_only=True)
        ms.storage.PostgresStore(with_schema(url, name)).close()
        reader = ms.storage.PostgresStore(with_schema(url, name), read_only=True)
        try:
            with pytest.raises(ms.storage.StorageError, match="read-only"):
                reader.create(
                    ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0)
                )
            assert reader.get("ex-1") is None
        finally:
            reader.close()
    finally:
        drop_schema(name)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://h/db?schema=Upper",
        "postgresql://h/db?schema=bad-name",
        "postgresql://h/db?schema=" + "x" * 49,
        "postgresql://h/db?schema=a&schema=b",
        "mysql://h/db",
    ],
)
def test_bad_addresses_are_refused_before_connecting(url: str) -> None:
    with pytest.raises(ValueError, match=r"schema|postgresql://"):
        parse_address(url)


def test_the_address_keeps_the_rest_of_the_url_and_hides_the_password() -> None:
    address = parse_address(
        "postgresql://me:s3cret@db.example:6543/app?sslmode=require&schema=ms_one"
        "&options=-c%20statement_timeout%3D5000"
    )
    assert address.schema == "ms_one"
    assert address.conninfo == (
        "postgresql://me:s3cret@db.example:6543/app?sslmode=require"
        "&options=-c%20statement_timeout%3D5000"
    )
    assert "s3cret" not in address.shown
    assert address.shown.startswith("postgresql://me:***@db.example:6543/app?")
    assert (
        ms.storage._seam.redact_url("postgresql://h/db?password=pw1")
        == "postgresql://h/db?password=***"
    )
