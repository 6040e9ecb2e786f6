"""Review of issue #14: the store URL reaches libpq as the user wrote it (only ``schema`` is
taken out), and contradictory settings are refused, not silently resolved."""

from __future__ import annotations

import secrets

import psycopg
import pytest

import mainspring as ms
from tests._postgres import postgres_url, server_url

__all__ = ["postgres_url"]  # a fixture


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
