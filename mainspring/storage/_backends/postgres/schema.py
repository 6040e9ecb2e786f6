"""PostgreSQL: the store's address (a URL naming a schema), and its schema, versioned.

The schema is created and upgraded by the library: ``meta`` holds a ``schema_version`` row;
a new store is created in one transaction and each upgrade of an existing one is one
transaction, under an advisory lock, so two hosts opening a new server at once do not race;
a schema newer than this library knows is refused with a clear error (an older library
never writes into a layout it does not understand).

Version 5 is storage v3's values (``storage._v2``: states in one spelling, typed stop requests
and approvals): no table changes, but the JSON of the rows that hold such values rewritten,
in the same one transaction as the version bump. It runs when a writable store opens the
schema (or ``mainspring migrate URL``); a host of an older mainspring must not be running
against the schema then, as it would go on writing the old values. A read-only store of an
older schema reads its rows as v3 spells them, in memory (reading never writes).
"""

from __future__ import annotations

import re
import urllib.parse
import zlib
from typing import Any

from ..._errors import StorageError

__all__ = [
    "DEFAULT_SCHEMA",
    "NOT_WRITTEN",
    "PG_SCHEMA_VERSION",
    "TABLES",
    "TABLES_SINCE",
    "VALUES_SINCE",
    "Address",
    "is_postgres_url",
    "parse_address",
    "schema_version",
    "upgrade",
]

DEFAULT_SCHEMA = "mainspring"
#: The SQLSTATE of a header row not written as decided (see ``written`` below).
NOT_WRITTEN = "MSF01"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")
_URL_SCHEMES = ("postgresql://", "postgres://")

#: Part -> table, as in SQLite. Fixed names: nothing user-given ever becomes SQL (the schema
#: name is checked against ``_SCHEMA_NAME`` and quoted).
TABLES = {
    "steps": "plan_steps",
    "obs": "observations",
    "done": "completed_steps",
    "tasks": "agent_tasks",
    "inner_obs": "inner_observations",
    "inner_done": "inner_completed",
    "workers": "workers",
    "worker_tasks": "worker_tasks",
    "worker_trail": "worker_trail",
}
#: The part tables added by schema version 4 (a read-only store of an older schema reads
#: those parts as empty).
TABLES_SINCE = {"workers": 4, "worker_tasks": 4, "worker_trail": 4}


def _part_table(table: str) -> list[str]:
    return [
        f"CREATE TABLE {{s}}.{table} (execution_id text NOT NULL, key text NOT NULL, "
        f"pos bigint NOT NULL, body bytea NOT NULL, PRIMARY KEY (execution_id, key))",
        f"CREATE INDEX {table}_order ON {{s}}.{table} (execution_id, pos)",
    ]


# Version 1: the tables. Version 2: history read per execution without a scan. Version 3:
# agent memory (``memory``). Version 4: external workers' parts (``storage._workers``)
# and sealed evidence (``storage._evidence``). Each entry is applied in a transaction of its own, in
# order, from the version stored; a new store gets them all, in order, in one transaction.
_UPGRADES: dict[int, list[str]] = {
    1: [
        "CREATE TABLE {s}.executions (id text PRIMARY KEY, seq bigint NOT NULL, "
        "stamp bigint NOT NULL, status text NOT NULL, updated_at double precision NOT NULL, "
        "lease_owner text NOT NULL DEFAULT '', lease_epoch bigint NOT NULL DEFAULT 0, "
        "lease_expires double precision NOT NULL DEFAULT 0, head bytea NOT NULL, "
        "checkpoints bytea NOT NULL)",
        *(
            statement
            for part, table in TABLES.items()
            if part not in TABLES_SINCE
            for statement in _part_table(table)
        ),
        "CREATE TABLE {s}.events (seq bigint PRIMARY KEY, execution_id text NOT NULL, "
        "eseq bigint NOT NULL, body bytea NOT NULL)",
        # The history's global sequence is allocated from this row, under its row lock held
        # to COMMIT: a follower never sees a sequence before every lower one is visible (V2).
        "CREATE TABLE {s}.counters (name text PRIMARY KEY, value bigint NOT NULL)",
        "INSERT INTO {s}.counters (name, value) VALUES ('history', 0)",
        # A header write that did not happen as decided (a lease lapsed between the
        # decision and the write, L4) fails its transaction with this SQLSTATE, inside the
        # pipelined batch: nothing after it, COMMIT included, is applied.
        "CREATE FUNCTION {s}.written(n bigint) RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN "
        "IF n <> 1 THEN RAISE EXCEPTION USING ERRCODE = 'MSF01', "
        "MESSAGE = 'mainspring: a header row was not written as decided'; END IF; "
        "RETURN n; END $$",
    ],
    2: ["CREATE INDEX events_by_execution ON {s}.events (execution_id, seq)"],
    3: [
        # Names compare and sort byte-wise ("C"), as in SQLite and Python: listing order and
        # ties in search do not depend on the server's locale. No CHECKs: a row is validated
        # into a Fact on read, and one that does not read is skipped, never coerced.
        'CREATE TABLE {s}.memory_facts (id text COLLATE "C" PRIMARY KEY, text text NOT NULL, '
        'scope text COLLATE "C" NOT NULL, domain text COLLATE "C" NOT NULL, '
        "confidence double precision NOT NULL, valid_until double precision, "
        'conflict_group text COLLATE "C", superseded_by text COLLATE "C", '
        'organization text COLLATE "C", created_at double precision NOT NULL, '
        'execution_id text COLLATE "C", task_id text COLLATE "C", step_id text COLLATE "C", '
        # The text's words (english, diacritics removed in Python), maintained on insert.
        "search tsvector)",
        "CREATE INDEX memory_facts_search ON {s}.memory_facts USING gin (search)",
        "CREATE INDEX memory_facts_group ON {s}.memory_facts (conflict_group)",
        "CREATE INDEX memory_facts_superseded_by ON {s}.memory_facts (superseded_by)",
        "CREATE INDEX memory_facts_order ON {s}.memory_facts (created_at, id)",
    ],
    4: [
        *(
            statement
            for table in ("workers", "worker_tasks", "worker_trail")
            for statement in _part_table(table)
        ),
        "CREATE TABLE {s}.evidence (digest text PRIMARY KEY, body bytea NOT NULL, "
        "created_at double precision NOT NULL)",
    ],
}
_UPGRADES[5] = []  # storage v3's values: rewritten by ``_REWRITES[5]``, no table changes
#: The first version whose rows hold storage v3's values: an older one must be upgraded
#: before it is read.
VALUES_SINCE = 5
#: The newest schema this library writes.
PG_SCHEMA_VERSION = max(_UPGRADES)


def _rewrite(conn: Any, select: str, update: str, change: Any) -> None:
    """Update each row ``select`` returns (``key..., body``) whose JSON body ``change``
    rewrites; a body that is not JSON is left as it is (E7: never repaired)."""
    import orjson

    from ..._codec import dumps_checked

    for *key, body in conn.execute(select).fetchall():
        try:
            raw = orjson.loads(bytes(body))
        except (orjson.JSONDecodeError, TypeError):
            continue
        upgraded = change(raw)
        if upgraded != raw:
            conn.execute(update, (dumps_checked(upgraded), *key))


def _storage_v3_values(conn: Any, schema: str) -> None:
    """Version 5: every row holding a value storage v3 spells differently, rewritten."""
    from ..._v2 import upgrade_event, upgrade_head, upgrade_part

    _rewrite(
        conn,
        _q("SELECT id, head FROM {s}.executions", schema),
        _q("UPDATE {s}.executions SET head = %s WHERE id = %s", schema),
        upgrade_head,
    )
    for part in ("workers", "worker_tasks", "worker_trail"):
        _rewrite(
            conn,
            _q(f"SELECT execution_id, key, body FROM {{s}}.{TABLES[part]}", schema),
            _q(
                f"UPDATE {{s}}.{TABLES[part]} SET body = %s WHERE execution_id = %s AND key = %s",
                schema,
            ),
            lambda raw, part=part: upgrade_part(part, raw),
        )
    _rewrite(
        conn,
        _q("SELECT seq, body FROM {s}.events", schema),
        _q("UPDATE {s}.events SET body = %s WHERE seq = %s", schema),
        upgrade_event,
    )


#: Rewrites of stored rows a version makes, in the same transaction as its statements.
_REWRITES: dict[int, Any] = {5: _storage_v3_values}


class Address:
    """A PostgreSQL store's address: the connection string for psycopg (without our own
    ``schema`` parameter) and the schema the store's tables live in."""

    __slots__ = ("conninfo", "schema", "shown")

    def __init__(self, conninfo: str, schema: str, shown: str) -> None:
        self.conninfo = conninfo
        self.schema = schema
        #: The URL with any password replaced by ``***``: safe for errors, logs, the CLI.
        self.shown = shown


def is_postgres_url(store: object) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL."""
    return isinstance(store, str) and store.startswith(_URL_SCHEMES)


def check_schema(schema: str) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            f"schema must match {_SCHEMA_NAME.pattern} (lower case, at most 48), not {schema!r}"
        )
    return schema


def _secret_key(key: str) -> bool:
    # password=, sslpassword=, and any other parameter whose name says it is one.
    return "password" in urllib.parse.unquote(key).lower()


def redact_url(url: str) -> str:
    """``url`` with every secret replaced by ``***``: the password of the user part and the
    value of any ``*password*`` parameter. It does not trust the URL to be well formed: all
    before the last ``@`` is taken for the user part (a password holding ``/``, ``?`` or
    ``#`` is still hidden; at worst too much is hidden, never too little)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "postgresql://(unparseable address)"
    if "@" in rest:
        userinfo, _, rest = rest.rpartition("@")
        user = userinfo.split(":", 1)[0]
        if "/" in user or "?" in user or "#" in user:
            user = "***"
        rest = f"{user}{':***' if ':' in userinfo else ''}@{rest}"
    base, qsep, query = rest.partition("?")
    if qsep:
        query, hsep, fragment = query.partition("#")
        pieces = [_redact_piece(piece) for piece in query.split("&")]
        base = f"{base}?{'&'.join(pieces)}{hsep}{fragment}"
    return f"{scheme}://{base}"


def _redact_piece(piece: str) -> str:
    key, eq, _ = piece.partition("=")
    return f"{key}=***" if eq and _secret_key(key) else piece


def scrub(message: str, url: str) -> str:
    """``message`` (a driver's error, say) with every secret of ``url`` replaced by ``***``,
    as typed or %-decoded."""
    for secret in _secrets_of(url):
        if len(secret) >= 3:
            message = message.replace(secret, "***")
    return message


def _secrets_of(url: str) -> list[str]:
    _, _, rest = url.partition("://")
    found: list[str] = []
    if "@" in rest:
        userinfo = rest.rpartition("@")[0]
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    query = rest.partition("?")[2].partition("#")[0]
    for piece in query.split("&"):
        key, eq, value = piece.partition("=")
        if eq and _secret_key(key):
            found.append(value)
    decoded = [urllib.parse.unquote(secret) for secret in found]
    # The longest first: a secret that contains another is replaced whole.
    return sorted({*found, *decoded} - {""}, key=len, reverse=True)


def parse_address(url: str, schema: str | None = None) -> Address:
    """Split ``url`` into what psycopg takes (the URL as written, without our ``schema``
    parameter: nothing else is re-encoded) and the schema (``?schema=NAME`` in the URL, or
    ``schema``, else ``mainspring``; both given and different is a ValueError)."""
    if not is_postgres_url(url):
        raise ValueError("a PostgreSQL store is named by a postgresql:// URL")
    base, qsep, query = url.partition("?")
    query, hsep, fragment = query.partition("#")
    pieces = [piece for piece in query.split("&") if piece] if qsep else []
    named = [p.partition("=")[2] for p in pieces if p.partition("=")[0] == "schema"]
    rest = [p for p in pieces if p.partition("=")[0] != "schema"]
    if len(named) > 1:
        raise ValueError("the store URL names its schema more than once")
    if named and schema is not None and urllib.parse.unquote(named[0]) != schema:
        raise ValueError(
            f"the store URL names schema {urllib.parse.unquote(named[0])!r} and the schema "
            f"argument {schema!r}: name it once"
        )
    chosen = check_schema(urllib.parse.unquote(named[0]) if named else schema or DEFAULT_SCHEMA)
    conninfo = base + (f"?{'&'.join(rest)}" if rest else "") + (hsep + fragment)
    return Address(conninfo, chosen, redact_url(url))


def _lock_key(schema: str) -> int:
    return zlib.crc32(f"mainspring:{schema}".encode()) - 2**31


def _q(statement: str, schema: str) -> str:
    return statement.replace("{s}", f'"{schema}"')


#: Whether ``schema`` exists, whether it holds a table named ``meta``, and how many tables
#: it holds (of what ``information_schema.tables`` lists: tables, views, foreign and
#: partitioned tables); one question, answered from the catalog's indexes (that view checks
#: privileges row by row, and scanning ``pg_class`` by schema reads every relation of the
#: database).
_TABLES_OF = (
    "SELECT (SELECT count(*) FROM pg_catalog.pg_class c WHERE c.relname = 'meta' "
    "AND c.relnamespace = n.oid AND c.relkind IN ('r', 'v', 'f', 'p')), "
    "(SELECT count(*) FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_class c ON c.oid = d.objid "
    "WHERE d.refclassid = 'pg_catalog.pg_namespace'::regclass AND d.refobjid = n.oid "
    "AND d.classid = 'pg_catalog.pg_class'::regclass AND c.relkind IN ('r', 'v', 'f', 'p')) "
    "FROM pg_catalog.pg_namespace n WHERE n.nspname = %s"
)


def schema_version(conn: Any, schema: str) -> int | None:
    """The version stored in ``schema``, or None if it holds no mainspring store. Raises
    StorageError if the schema holds tables of something else."""
    row = conn.execute(_TABLES_OF, (schema,)).fetchone()
    meta, tables = (row[0], row[1]) if row is not None else (0, 0)
    if not meta:
        if tables:
            raise StorageError(
                f"schema {schema!r} holds tables that are not a mainspring store; "
                f"name another schema (?schema=NAME in the store URL)"
            )
        return None
    row = conn.execute(
        _q("SELECT value FROM {s}.meta WHERE key = 'schema_version'", schema)
    ).fetchone()
    try:
        return int(row[0]) if row is not None else 0
    except ValueError:
        raise StorageError(f"schema {schema!r} has a schema_version of {row[0]!r}") from None


def _refuse_newer(version: int, schema: str) -> None:
    if version > PG_SCHEMA_VERSION:
        raise StorageError(
            f"schema {schema!r} has mainspring schema version {version}; this mainspring "
            f"knows up to {PG_SCHEMA_VERSION}: upgrade mainspring to open it"
        )


def _statements(version: int, schema: str) -> str:
    """Version ``version``'s statements, as one string (one round trip; none takes
    parameters)."""
    return ";\n".join(_q(statement, schema) for statement in _UPGRADES[version])


def upgrade(conn: Any, schema: str, *, to: int = PG_SCHEMA_VERSION) -> int:
    """Create or upgrade the store in ``schema`` up to version ``to``; returns the version
    now stored. ``conn`` is an autocommit connection.

    A new store is created in one transaction, every version's statements in order (there
    are no rows to rewrite); an existing one is upgraded one transaction per version, each
    version's rewrites with its statements. Either way each transaction holds the schema's
    advisory lock and reads the version again under it: another host may have gone first."""
    version = schema_version(conn, schema)
    if version is not None:
        _refuse_newer(version, schema)
    while version is None or version < to:
        with conn.transaction():
            # An upgrade waits for other hosts' transactions and for another host's upgrade
            # as long as they take: the session's lock and statement bounds (L6) are for a
            # store's own calls, which retry; an upgrade refused half way would not.
            conn.execute("SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
            version = schema_version(conn, schema)  # another host may have gone first
            if version is None:
                version = to
                statements = [
                    "CREATE SCHEMA IF NOT EXISTS {s}",
                    "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)",
                ]
                conn.execute(
                    ";\n".join(
                        [
                            *(_q(statement, schema) for statement in statements),
                            *(_statements(v, schema) for v in range(1, to + 1) if _UPGRADES[v]),
                        ]
                    )
                )
                conn.execute(
                    _q("INSERT INTO {s}.meta (key, value) VALUES ('schema_version', %s)", schema),
                    (str(to),),
                )
                break
            _refuse_newer(version, schema)
            if version >= to:
                break
            version += 1
            if _UPGRADES[version]:
                conn.execute(_statements(version, schema))
            if version in _REWRITES:
                _REWRITES[version](conn, schema)
            conn.execute(
                _q("UPDATE {s}.meta SET value = %s WHERE key = 'schema_version'", schema),
                (str(version),),
            )
    return version
