"""What the store does per durable step, apart from the runtime: time and counts per commit.

Run ``python benchmarks/bench_commit_path.py`` (``--postgres URL`` adds PostgresStore; a
scratch schema is made and dropped). For each store and run length (``--sizes``, default
20, 1,000 and 10,000 steps) it replays, through ``Store.commit_runs``, the commits a linear
plan of trivial tool steps makes: per step one commit that marks the plan step succeeded,
appends its observation and its id to the completed steps, and adds a checkpoint (what the
runtime commits). The last 200 commits of a run (all of a shorter one) are timed; the
ones before are written the same way, so the store's tables and caches are a long run's.

Per commit: wall and CPU microseconds (median of ``--repeats``), and what the store did,
counted: JSON encodes (``orjson.dumps``), SQL statements (SQLite) or round trips to the
server (PostgreSQL: pipeline syncs and statements outside a pipeline), fsyncs (FileStore).
A flat column from 20 to 10,000 steps is the goal (10,000-step runs must not cost more per
step than 20-step ones).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

TIMED = 200
OWNER = "bench:1:x"


def _plan(n: int) -> Any:
    from mainspring.storage import Plan, PlanStep

    return Plan(
        id="linear",
        goal="benchmark",
        steps=tuple(
            PlanStep(
                id=f"s{i}",
                tool="trivial",
                input={"step": f"s{i}"},
                depends_on=(f"s{i - 1}",) if i > 1 else (),
            )
            for i in range(1, n + 1)
        ),
    )


class _Counts:
    """Counters patched into orjson, os.fsync, a SQLite connection's trace and psycopg."""

    def __init__(self) -> None:
        self.encodes = 0
        self.statements = 0
        self.round_trips = 0
        self.fsyncs = 0


def _patch(store: Any, counts: _Counts) -> None:
    import orjson

    # The codec's own orjson, swapped for a counting one where the codec looks it up: a
    # module global no public name or internal door can stand in for.
    from mainspring.storage import _codec

    dumps = orjson.dumps

    class _Orjson:
        def __getattr__(self, name: str) -> Any:
            return getattr(orjson, name)

        @staticmethod
        def dumps(*args: Any, **kwargs: Any) -> bytes:
            counts.encodes += 1
            return dumps(*args, **kwargs)

    _codec.orjson = _Orjson()  # type: ignore[assignment]
    fsync = os.fsync

    def counted_fsync(fd: int) -> None:
        counts.fsyncs += 1
        fsync(fd)

    os.fsync = counted_fsync
    db = getattr(store, "_db", None)
    if db is not None:

        def traced(statement: str) -> None:
            counts.statements += 1

        db.set_trace_callback(traced)
    if type(store).__name__ == "PostgresStore":
        _count_round_trips(counts)


def _count_round_trips(counts: _Counts) -> None:
    """A round trip: a pipeline sync, or a statement run outside a pipeline."""
    import psycopg

    sync = psycopg.Pipeline.sync
    execute = psycopg.Connection.execute

    def counted_sync(self: Any) -> Any:
        counts.round_trips += 1
        return sync(self)

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._pipeline is None:
            counts.round_trips += 1
        return execute(self, *args, **kwargs)

    psycopg.Pipeline.sync = counted_sync  # type: ignore[method-assign]
    psycopg.Connection.execute = counted_execute  # type: ignore[method-assign]


def _replay(
    store: Any, execution_id: str, steps: int, counts: _Counts
) -> tuple[list[float], list[float], list[int]]:
    from mainspring.storage import Execution, Observation
    from mainspring.storage._seam import Checkpoint

    plan = _plan(steps)
    store.create(Execution(id=execution_id, goal="g", created_at=1.0, updated_at=1.0))
    lease = store.acquire(execution_id, OWNER, 600.0).lease
    execution = store.get(execution_id)
    execution = attrs.evolve(execution, status="running", plan=plan, plan_version=1)
    outcome = store.commit_runs([(execution, OWNER)])
    assert outcome[0].ok, outcome
    walls: list[float] = []
    cpus: list[float] = []
    counted = [0, 0, 0, 0]
    step_list = list(plan.steps)
    for index, step in enumerate(plan.steps):
        step_list[index] = attrs.evolve(step, status="succeeded")
        done = (*execution.completed_steps, step.id)
        checkpoint = Checkpoint(
            at=float(index), plan_version=1, completed_steps=done, tool_hashes={"trivial": "0"}
        )
        execution = attrs.evolve(
            execution,
            plan=attrs.evolve(execution.plan, steps=tuple(step_list)),
            observations=(
                *execution.observations,
                Observation(step_id=step.id, tool="trivial", ok=True, output={"step": step.id}),
            ),
            completed_steps=done,
            checkpoints=(*execution.checkpoints, checkpoint)[-5:],
            updated_at=float(index),
            lease=lease,
        )
        timed = index >= steps - min(TIMED, steps)
        before = (counts.encodes, counts.statements, counts.round_trips, counts.fsyncs)
        wall, cpu = time.perf_counter(), time.thread_time()
        outcome = store.commit_runs([(execution, OWNER)])
        after = (counts.encodes, counts.statements, counts.round_trips, counts.fsyncs)
        counted = [c + b - a for c, a, b in zip(counted, before, after, strict=True)]
        if timed:
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
        assert outcome[0] == "ok", outcome
    return walls, cpus, counted


def measure(kind: str, steps: int, url: str | None) -> dict[str, float]:
    from mainspring.storage import FileStore, PostgresStore, SqliteStore

    with tempfile.TemporaryDirectory(prefix="mainspring-commit-path-") as scratch:
        if kind == "sqlite":
            store: Any = SqliteStore(Path(scratch) / "store.sqlite3")
        elif kind == "file":
            store = FileStore(Path(scratch) / "store")
        else:
            assert url is not None
            store = PostgresStore(url, schema=f"bench_commit_{os.getpid()}")
        counts = _Counts()
        try:
            _patch(store, counts)
            walls, cpus, counted = _replay(store, f"ex-{steps}", steps, counts)
        finally:
            if kind == "postgres":
                import psycopg

                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')
            close = getattr(store, "close", None)
            if close is not None:
                close()
    per = [count / steps for count in counted]
    return {
        "wall": 1e6 * statistics.median(walls),
        "cpu": 1e6 * statistics.median(cpus),
        "encodes": per[0],
        "statements": per[1],
        "round_trips": per[2],
        "fsyncs": per[3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20,1000,10000")
    parser.add_argument("--stores", default="sqlite,file")
    parser.add_argument("--postgres", help="a server URL: adds PostgresStore")
    args = parser.parse_args()
    kinds = [k for k in args.stores.split(",") if k]
    if args.postgres:
        kinds.append("postgres")
    print(
        "| store | steps | wall us/commit | CPU us/commit | encodes | SQL statements "
        "| round trips | fsyncs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind in kinds:
        for steps in (int(s) for s in args.sizes.split(",")):
            got = measure(kind, steps, args.postgres)
            print(
                f"| {kind} | {steps:,} | {got['wall']:,.0f} | {got['cpu']:,.0f} "
                f"| {got['encodes']:.1f} | {got['statements']:.1f} "
                f"| {got['round_trips']:.1f} | {got['fsyncs']:.1f} |",
                flush=True,
            )
    print(
        f"\nMedian of the last {TIMED} commits of each run; counts are per commit over the "
        "whole run (commits only). CPU is the writing thread's (time.thread_time())."
    )


if __name__ == "__main__":
    main()
