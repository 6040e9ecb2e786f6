"""The PostgreSQL server the tests talk to: ``MAINSPRING_TEST_POSTGRES`` (a URL), default
the local one. Each test gets a schema of its own, dropped afterwards.

Where no server answers, these tests skip and say how to get one; under CI
(``MAINSPRING_REQUIRE_POSTGRES=1``, set by ``.ci/run``) that is a failure instead, so CI is
never green without having run them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from typing import Any

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


_admin: Any = None
_admin_lock = threading.RLock()  # a helper that nests uses the same session


@contextlib.contextmanager
def admin() -> Iterator[Any]:
    """This process's own autocommit connection to the test server, for the harness's work
    behind a store's back (dropping a test's schema, reading or damaging its rows): one
    connection per process, not one per call (a new session is a new server process).
    One thread uses it at a time; one that no longer answers (a restarted server) is
    replaced. Leave it as found (no open transaction, no session settings)."""
    import psycopg

    global _admin
    with _admin_lock:
        if _admin is not None:
            try:  # the server may have been restarted (the slow suites do) since last time
                _admin.execute("SELECT 1")
            except psycopg.Error:
                with contextlib.suppress(Exception):
                    _admin.close()
                _admin = None
        if _admin is None:
            _admin = psycopg.connect(server_url(), autocommit=True)
        try:
            yield _admin
        except psycopg.OperationalError:
            # The session may have ended under it (a server restart): the next caller
            # connects anew.
            with contextlib.suppress(Exception):
                _admin.close()
            _admin = None
            raise


def drop_schema(schema: str) -> None:
    with admin() as conn:
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


# ----------------------------------------------------------------------
# Recycled stores: a schema holding an empty store at the newest version, given to a test
# that opens a writable store in it anyway. Creating a store's schema and dropping it again
# is most of a small test's time on the server (dozens of tables and indexes made and
# removed, catalog rows left behind); emptying one costs a TRUNCATE. A schema goes back for
# reuse only if nothing of its structure changed during the test (every catalog row of it
# as it was: a table altered, a trigger, constraint or index added, a function replaced,
# the schema version changed all show) and no session still holds it; otherwise it is
# dropped as before.

#: Every catalog row of a schema and of what is in it, by identity and row version (any
#: ALTER, CREATE, GRANT, TRUNCATE writes a new version of some row listed here), and the
#: planner's view of each table and index (its size and statistics, which VACUUM, ANALYZE
#: and CREATE INDEX change in place: a reused store plans as a new one would). Found
#: through ``pg_depend``'s index (what depends on the schema, and what depends on that:
#: indexes, constraints, triggers, rules, policies, defaults), never by scanning a catalog.
_FINGERPRINT = """
WITH top AS (
  SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
   WHERE d.refclassid = 'pg_catalog.pg_namespace'::regclass
     AND d.refobjid = to_regnamespace(%(s)s)
), objects AS (
  SELECT classid, objid FROM top
  UNION
  SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
   JOIN top ON d.refclassid = top.classid AND d.refobjid = top.objid
)
SELECT coalesce(string_agg(row, ',' ORDER BY row), '') FROM (
  SELECT 'n' || n.oid || ':' || n.xmin AS row FROM pg_catalog.pg_namespace n
   WHERE n.oid = to_regnamespace(%(s)s)
  UNION ALL
  SELECT o.classid || '/' || o.objid || ':' || coalesce(
    (SELECT c.xmin || '/' || c.reltuples || '/' || c.relpages || '/' || c.relallvisible
            || '/' || (SELECT count(*) FROM pg_catalog.pg_statistic z WHERE z.starelid = c.oid)
       FROM pg_catalog.pg_class c
      WHERE o.classid = 'pg_catalog.pg_class'::regclass AND c.oid = o.objid),
    (SELECT p.xmin::text FROM pg_catalog.pg_proc p
      WHERE o.classid = 'pg_catalog.pg_proc'::regclass AND p.oid = o.objid),
    (SELECT k.xmin::text FROM pg_catalog.pg_constraint k
      WHERE o.classid = 'pg_catalog.pg_constraint'::regclass AND k.oid = o.objid),
    (SELECT t.xmin::text FROM pg_catalog.pg_trigger t
      WHERE o.classid = 'pg_catalog.pg_trigger'::regclass AND t.oid = o.objid),
    (SELECT w.xmin::text FROM pg_catalog.pg_rewrite w
      WHERE o.classid = 'pg_catalog.pg_rewrite'::regclass AND w.oid = o.objid),
    (SELECT y.xmin::text FROM pg_catalog.pg_type y
      WHERE o.classid = 'pg_catalog.pg_type'::regclass AND y.oid = o.objid),
    (SELECT f.xmin::text FROM pg_catalog.pg_attrdef f
      WHERE o.classid = 'pg_catalog.pg_attrdef'::regclass AND f.oid = o.objid),
    (SELECT l.xmin::text FROM pg_catalog.pg_policy l
      WHERE o.classid = 'pg_catalog.pg_policy'::regclass AND l.oid = o.objid),
    '') FROM objects o
  UNION ALL
  SELECT 'a' || a.attrelid || '.' || a.attnum || ':' || a.xmin FROM pg_catalog.pg_attribute a
   JOIN objects o ON o.classid = 'pg_catalog.pg_class'::regclass AND a.attrelid = o.objid
) rows
"""

#: This process's empty stores: schema, fingerprint, its tables, times it was emptied.
_spare: list[tuple[str, str, str, int]] = []
#: A store's tables (as created: its structure is checked unchanged before each reuse).
_TABLES = (
    "SELECT string_agg(format('%%I.%%I', %(s)s::text, c.relname), ', ' ORDER BY c.relname) "
    "FROM pg_catalog.pg_class c WHERE c.relnamespace = to_regnamespace(%(s)s) "
    "AND c.relkind = 'r'"
)
#: A reused store is dropped after so many uses (a new one is made): the rows deleted for
#: reuse do not pile up (vacuuming would change what the planner sees, see above).
_RETIRE_AFTER = 50


def _fingerprint(conn: Any, schema: str) -> str:
    row = conn.execute(_FINGERPRINT, {"s": schema}).fetchone()
    return str(row[0]) if row is not None else ""


def _emptied(schema: str, fingerprint: str, tables: str, uses: int) -> bool:
    """Empty the store in ``schema`` if its structure is as ``fingerprint`` says, it is at
    the newest version and not used ``_RETIRE_AFTER`` times yet (True), else leave it (to be
    dropped). Its rows are deleted, not truncated: the tables keep their files and catalog
    rows, so the fingerprint holds."""
    import psycopg

    from mainspring.storage._backends.postgres.schema import PG_SCHEMA_VERSION

    if uses + 1 >= _RETIRE_AFTER:
        return False
    try:
        with admin() as conn, conn.transaction():
            # A session still in the schema (a store left open) would make this wait:
            # then the schema is dropped instead, which waits as it always did.
            conn.execute("SET LOCAL lock_timeout = '2s'")
            if _fingerprint(conn, schema) != fingerprint:
                return False
            row = conn.execute(
                f'SELECT value FROM "{schema}".meta WHERE key = %s', ("schema_version",)
            ).fetchone()
            if row != (str(PG_SCHEMA_VERSION),):
                return False
            # Every table but meta; then what the store's creation wrote besides its
            # tables (schema.py, version 1).
            conn.execute(
                ";".join(
                    f"DELETE FROM {table}"
                    for table in tables.split(", ")
                    if table != f'"{schema}".meta' and table != f"{schema}.meta"
                )
                + f";INSERT INTO \"{schema}\".counters (name, value) VALUES ('history', 0)"
            )
        return True
    except psycopg.Error:
        return False


def _drop_spares() -> None:
    # If the server went away first, the schemas go with the test database.
    while _spare:
        schema = _spare.pop()[0]
        with contextlib.suppress(Exception):
            drop_schema(schema)


@contextlib.contextmanager
def recycled_store() -> Iterator[str]:
    """The name of a schema holding an empty store at the newest version (made now, or one
    an earlier test of this process used and left as it found it), for a test that opens a
    writable store there; emptied for the next test, or dropped."""
    from mainspring.storage._backends.postgres.schema import upgrade

    require_server()
    if _spare:
        schema, fingerprint, tables, uses = _spare.pop()
    else:
        if not _spare_registered:
            _spare_registered.append(True)
            atexit.register(_drop_spares)
        schema = fresh_schema()
        with admin() as conn:
            upgrade(conn, schema)
            fingerprint = _fingerprint(conn, schema)
            row = conn.execute(_TABLES, {"s": schema}).fetchone()
        tables, uses = (str(row[0]) if row is not None else ""), 0
    kept = False
    try:
        yield schema
    finally:
        try:
            kept = bool(tables) and _emptied(schema, fingerprint, tables, uses)
        finally:
            if kept:
                _spare.append((schema, fingerprint, tables, uses + 1))
            else:
                drop_schema(schema)


_spare_registered: list[bool] = []


@pytest.fixture
def postgres_store_url() -> Iterator[str]:
    """A store URL on the test server whose schema holds an empty store at the newest
    version (see ``recycled_store``): for a test that opens a writable store there first.
    A test that needs the schema not to exist yet (an older version made by hand, a
    read-only open of nothing, a foreign table) takes ``postgres_url``."""
    with recycled_store() as schema:
        yield with_schema(server_url(), schema)
