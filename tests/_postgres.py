"""The PostgreSQL server the tests talk to: ``MAINSPRING_TEST_POSTGRES`` (a URL), default
the local one. Each test gets a schema of its own, dropped afterwards.

Where no server answers, these tests skip and say how to get one; under CI
(``MAINSPRING_REQUIRE_POSTGRES=1``, set by ``.ci/run``) that is a failure instead, so CI is
never green without having run them.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
HOW = (
    "start one (e.g. `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main "
    "start`) or point MAINSPRING_TEST_POSTGRES at a server URL"
)


def server_url() -> str:
    return os.environ.get("MAINSPRING_TEST_POSTGRES") or DEFAULT_URL


_reachable: bool | str | None = None


def require_server() -> str:
    """The server URL; skips (or, under CI, fails) the test if no server answers."""
    global _reachable
    if _reachable is None:
        try:
            import psycopg

            with psycopg.connect(server_url(), connect_timeout=5) as conn:
                conn.execute("SELECT 1")
            _reachable = True
        except Exception as exc:
            _reachable = f"{type(exc).__name__}: {exc}".strip()
    if _reachable is not True:
        message = f"no PostgreSQL server at {server_url()} ({_reachable}); {HOW}"
        if os.environ.get("MAINSPRING_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return server_url()


def server_expected() -> bool:
    """Whether tests should use the server: it answers, or CI requires it (then
    :func:`require_server` fails loudly instead of skipping)."""
    if os.environ.get("MAINSPRING_REQUIRE_POSTGRES") == "1":
        return True
    try:
        require_server()
    except pytest.skip.Exception:
        return False
    return True


def with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def fresh_schema() -> str:
    return f"t_{secrets.token_hex(6)}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A store URL on the test server in a schema of this test's own."""
    url = require_server()
    schema = fresh_schema()
    try:
        yield with_schema(url, schema)
    finally:
        drop_schema(schema)
