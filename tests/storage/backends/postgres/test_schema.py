"""PostgresStore's schema: created and upgraded by the library, one transaction per version;
a newer schema, a foreign one and a bad address are refused clearly, changing nothing."""

from __future__ import annotations

import contextlib
import io
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

import mainspring as ms
from mainspring.storage._backends.postgres.schema import PG_SCHEMA_VERSION, parse_address, upgrade
from tests._cli_kit import run_cli
from tests._postgres import (
    drop_schema,
    fresh_schema,
    postgres_url,
    require_server,
    server_url,
    with_schema,
)

__all__ = ["postgres_url"]


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


class _CountingTransactions:
    """A connection that counts the transactions ``upgrade`` opens on it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.transactions = 0

    def transaction(self) -> Any:
        self.transactions += 1
        return self.conn.transaction()

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self.conn.execute(*args, **kwargs)


def test_a_new_store_is_created_in_one_transaction_and_an_old_one_upgraded_per_version(
    schema: tuple[str, str],
) -> None:
    """Creating a store is one transaction, every version's statements in order (a first
    open is one commit, not one per version); upgrading an existing store stays one
    transaction per version, so a crash between versions leaves a version that is whole."""
    url, name = schema
    with psycopg.connect(url, autocommit=True) as raw:
        conn = _CountingTransactions(raw)
        assert upgrade(conn, name, to=1) == 1
        assert conn.transactions == 1
        assert upgrade(conn, name) == PG_SCHEMA_VERSION
        assert conn.transactions == 1 + (PG_SCHEMA_VERSION - 1)
        assert upgrade(conn, name) == PG_SCHEMA_VERSION  # nothing to do: no transaction
        assert conn.transactions == PG_SCHEMA_VERSION
    assert _version(url, name) == str(PG_SCHEMA_VERSION)
    other = fresh_schema()
    try:
        with psycopg.connect(url, autocommit=True) as raw:
            conn = _CountingTransactions(raw)
            assert upgrade(conn, other) == PG_SCHEMA_VERSION
            assert conn.transactions == 1
        assert _version(url, other) == str(PG_SCHEMA_VERSION)
        # What the one transaction made is what the versions one by one made.
        with psycopg.connect(url) as raw:
            shapes = [
                raw.execute(
                    "SELECT c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod), "
                    "a.attnotnull FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
                    "WHERE n.nspname = %s ORDER BY 1, 3",
                    (schema_name,),
                ).fetchall()
                for schema_name in (name, other)
            ]
        assert shapes[0] == shapes[1]
        assert shapes[0]
    finally:
        drop_schema(other)


def test_an_empty_schema_gets_a_store_and_one_holding_only_a_view_is_refused(
    schema: tuple[str, str],
) -> None:
    url, name = schema
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    ms.storage.PostgresStore(with_schema(url, name)).close()  # an empty schema is taken
    assert _version(url, name) == str(PG_SCHEMA_VERSION)
    other = fresh_schema()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{other}"')
            conn.execute(f'CREATE VIEW "{other}".report AS SELECT 1 AS one')
        for read_only in (False, True):
            with pytest.raises(ms.storage.StorageError, match="not a mainspring store"):
                ms.storage.PostgresStore(with_schema(url, other), read_only=read_only)
    finally:
        drop_schema(other)


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


# ----------------------------------------------------------------------
# The store URL reaches libpq as the user wrote it (only ``schema`` is
# taken out), and contradictory settings are refused, not silently resolved.


def test_a_plus_in_a_url_parameter_reaches_libpq_as_a_plus(postgres_url: str) -> None:
    """libpq reads ``+`` in a URI query literally (only %-escapes are decoded); the store
    re-encodes the query with form decoding (``parse_qsl``), so ``+`` becomes a space: an
    ``application_name``, ``options`` or ``password=`` holding a ``+`` is changed (a
    password then fails to authenticate). Cause: _pg_schema.parse_address."""
    name = f"rev14+{secrets.token_hex(4)}"
    url = f"{postgres_url}&application_name={name}"
    with psycopg.connect(url.replace(f"schema={url.split('schema=')[1].split('&')[0]}&", "")) as c:
        row = c.execute("SELECT current_setting('application_name')").fetchone()
        assert row == (name,)  # what libpq makes of the URL itself
    store = ms.storage.PostgresStore(url)
    try:
        with psycopg.connect(server_url()) as conn:
            names = {
                row[0]
                for row in conn.execute(
                    "SELECT application_name FROM pg_stat_activity WHERE application_name "
                    "LIKE 'rev14%%'"
                )
            }
        assert name in names, names
    finally:
        store.close()


def test_a_schema_argument_contradicting_the_url_is_refused(postgres_url: str) -> None:
    """``PostgresStore(url_with_schema_a, schema="b")``: which one did the caller mean? The
    URL silently wins today; writing into a schema the caller did not name is worse than a
    clear ValueError."""
    try:
        store = ms.storage.PostgresStore(postgres_url, schema="rev14_other")
    except ValueError:
        return
    store.close()
    pytest.fail(f"the schema argument was ignored: the store opened schema {store.schema!r}")


# ----------------------------------------------------------------------
# A store URL's secrets never reach an error, a repr or the command's
# output, whatever the URL looks like; a bad URL is a typed error, never a driver's crash.

SECRET = "s3cretXY"


def _host() -> str:
    """The test server's host and port (a URL of our own is built around it)."""
    url = require_server()
    return url.split("@", 1)[1].split("/", 1)[0]


def _cli(*argv: str) -> tuple[int | str, str]:
    """Run the command; its exit code (or the exception it crashed with) and all it printed."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code, out = run_cli(*argv)
        except BaseException as exc:  # the command must not crash
            return f"crashed: {type(exc).__name__}: {exc}", err.getvalue()
    return code, out + err.getvalue()


def _opening(url: str) -> BaseException | None:
    """What opening a store at ``url`` raised (None if it opened: its schema is dropped)."""
    try:
        store = ms.storage.PostgresStore(url, connect_timeout=2)
    except Exception as exc:
        return exc
    store.close()
    drop_schema(store.schema)
    return None


def test_E5_a_bad_percent_escape_in_the_password_never_reaches_the_error() -> None:
    """libpq's "invalid percent-encoded token" names the token, i.e. the password: the
    store's error must be a StorageError/ValueError without it (cause: _pg_connect._defaults
    calls psycopg's conninfo_to_dict unguarded)."""
    url = f"postgresql://postgres:{SECRET}%zz@{_host()}/test?schema=t_rev_secret"
    error = _opening(url)
    assert error is not None
    assert SECRET not in str(error)
    assert isinstance(error, ms.StorageError | ValueError), type(error)


def test_E5_the_command_with_a_bad_percent_escape_exits_cleanly_without_the_password() -> None:
    url = f"postgresql://postgres:{SECRET}%zz@{_host()}/test?schema=t_rev_secret"
    code, printed = _cli("ls", "--store", url)
    assert isinstance(code, int), code
    assert code != 0
    assert SECRET not in printed
    assert SECRET not in str(code)


def test_U5_an_unknown_url_parameter_is_a_typed_error_and_the_command_does_not_crash() -> None:
    url = f"postgresql://postgres@{_host()}/test?schema=t_rev_secret&bogus=1"
    error = _opening(url)
    assert error is not None
    assert isinstance(error, ms.StorageError | ValueError), type(error)
    code, _ = _cli("ls", "--store", url)
    assert isinstance(code, int), code
    assert code != 0


def test_E5_sslpassword_is_masked_like_password() -> None:
    """``sslpassword`` (the client key's passphrase, a libpq parameter) is a secret too."""
    url = f"postgresql://postgres@127.0.0.1:1/test?schema=t_rev_secret&sslpassword={SECRET}"
    assert SECRET not in ms.storage._seam.redact_url(url)
    assert SECRET not in str(_opening(url))
    code, printed = _cli("ls", "--store", url)
    assert code != 0
    assert SECRET not in printed


@pytest.mark.parametrize("sep", ["/", "#", "?"])
def test_E5_a_password_holding_a_url_delimiter_is_never_shown(sep: str) -> None:
    """A password with an unescaped ``/``, ``#`` or ``?`` (a user's mistake, but a common
    one) must still not be printed: the redaction splits on what urlsplit finds, which ends
    the user info early and shows the password's tail."""
    url = f"postgresql://postgres:pa{sep}{SECRET}@{_host()}/test?schema=t_rev_secret"
    assert SECRET not in ms.storage._seam.redact_url(url)
    assert SECRET not in str(_opening(url))
    code, printed = _cli("ls", "--store", url)
    assert SECRET not in printed
    assert SECRET not in str(code)


def test_D2_a_recycled_store_holds_nothing_of_the_test_before() -> None:
    """The harness's reused store (tests/_postgres.py, ``recycled_store``) is as a new one:
    no row of an earlier test in any table, the history's counter back at 0, ``meta``
    holding only the version."""
    from tests._postgres import admin, recycled_store

    async def run(url: str) -> None:
        async with ms.open_runtime(store=url, tools={"inc": _inc}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="inc"),))
            await (await rt.start("g", plan, execution_id="ex-1")).wait()

    require_server()
    with recycled_store() as first:
        anyio.run(run, with_schema(server_url(), first))
        with admin() as conn:
            assert conn.execute(f'SELECT count(*) FROM "{first}".events').fetchone() != (0,)
    with recycled_store() as schema:
        assert schema == first  # the same store, emptied
        with admin() as conn:
            tables = conn.execute(
                "SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relkind = 'r' "
                "AND c.relnamespace = to_regnamespace(%s)",
                (schema,),
            ).fetchall()
            for (table,) in tables:
                rows = conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall()
                if table == "meta":
                    assert rows == [("schema_version", str(PG_SCHEMA_VERSION))]
                elif table == "counters":
                    assert rows == [("history", 0)]
                else:
                    assert rows == [], table
        # A run in it numbers its history from 1, as in a new store.
        anyio.run(run, with_schema(server_url(), schema))
        with admin() as conn:
            assert conn.execute(f'SELECT min(seq) FROM "{schema}".events').fetchone() == (1,)


async def _inc(x: int = 0) -> int:
    return x + 1
