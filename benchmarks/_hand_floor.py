"""The same job written by hand, and the disk's own commit rate: the floors mainspring is read
against (issue #29), measured in the same run as mainspring and its peers.

"The job" is the one ``bench_goals.py`` gives mainspring: executions of a linear plan of 20
trivial tool steps, every step durable before the next one starts. Written by hand, with
nothing a runtime adds (no actors, no leases, no records beyond one small row per step):

- **minimal loop** (the in-memory floor): a scheduler over the plan's dependencies, the tool
  call, one ``orjson`` encode of a small record, and one actor hop — the record sent to a
  store task over an anyio memory stream, which keeps it in a dict and answers with an event
  the step awaits. No disk.
- **SQLite by hand**: per step, call the tool, encode the record, and one SQLite WAL
  ``synchronous=FULL`` transaction (one INSERT) through a worker thread
  (``anyio.to_thread.run_sync``) before the next step. Each execution first commits its run
  row (the plan durable before any step) and last marks it completed.
- **PostgreSQL by hand**: the same with psycopg 3 (one INSERT and COMMIT per step on one
  connection, through a worker thread), in a database of its own.
- **with N in flight**: the same executions, N at a time, and one writer task that takes
  every record waiting, writes them in one transaction in its worker thread (group commit)
  and then wakes their steps.
- **the physical limits**: the disk's fsync rate (a 64-byte ``write`` + ``fsync`` per commit,
  in a loop, on the same file system as the stores) and the PostgreSQL server's (one-row
  INSERT + COMMIT in a loop, one connection).

Each function times only the work, not the setup, and returns steps (or commits) per second.
Run ``python benchmarks/_hand_floor.py`` for a quick look at the SQLite and in-memory figures.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

STEPS = 20

Row = tuple[str, str, bytes]  # (execution, step, record): one durable write
RUN = "__run__"  # the step name of an execution's own row


def _plan(steps: int) -> list[tuple[str, dict[str, str], tuple[str, ...]]]:
    """``_harness.linear_plan`` as plain data: (step id, input, dependencies)."""
    return [
        (f"s{i}", {"step": f"s{i}"}, (f"s{i - 1}",) if i > 1 else ()) for i in range(1, steps + 1)
    ]


def _tool(step: Any) -> Any:
    """The benchmarks' trivial tool (``_harness.trivial``): returns its input."""
    return step


def _record(execution: str, step: str, output: Any) -> bytes:
    import orjson

    return orjson.dumps(
        {"execution": execution, "step": step, "status": "completed", "output": output}
    )


async def _drive(
    commit: Callable[[Row], Any], executions: int, in_flight: int, steps: int
) -> float:
    """Run ``executions`` linear plans, ``in_flight`` at a time, awaiting ``commit`` for each
    run row and each step; returns steps/s over the wall time of the runs."""
    import anyio

    plan = _plan(steps)
    limiter = anyio.CapacityLimiter(in_flight)

    async def one(n: int) -> None:
        async with limiter:
            execution = f"ex-{n}"
            await commit((execution, RUN, b'{"status":"running"}'))
            for step, given, _ in plan:  # a line: each step's one dependency is the one before
                await commit((execution, step, _record(execution, step, _tool(given))))
            await commit((execution, RUN, b'{"status":"completed"}'))

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for n in range(executions):
            tg.start_soon(one, n)
    return steps * executions / (time.perf_counter() - start)


class _GroupWriter:
    """One writer for many runs: every row waiting is written in one transaction (one fsync),
    then every step that waited on it goes on."""

    def __init__(self, write: Callable[[Sequence[Row]], None]) -> None:
        import anyio

        self._write = write
        self._pending: list[tuple[Row, anyio.Event]] = []
        self._wake = anyio.Event()

    async def commit(self, row: Row) -> None:
        import anyio

        done = anyio.Event()
        self._pending.append((row, done))
        self._wake.set()
        await done.wait()

    async def run(self) -> None:
        import anyio

        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            batch, self._pending = self._pending, []
            await anyio.to_thread.run_sync(self._write, [row for row, _ in batch])
            for _, done in batch:
                done.set()


async def _by_hand(
    write: Callable[[Sequence[Row]], None], executions: int, in_flight: int, steps: int
) -> float:
    """One transaction per row through a worker thread, or with ``in_flight`` above one, one
    group-committing writer."""
    import anyio

    if in_flight <= 1:

        async def one_at_a_time(row: Row) -> None:
            await anyio.to_thread.run_sync(write, (row,))

        return await _drive(one_at_a_time, executions, 1, steps)
    writer = _GroupWriter(write)
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        rate = await _drive(writer.commit, executions, in_flight, steps)
        tg.cancel_scope.cancel()
    return rate


# -- SQLite -------------------------------------------------------------------------------------


def sqlite_by_hand(
    path: Path, *, executions: int, in_flight: int = 1, steps: int = STEPS, backend: str = "asyncio"
) -> float:
    """Steps/s of the job by hand on a SQLite file in WAL mode with ``synchronous=FULL``."""
    import anyio

    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE steps (execution TEXT NOT NULL, step TEXT NOT NULL, record BLOB NOT NULL,"
        " PRIMARY KEY (execution, step))"
    )

    def write(rows: Sequence[Row]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT OR REPLACE INTO steps VALUES (?, ?, ?)", rows)
        conn.execute("COMMIT")

    try:
        return float(anyio.run(_by_hand, write, executions, in_flight, steps, backend=backend))
    finally:
        conn.close()


# -- PostgreSQL ---------------------------------------------------------------------------------


def postgres_by_hand(
    dsn: str, *, executions: int, in_flight: int = 1, steps: int = STEPS, backend: str = "asyncio"
) -> float:
    """Steps/s of the job by hand on PostgreSQL (the database ``dsn`` names, made fresh by the
    caller): one INSERT and COMMIT per row, or per group with ``in_flight`` above one."""
    import anyio
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute(
            "CREATE TABLE steps (execution text NOT NULL, step text NOT NULL,"
            " record bytea NOT NULL, PRIMARY KEY (execution, step))"
        )
        conn.commit()
        sql = (
            "INSERT INTO steps VALUES (%s, %s, %s)"
            " ON CONFLICT (execution, step) DO UPDATE SET record = EXCLUDED.record"
        )

        def write(rows: Sequence[Row]) -> None:
            with conn.cursor() as cursor:
                if len(rows) == 1:
                    cursor.execute(sql, rows[0])
                else:
                    cursor.executemany(sql, rows)
            conn.commit()

        return float(anyio.run(_by_hand, write, executions, in_flight, steps, backend=backend))


# -- the minimal loop (no disk) -----------------------------------------------------------------


async def _minimal_loop(executions: int, steps: int) -> float:
    import anyio

    plan = _plan(steps)
    send, receive = anyio.create_memory_object_stream[tuple[str, str, bytes, anyio.Event]](1)
    stored: dict[tuple[str, str], bytes] = {}

    async def store() -> None:
        async with receive:
            async for execution, step, record, done in receive:
                stored[(execution, step)] = record
                done.set()

    async def run(execution: str) -> None:
        # The scheduler: a step is ready once every step it depends on is done.
        waiting = {step: set(after) for step, _, after in plan}
        inputs = {step: given for step, given, _ in plan}
        dependents: dict[str, list[str]] = defaultdict(list)
        for step, _, after in plan:
            for before in after:
                dependents[before].append(step)
        ready = deque(step for step, left in waiting.items() if not left)
        while ready:
            step = ready.popleft()
            record = _record(execution, step, _tool(inputs[step]))
            done = anyio.Event()
            await send.send((execution, step, record, done))  # the one actor hop ...
            await done.wait()  # ... and its answer
            for next_step in dependents[step]:
                waiting[next_step].discard(step)
                if not waiting[next_step]:
                    ready.append(next_step)

    async with anyio.create_task_group() as tg:
        tg.start_soon(store)
        start = time.perf_counter()
        for n in range(executions):
            await run(f"ex-{n}")
        elapsed = time.perf_counter() - start
        await send.aclose()
    assert len(stored) == steps * executions
    return steps * executions / elapsed


def minimal_loop(*, executions: int, steps: int = STEPS, backend: str = "asyncio") -> float:
    """Steps/s of the minimal loop, executions one after another."""
    import anyio

    return float(anyio.run(_minimal_loop, executions, steps, backend=backend))


# -- the physical limits ------------------------------------------------------------------------


def fsync_rate(path: Path, seconds: float) -> float:
    """Commits/s of the disk: a 64-byte append and an fsync, in a loop for ``seconds``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    payload = b"x" * 63 + b"\n"
    try:
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            os.write(fd, payload)
            os.fsync(fd)
            count += 1
        return count / (time.perf_counter() - start)
    finally:
        os.close(fd)


def postgres_commit_rate(dsn: str, seconds: float) -> float:
    """Commits/s of the server: one-row INSERT + COMMIT on one connection, for ``seconds``."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE commits (id bigserial PRIMARY KEY, v int NOT NULL)")
        conn.commit()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            conn.execute("INSERT INTO commits (v) VALUES (%s)", (count,))
            conn.commit()
            count += 1
        return count / (time.perf_counter() - start)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mainspring-floor-") as tmp:
        base = Path(tmp)
        figures = {
            "minimal loop (no disk), one at a time": minimal_loop(executions=500),
            "SQLite by hand, one at a time": sqlite_by_hand(base / "seq.sqlite3", executions=50),
            "SQLite by hand, 50 in flight, group commit": sqlite_by_hand(
                base / "group.sqlite3", executions=100, in_flight=50
            ),
            "disk: 64-byte write + fsync (commits/s)": fsync_rate(base / "fsync", 2.0),
        }
    print("| the job by hand (20-step plans) | steps/s |")
    print("|---|---:|")
    for what, rate in figures.items():
        print(f"| {what} | {rate:,.0f} |")
