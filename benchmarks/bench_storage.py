"""Storage benchmarks: the disk's own limits, then the persistence actor on both backends.

Run ``python benchmarks/bench_storage.py``. One invocation measures, on the disk under
``--dir`` (default: a temp dir):

- the disk's limits: a 4 KiB file written, fsynced, renamed and its directory fsynced, per
  commit; SQLite in WAL mode with ``synchronous=FULL``, one 4 KiB insert per transaction;
- the persistence actor's acknowledged durable commits/s with ~4 KiB records for 1, 10, 100
  and 1,000 concurrent executions (each execution commits again as soon as its previous commit
  is durable), on FileStore and SqliteStore;
- beside a naive baseline: the same executions each calling the store directly from a worker
  thread, every commit written and synced on its own.

Figures are medians of ``--runs`` runs (default 3), asyncio backend.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PAYLOAD = "x" * 3900  # with the record's other fields: ~4 KiB on disk


def disk_file_limit(where: Path, n: int) -> float:
    where.mkdir(parents=True, exist_ok=True)
    data = os.urandom(4096)
    dir_fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
    start = time.perf_counter()
    for i in range(n):
        fd, temp = tempfile.mkstemp(dir=where)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        os.replace(temp, where / f"f{i % 10}.json")
        os.fsync(dir_fd)
    elapsed = time.perf_counter() - start
    os.close(dir_fd)
    return n / elapsed


def disk_sqlite_limit(where: Path, n: int) -> float:
    where.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(where / "limit.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body BLOB)")
    data = os.urandom(4096)
    start = time.perf_counter()
    for i in range(n):
        db.execute("BEGIN")
        db.execute("INSERT OR REPLACE INTO t (id, body) VALUES (?, ?)", (i % 100, data))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return n / elapsed


def _store(kind: str, where: Path) -> Any:
    import mainspring as ms

    if kind == "file":
        return ms.storage.FileStore(where / "files")
    return ms.storage.SqliteStore(where / "store.db")


def _prepare(store: Any, count: int, owner: str) -> None:
    import mainspring as ms

    for i in range(count):
        store.create(
            ms.storage.Execution(id=f"ex-{i}", goal=PAYLOAD, created_at=0.0, updated_at=0.0)
        )
        assert store.acquire(f"ex-{i}", owner, ttl=3600).acquired


def commits_per_second(kind: str, where: Path, concurrency: int, total: int, naive: bool) -> float:
    import anyio
    import anyio.to_thread

    import mainspring as ms

    # The persistence actor alone, through storage's internal door: no public name starts
    # it without a runtime around it.
    from mainspring.storage._seam import open_committer

    owner = "bench:1:x"
    store = _store(kind, where)
    _prepare(store, concurrency, owner)
    per_execution = max(1, total // concurrency)

    async def main() -> float:
        async with ms.open_system() as system:
            committer = await open_committer(system, store)

            async def run(i: int) -> None:
                for n in range(per_execution):
                    record = ms.storage.Execution(
                        id=f"ex-{i}", goal=PAYLOAD, created_at=0.0, updated_at=float(n),
                        calls_used=n,
                    )  # fmt: skip
                    if naive:
                        outcome = await anyio.to_thread.run_sync(store.commit_run, record, owner)
                    else:
                        outcome = await committer.submit(record, owner)
                    assert outcome.ok

            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(concurrency):
                    tg.start_soon(run, i)
            return per_execution * concurrency / (time.perf_counter() - start)

    rate = float(anyio.run(main))
    if hasattr(store, "close"):
        store.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="mainspring-bench-"))
    scale = 0.1 if args.quick else 1.0

    def runs(fn: Any, *a: Any) -> float:
        values = []
        for r in range(args.runs):
            where = base / f"{fn.__name__}-{'-'.join(map(str, a))}-{r}"
            values.append(fn(*a[:1], where, *a[1:]) if a else fn(where))
        return statistics.median(values)

    file_limit = runs(lambda w: disk_file_limit(w, int(500 * scale) or 20))
    sqlite_limit = runs(lambda w: disk_sqlite_limit(w, int(1000 * scale) or 20))
    print(f"\nmainspring storage benchmarks: median of {args.runs} runs, under {base}\n")
    print("| what | commits/s |")
    print("|---|---:|")
    print(f"| disk limit: 4 KiB file + fsync + rename + dir fsync | {file_limit:,.0f} |")
    print(f"| disk limit: SQLite WAL FULL, one insert per transaction | {sqlite_limit:,.0f} |")
    print()
    print("| backend | concurrent executions | persistence actor | naive | actor / naive "
          "| actor / disk limit |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for kind, limit in (("file", file_limit), ("sqlite", sqlite_limit)):
        for concurrency in (1, 10, 100, 1000):
            total = max(concurrency, int((400 if kind == "file" else 2000) * scale))
            actor = runs(
                lambda w, k=kind, c=concurrency, t=total: commits_per_second(k, w, c, t, False)
            )
            naive = runs(
                lambda w, k=kind, c=concurrency, t=total: commits_per_second(k, w, c, t, True)
            )
            print(
                f"| {kind} | {concurrency:,} | {actor:,.0f} | {naive:,.0f} | {actor / naive:.1f}x "
                f"| {actor / limit:.2f}x |",
                flush=True,
            )
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
