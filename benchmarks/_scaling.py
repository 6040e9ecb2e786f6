"""The scaling table of ``bench_executions.py``: how a step's cost grows with a run's length.

Each figure is one execution in a fresh process (``--one scale-...``), run in a scratch
directory the parent makes and removes. Before it, the same process runs a 2-step warm-up on
a store of its own, so that first-use costs (imports, cattrs' generated converters, a peer's
first workflow) are not counted as the cost of the steps:

- ``scale-plan-<store>``: a linear plan of N trivial tool steps (20, 1,000, 10,000).
  steps/s is N over the wall time from ``rt.start`` to the completed result.
- ``scale-agent-<store>``: one agent step whose agent makes N ``ctx.step`` calls of a
  trivial function (100, 10,000, 100,000); inner steps/s likewise.
- ``scale-dbos`` / ``scale-langgraph``: one DBOS workflow of N sequential steps on its SQLite
  system database, one LangGraph line of N nodes with ``SqliteSaver`` and
  ``durability="sync"`` (20, 1,000), with ``_durable_peers.py``.

Bytes, two counts per step:

- **write bytes/step**: the growth of ``write_bytes`` in ``/proc/self/io`` (``wchar`` where
  the kernel gives no ``write_bytes``) from just before the run starts (the store already
  open, the peer launched) to after the runtime or peer has closed, over N. ``write_bytes``
  counts the bytes this process (all its threads) caused to be sent to the block layer: pages
  it dirtied in the page cache, counted once each time a clean page is dirtied — so a page
  rewritten after every fsync counts every time, and SQLite's WAL frames, its checkpoints
  back into the database and FileStore's temp files all count. ``wchar`` (the fallback)
  counts bytes passed to ``write()`` calls, cached or not. Each cell says which was used when
  it is not ``write_bytes``.
- **store bytes/step**: the store's size on disk once closed (the apparent size of the
  database with its ``-wal``/``-shm``/``-journal`` files, or of every file under the
  FileStore directory), over N: what a run leaves behind, against what it cost to write.

A size the runtime refuses (an error at start, or a run that ends other than completed, e.g.
an agent past ``MAX_INNER_STEPS``) or that runs past ``--scaling-timeout`` gets its reason
in the row instead of a figure, and is not tried again in later repeats.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import in_subprocess, linear_plan, run_on, store_path, trivial

PLAN_SIZES = (20, 1_000, 10_000)
AGENT_SIZES = (100, 10_000, 100_000)
PEER_SIZES = (20, 1_000)
QUICK_PLAN_SIZES = (20, 200)
QUICK_AGENT_SIZES = (100, 1_000)
QUICK_PEER_SIZES = (20, 200)
SCALING_BACKENDS = ("asyncio", "trio")  # the event loops of --backends this table runs on
STORES = {"file": "FileStore", "sqlite": "SqliteStore"}
PEERS = {"dbos": "DBOS", "langgraph": "LangGraph"}
GOAL_VS_SHORT = 0.8  # the longest plan's steps/s against the 20-step figure
GOAL_FLAT_BYTES = 1.25  # "flat": the longest plan's write bytes/step at most this x the shortest
GOAL_VS_DBOS = 5.0


# -- inside the measuring process ------------------------------------------------------------


def _io_written() -> tuple[int, str]:
    """This process's bytes written so far, and which counter of /proc/self/io gave them."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return 0, "unavailable"
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = int(value)
    for counter in ("write_bytes", "wchar"):
        if counter in fields:
            return fields[counter], counter
    return 0, "unavailable"


def _on_disk(path: Path) -> int:
    """Apparent size of a store: a directory's files, or a database and its journals."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    siblings = [path.with_name(path.name + s) for s in ("", "-wal", "-shm", "-journal")]
    return sum(f.stat().st_size for f in siblings if f.exists())


class _Meter:
    """Reads the write counter at ``begin`` and at ``end``; the scratch dir's store at ``end``."""

    def __init__(self) -> None:
        self.before = 0

    def begin(self) -> None:
        self.before = _io_written()[0]

    def end(self, steps: int, seconds: float, store: Path) -> dict[str, Any]:
        after, counter = _io_written()
        return {
            "steps_per_s": steps / seconds,
            "write_per_step": (after - self.before) / steps,
            "counter": counter,
            "store_per_step": _on_disk(store) / steps,
        }


async def _agent_loop(ctx: Any, input: dict[str, Any]) -> int:
    for i in range(input["steps"]):
        await ctx.step(f"i{i}", trivial, i)
    return int(input["steps"])


def _plan(what: str, steps: int) -> Any:
    import mainspring as ms

    if what == "plan":
        return linear_plan("trivial", steps)
    one = ms.PlanStep(id="a", agent="loop", input={"steps": steps})
    return ms.Plan(id="agent", goal="benchmark", steps=(one,))


def _mainspring(what: str, kind: str, backend: str, steps: int, scratch: Path) -> dict[str, Any]:
    import mainspring as ms

    async def once(store: Path, plan: Any, meter: _Meter) -> dict[str, Any]:
        tools, agents = {"trivial": trivial}, {"loop": _agent_loop}
        async with ms.open_runtime(store=store, tools=tools, agents=agents) as rt:
            meter.begin()
            start = time.perf_counter()
            try:
                handle = await rt.start("scaling", plan)
            except (ValueError, ms.MainspringError) as exc:
                return {"refused": f"refused at start: {exc}"}
            result = await handle.wait()
            elapsed = time.perf_counter() - start
            tasks = await rt.agent_tasks(result.execution_id)
        if result.status != "completed":
            why = [t.failure.message for t in tasks if t.failure is not None]
            return {
                "refused": f"{result.status}: {'; '.join(why) or result.error or result.summary}"
            }
        return meter.end(steps, elapsed, store)

    async def main() -> dict[str, Any]:
        (scratch / "warm-up").mkdir()
        await once(store_path(kind, scratch / "warm-up"), _plan(what, 2), _Meter())
        return await once(store_path(kind, scratch), _plan(what, steps), _Meter())

    return dict(run_on(backend, main))


def _peer(name: str, steps: int, scratch: Path) -> dict[str, Any]:
    from _durable_peers import dbos_steps_per_second, langgraph_steps_per_second

    meter = _Meter()
    if name == "dbos":
        dbos_steps_per_second(scratch / "warm-up", steps=2, workflows=1)
        rate = dbos_steps_per_second(scratch, steps=steps, workflows=1, on_start=meter.begin)
        database = scratch / "dbos.sqlite"
    else:
        langgraph_steps_per_second(scratch / "warm-up", steps=2, runs=1)
        rate = langgraph_steps_per_second(
            scratch, steps=steps, runs=1, durability="sync", on_start=meter.begin
        )
        database = scratch / "langgraph.sqlite"
    return meter.end(steps, steps / rate, database)


def measure(name: str, backend: str, steps: int, scratch: Path) -> dict[str, Any]:
    """``name``: ``scale-plan-<store>``, ``scale-agent-<store>``, ``scale-dbos``,
    ``scale-langgraph``."""
    parts = name.split("-")
    if parts[1] in PEERS:
        return _peer(parts[1], steps, scratch)
    return _mainspring(parts[1], parts[2], backend, steps, scratch)


# -- in the parent: the runs, interleaved, and the table --------------------------------------

Key = tuple[str, str, int]  # measure name, backend, size


def _runs(backends: list[str], quick: bool) -> list[Key]:
    plan_sizes = QUICK_PLAN_SIZES if quick else PLAN_SIZES
    agent_sizes = QUICK_AGENT_SIZES if quick else AGENT_SIZES
    peer_sizes = QUICK_PEER_SIZES if quick else PEER_SIZES
    loops = [b for b in SCALING_BACKENDS if b in backends] or ["asyncio"]
    runs: list[Key] = []
    for size in plan_sizes:
        runs += [(f"scale-plan-{kind}", b, size) for b in loops for kind in STORES]
        if size in peer_sizes:
            runs += [(f"scale-{peer}", "threads", size) for peer in PEERS]
    for size in agent_sizes:
        runs += [(f"scale-agent-{kind}", b, size) for b in loops for kind in STORES]
    return runs


def collect(script: str, backends: list[str], repeats: int, timeout: float, quick: bool) -> Any:
    """Every run ``repeats`` times, interleaved, each in a fresh process and scratch dir.

    Returns ``(runs, samples, reasons)``: figures per run, and why a run has none.
    """
    runs = _runs(backends, quick)
    samples: dict[Key, list[dict[str, Any]]] = {run: [] for run in runs}
    reasons: dict[Key, str] = {}
    base = Path(tempfile.mkdtemp(prefix="mainspring-scaling-"))
    try:
        for repeat in range(repeats):
            for run in runs:
                if run in reasons:
                    continue  # refused or too slow once: the same next time
                scratch = base / f"{repeat}-{'-'.join(map(str, run))}"
                scratch.mkdir()
                name, backend, size = run
                try:
                    got = in_subprocess(
                        script, name, backend, size, extra=("--scratch", str(scratch)),
                        timeout=timeout,
                    )  # fmt: skip
                except subprocess.TimeoutExpired:
                    reasons[run] = f"timed out after {timeout:g} s"
                except RuntimeError as exc:
                    last = str(exc).strip().splitlines()[-1]
                    reasons[run] = f"failed: {last[:200]}"
                else:
                    if "refused" in got:
                        reasons[run] = str(got["refused"])[:200]
                    else:
                        samples[run].append(got)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                print(f"scaling {repeat + 1}/{repeats}: {name} {backend} {size}", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return runs, samples, reasons


def _median(samples: list[dict[str, Any]], field: str) -> float:
    return statistics.median(s[field] for s in samples)


def _bytes(samples: list[dict[str, Any]], field: str) -> str:
    figure = f"{_median(samples, field):,.0f}"
    counters = {s["counter"] for s in samples} - {"write_bytes"}
    if field == "write_per_step" and counters:
        figure += f" ({', '.join(sorted(counters))})"
    return figure


def _cell(mine: float | None, theirs: float | None) -> str:
    return f"{mine / theirs:.2f}x" if mine and theirs else ""


def print_table(runs: list[Key], samples: Any, reasons: dict[Key, str], repeats: int) -> None:
    """The markdown table, the peers' own bytes, and where each goal stands."""

    def rate(run: Key) -> float | None:
        return _median(samples[run], "steps_per_s") if samples.get(run) else None

    def fmt(value: float | None) -> str:
        return f"{value:,.0f}" if value is not None else ""

    peer_sizes = sorted({size for name, _, size in runs if name.split("-")[1] in PEERS})
    ours = [run for run in runs if run[0].split("-")[1] not in PEERS]
    ours.sort(key=lambda r: (r[0].split("-")[1] == "agent", r[1], r[0], r[2]))
    print(
        f"\nScaling: one execution per fresh process, median of {repeats} runs; linear plans "
        "of trivial tools (steps/s from start to completion) and one agent step making "
        "trivial `ctx.step` calls (inner steps/s); 'vs shortest run' is against the shortest "
        "plan (or agent) on the same store and loop. Bytes per step: see the docstring of "
        "benchmarks/_scaling.py (write bytes: /proc/self/io write_bytes, WAL and checkpoints "
        "included; "
        "store bytes: the closed store's size).\n"
    )
    print(
        "| size | store | event loop | steps/s | vs shortest run | write bytes/step "
        "| store bytes/step | DBOS steps/s | vs DBOS | LangGraph steps/s | vs LangGraph |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    goals: dict[str, list[str]] = {"length": [], "dbos": [], "agent": []}
    for name, backend, size in ours:
        what, kind = name.split("-")[1:]
        run = (name, backend, size)
        label = f"{size:,}-step plan" if what == "plan" else f"agent, {size:,} inner steps"
        sizes = sorted(s for n, b, s in ours if n == name and b == backend)
        shortest = rate((name, backend, sizes[0]))
        mine = rate(run)
        if mine is None:
            cells = [reasons.get(run, "no figure"), "", "", "", "", "", "", ""]
        else:
            dbos = rate(("scale-dbos", "threads", size)) if what == "plan" else None
            lg = rate(("scale-langgraph", "threads", size)) if what == "plan" else None
            if run in reasons:  # a later repeat failed: say so beside the figure
                shown = f"{fmt(mine)} ({len(samples[run])} of {repeats}; then {reasons[run]})"
            else:
                shown = fmt(mine)
            cells = [
                shown,
                _cell(mine, shortest),
                _bytes(samples[run], "write_per_step"),
                _bytes(samples[run], "store_per_step"),
                fmt(dbos),
                _cell(mine, dbos),
                fmt(lg),
                _cell(mine, lg),
            ]
        print(f"| {label} | {STORES[kind]} | {backend} | " + " | ".join(cells) + " |")
        if what == "plan" and size == sizes[-1] and size != sizes[0]:
            goals["length"].append(_plan_goals(samples, reasons, name, backend, sizes))
        if what == "agent" and size == sizes[-1]:
            done = "completes" if mine is not None else f"does not: {reasons.get(run, '?')}"
            goals["agent"].append(f"- {size:,}-inner-step agent, {STORES[kind]}, {backend}: {done}")
        if what == "plan" and size in peer_sizes and mine is not None:
            dbos = rate(("scale-dbos", "threads", size))
            if dbos:
                met = "met" if mine / dbos >= GOAL_VS_DBOS else "not met"
                goals["dbos"].append(
                    f"- {size:,}-step plan, {STORES[kind]}, {backend}: {mine / dbos:.2f}x DBOS "
                    f"(goal >= {GOAL_VS_DBOS:g}x, {met})"
                )

    print("\nThe peers' own figures, same runs:\n")
    print("| size | system | steps/s | write bytes/step | store bytes/step |")
    print("|---|---|---:|---:|---:|")
    for size in peer_sizes:
        for peer, label in PEERS.items():
            run = (f"scale-{peer}", "threads", size)
            if samples.get(run):
                print(
                    f"| {size:,} | {label} | {fmt(rate(run))} "
                    f"| {_bytes(samples[run], 'write_per_step')} "
                    f"| {_bytes(samples[run], 'store_per_step')} |"
                )
            else:
                print(f"| {size:,} | {label} | {reasons.get(run, 'no figure')} | | |")
    print("\nGoals (issue 13):\n")
    print("\n".join(line for kind in goals.values() for line in kind))


def _plan_goals(samples: Any, reasons: dict[Key, str], name: str, backend: str, sizes: Any) -> str:
    """The longest plan against the shortest: steps/s within 0.8x, bytes/step flat."""
    kind = name.split("-")[2]
    short, long = (name, backend, sizes[0]), (name, backend, sizes[-1])
    head = f"- {sizes[-1]:,}-step plan vs {sizes[0]:,}, {STORES[kind]}, {backend}: "
    if not samples.get(long) or not samples.get(short):
        return head + f"no figure ({reasons.get(long) or reasons.get(short) or '?'})"
    speed = _median(samples[long], "steps_per_s") / _median(samples[short], "steps_per_s")
    grown = _median(samples[long], "write_per_step") / _median(samples[short], "write_per_step")
    fast = "met" if speed >= GOAL_VS_SHORT else "not met"
    flat = "met" if grown <= GOAL_FLAT_BYTES else "not met"
    return (
        head + f"steps/s {speed:.2f}x (goal >= {GOAL_VS_SHORT:g}x, {fast}); "
        f"write bytes/step {grown:.2f}x (flat: <= {GOAL_FLAT_BYTES:g}x, {flat})"
    )
