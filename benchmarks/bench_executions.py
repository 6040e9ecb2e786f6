"""Durable executions: steps/s beside DBOS and LangGraph, and what a kill -9 makes run again.

Run ``python benchmarks/bench_executions.py`` (``pip install -e '.[bench]'`` first). One
invocation measures, on the disk under ``--dir`` (default: the temp dir):

- throughput: durable steps/s of 20-step linear plans of trivial tools, run one execution
  after another (50 of them) and with 50 in flight (100 of them, a ``CapacityLimiter`` of 50),
  on FileStore and SqliteStore, on each event loop of ``--backends``. Steps are counted from
  the plans (20 per execution, every one completed) over the wall time from the first
  ``start`` to the last completion. In the same run and with as many executions: DBOS on its
  SQLite system database (a workflow of 20 steps, sequential and 50 in flight) and LangGraph
  with ``SqliteSaver`` and ``durability="sync"`` (a line of 20 nodes, sequential); see
  ``_durable_peers.py``. Each figure is the median of ``--repeats`` runs, each a fresh
  process with a fresh temp dir, interleaved so machine drift hits every row alike.
- crash: a worker process runs a 20-step plan whose tool appends "<step> begin" and
  "<step> end" to a ledger (50 ms apart), and is killed with SIGKILL during step 10 (at
  offsets spread across the step and just past its end). The record is read straight after
  the kill; a fresh process resumes the run (``lease_ttl=1.0``, retrying on
  ``ExecutionBusy`` until the dead owner's lease lapses). Counted: steps that were durable at
  the kill (in ``completed_steps``) and ran again — should be 0 — and steps in flight at the
  kill that ran twice. ``--crash-trials`` kills per store (default 5).
- scaling (``--scaling`` for this table alone, ``--skip-scaling`` to leave it out): how a
  step's cost grows with a run's length. One execution per fresh process: linear plans of
  20, 1,000 and 10,000 trivial tool steps and one agent step making 100, 10,000 and 100,000
  ``ctx.step`` calls, on both stores, on asyncio (and trio when ``--backends`` has it); DBOS
  and LangGraph at 20 and 1,000 steps. steps/s, and bytes per step: what the process wrote
  (``/proc/self/io`` ``write_bytes``, i.e. sent to the block layer, SQLite's WAL and
  checkpoints included) and the closed store's size. A size the runtime refuses, or that
  runs past ``--scaling-timeout`` seconds (default 600), gets its reason in the row. See
  ``_scaling.py``.

Goals (ratios, since absolute figures move from machine to machine): >= 5x DBOS sequential,
>= 20x DBOS with 50 in flight, >= 3x LangGraph sync, 0 durable steps run again; at 10,000
steps within 0.8x of the 20-step figure with flat bytes per step, >= 5x DBOS at every length,
and a 100,000-inner-step agent that completes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from _harness import in_subprocess, linear_plan, run_on, store_path, trivial
from _scaling import collect, print_table
from _scaling import measure as measure_scaling

BACKENDS = ["asyncio", "asyncio+uvloop", "trio"]
STORES = {"file": "FileStore", "sqlite": "SqliteStore"}
STEPS = 20
IN_FLIGHT = 50
GOAL_DBOS_SEQUENTIAL = 5.0
GOAL_DBOS_CONCURRENT = 20.0
GOAL_LANGGRAPH_SYNC = 3.0

CRASH_STEP = 10  # killed while this step (1-based) runs, or just after it ends
CRASH_STEP_SECONDS = 0.05  # between a crash-test step's "begin" and "end"
CRASH_EXECUTION = "crash-test"


# -- throughput: one measurement per fresh process -------------------------------------------


def mainspring_steps_per_second(kind: str, backend: str, executions: int, in_flight: int) -> float:
    import anyio

    import mainspring as ms

    async def main(where: Path) -> float:
        plan = linear_plan("trivial", STEPS)
        limiter = anyio.CapacityLimiter(in_flight)
        async with ms.open_runtime(store=store_path(kind, where), tools={"trivial": trivial}) as rt:

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

    with tempfile.TemporaryDirectory(prefix="mainspring-bench-") as tmp:
        return float(run_on(backend, lambda: main(Path(tmp))))


def _peer(name: str, executions: int, in_flight: int) -> float:
    from _durable_peers import dbos_steps_per_second, langgraph_steps_per_second

    with tempfile.TemporaryDirectory(prefix="mainspring-peer-") as tmp:
        if name == "dbos":
            return dbos_steps_per_second(
                Path(tmp), steps=STEPS, workflows=executions, concurrency=in_flight
            )
        return langgraph_steps_per_second(
            Path(tmp), steps=STEPS, runs=executions, durability="sync"
        )


def measure(name: str, backend: str, executions: int) -> float:
    """``name`` is ``<system>-<seq|concurrent>``, system one of file, sqlite, dbos, langgraph."""
    system, mode = name.split("-")
    in_flight = 1 if mode == "seq" else IN_FLIGHT
    if system in STORES:
        return mainspring_steps_per_second(system, backend, executions, in_flight)
    return _peer(system, executions, in_flight)


# -- crash: a worker killed with SIGKILL, resumed in a fresh process --------------------------


def _ledger_tool(ledger: str) -> Any:
    import anyio

    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def work(step: str) -> str:
        # Unbuffered appends: a SIGKILL loses nothing the tool has written.
        os.write(fd, f"{step} begin\n".encode())
        await anyio.sleep(CRASH_STEP_SECONDS)
        os.write(fd, f"{step} end\n".encode())
        return step

    return work


def worker(mode: str, store: str, ledger: str, execution_id: str) -> None:
    """``run``: start the crash-test plan and wait (until killed). ``resume``: resume it here,
    retrying while the dead owner's lease lives, and print how it ended as JSON."""
    import anyio

    import mainspring as ms

    async def main() -> dict[str, Any]:
        tools = {"work": _ledger_tool(ledger)}
        async with ms.open_runtime(store=store, tools=tools, lease_ttl=1.0) as rt:
            if mode == "run":
                handle = await rt.start(
                    "crash test", linear_plan("work", STEPS), execution_id=execution_id
                )
                result = await handle.wait()
                return {"status": result.status}
            start = time.perf_counter()
            busy = 0
            while True:
                try:
                    handle = await rt.resume(execution_id)
                    break
                except ms.ExecutionBusy:
                    busy += 1
                    await anyio.sleep(0.02)
            waited = time.perf_counter() - start
            result = await handle.wait()
            return {"status": result.status, "busy": busy, "lease_wait": waited}

    print(json.dumps(anyio.run(main)), flush=True)


def _ledger(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]  # a line being written is not counted yet
    return [tuple(line.split()) for line in complete.splitlines()]  # type: ignore[misc]


def _read_record(kind: str, store: Path, execution_id: str) -> Any:
    import mainspring as ms

    backend = ms.storage.SqliteStore(store) if kind == "sqlite" else ms.storage.FileStore(store)
    try:
        return backend.get(execution_id)
    finally:
        if hasattr(backend, "close"):
            backend.close()


def crash_trial(kind: str, where: Path, delay: float) -> dict[str, Any]:
    """Kill a worker ``delay`` s after step CRASH_STEP began, then resume it elsewhere."""
    where.mkdir(parents=True, exist_ok=True)
    store, ledger = store_path(kind, where), where / "ledger.txt"
    args = [str(store), str(ledger), CRASH_EXECUTION]
    errors = (where / "worker.err").open("wb")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", "run", *args],
        stdout=subprocess.DEVNULL,
        stderr=errors,
    )
    marker = (f"s{CRASH_STEP}", "begin")
    deadline = time.monotonic() + 60
    while marker not in _ledger(ledger):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            err = (where / "worker.err").read_text()[-2000:]
            raise RuntimeError(f"the crash worker ended early:\n{err}")
        time.sleep(0.001)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    errors.close()
    before = _ledger(ledger)
    at_kill = _read_record(kind, store, CRASH_EXECUTION)
    durable = set(at_kill.completed_steps)

    done = subprocess.run(
        [sys.executable, __file__, "--worker", "resume", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the resume worker failed:\n{done.stderr[-2000:]}")
    resumed = json.loads(done.stdout.strip().splitlines()[-1])
    after = _ledger(ledger)[len(before) :]
    final = _read_record(kind, store, CRASH_EXECUTION)

    began_before = {step for step, what in before if what == "begin"}
    ended_before = {step for step, what in before if what == "end"}
    began_after = [step for step, what in after if what == "begin"]
    ended_after = {step for step, what in after if what == "end"}
    every = {f"s{i}" for i in range(1, STEPS + 1)}
    return {
        "durable": len(durable),
        "durable_rerun": len(durable & set(began_after)),
        "in_flight": len(began_before - durable),
        "in_flight_rerun": len((began_before - durable) & set(began_after)),
        "ended_not_durable": len(ended_before - durable),
        "durable_without_end": len(durable - ended_before),  # must be 0: recorded, never done
        "ran_after_twice": len(began_after) - len(set(began_after)),
        "completed": resumed["status"] == "completed"
        and final.status == "completed"
        and set(final.completed_steps) == every
        and every <= ended_before | ended_after,
        "lease_wait": resumed["lease_wait"],
    }


# -- the tables -------------------------------------------------------------------------------


def _versions() -> str:
    parts = []
    for dist in ("anyio", "dbos", "langgraph", "langgraph-checkpoint-sqlite"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} missing")
    return ", ".join(parts)


def _ratio(mine: float, theirs: float, goal: float) -> tuple[str, str]:
    ratio = mine / theirs
    return f"{ratio:.2f}x", f">= {goal:g}x ({'met' if ratio >= goal else 'not met'})"


def _header(repeats: int, started: float) -> None:
    print(
        f"\nmainspring durable executions: median of {repeats} runs, "
        f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, {_versions()}, "
        f"{os.cpu_count()} cpus, under {tempfile.gettempdir()}, "
        f"{time.perf_counter() - started:.0f} s in all\n"
    )


def _throughput_and_crash(
    args: argparse.Namespace, repeats: int, backends: list[str], started: float
) -> None:
    """The headline tables: steps/s of 20-step plans beside the peers, and the kill -9 trials."""
    trials = args.crash_trials or (2 if args.quick else 5)
    sequential, concurrent = (5, IN_FLIGHT) if args.quick else (50, 100)

    runs: list[tuple[str, str, int]] = [
        (f"{kind}-{mode}", backend, sequential if mode == "seq" else concurrent)
        for backend in backends
        for kind in STORES
        for mode in ("seq", "concurrent")
    ]
    runs += [
        ("dbos-seq", "threads", sequential),
        ("dbos-concurrent", "threads", concurrent),
        ("langgraph-seq", "threads", sequential),
    ]
    samples: dict[tuple[str, str], list[float]] = {(m, b): [] for m, b, _ in runs}
    for repeat in range(repeats):
        for name, backend, n in runs:
            samples[(name, backend)].append(float(in_subprocess(__file__, name, backend, n)))
        print(f"throughput run {repeat + 1}/{repeats} done", file=sys.stderr, flush=True)

    def med(name: str, backend: str = "threads") -> float:
        return statistics.median(samples[(name, backend)])

    def spread(name: str, backend: str = "threads") -> str:
        values = samples[(name, backend)]
        return f"{min(values):,.0f}-{max(values):,.0f}"

    crash: dict[str, list[dict[str, Any]]] = {}
    if not args.skip_crash:
        base = Path(tempfile.mkdtemp(prefix="mainspring-crash-"))
        for kind in STORES:
            crash[kind] = []
            for trial in range(trials):
                # Kill points spread from early in step 10 to just past its end (its commit).
                fraction = 0.2 + (1.0 * trial / (trials - 1) if trials > 1 else 0.0)
                crash[kind].append(
                    crash_trial(kind, base / f"{kind}-{trial}", fraction * CRASH_STEP_SECONDS)
                )
            print(f"crash trials on {STORES[kind]} done", file=sys.stderr, flush=True)
        shutil.rmtree(base, ignore_errors=True)

    _header(repeats, started)
    dbos_seq, dbos_conc, lg_sync = med("dbos-seq"), med("dbos-concurrent"), med("langgraph-seq")
    print(
        f"Durable steps/s, {STEPS}-step linear plans of trivial tools; {sequential} executions "
        f"one after another, or {concurrent} with {IN_FLIGHT} in flight.\n"
    )
    print(
        "| system | store | event loop | in flight | steps/s | range | vs DBOS (same in flight) "
        "| goal | vs LangGraph sync | goal |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|---:|---|")
    for backend in backends:
        for kind, label in STORES.items():
            for mode, in_flight in (("seq", 1), ("concurrent", IN_FLIGHT)):
                name = f"{kind}-{mode}"
                mine = med(name, backend)
                if mode == "seq":
                    vs_dbos, dbos_goal = _ratio(mine, dbos_seq, GOAL_DBOS_SEQUENTIAL)
                    vs_lg, lg_goal = _ratio(mine, lg_sync, GOAL_LANGGRAPH_SYNC)
                else:
                    vs_dbos, dbos_goal = _ratio(mine, dbos_conc, GOAL_DBOS_CONCURRENT)
                    vs_lg, lg_goal = "", ""
                print(
                    f"| mainspring | {label} | {backend} | {in_flight} | {mine:,.0f} "
                    f"| {spread(name, backend)} | {vs_dbos} | {dbos_goal} | {vs_lg} | {lg_goal} |"
                )
    print(
        f"| DBOS | SQLite system database | threads | 1 | {dbos_seq:,.0f} | {spread('dbos-seq')} "
        "| 1.00x | | | |"
    )
    print(
        f"| DBOS | SQLite system database | threads | {IN_FLIGHT} | {dbos_conc:,.0f} "
        f"| {spread('dbos-concurrent')} | 1.00x | | | |"
    )
    print(
        f'| LangGraph, durability="sync" | SqliteSaver | sync | 1 | {lg_sync:,.0f} '
        f"| {spread('langgraph-seq')} | {lg_sync / dbos_seq:.2f}x | | 1.00x | |"
    )

    if crash:
        print(
            f"\nkill -9 during step {CRASH_STEP} of {STEPS} (tool steps of "
            f"{CRASH_STEP_SECONDS * 1000:.0f} ms, killed {0.2:.1f}-1.2 step-lengths after step "
            f"{CRASH_STEP} began), then resume in a fresh process; totals over the trials.\n"
        )
        print(
            "| system | trials | durable at kill | durable steps run again | in-flight steps run "
            "twice | finished, not yet durable at kill | resumed to completion | lease wait (s) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for kind, results in crash.items():
            durable = sorted(r["durable"] for r in results)
            rerun = sum(r["durable_rerun"] for r in results)
            twice = sum(r["in_flight_rerun"] for r in results)
            in_flight = sum(r["in_flight"] for r in results)
            not_durable = sum(r["ended_not_durable"] for r in results)
            completed = sum(r["completed"] for r in results)
            wait = statistics.median(r["lease_wait"] for r in results)
            bad = sum(r["durable_without_end"] + r["ran_after_twice"] for r in results)
            flag = f" ({bad} anomalies)" if bad else ""
            print(
                f"| mainspring {STORES[kind]} | {len(results)} | {durable[0]}-{durable[-1]} "
                f"| {rerun} (goal 0){flag} | {twice} of {in_flight} | {not_durable} "
                f"| {completed} of {len(results)} | {wait:.2f} |"
            )
        cited = "from ANCHORS.md, not measured here"
        for peer in ("DBOS on SQLite", 'LangGraph durability="sync"'):
            print(f"| {peer} ({cited}) | | steps 1-9 | 0 | step 10 ran again | | | |")
        print(
            f'| LangGraph durability="async", the default ({cited}) | | steps 1-9 '
            "| 8-9 of the 9 | | | | |"
        )
        print(
            "\nThe peers' rows are quoted from /work/shared/ANCHORS.md (kill -9 during step 10 of "
            "20, then resume); this script does not crash the peers."
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure (median)")
    parser.add_argument("--crash-trials", type=int, default=None, help="kills per store")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--skip-crash", action="store_true", help="no kill -9 trials")
    parser.add_argument("--scaling", action="store_true", help="the scaling table only")
    parser.add_argument("--skip-scaling", action="store_true", help="no scaling table")
    parser.add_argument(
        "--scaling-timeout",
        type=float,
        default=600.0,
        help="seconds a scaling run may take before its row says so (default 600)",
    )
    parser.add_argument("--scratch", default=None, help="internal")
    parser.add_argument("--one", nargs=3, metavar=("MEASURE", "BACKEND", "N"), help="internal")
    parser.add_argument(
        "--worker", nargs=4, metavar=("MODE", "STORE", "LEDGER", "ID"), help="internal"
    )
    args = parser.parse_args()

    if args.one:
        name, backend, n = args.one
        if name.startswith("scale-"):
            print(json.dumps(measure_scaling(name, backend, int(n), Path(args.scratch))))
        else:
            print(json.dumps(measure(name, backend, int(n))))
        return
    if args.worker:
        worker(*args.worker)
        return

    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
        os.environ["TMPDIR"] = str(Path(args.dir).resolve())  # for the measuring processes too
        tempfile.tempdir = None
    repeats = args.repeats or (1 if args.quick else 3)
    backends = [b for b in args.backends.split(",") if b]
    started = time.perf_counter()
    if not args.scaling:
        _throughput_and_crash(args, repeats, backends, started)
    if args.scaling or not args.skip_scaling:
        scaling_started = time.perf_counter()
        runs, samples, reasons = collect(
            __file__, backends, repeats, args.scaling_timeout, args.quick
        )
        if args.scaling:
            _header(repeats, started)
        print_table(runs, samples, reasons, repeats)
        print(f"\nThe scaling table took {time.perf_counter() - scaling_started:.0f} s.")
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
