"""The SQL of PostgresStore: the statements a store prepares once for its schema, and the
rows a commit's changes (``storage._journal``) become.

Kept apart from the store so the transaction logic reads without the SQL text in the way.
Every value goes in as a parameter; only the schema name (checked by ``parse_address``) and
the table names of ``schema.TABLES`` are part of the text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import orjson

from ..._errors import RecordError, TooLarge
from ..._journal.model import Change
from .schema import PG_SCHEMA_VERSION, TABLES, TABLES_SINCE

__all__ = [
    "Rows",
    "Statements",
    "loads_row",
    "rows_for",
    "size_expr",
    "tables_of",
    "with_puts",
]


def loads_row(body: Any, kind: str, max_bytes: int) -> Any:
    """A row's body parsed: bytes within ``max_bytes`` (X2) that are JSON, else an error
    that names the record (E7: a row that is not data is a problem, not a crash)."""
    if type(body) is memoryview:
        body = bytes(body)
    if type(body) is not bytes:
        raise RecordError(kind, [f"(row): a {type(body).__name__}, not a stored entry"])
    if len(body) > max_bytes:  # X2: one row, bounded before parsing
        raise TooLarge(kind, len(body), max_bytes)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RecordError(kind, [f"(row): not JSON ({exc})"]) from None


def tables_of(version: int) -> dict[str, str]:
    """Part -> table of the tables a schema of ``version`` has."""
    return {p: t for p, t in TABLES.items() if TABLES_SINCE.get(p, 1) <= version}


def size_expr(schema: str, version: int = PG_SCHEMA_VERSION) -> str:
    """The stored size of one execution (``%(id)s``): its header and every row of it."""
    parts = " + ".join(
        f'(SELECT coalesce(sum(octet_length(body)), 0) FROM "{schema}".{table} '
        f"WHERE execution_id = %(id)s)"
        for table in tables_of(version).values()
    )
    return f"octet_length(head) + octet_length(checkpoints) + {parts}"


@attrs.frozen
class Statements:
    """The statements of a store in schema ``schema`` (quoted as ``s``) of ``version``
    (a read-only store may be of an older one: the parts it lacks read as empty)."""

    schema: str
    version: int = PG_SCHEMA_VERSION

    @property
    def s(self) -> str:
        return f'"{self.schema}"'

    @property
    def lock(self) -> str:
        """Lock the rows of ``%s`` (ids, in id order) and read the server's clock, the
        transaction id and the rows' stamps. The clock is read from the row the locks make,
        so after every lock is held: a clock read before a wait for a lock would shorten or
        revive leases (L1, L2)."""
        s = self.s
        return (
            f"WITH locked AS (SELECT id, stamp FROM {s}.executions WHERE id = ANY(%s) "
            "ORDER BY id FOR UPDATE), rows AS (SELECT coalesce(array_agg(id ORDER BY id), "
            "'{}') AS ids, coalesce(array_agg(stamp ORDER BY id), '{}') AS stamps FROM locked) "
            "SELECT extract(epoch FROM clock_timestamp())::float8, txid_current(), ids, stamps "
            "FROM rows"
        )

    @property
    def events(self) -> str:
        """Append history entries, numbered from the counter row, which stays locked until
        COMMIT so no follower sees a sequence before the lower ones commit (V2); then tell
        the other hosts the newest sequence."""
        s = self.s
        return (
            f"WITH counter AS (UPDATE {s}.counters SET value = value + %s "
            "WHERE name = 'history' RETURNING value), "
            f"added AS (INSERT INTO {s}.events (seq, execution_id, eseq, body) "
            "SELECT (SELECT value FROM counter) - count(*) OVER () + e.n, e.id, e.eseq, e.body "
            "FROM unnest(%s::text[], %s::bigint[], %s::bytea[]) WITH ORDINALITY "
            "AS e(id, eseq, body, n) RETURNING seq) "
            "SELECT pg_notify(%s, 'h ' || max(seq)) FROM added"
        )

    @property
    def read(self) -> str:
        """One execution whole (``%(id)s``): the header row with the stored size, then
        every part row in part order and position, unless the size passes ``%(limit)s``
        (X2: nothing beyond the header is fetched then)."""
        s = self.s
        return (
            f"WITH total AS (SELECT seq, head, checkpoints, "
            f"{size_expr(self.schema, self.version)} AS n "
            f"FROM {s}.executions WHERE id = %(id)s) "
            "SELECT -1, '', seq, head, checkpoints, n FROM total"
            + "".join(
                f" UNION ALL SELECT {index}, key, pos, body, NULL, NULL FROM {s}.{table} "
                f"WHERE execution_id = %(id)s AND (SELECT n FROM total) <= %(limit)s"
                for index, (part, table) in enumerate(TABLES.items())
                if TABLES_SINCE.get(part, 1) <= self.version
            )
            + " ORDER BY 1, 3"
        )


#: The most rows one INSERT of a reset or a task's group writes (4 parameters each).
INSERT_ROWS = 1_000


@attrs.define
class Rows:
    """What one commit writes besides its header: the head and checkpoint window it
    stores, the part statements in order, and the bytes of the part rows. ``puts`` are the
    upserts among the statements (table -> key -> position and body), and ``others`` counts
    the rest (deletes, inserts after a delete): a commit of upserts alone, each row once,
    can write them in its header's statement (see :func:`with_puts`)."""

    head: bytes | None = None
    window: Any = None
    statements: list[tuple[str, Any]] = attrs.field(factory=list)
    written: int = 0
    puts: dict[str, dict[str, tuple[int, bytes]]] = attrs.field(factory=dict)
    others: int = 0

    @property
    def only_puts(self) -> bool:
        """Whether every part statement is an upsert of a row no other one writes."""
        return self.others == 0 and sum(map(len, self.puts.values())) == len(self.statements)


def with_puts(
    header: str, execution_id: str, puts: dict[str, dict[str, tuple[int, bytes]]], s: str
) -> tuple[str, list[Any]]:
    """The data-modifying CTEs that write ``puts`` (see :class:`Rows`) in the statement of
    the header's write, after its own ``header`` CTE, and their arguments: a commit's rows
    in one statement, not one each (each costs the client and the server a statement's
    work; every CTE of a statement runs to completion, or the statement fails whole)."""
    parts: list[str] = []
    args: list[Any] = []
    for n, (table, rows) in enumerate(puts.items()):
        values = ", ".join(["(%s, %s, %s, %s)"] * len(rows))
        parts.append(
            f"p{n} AS (INSERT INTO {s}.{table} (execution_id, key, pos, body) VALUES {values} "
            "ON CONFLICT (execution_id, key) DO UPDATE SET body = excluded.body)"
        )
        for key, (pos, body) in rows.items():
            args.extend((execution_id, key, pos, body))
    return f"WITH header AS ({header} RETURNING 1), {', '.join(parts)}", args


def rows_for(
    s: str,
    execution_id: str,
    changes: list[Change],
    window: Any,
    dumps: Callable[[Any], bytes],
) -> Rows:
    """The statements that store ``changes`` of ``execution_id`` (every value encoded and
    checked by ``dumps`` first). ``window`` is the checkpoint window after the changes when
    there was a stored base (a first write's comes from its ``ckpts`` change)."""
    rows = Rows(window=window)
    for change in changes:
        op = change[0]
        if op == "head":
            rows.head = dumps(change[1])
        elif op == "put":
            _, part, key, pos, value = change
            body = dumps(value)
            rows.written += len(body)
            rows.puts.setdefault(TABLES[part], {})[key] = (pos, body)
            rows.statements.append(
                (
                    f"INSERT INTO {s}.{TABLES[part]} (execution_id, key, pos, body) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (execution_id, key) "
                    "DO UPDATE SET body = excluded.body",
                    (execution_id, key, pos, body),
                )
            )
        elif op == "drop":  # the oldest of the trail: one row each (storage._journal)
            rows.others += len(change[2])
            rows.statements.extend(
                (
                    f"DELETE FROM {s}.{TABLES[change[1]]} WHERE execution_id = %s AND key = %s",
                    (execution_id, key),
                )
                for key in change[2]
            )
        elif op in ("reset", "group"):
            table = TABLES[change[1]]
            rows.others += 1
            if op == "reset":
                rows.statements.append(
                    (f"DELETE FROM {s}.{table} WHERE execution_id = %s", (execution_id,))
                )
                start, entries = 0, change[2]
            else:
                # "0" follows "/": every key of the task sorts between the two (C collation)
                rows.statements.append(
                    (
                        f"DELETE FROM {s}.{table} WHERE execution_id = %s "
                        'AND key COLLATE "C" >= %s AND key COLLATE "C" < %s',
                        (execution_id, f"{change[2]}/", f"{change[2]}0"),
                    )
                )
                start, entries = change[3], change[4]
            values: list[Any] = []
            for offset, (key, value) in enumerate(entries):
                body = dumps(value)
                rows.written += len(body)
                values.extend((execution_id, key, start + offset, body))
            # Many rows a statement (a plan's steps as it is created): a statement costs
            # the client and the server more than a row does. Bounded: the server takes at
            # most 65,535 parameters a statement.
            for first in range(0, len(values), 4 * INSERT_ROWS):
                chunk = values[first : first + 4 * INSERT_ROWS]
                placeholders = ", ".join(["(%s, %s, %s, %s)"] * (len(chunk) // 4))
                rows.statements.append(
                    (
                        f"INSERT INTO {s}.{table} (execution_id, key, pos, body) "
                        f"VALUES {placeholders}",
                        tuple(chunk),
                    )
                )
        elif op == "ckpts" and rows.window is None:
            rows.window = change[1]
    return rows
