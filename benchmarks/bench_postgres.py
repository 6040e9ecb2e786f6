"""Durable steps/s on PostgreSQL: mainspring beside DBOS, over the server's own commit rate.

Run ``python benchmarks/bench_postgres.py`` (``pip install -e '.[bench]'`` and psycopg 3
first) against the local server named by ``$MAINSPRING_TEST_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432/test``; trust auth, default ``synchronous_commit=on``).
One invocation measures:

- the physical reference: one-row commits/s, pgbench-style: 1, 8 and 50 psycopg connections
  (one thread each) each doing ``INSERT`` of one small row + ``COMMIT`` in a loop for
  ``--seconds`` (default 5), into a table of the scratch schema ``mainspring_bench_raw``; and,
  when the binary is there, the real ``pgbench`` with a one-INSERT script file, ``-n -c 1`` and
  ``-n -c 50 -j 2``, for as long.
- DBOS with its system database on the same server, in a database
  ``mainspring_bench_dbos`` dropped and created afresh for each measurement: the 20-step
  workflow of ``_durable_peers.py`` (``dbos_steps_per_second``, with ``system_database_url``
  pointing there), one at a time and 50 in flight, DBOS's defaults otherwise.
- mainspring on PostgreSQL, in a fresh database ``mainspring_bench_ms`` (schema
  ``mainspring_bench``): 20-step linear plans of trivial tools through
  ``open_runtime(store="postgresql://.../mainspring_bench_ms?schema=mainspring_bench")``, as
  ``bench_executions.py``'s ``mainspring_steps_per_second`` does on SQLite (50 executions one
  after another; 100 with 50 in flight), on asyncio and trio. If ``mainspring.storage`` has no
  ``PostgresStore`` yet, these rows read "n/a".
- for context, mainspring on SqliteStore (temp dir), one at a time, on asyncio.

Each figure is the median of ``--repeats`` (default 3) runs, every one in a fresh process
(``--one``), interleaved so drift hits every row alike; only the runs are timed, not the
setup. ``--quick`` is a smoke test. The scratch schema and databases are dropped at the end.

Goals: mainspring on PostgreSQL >= 5x DBOS on PostgreSQL one at a time, >= 20x with 50 in
flight.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _harness import in_subprocess, linear_plan, run_on, trivial

DSN = os.environ.get("MAINSPRING_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
RAW_SCHEMA = "mainspring_bench_raw"
DBOS_DB = "mainspring_bench_dbos"
MS_DB = "mainspring_bench_ms"
MS_SCHEMA = "mainspring_bench"
STEPS = 20
IN_FLIGHT = 50
CONNECTIONS = (1, 8, 50)
GOAL_SEQUENTIAL = 5.0
GOAL_CONCURRENT = 20.0


# -- setup: scratch schema and fresh databases (never timed) ----------------------------------


def _admin(sql: str, dsn: str = DSN) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql)


def _with_database(dsn: str, name: str) -> str:
    return urlsplit(dsn)._replace(path=f"/{name}").geturl()


def fresh_database(name: str) -> str:
    """Drop and create database ``name`` on the server; return a URL naming it."""
    _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _admin(f"CREATE DATABASE {name}")
    return _with_database(DSN, name)


def _raw_table(name: str) -> str:
    table = f"{RAW_SCHEMA}.{name}"
    _admin(f"CREATE SCHEMA IF NOT EXISTS {RAW_SCHEMA}")
    _admin(f"DROP TABLE IF EXISTS {table}")
    _admin(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, worker int NOT NULL, v int)")
    return table


def cleanup() -> None:
    _admin(f"DROP SCHEMA IF EXISTS {RAW_SCHEMA} CASCADE")
    for name in (DBOS_DB, MS_DB):
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# -- the measurements, each in a fresh process --------------------------------------------------


def commits_per_second(connections: int, seconds: float) -> float:
    """One-row INSERT + COMMIT in a loop on each of ``connections`` threads for ``seconds``."""
    import psycopg

    table = _raw_table(f"commits_{connections}")
    conns = [psycopg.connect(DSN) for _ in range(connections)]  # autocommit off: BEGIN implied
    counts = [0] * connections
    ready = threading.Barrier(connections + 1)
    stop = threading.Event()

    def loop(i: int) -> None:
        conn, n = conns[i], 0
        ready.wait()
        while not stop.is_set():
            conn.execute(f"INSERT INTO {table} (worker, v) VALUES (%s, %s)", (i, n))
            conn.commit()
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for conn in conns:
        conn.close()
    return sum(counts) / elapsed


def pgbench_tps(clients: int, seconds: float) -> float | None:
    """The real pgbench, one INSERT per transaction; None if the binary is not there."""
    if not os.access(PGBENCH, os.X_OK):
        return None
    table = _raw_table(f"pgbench_{clients}")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(f"INSERT INTO {table} (worker, v) VALUES (:client_id, 1);\n")
    try:
        jobs = ["-j", "2"] if clients > 1 else []
        duration = str(max(1, round(seconds)))
        done = subprocess.run(
            [PGBENCH, "-n", "-c", str(clients), *jobs, "-T", duration, "-f", script.name, DSN],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(script.name)
    found = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", done.stdout)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"pgbench failed:\n{done.stdout[-1000:]}{done.stderr[-1000:]}")
    return float(found.group(1))


def dbos_on_postgres(executions: int, in_flight: int) -> float:
    from _durable_peers import dbos_steps_per_second

    url = fresh_database(DBOS_DB)
    with tempfile.TemporaryDirectory(prefix="mainspring-peer-") as tmp:
        return dbos_steps_per_second(
            Path(tmp),
            steps=STEPS,
            workflows=executions,
            concurrency=in_flight,
            system_database_url=url,
        )


def postgres_store_available() -> bool:
    import mainspring as ms

    return hasattr(ms.storage, "PostgresStore")


def mainspring_steps_per_second(store: Any, backend: str, executions: int, in_flight: int) -> float:
    """``bench_executions.mainspring_steps_per_second``, with the store given."""
    import anyio

    import mainspring as ms

    async def main() -> float:
        plan = linear_plan("trivial", STEPS)
        limiter = anyio.CapacityLimiter(in_flight)
        async with ms.open_runtime(store=store, tools={"trivial": trivial}) as rt:

            async def one() -> None:
                async with limiter:
                    handle = await rt.start("benchmark", plan)
                    result = await handle.wait()
                assert result.status == "completed", result
                assert result.steps_done == STEPS, result

            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(executions):
                    tg.start_soon(one)
            elapsed = time.perf_counter() - start
        return STEPS * executions / elapsed

    return float(run_on(backend, main))


def measure(name: str, backend: str, n: int, seconds: float) -> float | None:
    """``name``: commits-<connections>, pgbench-<clients>, dbos-<in flight>, pg-<in flight>
    (mainspring on PostgreSQL) or sqlite-<in flight>; ``n`` executions or unused."""
    system, count = name.split("-")
    if system == "commits":
        return commits_per_second(int(count), seconds)
    if system == "pgbench":
        return pgbench_tps(int(count), seconds)
    if system == "dbos":
        return dbos_on_postgres(n, int(count))
    if system == "pg":
        store = f"{fresh_database(MS_DB)}?schema={MS_SCHEMA}"
        return mainspring_steps_per_second(store, backend, n, int(count))
    with tempfile.TemporaryDirectory(prefix="mainspring-bench-") as tmp:
        path = Path(tmp) / "store.sqlite3"
        return mainspring_steps_per_second(path, backend, n, int(count))


# -- the table ----------------------------------------------------------------------------------


def _versions() -> str:
    import psycopg

    parts = [f"PostgreSQL {_server_version()}", f"psycopg {psycopg.__version__}"]
    for dist in ("dbos", "anyio", "trio"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} missing")
    return ", ".join(parts)


def _server_version() -> str:
    import psycopg

    with psycopg.connect(DSN) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version'), current_setting('synchronous_commit'),"
            " current_setting('fsync')"
        ).fetchone()
    assert row is not None
    return f"{row[0]} (synchronous_commit={row[1]}, fsync={row[2]})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--seconds", type=float, default=None, help="per commit-loop run")
    parser.add_argument("--backends", default="asyncio,trio", help="for mainspring on Postgres")
    parser.add_argument("--one", nargs=3, metavar=("MEASURE", "BACKEND", "N"), help="internal")
    args = parser.parse_args()
    seconds = args.seconds or (1.0 if args.quick else 5.0)
    if args.one:
        name, backend, n = args.one
        print(json.dumps(measure(name, backend, int(n), seconds)))
        return

    repeats = args.repeats or (1 if args.quick else 3)
    sequential, concurrent = (5, IN_FLIGHT) if args.quick else (50, 100)
    backends = [b for b in args.backends.split(",") if b]
    available = postgres_store_available()
    runs: list[tuple[str, str, int]] = [(f"commits-{c}", "threads", 0) for c in CONNECTIONS]
    runs += [("pgbench-1", "pgbench", 0), (f"pgbench-{IN_FLIGHT}", "pgbench", 0)]
    runs += [("dbos-1", "threads", sequential), (f"dbos-{IN_FLIGHT}", "threads", concurrent)]
    if available:
        runs += [
            (f"pg-{k}", backend, sequential if k == 1 else concurrent)
            for backend in backends
            for k in (1, IN_FLIGHT)
        ]
    runs.append(("sqlite-1", "asyncio", sequential))

    started = time.perf_counter()
    samples: dict[tuple[str, str], list[float]] = {(m, b): [] for m, b, _ in runs}
    extra = ["--seconds", str(seconds)]
    try:
        for repeat in range(repeats):
            for name, backend, n in runs:
                value = in_subprocess(__file__, name, backend, n, extra=extra)
                if value is not None:
                    samples[(name, backend)].append(float(value))
            print(f"run {repeat + 1}/{repeats} done", file=sys.stderr, flush=True)
    finally:
        cleanup()

    def figure(name: str, backend: str = "threads") -> tuple[float | None, str]:
        values = samples.get((name, backend)) or []
        if not values:
            return None, "n/a"
        mid = statistics.median(values)
        spread = f" ({min(values):,.0f}-{max(values):,.0f})" if len(values) > 1 else ""
        return mid, f"{mid:,.0f}{spread}"

    dbos = {1: figure("dbos-1")[0], IN_FLIGHT: figure(f"dbos-{IN_FLIGHT}")[0]}

    def ratio(value: float | None, k: int) -> str:
        base = dbos.get(k)
        return f"{value / base:.2f}x" if value is not None and base else ""

    print(
        f"\nmainspring on PostgreSQL: median of {repeats} runs (range in brackets), "
        f"python {sys.version.split()[0]}, {_versions()}, {os.cpu_count()} cpus, "
        f"{time.perf_counter() - started:.0f} s in all\n"
    )
    print(
        f"{STEPS}-step executions: {sequential} one after another, or {concurrent} with "
        f"{IN_FLIGHT} in flight; commit loops and pgbench for {seconds:g} s.\n"
    )
    print("| measure | system | steps/s (or commits/s) | ratio vs DBOS-on-Postgres | goal |")
    print("|---|---|---:|---:|---|")
    for c in CONNECTIONS:
        value, text = figure(f"commits-{c}")
        print(
            f"| one-row INSERT + COMMIT, {c} connection{'s' if c > 1 else ''} "
            f"| PostgreSQL via psycopg (threads) | {text} commits/s | {ratio(value, c)} | |"
        )
    for c in (1, IN_FLIGHT):
        value, text = figure(f"pgbench-{c}", "pgbench")
        flags = f"-n -c {c}" + (" -j 2" if c > 1 else "")
        unit = " commits/s" if value is not None else ""
        print(
            f"| one-row INSERT, pgbench {flags} | PostgreSQL (pgbench) | {text}{unit} "
            f"| {ratio(value, c)} | |"
        )
    for k in (1, IN_FLIGHT):
        label = "one at a time" if k == 1 else f"{k} in flight"
        _, text = figure(f"dbos-{k}")
        print(
            f"| {STEPS}-step executions, {label} | DBOS, Postgres system database | {text} "
            "| 1.00x | |"
        )
    for backend in backends:
        for k, goal in ((1, GOAL_SEQUENTIAL), (IN_FLIGHT, GOAL_CONCURRENT)):
            label = "one at a time" if k == 1 else f"{k} in flight"
            value, text = figure(f"pg-{k}", backend)
            if value is None:
                text = "n/a (PostgresStore not available)"
            base = dbos.get(k)
            met = (
                f" ({'met' if value / base >= goal else 'not met'})"
                if value is not None and base
                else ""
            )
            print(
                f"| {STEPS}-step executions, {label} | mainspring PostgresStore, {backend} "
                f"| {text} | {ratio(value, k)} | >= {goal:g}x{met} |"
            )
    value, text = figure("sqlite-1", "asyncio")
    print(
        f"| {STEPS}-step executions, one at a time | mainspring SqliteStore (temp dir), asyncio "
        f"| {text} | {ratio(value, 1)} | (context) |"
    )
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
