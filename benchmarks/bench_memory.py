"""Agent memory benchmarks: remembering and searching facts through the runtime, beside the
same work done with the database library directly.

Run ``python benchmarks/bench_memory.py`` (SQLite, in a temp dir; ``--store
postgresql://...`` for PostgreSQL, each run in a schema of its own, dropped afterwards).
For each size (1,000, 10,000 and 100,000 facts; ``--quick``: 500 and 2,000):

- **remember, 64 in flight**: the store filled with that many facts through
  ``rt.memory.remember``, 64 writers at once (the persistence actor groups their writes into
  one transaction per flush). Peer: the same rows inserted by hand in transactions of 64
  (ideal group commit: as few syncs as the concurrency allows), same durability (SQLite:
  WAL, ``synchronous=FULL``; PostgreSQL: the server's defaults, synchronous commit on).
- **remember, 1 in flight**: then 500 more facts one after another (one sync each). Peer:
  one transaction per fact.
- **search p50 / p99**: 300 queries of 1 to 3 words drawn from the facts' vocabulary,
  ``rt.memory.search(query, limit=10)``, one at a time. Peer: one hand-written full-text
  query (SQLite FTS5 ``MATCH`` ordered by ``bm25()``; PostgreSQL ``plainto_tsquery`` terms
  OR-ed, ordered by ``ts_rank``) with the same filter (visible scopes, not superseded, not
  expired), 10 rows fetched as tuples.

Then cosine ranking (``embedder=`` a cheap deterministic hashed bag of words, pure Python)
over 1,000 and 10,000 facts: the first search (every fact embedded) and warm searches
(vectors cached), beside the floor of the ranking alone (the dot products and the top 10
over vectors already in a list).

Facts are 8 to 14 words from a 3,000-word made-up vocabulary drawn with Zipf-like weights
(a few words are in most facts, most in few); project, user and repository scopes, no
conflict groups. Ratios are ours / direct: above 1x for rates is better, below 1x for
latencies is better.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

VOCABULARY = 3_000
IN_FLIGHT = 64
SEQUENTIAL = 500
QUERIES = 300
SCOPES = ("project", "project", "project", "user", "repository")


# -- the data ------------------------------------------------------------------------------


def vocabulary(rng: random.Random) -> list[str]:
    """Made-up words (consonant-vowel syllables, no word a stem of another's ending)."""
    consonants, vowels = "bdfgklmnprtvz", "aiou"
    words: set[str] = set()
    while len(words) < VOCABULARY:
        syllables = rng.randint(2, 4)
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables)))
    return sorted(words)


class Data:
    """Facts and queries, the same for ours and the peer (seeded)."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        self.weights = [1 / (rank + 1) ** 0.8 for rank in range(len(self.words))]

    def facts(self, n: int) -> list[tuple[str, str]]:
        """``n`` (text, scope) pairs."""
        out = []
        for _ in range(n):
            count = self.rng.randint(8, 14)
            text = " ".join(self.rng.choices(self.words, self.weights, k=count))
            out.append((text, self.rng.choice(SCOPES)))
        return out

    def queries(self, n: int) -> list[str]:
        """1 to 3 words each, uniformly from the vocabulary (mostly mid-frequency words; a
        common one now and then)."""
        return [" ".join(self.rng.sample(self.words, self.rng.randint(1, 3))) for _ in range(n)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the peers: the same work done with the library directly --------------------------------


def _row(text: str, scope: str) -> tuple[Any, ...]:
    return (f"fact-{secrets.token_hex(16)}", text, scope, "general", 1.0, None, None, time.time())


_INSERT = (
    "INSERT INTO facts (id, text, scope, domain, confidence, valid_until, superseded_by, "
    "created_at) VALUES ({})"
)

_SQLITE_SCHEMA = (
    "CREATE TABLE facts (rid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, "
    "scope TEXT NOT NULL, domain TEXT NOT NULL, confidence REAL NOT NULL, valid_until REAL, "
    "superseded_by TEXT, created_at REAL NOT NULL)",
    "CREATE INDEX facts_created ON facts (created_at, id)",
    "CREATE VIRTUAL TABLE facts_fts USING fts5(text, content='facts', content_rowid='rid', "
    "tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER facts_added AFTER INSERT ON facts BEGIN "
    "INSERT INTO facts_fts (rowid, text) VALUES (new.rid, new.text); END",
)


class DirectSqlite:
    """sqlite3 and an FTS5 table: WAL, ``synchronous=FULL``, one transaction per batch."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        for statement in _SQLITE_SCHEMA:
            self.db.execute(statement)
        self.insert = _INSERT.format(", ".join("?" * 8))
        self.search_sql = (
            "SELECT f.id, f.text, f.scope, f.domain, f.confidence, f.valid_until, f.created_at, "
            "bm25(facts_fts) FROM facts_fts JOIN facts f ON f.rid = facts_fts.rowid "
            "WHERE facts_fts MATCH ? AND f.scope IN ('user', 'project', 'repository') "
            "AND f.confidence >= 0 AND (f.valid_until IS NULL OR f.valid_until > ?) "
            "AND f.superseded_by IS NULL ORDER BY bm25(facts_fts), f.id LIMIT 10"
        )

    def commit(self, rows: list[tuple[str, str]]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.executemany(self.insert, [_row(text, scope) for text, scope in rows])
        self.db.execute("COMMIT")

    def search(self, query: str) -> list[Any]:
        expression = " OR ".join(f'"{word}"' for word in dict.fromkeys(query.lower().split()))
        return self.db.execute(self.search_sql, (expression, time.time())).fetchall()

    def close(self) -> None:
        self.db.close()


class DirectPostgres:
    """psycopg and a table with a generated ``tsvector`` (GIN index), in a schema of its
    own; one transaction per batch (synchronous commit, the server's default)."""

    def __init__(self, url: str, schema: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute(f'CREATE SCHEMA "{schema}"')
        self.conn.execute(f'SET search_path TO "{schema}"')
        self.conn.execute(
            'CREATE TABLE facts (id text COLLATE "C" PRIMARY KEY, text text NOT NULL, '
            "scope text NOT NULL, domain text NOT NULL, confidence float8 NOT NULL, "
            "valid_until float8, superseded_by text, created_at float8 NOT NULL, "
            "search tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) "
            "STORED)"
        )
        self.conn.execute("CREATE INDEX facts_search ON facts USING gin (search)")
        self.conn.execute("CREATE INDEX facts_created ON facts (created_at, id)")
        self.insert = _INSERT.format(", ".join(["%s"] * 8))

    def commit(self, rows: list[tuple[str, str]]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(self.insert, [_row(text, scope) for text, scope in rows])

    def search(self, query: str) -> list[Any]:
        words = list(dict.fromkeys(query.lower().split()))
        tsquery = " || ".join("plainto_tsquery('english', %s)" for _ in words)
        sql = (
            f"SELECT id, text, scope, domain, confidence, valid_until, created_at, "
            f"ts_rank(search, {tsquery}) AS rank FROM facts "
            f"WHERE search @@ ({tsquery}) AND scope IN ('user', 'project', 'repository') "
            "AND confidence >= 0 AND (valid_until IS NULL OR valid_until > %s) "
            "AND superseded_by IS NULL ORDER BY rank DESC, id LIMIT 10"
        )
        return self.conn.execute(sql, (*words, *words, time.time())).fetchall()

    def close(self) -> None:
        self.conn.close()


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


# -- ours beside the peer ---------------------------------------------------------------------

#: Facts per round: ours and the peer take turns, so that both see the same load.
ROUND = 2_048


def measure(store: str, peer: Any, facts: list[tuple[str, str]], extra: list[tuple[str, str]],
            queries: list[str]) -> dict[str, float]:  # fmt: skip
    """Fill, remember one at a time, search: ours and the peer in turns (the peer's calls
    block the event loop while ours is idle, which costs ours nothing)."""
    import anyio

    import mainspring as ms

    async def main() -> dict[str, float]:
        spent = dict.fromkeys(("fill", "peer_fill", "one", "peer_one"), 0.0)
        ours_ms: list[float] = []
        peer_ms: list[float] = []
        async with ms.open_runtime(store=store) as rt:
            memory = rt.memory
            before = await rt._committer.stats()
            for at in range(0, len(facts), ROUND):
                chunk = facts[at : at + ROUND]
                pending = iter(chunk)

                async def writer(pending: Any = pending) -> None:
                    for text, scope in pending:
                        await memory.remember(text, scope=scope)

                start = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for _ in range(IN_FLIGHT):
                        tg.start_soon(writer)
                spent["fill"] += time.perf_counter() - start
                start = time.perf_counter()
                for batch in range(0, len(chunk), IN_FLIGHT):
                    peer.commit(chunk[batch : batch + IN_FLIGHT])
                spent["peer_fill"] += time.perf_counter() - start
            after = await rt._committer.stats()
            for text, scope in extra:
                start = time.perf_counter()
                await memory.remember(text, scope=scope)
                spent["one"] += time.perf_counter() - start
                start = time.perf_counter()
                peer.commit([(text, scope)])
                spent["peer_one"] += time.perf_counter() - start
            for query in queries:
                start = time.perf_counter()
                found = await memory.search(query, limit=10)
                ours_ms.append((time.perf_counter() - start) * 1e3)
                assert found.fallback is None
                start = time.perf_counter()
                peer.search(query)
                peer_ms.append((time.perf_counter() - start) * 1e3)
        return {
            "fill": len(facts) / spent["fill"],
            "peer_fill": len(facts) / spent["peer_fill"],
            "batch": len(facts) / max(1, after.flushes - before.flushes),
            "one": len(extra) / spent["one"],
            "peer_one": len(extra) / spent["peer_one"],
            "p50": percentile(ours_ms, 0.5),
            "peer_p50": percentile(peer_ms, 0.5),
            "p99": percentile(ours_ms, 0.99),
            "peer_p99": percentile(peer_ms, 0.99),
        }

    result: dict[str, float] = anyio.run(main)
    return result


# -- cosine ---------------------------------------------------------------------------------

DIMENSIONS = 64


def fake_embedder(texts: list[str]) -> list[list[float]]:
    """A hashed bag of words: deterministic, cheap, and similar texts get similar vectors."""
    out = []
    for text in texts:
        vector = [0.0] * DIMENSIONS
        for word in text.lower().split():
            digest = hashlib.blake2b(word.encode(), digest_size=2).digest()
            vector[digest[0] % DIMENSIONS] += 1.0 if digest[1] & 1 else -1.0
        out.append(vector)
    return out


def _unit(vector: list[float]) -> array[float]:
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return array("d", (v / norm for v in vector))


def cosine(store: str, facts: list[tuple[str, str]], queries: list[str]) -> dict[str, float]:
    import heapq
    import operator

    import anyio

    import mainspring as ms

    async def main() -> dict[str, float]:
        async with ms.open_runtime(store=store, embedder=fake_embedder) as rt:
            pending = iter(facts)

            async def writer() -> None:
                for text, scope in pending:
                    await rt.memory.remember(text, scope=scope)

            async with anyio.create_task_group() as tg:
                for _ in range(IN_FLIGHT):
                    tg.start_soon(writer)
            start = time.perf_counter()
            first = await rt.memory.search(queries[0], limit=10)
            cold = time.perf_counter() - start
            assert first.ranking == "cosine", first
            latencies = []
            for query in queries[1:]:
                start = time.perf_counter()
                found = await rt.memory.search(query, limit=10)
                latencies.append(time.perf_counter() - start)
                assert found.ranking == "cosine"
        vectors = [_unit(v) for v in fake_embedder([text for text, _ in facts])]
        floor = []
        for query in queries[1:]:
            start = time.perf_counter()
            wanted = _unit(fake_embedder([query])[0])
            scored = [(sum(map(operator.mul, wanted, v)), i) for i, v in enumerate(vectors)]
            heapq.nlargest(10, scored)
            floor.append(time.perf_counter() - start)
        return {
            "cold": cold * 1e3,
            "p50": percentile(latencies, 0.5) * 1e3,
            "p99": percentile(latencies, 0.99) * 1e3,
            "floor": statistics.median(floor) * 1e3,
        }

    result: dict[str, float] = anyio.run(main)
    return result


# -- the run --------------------------------------------------------------------------------


def _pair(args: argparse.Namespace, base: Path, size: int, data: Data) -> dict[str, float]:
    facts, extra = data.facts(size), data.facts(100 if args.quick else SEQUENTIAL)
    queries = data.queries(60 if args.quick else QUERIES)
    if args.store is None:
        peer: Any = DirectSqlite(base / f"direct-{size}.sqlite3")
        try:
            return measure(str(base / f"ours-{size}.sqlite3"), peer, facts, extra, queries)
        finally:
            peer.close()
    ours_schema, peer_schema = (f"bench_{secrets.token_hex(4)}" for _ in range(2))
    peer = None
    try:
        peer = DirectPostgres(args.store, peer_schema)
        return measure(_with_schema(args.store, ours_schema), peer, facts, extra, queries)
    finally:
        if peer is not None:
            peer.close()
        _drop_schema(args.store, ours_schema)
        _drop_schema(args.store, peer_schema)


def _cosine(args: argparse.Namespace, base: Path, size: int, data: Data) -> dict[str, float]:
    facts, queries = data.facts(size), data.queries(21 if args.quick else 41)
    if args.store is None:
        return cosine(str(base / f"cosine-{size}.sqlite3"), facts, queries)
    schema = f"bench_{secrets.token_hex(4)}"
    try:
        return cosine(_with_schema(args.store, schema), facts, queries)
    finally:
        _drop_schema(args.store, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default=None, help="a postgresql:// URL (default: SQLite)")
    parser.add_argument("--dir", default=None, help="where SQLite files go (default: temp)")
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    args = parser.parse_args()
    if args.store is not None and not args.store.startswith(("postgresql://", "postgres://")):
        parser.error("--store takes a postgresql:// URL (SQLite is the default)")
    sizes = [500, 2_000] if args.quick else [1_000, 10_000, 100_000]
    base = Path(args.dir or tempfile.mkdtemp(prefix="mainspring-bench-memory-"))
    data = Data()
    began = time.perf_counter()
    print(f"\nmainspring memory benchmark: {'SQLite' if args.store is None else 'PostgreSQL'}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print(
        "| facts | remember, 64 in flight (facts/s): ours / direct | ratio | ours facts/flush "
        "| remember, 1 in flight (facts/s): ours / direct | ratio "
        "| search p50 (ms): ours / direct | ratio | search p99 (ms): ours / direct | ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    for size in sizes:
        got = _pair(args, base, size, data)
        cells = [f"{size:,}"]
        for key, digits in (("fill", 0), ("one", 0), ("p50", 2), ("p99", 2)):
            mine, peer = got[key], got[f"peer_{key}"]
            cells += [f"{mine:,.{digits}f} / {peer:,.{digits}f}", f"{mine / peer:.2f}x"]
            if key == "fill":
                cells.append(f"{got['batch']:.1f}")
        print("| " + " | ".join(cells) + " |", flush=True)
    print(
        "\n| facts | cosine: first search (ms, every fact embedded) | warm p50 (ms) "
        "| warm p99 (ms) | floor: dot products + top 10 (ms) | p50 / floor |"
    )
    print("|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    for size in [500, 2_000] if args.quick else [1_000, 10_000]:
        got = _cosine(args, base, size, data)
        print(
            f"| {size:,} | {got['cold']:,.0f} | {got['p50']:.1f} | {got['p99']:.1f} "
            f"| {got['floor']:.1f} | {got['p50'] / got['floor']:.1f}x |",
            flush=True,
        )
    print(f"\n{time.perf_counter() - began:.0f} s in all, load {os.getloadavg()[0]:.1f}, "
          f"under {base}", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
