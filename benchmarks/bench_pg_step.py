"""Where a step's time goes on PostgreSQL (issue #29): executions of a linear plan of 20
trivial tool steps, ``--in-flight`` at a time, on a PostgresStore in a database of its own.

Prints, per step: the wall time, the CPU of this process by thread (the event loop's, and
the worker threads': the writer's store calls and the change feed's waits), the CPU of the
PostgreSQL server's processes (a server on this machine: its processes are read from
/proc), the statements sent, the Syncs sent and the waits for the server's answers (round
trips); and the store calls and their CPU. Counting patches psycopg and the store, and
costs a little itself; compare runs of this script with each other, not with
``bench_goals.py``. Run ``PYTHONPATH=. python benchmarks/bench_pg_step.py --help`` (the
``mainspring`` on PYTHONPATH is the one measured: a checkout's, to compare two).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _harness; mainspring: PYTHONPATH

DSN = os.environ.get("MAINSPRING_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DATABASE = "mainspring_bench_pg_step"
STEPS = 20


def _database() -> str:
    import psycopg

    with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    return urlsplit(DSN)._replace(path=f"/{DATABASE}").geturl()


def _drop() -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def _ticks(path: str) -> int:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _threads() -> dict[int, int]:
    return {int(t): _ticks(f"/proc/self/task/{t}/stat") for t in os.listdir("/proc/self/task")}


def _server() -> dict[int, int]:
    """CPU ticks of every process named postgres on this machine."""
    found: dict[int, int] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if "(postgres)" in Path(f"/proc/{pid}/stat").read_text():
                found[int(pid)] = _ticks(f"/proc/{pid}/stat")
        except OSError:
            continue
    return found


class Counts:
    """psycopg's statements, Syncs and waits, and the store's calls, counted while on."""

    def __init__(self) -> None:
        self.on = False
        self.n: collections.Counter[str] = collections.Counter()
        self.cpu: collections.Counter[str] = collections.Counter()

    def patch(self) -> None:
        import psycopg

        from mainspring.storage import PostgresStore

        def counted(owner: Any, name: str, key: str, timed: bool = False) -> None:
            """Count ``owner.name`` (a class's method, or one object's)."""
            original = getattr(owner, name)

            def call(*args: Any, **kwargs: Any) -> Any:
                if not self.on:
                    return original(*args, **kwargs)
                self.n[key] += 1
                start = time.thread_time() if timed else 0.0
                try:
                    return original(*args, **kwargs)
                finally:
                    if timed:
                        self.cpu[key] += time.thread_time() - start

            setattr(owner, name, call)

        counted(psycopg.Connection, "execute", "statements")
        counted(psycopg.Pipeline, "_enqueue_sync", "syncs sent")
        counted(psycopg.Pipeline, "sync", "waits")
        counted(psycopg.Pipeline, "__exit__", "waits")
        for name in ("commit_runs", "renew_many", "create", "acquire", "release", "edit"):
            counted(PostgresStore, name, f"store.{name}", timed=True)
        listen = PostgresStore.listen

        def listening(store: Any) -> Any:
            feed = listen(store)  # each feed's waits counted on the feed itself
            counted(feed, "wait", "feed.wait", timed=True)
            return feed

        PostgresStore.listen = listening  # type: ignore[method-assign]


def run(in_flight: int, executions: int, backend: str) -> None:
    import anyio
    from _harness import linear_plan

    import mainspring as ms

    counts = Counts()
    counts.patch()
    url = f"{_database()}?schema=bench"

    def trivial(step: Any) -> Any:
        return step

    async def main() -> tuple[float, dict[int, int], dict[int, int], dict[str, int]]:
        plan = linear_plan("trivial", STEPS)
        async with ms.open_runtime(store=url, tools={"trivial": trivial}) as rt:
            await (await rt.start("warm", plan)).wait()  # prepared statements, pool
            names = {t.native_id: t.name for t in threading.enumerate()}
            before, server = _threads(), _server()
            counts.on = True
            limiter = anyio.CapacityLimiter(in_flight)
            start = time.perf_counter()

            async def one() -> None:
                async with limiter:
                    result = await (await rt.start("bench", plan)).wait()
                if result.status != "completed":
                    raise RuntimeError(f"not completed: {result.summary}")

            async with anyio.create_task_group() as tg:
                for _ in range(executions):
                    tg.start_soon(one)
            wall = time.perf_counter() - start
            counts.on = False
            after, server_after = _threads(), _server()
            names.update({t.native_id: t.name for t in threading.enumerate()})
            spent: collections.Counter[str] = collections.Counter()
            for tid, ticks in after.items():
                role = "event loop" if names.get(tid) == "MainThread" else "worker threads"
                spent[role] += ticks - before.get(tid, 0)
            spent["server"] = sum(t - server.get(p, 0) for p, t in server_after.items())
            return wall, before, after, dict(spent)

    try:
        wall, _, _, spent = anyio.run(main, backend=backend)
    finally:
        _drop()
    steps = executions * STEPS
    tick = os.sysconf("SC_CLK_TCK")
    commits = counts.n["store.commit_runs"]
    print(f"{in_flight} in flight, {executions} executions of {STEPS} steps, {backend}")
    print(f"  {steps / wall:,.0f} steps/s, {wall / steps * 1e3:.2f} ms a step (wall)")
    for role in ("event loop", "worker threads", "server"):
        print(f"  CPU, {role}: {spent.get(role, 0) / tick / steps * 1e3:.2f} ms a step")
    print(f"  store commit_runs calls: {commits / steps:.2f} a step")
    for key in ("statements", "syncs sent", "waits"):
        print(f"  {key}: {counts.n[key] / max(commits, 1):.2f} a commit_runs (all calls)")
    for key, cpu in sorted(counts.cpu.items()):
        print(f"  CPU in {key}: {cpu / steps * 1e3:.3f} ms a step ({counts.n[key]} calls)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-flight", type=int, default=1)
    parser.add_argument("--executions", type=int, default=40)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args()
    run(args.in_flight, args.executions, args.backend)


if __name__ == "__main__":
    main()
