"""The run core's goal table (issue #29): mainspring beside DBOS, LangGraph sync, the same job
written by hand and the disk's own commit rate, every figure measured in one invocation.

Run ``PYTHONPATH=. python benchmarks/bench_goals.py [--repeats N] [--limit S]`` from the
repository's root: it measures whichever ``mainspring`` that puts first on the path (only its
public API: ``open_runtime``, ``Plan``, ``PlanStep``, the stores of ``mainspring.storage``;
the in-memory store is ``profile_runtime.MemoryStore``). The peers run in their own
interpreter, ``.venv-peers/bin/python`` at the repository's root (or ``--peers-python``); make
it once with ``python -m venv .venv-peers && .venv-peers/bin/pip install dbos langgraph
langgraph-checkpoint-sqlite 'psycopg[binary]'``. Without it the peers' cells read "n/a".
PostgreSQL is the server of ``$MAINSPRING_TEST_POSTGRES`` (default the local one); each
PostgreSQL measurement gets a database of its own, made fresh, dropped at the end; without a
server those cells read "n/a".

What is measured (steps/s; "the job" is executions of a linear plan of trivial tool steps):

- mainspring, in-memory store (the runtime alone): 20-, 1,000- and 10,000-step plans; one agent
  step of 100 and 100,000 ``ctx.step`` calls. Short cases run again, one after another, until
  they made 1,000 steps.
- mainspring on SqliteStore and PostgresStore: 20-step plans, 50 executions one at a time and
  100 with 50 in flight; on SqliteStore one 1,000- and one 10,000-step plan too.
- DBOS (its SQLite system database, and a database on the same PostgreSQL server) one at a time
  and 50 in flight; LangGraph with ``SqliteSaver`` and ``durability="sync"`` one at a time
  (``_durable_peers.py``).
- the job by hand and the physical limits (``_hand_floor.py``): the minimal loop (scheduler +
  tool + encode + one actor hop, no disk); per step one SQLite WAL ``synchronous=FULL`` commit
  through a worker thread, or one PostgreSQL INSERT + COMMIT; with 50 in flight one writer and
  group commit; the disk's fsync rate and the server's one-row commit rate.

Each cell is the median of ``--repeats`` runs, every run a fresh process, the rows interleaved
so that drift on a shared machine hits them alike. A run still going after ``--limit`` seconds
is stopped, gives the rate of what it did, and is not run again. The goal table reads the
medians as ratios: on a noisy machine the ratios, not the absolute figures, stay put.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _harness import in_subprocess, peers_python

DSN = os.environ.get("MAINSPRING_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DATABASES = {  # one per kind of measurement, made fresh for each, dropped at the end
    "ms": "mainspring_goals_ms",
    "dbos": "mainspring_goals_dbos",
    "hand": "mainspring_goals_hand",
}
MS_SCHEMA = "mainspring_goals"
STEPS = 20
IN_FLIGHT = 50
SEQUENTIAL = 50  # executions one after another
CONCURRENT = 100  # executions with IN_FLIGHT in flight
MINIMAL_EXECUTIONS = 500  # the minimal loop is fast: more executions, a steadier figure
LIMIT_SECONDS = 2.0  # how long each physical-limit loop runs


# -- inside a measuring process -----------------------------------------------------------------


def _outcome(steps: int, seconds: float, finished: bool, note: str = "") -> dict[str, Any]:
    rate = steps / seconds if seconds else 0.0
    return {"rate": rate, "steps": steps, "seconds": seconds, "finished": finished, "note": note}


def _rate(rate: float) -> dict[str, Any]:
    return {"rate": rate, "finished": True, "note": ""}


def _database(name: str) -> str:
    """Drop and create database ``name`` on the server; a URL naming it."""
    import psycopg

    with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return urlsplit(DSN)._replace(path=f"/{name}").geturl()


def _mainspring(
    store: Any, backend: str, steps: int, executions: int, in_flight: int, limit: float
) -> dict[str, Any]:
    """``executions`` linear plans of ``steps`` trivial tool steps, ``in_flight`` at a time."""
    import anyio
    from _harness import linear_plan, run_on

    import mainspring as ms

    done = [0]

    def trivial(step: Any) -> Any:
        done[0] += 1
        return step

    async def main() -> dict[str, Any]:
        plan = linear_plan("trivial", steps)
        limiter = anyio.CapacityLimiter(in_flight)
        started: list[str] = []
        failed: list[str] = []
        async with ms.open_runtime(store=store, tools={"trivial": trivial}) as rt:

            async def one() -> None:
                async with limiter:
                    handle = await rt.start("benchmark", plan)
                    started.append(handle.execution_id)
                    result = await handle.wait()
                if result.status != "completed" or result.steps_done != steps:
                    failed.append(f"{result.status}: {result.summary}")

            finished = False
            start = time.perf_counter()
            with anyio.move_on_after(limit):
                async with anyio.create_task_group() as tg:
                    for _ in range(executions):
                        tg.start_soon(one)
                finished = True
            elapsed = time.perf_counter() - start
            if not finished:
                for execution_id in started:
                    with contextlib.suppress(Exception):  # one that ended has nothing to stop
                        await rt.cancel(execution_id)
        if failed:
            return _outcome(done[0], elapsed, True, f"not completed: {failed[0]}")
        return _outcome(steps * executions if finished else done[0], elapsed, finished)

    return dict(run_on(backend, main))


def _memory(case: str, backend: str, limit: float) -> dict[str, Any]:
    """A ``profile_runtime`` case (``linear-N`` or ``agent-N``) on its in-memory store."""
    from _harness import run_on
    from profile_runtime import run_case

    got = run_on(backend, lambda: run_case(case, limit))
    note = "" if got["status"] in ("completed", "stopped") else f"not completed: {got['status']}"
    return _outcome(got["steps"], got["seconds"], got["finished"], note)


def measure(name: str, backend: str, limit: float) -> dict[str, Any]:
    """One figure, in this (fresh) process. ``name`` is one of:

    ``ms-memory-linear-N`` / ``ms-memory-agent-N``; ``ms-sqlite-K-N`` / ``ms-postgres-K-N``
    (K in flight, N steps a plan); ``dbos-sqlite-K`` / ``dbos-postgres-K``; ``langgraph-1``;
    ``hand-memory``; ``hand-sqlite-K`` / ``hand-postgres-K``; ``limit-fsync`` /
    ``limit-postgres``.
    """
    parts = name.split("-")
    with tempfile.TemporaryDirectory(prefix="mainspring-goals-") as tmp:
        where = Path(tmp)
        if parts[0] == "ms" and parts[1] == "memory":
            return _memory(f"{parts[2]}-{parts[3]}", backend, limit)
        if parts[0] == "ms":
            in_flight, steps = int(parts[2]), int(parts[3])
            executions = 1 if steps > STEPS else (SEQUENTIAL if in_flight == 1 else CONCURRENT)
            if parts[1] == "sqlite":
                store: Any = where / "store.sqlite3"
            else:
                store = f"{_database(DATABASES['ms'])}?schema={MS_SCHEMA}"
            return _mainspring(store, backend, steps, executions, in_flight, limit)
        if parts[0] == "dbos":
            from _durable_peers import dbos_steps_per_second

            in_flight = int(parts[2])
            url = _database(DATABASES["dbos"]) if parts[1] == "postgres" else None
            return _rate(
                dbos_steps_per_second(
                    where,
                    steps=STEPS,
                    workflows=SEQUENTIAL if in_flight == 1 else CONCURRENT,
                    concurrency=in_flight,
                    system_database_url=url,
                )
            )
        if parts[0] == "langgraph":
            from _durable_peers import langgraph_steps_per_second

            return _rate(
                langgraph_steps_per_second(where, steps=STEPS, runs=SEQUENTIAL, durability="sync")
            )
        import _hand_floor as hand

        if name == "hand-memory":
            return _rate(hand.minimal_loop(executions=MINIMAL_EXECUTIONS, backend=backend))
        if parts[0] == "hand":
            in_flight = int(parts[2])
            executions = SEQUENTIAL if in_flight == 1 else CONCURRENT
            if parts[1] == "sqlite":
                return _rate(
                    hand.sqlite_by_hand(
                        where / "hand.sqlite3",
                        executions=executions,
                        in_flight=in_flight,
                        backend=backend,
                    )
                )
            return _rate(
                hand.postgres_by_hand(
                    _database(DATABASES["hand"]),
                    executions=executions,
                    in_flight=in_flight,
                    backend=backend,
                )
            )
        if name == "limit-fsync":
            return _rate(hand.fsync_rate(where / "fsync", LIMIT_SECONDS))
        if name == "limit-postgres":
            return _rate(hand.postgres_commit_rate(_database(DATABASES["hand"]), LIMIT_SECONDS))
    raise SystemExit(f"unknown measurement {name!r}")


# -- the parent: what to run, and the tables ----------------------------------------------------


@dataclass
class Figure:
    """The runs of one measurement."""

    name: str
    label: str
    python: str | None  # None: this interpreter (mainspring, the floors)
    samples: list[dict[str, Any]]
    missing: str = ""  # why there is no figure, if there is none

    @property
    def median(self) -> float | None:
        rates = [s["rate"] for s in self.samples]
        return statistics.median(rates) if rates else None

    @property
    def stopped(self) -> bool:
        return any(not s["finished"] for s in self.samples)

    @property
    def note(self) -> str:
        notes = [s["note"] for s in self.samples if s["note"]]
        return notes[0] if notes else ""

    def cell(self) -> str:
        if self.median is None:
            return f"n/a ({self.missing})" if self.missing else "n/a"
        rates = [s["rate"] for s in self.samples]
        text = f"{self.median:,.0f}"
        if len(rates) > 1:
            text += f" ({min(rates):,.0f}-{max(rates):,.0f})"
        if self.stopped:
            stopped = next(s for s in self.samples if not s["finished"])
            text += f", stopped at {stopped['seconds']:.0f} s after {stopped['steps']:,} steps"
        if self.note:
            text += f", {self.note}"
        return text


def _figures(peers: str | None, postgres: str) -> dict[str, Figure]:
    mine = [
        ("ms-memory-linear-20", "mainspring, in-memory store, 20-step plans"),
        ("ms-memory-linear-1000", "mainspring, in-memory store, a 1,000-step plan"),
        ("ms-memory-linear-10000", "mainspring, in-memory store, a 10,000-step plan"),
        ("ms-memory-agent-100", "mainspring, in-memory store, an agent of 100 inner steps"),
        ("ms-memory-agent-100000", "mainspring, in-memory store, an agent of 100,000 inner steps"),
        ("ms-sqlite-1-20", "mainspring SqliteStore, 20-step plans, one at a time"),
        (
            f"ms-sqlite-{IN_FLIGHT}-20",
            f"mainspring SqliteStore, 20-step plans, {IN_FLIGHT} in flight",
        ),
        ("ms-sqlite-1-1000", "mainspring SqliteStore, a 1,000-step plan"),
        ("ms-sqlite-1-10000", "mainspring SqliteStore, a 10,000-step plan"),
        ("ms-postgres-1-20", "mainspring PostgresStore, 20-step plans, one at a time"),
        (
            f"ms-postgres-{IN_FLIGHT}-20",
            f"mainspring PostgresStore, 20-step plans, {IN_FLIGHT} in flight",
        ),
        ("hand-memory", "by hand: minimal loop (scheduler + tool + encode + one actor hop)"),
        ("hand-sqlite-1", "by hand: tool + orjson + one WAL FULL commit via a thread, a step"),
        (f"hand-sqlite-{IN_FLIGHT}", f"by hand, SQLite, {IN_FLIGHT} in flight, one group writer"),
        ("hand-postgres-1", "by hand: tool + orjson + one INSERT + COMMIT via a thread, a step"),
        (
            f"hand-postgres-{IN_FLIGHT}",
            f"by hand, PostgreSQL, {IN_FLIGHT} in flight, one group writer",
        ),
        ("limit-fsync", "disk: 64-byte write + fsync, commits/s"),
        ("limit-postgres", "PostgreSQL server: one-row INSERT + COMMIT, commits/s"),
    ]
    theirs = [
        ("dbos-sqlite-1", "DBOS, SQLite system database, one at a time"),
        (f"dbos-sqlite-{IN_FLIGHT}", f"DBOS, SQLite system database, {IN_FLIGHT} in flight"),
        ("dbos-postgres-1", "DBOS, PostgreSQL system database, one at a time"),
        (f"dbos-postgres-{IN_FLIGHT}", f"DBOS, PostgreSQL system database, {IN_FLIGHT} in flight"),
        ("langgraph-1", 'LangGraph, SqliteSaver, durability="sync", one at a time'),
    ]
    figures = {name: Figure(name, label, None, []) for name, label in mine}
    for name, label in theirs:
        figures[name] = Figure(name, label, peers, [])
        if peers is None:
            figures[name].missing = "no peers' interpreter: see the top of bench_goals.py"
    for name, figure in figures.items():
        if "postgres" in name and postgres:
            figure.missing = postgres
    return figures


def _postgres_missing() -> str:
    """Why the PostgreSQL cells are empty, or "" when the server answers."""
    try:
        import psycopg

        with psycopg.connect(DSN, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as error:  # no driver, no server: the cells say so
        return f"no PostgreSQL at {DSN}: {type(error).__name__}"
    return ""


def _drop_databases() -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
        for name in DATABASES.values():
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@dataclass
class Goal:
    """One row of the goal table: ``mine`` against ``theirs`` (a figure, or a number)."""

    measure: str
    mine: str
    theirs: str | float
    against: str
    goal: float | None  # None: context, no goal
    unit: str = "x"  # "x": a ratio; "steps/s": an absolute floor on ``mine``
    finishes: bool = False  # the goal also asks that ``mine`` finished


GOALS = [
    Goal("runtime alone, in-memory store, 20-step plans", "ms-memory-linear-20",
         10_000.0, "the goal itself", 10_000.0, "steps/s"),
    Goal("", "ms-memory-linear-20", "hand-memory", "the minimal loop", None),
    Goal("runtime alone, 10,000 vs 20 steps", "ms-memory-linear-10000",
         "ms-memory-linear-20", "in-memory, 20-step plans", 0.9),
    Goal("", "ms-memory-linear-1000", "ms-memory-linear-20", "(1,000 steps)", None),
    Goal("runtime alone, agent 100,000 vs 100 inner steps", "ms-memory-agent-100000",
         "ms-memory-agent-100", "in-memory, agent of 100", 0.8, finishes=True),
    Goal("SqliteStore, one at a time", "ms-sqlite-1-20", "dbos-sqlite-1", "DBOS", 5.0),
    Goal("", "ms-sqlite-1-20", "langgraph-1", "LangGraph sync", 3.0),
    Goal("SqliteStore, one at a time, vs the job by hand", "ms-sqlite-1-20", "hand-sqlite-1",
         "by hand: one WAL FULL commit a step", 0.5),
    Goal("", "ms-sqlite-1-20", "limit-fsync", "the disk's fsync rate", None),
    Goal(f"SqliteStore, {IN_FLIGHT} in flight", f"ms-sqlite-{IN_FLIGHT}-20",
         f"dbos-sqlite-{IN_FLIGHT}", f"DBOS, {IN_FLIGHT} in flight", 20.0),
    Goal("", f"ms-sqlite-{IN_FLIGHT}-20", f"hand-sqlite-{IN_FLIGHT}",
         "by hand, group commit", None),
    Goal("PostgresStore, one at a time", "ms-postgres-1-20", "dbos-postgres-1",
         "DBOS, same server", 4.0),
    Goal("", "ms-postgres-1-20", "hand-postgres-1", "by hand: one INSERT + COMMIT a step", None),
    Goal("", "ms-postgres-1-20", "limit-postgres", "the server's commit rate", None),
    Goal(f"PostgresStore, {IN_FLIGHT} in flight", f"ms-postgres-{IN_FLIGHT}-20",
         f"dbos-postgres-{IN_FLIGHT}", f"DBOS, same server, {IN_FLIGHT} in flight", 20.0),
    Goal("", f"ms-postgres-{IN_FLIGHT}-20", f"hand-postgres-{IN_FLIGHT}",
         "by hand, group commit", None),
    Goal("SQLite, 10,000-step plan vs 20-step", "ms-sqlite-1-10000", "ms-sqlite-1-20",
         "SqliteStore, 20-step plans", 0.9),
    Goal("", "ms-sqlite-1-1000", "ms-sqlite-1-20", "(1,000 steps)", None),
]  # fmt: skip


def goal_row(goal: Goal, figures: dict[str, Figure]) -> str:
    """One markdown row: measure | mainspring | against | their figure | ratio | goal | verdict."""
    mine = figures[goal.mine]
    if isinstance(goal.theirs, float):
        theirs_value: float | None = goal.theirs
        theirs_text = ""
    else:
        theirs_value = figures[goal.theirs].median
        theirs_text = figures[goal.theirs].cell()
    ours = mine.median
    mine_text = "n/a" if ours is None else f"{ours:,.0f}"
    if mine.stopped:
        mine_text += " (stopped)"
    if goal.unit == "steps/s":
        assert goal.goal is not None
        ratio = "n/a" if ours is None else f"{ours / goal.goal:.2f}x"
        wanted = f">= {goal.goal:,.0f} steps/s"
        met = ours is not None and ours >= goal.goal
    else:
        value = ours / theirs_value if ours is not None and theirs_value else None
        ratio = "n/a" if value is None else f"{value:.2f}x"
        wanted = "(context)" if goal.goal is None else f">= {goal.goal:g}x"
        if goal.finishes:
            wanted += " and it finishes"
        met = value is not None and goal.goal is not None and value >= goal.goal
        if goal.finishes and mine.stopped:
            met = False
    if goal.goal is None:
        verdict = ""
    elif ours is None or (goal.unit == "x" and theirs_value is None):
        verdict = "n/a"
    elif mine.stopped and goal.finishes:
        verdict = "not met (did not finish)"
    elif mine.stopped:
        # A run stopped early gives the rate of its first steps; a step's cost that grows with
        # the run's length only makes the rest slower, so a miss is a miss, a pass unproven.
        verdict = "not met (stopped)" if not met else "unknown (stopped: raise --limit)"
    else:
        verdict = "met" if met else "not met"
    return (
        f"| {goal.measure} | {mine_text} | {goal.against} | {theirs_text} | {ratio} | {wanted} "
        f"| {verdict} |"
    )


def _peer_versions(peers: str | None) -> str:
    if peers is None:
        return "peers: none"
    code = (
        "from importlib import metadata as m\n"
        "print(', '.join(f'{d} {m.version(d)}' for d in "
        "('dbos', 'langgraph', 'langgraph-checkpoint-sqlite')))"
    )
    done = subprocess.run([peers, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "peers: versions unknown"


def _tree() -> str:
    """Which mainspring the runs import: its folder and, if it is a git checkout, its commit."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import mainspring, os; print(os.path.dirname(mainspring.__file__))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    where = done.stdout.strip() or "mainspring not importable"
    head = subprocess.run(
        ["git", "-C", where, "log", "-1", "--format=%h %cs"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{where}" + (f" (git {head})" if head else "")


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cpus ({model})"


def _versions(peers: str | None) -> str:
    parts = [f"python {sys.version.split()[0]}", f"SQLite {sqlite3.sqlite_version}"]
    for dist in ("anyio", "orjson", "psycopg"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} missing")
    return ", ".join(parts) + "; " + _peer_versions(peers)


def run(args: argparse.Namespace) -> None:
    peers = peers_python(args.peers_python, "dbos")
    postgres = _postgres_missing()
    figures = _figures(peers, postgres)
    wanted = [f for f in figures.values() if not args.only or f.name.startswith(tuple(args.only))]
    for figure in figures.values():
        if figure not in wanted:
            figure.missing = "not measured in this run (--only)"
    started = time.perf_counter()
    load = os.getloadavg()
    extra = ["--limit", str(args.limit)]
    try:
        for repeat in range(args.repeats):
            for figure in wanted:
                if figure.missing or (figure.samples and figure.stopped):
                    continue  # nothing to run it with, or it already ran out of time
                try:
                    sample = in_subprocess(
                        __file__,
                        figure.name,
                        args.backend,
                        0,
                        extra=extra,
                        timeout=args.limit + 300,
                        python=figure.python,
                    )
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    figure.missing = f"failed: {str(error).strip().splitlines()[-1][:120]}"
                    print(f"{figure.name} failed:\n{error}", file=sys.stderr, flush=True)
                    continue
                figure.samples.append(sample)
                print(f"{figure.name}: {sample['rate']:,.0f}", file=sys.stderr, flush=True)
            print(f"run {repeat + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    finally:
        if not postgres:
            _drop_databases()
    _print(figures, args, peers, started, (load[0], os.getloadavg()[0]))


def _print(
    figures: dict[str, Figure],
    args: argparse.Namespace,
    peers: str | None,
    started: float,
    load: tuple[float, float],
) -> None:
    print(
        f"\nThe run core's goals (issue #29), {time.strftime('%Y-%m-%d')}: median of "
        f"{args.repeats} fresh-process runs a cell, event loop {args.backend}, "
        f"{time.perf_counter() - started:.0f} s in all; {_machine()}, load average "
        f"{load[0]:.1f} at the start, {load[1]:.1f} at the end; under {tempfile.gettempdir()}; "
        f"{_versions(peers)}.\n"
        f"mainspring measured: {_tree()}.\n"
    )
    print("| measure | mainspring steps/s | against | their steps/s | ratio | goal | |")
    print("|---|---:|---|---:|---:|---|---|")
    for goal in GOALS:
        if goal.mine in figures:
            print(goal_row(goal, figures))
    print(
        f"\nEvery figure (steps/s unless it says commits/s; median, range of {args.repeats}; "
        f"20-step plans: {SEQUENTIAL} executions one at a time or {CONCURRENT} with "
        f"{IN_FLIGHT} in flight; a case stopped at --limit {args.limit:g} s gives the rate of "
        "what it did):\n"
    )
    print("| what | steps/s |")
    print("|---|---:|")
    for figure in figures.values():
        print(f"| {figure.label} | {figure.cell()} |")
    _microseconds(figures)


STEP_COSTS = [  # (what, the figure whose step it is, the figure it is read against)
    ("in-memory store (the runtime alone)", "ms-memory-linear-20", "hand-memory"),
    ("SqliteStore, one at a time", "ms-sqlite-1-20", "hand-sqlite-1"),
    ("PostgresStore, one at a time", "ms-postgres-1-20", "hand-postgres-1"),
    (
        f"SqliteStore, {IN_FLIGHT} in flight",
        f"ms-sqlite-{IN_FLIGHT}-20",
        f"hand-sqlite-{IN_FLIGHT}",
    ),
    (
        f"PostgresStore, {IN_FLIGHT} in flight",
        f"ms-postgres-{IN_FLIGHT}-20",
        f"hand-postgres-{IN_FLIGHT}",
    ),
]


def _microseconds(figures: dict[str, Figure]) -> None:
    """The medians as microseconds a step: mainspring's, the same job's by hand, the gap, and
    how much of mainspring's step the runtime alone (the in-memory figure) accounts for."""
    alone = figures["ms-memory-linear-20"].median

    def us(name: str) -> float | None:
        rate = figures[name].median
        return 1e6 / rate if rate else None

    print(
        "\nA step in microseconds (wall time over steps; with many in flight, over all of "
        "them), from the medians above:\n"
    )
    print("| 20-step plans | mainspring | by hand | gap | runtime alone (in-memory) |")
    print("|---|---:|---:|---:|---:|")
    for what, mine, hand in STEP_COSTS:
        ours, theirs = us(mine), us(hand)
        if ours is None or theirs is None:
            print(f"| {what} | n/a | n/a | | |")
            continue
        shown = alone is not None and mine.endswith("-1-20")  # beside a store's step
        runtime = f"{1e6 / alone:,.0f}" if alone is not None and shown else ""
        print(f"| {what} | {ours:,.0f} | {theirs:,.0f} | {ours - theirs:,.0f} | {runtime} |")
    for name, what in (("limit-fsync", "the disk"), ("limit-postgres", "the server")):
        cost = us(name)
        if cost is not None:
            print(f"\nOne commit of {what} alone (its physical limit): {cost:,.0f} us.", end="")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (median)")
    parser.add_argument(
        "--limit", type=float, default=30.0, help="seconds a run may take before it is stopped"
    )
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--peers-python", default=None, help="an interpreter that has dbos")
    parser.add_argument(
        "--only", nargs="*", default=None, help="measurements whose names start so, e.g. ms-sqlite"
    )
    parser.add_argument("--one", nargs=3, metavar=("MEASURE", "BACKEND", "N"), help="internal")
    args = parser.parse_args()
    if args.one:
        import json

        name, backend, _ = args.one
        print(json.dumps(measure(name, backend, args.limit)), flush=True)
        return
    run(args)


if __name__ == "__main__":
    main()
