"""Durable steps per second of two peer systems, DBOS and LangGraph, each on its own SQLite file.

``bench_executions.py`` imports these to put mainspring's figure beside its peers'. Each
function builds a fresh database under the directory it is given, times only the runs (not the
setup), tears its system down and returns completed steps / wall time. Both peers keep their
default durability settings, so each step is acknowledged only once it is on disk. Each takes
``on_start``, called once setup is done and just before the clock starts (the scaling table
reads the process's I/O counters there), and a ``steps`` count for runs of any length.

Run ``python benchmarks/_durable_peers.py`` for a quick check of both figures.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any


def _fresh(path: Path) -> Path:
    """Make ``path``'s directory and remove a database (and its journals) left by an earlier run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-journal", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    return path


@cache
def _dbos_workflow() -> Callable[[int], int]:
    """Register the benchmark's step and workflow with DBOS, once per process.

    DBOS keeps its registry in a module global that outlives ``DBOS.destroy()``; registering the
    same names a second time would clash, so the decorated functions are built once and reused.
    """
    from dbos import DBOS

    @DBOS.step(name="mainspring_bench_inc")
    def inc(i: int) -> int:
        return i + 1

    @DBOS.workflow(name="mainspring_bench_steps")
    def steps_workflow(steps: int) -> int:
        value = 0
        for _ in range(steps):
            value = inc(value)
        return value

    return steps_workflow


def dbos_steps_per_second(
    workdir: Path,
    *,
    steps: int = 20,
    workflows: int = 20,
    concurrency: int = 1,
    on_start: Callable[[], None] | None = None,
    system_database_url: str | None = None,
) -> float:
    """DBOS workflows of ``steps`` sequential steps on its SQLite system database (or on the
    database ``system_database_url`` names, e.g. a PostgreSQL one; see ``bench_postgres.py``).

    ``concurrency`` workflows are kept in flight until ``workflows`` have finished. Above one,
    they are started with ``DBOS.start_workflow`` (sync workflows on DBOS's own thread pool), the
    fastest of the ways tried: on 2 cores, 50 in flight gave ~515 steps/s this way, ~500 with
    our own threads calling the workflow, and ~415 with async workflows and steps under
    ``asyncio.gather``. At one, the workflow is simply called.

    DBOS is a process-wide singleton; ``DBOS.destroy()`` (keeping the registry) resets it, so
    this can be called many times in one process.
    """
    from dbos import DBOS

    workflow = _dbos_workflow()
    if system_database_url is None:
        system_database_url = f"sqlite:///{_fresh(workdir / 'dbos.sqlite')}"
    DBOS(
        config={
            "name": "mainspring-bench",
            "system_database_url": system_database_url,
            "log_level": "WARNING",
        }
    )
    try:
        DBOS.launch()
        if on_start is not None:
            on_start()
        start = time.perf_counter()
        if concurrency <= 1:
            for _ in range(workflows):
                assert workflow(steps) == steps
        else:
            in_flight: deque[Any] = deque()
            for _ in range(workflows):
                if len(in_flight) >= concurrency:
                    assert in_flight.popleft().get_result() == steps
                in_flight.append(DBOS.start_workflow(workflow, steps))
            while in_flight:
                assert in_flight.popleft().get_result() == steps
        elapsed = time.perf_counter() - start
    finally:
        DBOS.destroy()
    return steps * workflows / elapsed


def langgraph_steps_per_second(
    workdir: Path,
    *,
    steps: int = 20,
    runs: int = 20,
    durability: str = "sync",
    on_start: Callable[[], None] | None = None,
) -> float:
    """A LangGraph line of ``steps`` nodes checkpointed by ``SqliteSaver``, run ``runs`` times.

    Each run has its own thread_id, so every run starts from an empty checkpoint history.
    ``durability="sync"`` writes each node's checkpoint before the next node starts;
    ``"async"`` (LangGraph's default) writes it while the next node runs. The recursion limit
    (one superstep per node here) is raised to fit the line.
    """
    import sqlite3
    from typing import TypedDict, cast

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Durability

    if durability not in ("sync", "async", "exit"):
        raise ValueError(f"unknown LangGraph durability {durability!r}")
    mode = cast(Durability, durability)

    class Counter(TypedDict):
        count: int

    def increment(state: Counter) -> Counter:
        return {"count": state["count"] + 1}

    builder = StateGraph(Counter)
    names = [f"n{i}" for i in range(steps)]
    for name in names:
        builder.add_node(name, increment)
    for before, after in zip([START, *names], [*names, END], strict=True):
        builder.add_edge(before, after)

    # check_same_thread=False: LangGraph may write checkpoints from a worker thread; the saver
    # serialises its own use of the connection with a lock.
    conn = sqlite3.connect(_fresh(workdir / "langgraph.sqlite"), check_same_thread=False)
    try:
        graph = builder.compile(checkpointer=SqliteSaver(conn))
        if on_start is not None:
            on_start()
        start = time.perf_counter()
        for i in range(runs):
            config: Any = {
                "configurable": {"thread_id": f"run-{i}"},
                "recursion_limit": max(25, steps + 10),
            }
            result = graph.invoke(Counter(count=0), config, durability=mode)
            assert result["count"] == steps
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return steps * runs / elapsed


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mainspring-peers-") as tmp:
        base = Path(tmp)
        figures = {
            "DBOS, sequential": dbos_steps_per_second(base / "dbos-seq", workflows=100),
            "DBOS, 50 concurrent": dbos_steps_per_second(
                base / "dbos-50", workflows=100, concurrency=50
            ),
            'LangGraph, durability="sync"': langgraph_steps_per_second(base / "lg-sync"),
            'LangGraph, durability="async"': langgraph_steps_per_second(
                base / "lg-async", durability="async"
            ),
        }
    print("| peer (20-step executions, SQLite) | durable steps/s |")
    print("|---|---:|")
    for what, rate in figures.items():
        print(f"| {what} | {rate:,.0f} |")
