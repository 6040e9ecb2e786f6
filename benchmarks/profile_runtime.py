"""What a step costs the execution runtime alone, by how many steps came before it.

Run ``python benchmarks/profile_runtime.py``. Every run uses an in-memory store (a dict
behind a lock, deciding with the same rules as the real backends), so a commit costs next to
nothing and the figures are the runtime's own: the ExecutionActor, its snapshots, the
persistence actor's hand-off, the step and agent actors. Measured, each case in a fresh
process (asyncio unless ``--backend``):

- ``linear-N``: a linear plan of N trivial tool steps (20, 1,000 and 10,000);
- ``agent-N``: one agent step whose agent makes N ``ctx.step`` calls (100, 10,000, 100,000).

Each case prints steps/s (tool steps, or inner steps for an agent) over the wall time from
``start`` to completion, the median of ``--repeats`` runs, each in a fresh process (a case of
fewer than 1,000 steps runs again, one run after another, until it has made 1,000). A case
that has not finished after ``--limit`` seconds is stopped and reported with the rate of what
it did. Then one case (``--profile``, default ``linear-10000``) runs again under cProfile, and
the top 20 entries by cumulative time (and by own time) are printed. What runs in worker
threads (the store) is not profiled. ``--no-validators`` runs with attrs validators off: the
records' constructors re-check every id of every tuple, which is storage's cost, not the
runtime's.

The goal (issue #13): the 10,000-step and 100,000-inner-step figures near the 20-step one.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import anyio
import attrs

import mainspring as ms
from mainspring.storage import Execution, Lease, Store

# The backends' decisions, so that this store answers exactly as they do, through storage's
# internal door: the public MemoryStore (``mainspring.testing``) encodes every commit as a
# real backend would, which is storage's cost, not the runtime's.
from mainspring.storage._seam import (
    CommitOutcome,
    Edit,
    LeaseResult,
    Listing,
    decide_acquire,
    decide_commit,
    decide_edit,
    decide_heartbeat,
    decide_release,
    decide_renew,
    with_disk_lease,
)

LINEAR = (20, 1_000, 10_000)
AGENT = (100, 10_000, 100_000)
MIN_STEPS = 1_000  # a case of fewer steps runs its plan again until it has made this many


class MemoryStore:
    """The Store protocol on a dict: every write keeps the record object itself (no
    encoding, no copy), so what a commit costs is a lock and a few comparisons. Its calls
    never block, and it says so (``blocking``, see ``Store``): the persistence actor calls it
    on the event loop, with no thread hop."""

    blocking = False

    def __init__(self) -> None:
        self._items: dict[str, Execution] = {}
        self._lock = threading.Lock()
        self.writes = 0

    def _now(self) -> float:
        return time.time()

    def _put(self, execution: Execution) -> None:
        self._items[execution.id] = execution
        self.writes += 1

    def get(self, execution_id: str) -> Execution | None:
        with self._lock:
            return self._items.get(execution_id)

    def list(self) -> Listing:
        with self._lock:
            return Listing(executions=tuple(self._items.values()))

    def now(self) -> float:
        return self._now()

    def create(self, execution: Execution, *, lease_ttl: float | None = None) -> bool:
        with self._lock:
            if execution.id in self._items:
                return False
            if lease_ttl is not None and execution.lease is not None:
                lease = attrs.evolve(execution.lease, expires_at=self._now() + lease_ttl)
                execution = attrs.evolve(execution, lease=lease)
            self._put(execution)
            return True

    def acquire(self, execution_id: str, owner: str, ttl: float) -> LeaseResult:
        with self._lock:
            result, updated = decide_acquire(self._items.get(execution_id), owner, ttl, self._now())
            if updated is not None:
                self._put(updated)
            return result

    def heartbeat(self, execution_id: str, owner: str, ttl: float) -> bool:
        with self._lock:
            updated = decide_heartbeat(self._items.get(execution_id), owner, ttl, self._now())
            if updated is None:
                return False
            self._put(updated)
            return True

    def release(self, execution_id: str, owner: str) -> bool:
        with self._lock:
            updated = decide_release(self._items.get(execution_id), owner)
            if updated is None:
                return False
            self._put(updated)
            return True

    def _commit_one(self, execution: Execution, owner: str, now: float) -> CommitOutcome:
        stored = self._items.get(execution.id)
        outcome = decide_commit(stored, owner, now)
        if outcome is CommitOutcome.OK:
            assert stored is not None
            self._put(with_disk_lease(execution, stored))
        return outcome

    def commit_run(self, execution: Execution, owner: str) -> CommitOutcome:
        with self._lock:
            return self._commit_one(execution, owner, self._now())

    def replace(self, execution: Execution, owner: str) -> bool:
        with self._lock:
            stored = self._items.get(execution.id)
            if not decide_edit(stored, owner, self._now()):
                return False
            assert stored is not None
            self._put(with_disk_lease(execution, stored))
            return True

    def renew(
        self, execution_id: str, owner: str, ttl: float, epoch: int | None = None
    ) -> tuple[CommitOutcome, Execution | None]:
        with self._lock:
            stored = self._items.get(execution_id)
            outcome, updated = decide_renew(stored, owner, ttl, self._now(), epoch=epoch)
            if updated is not None:
                self._put(updated)
            return outcome, updated

    def edit(self, execution_id: str, change: Edit) -> Execution | None:
        with self._lock:
            stored = self._items.get(execution_id)
            if stored is None:
                return None
            updated = change(stored, self._now())
            if updated is None:
                return None
            lease: Lease | None = stored.lease
            updated = attrs.evolve(updated, lease=lease)
            self._put(updated)
            return updated

    def renew_many(
        self, renewals: Sequence[Any]
    ) -> tuple[tuple[CommitOutcome, Execution | None], ...]:
        return tuple(self.renew(*renewal) for renewal in renewals)

    def commit_runs(self, commits: Sequence[tuple[Execution, str]]) -> tuple[CommitOutcome, ...]:
        with self._lock:
            now = self._now()
            return tuple(self._commit_one(execution, owner, now) for execution, owner in commits)


def _typed(store: MemoryStore) -> Store:
    return store  # checked by mypy: MemoryStore is a Store


def linear_plan(n: int) -> ms.Plan:
    return ms.Plan(
        id="linear",
        goal="profile",
        steps=tuple(
            ms.PlanStep(
                id=f"s{i}", tool="trivial", input={"x": i}, depends_on=(f"s{i - 1}",) if i else ()
            )
            for i in range(n)
        ),
    )


async def run_case(case: str, limit: float) -> dict[str, Any]:
    """Run one case; returns its steps, the seconds taken and whether it finished."""
    kind, _, size = case.partition("-")
    n = int(size)
    runs = max(1, MIN_STEPS // n)  # short runs are repeated, one after another
    done = [0]

    def trivial(x: int) -> int:
        done[0] += 1
        return x

    def inner(i: int) -> int:
        done[0] += 1
        return i

    async def loop(ctx: ms.AgentContext, input: Any) -> int:
        for i in range(n):
            await ctx.step(f"i{i}", inner, i)
        return n

    if kind == "linear":
        plan = linear_plan(n)
    elif kind == "agent":
        plan = ms.Plan(id="agent", goal="profile", steps=(ms.PlanStep(id="a", agent="loop"),))
    else:
        raise SystemExit(f"unknown case {case!r}")
    store = _typed(MemoryStore())
    async with ms.open_runtime(
        store=store, tools={"trivial": trivial}, agents={"loop": loop}, lease_ttl=60.0
    ) as rt:
        start = time.perf_counter()
        finished = False
        status = "stopped"
        with anyio.move_on_after(limit):
            for _ in range(runs):
                handle = await rt.start("profile", plan)
                result = await handle.wait()
                if result.status != "completed":
                    errors = [o.error for o in result.observations if o.error]
                    status = f"{result.status}: {errors[-1] if errors else result.summary}"
                    break
            else:
                status = "completed"
            finished = True
        elapsed = time.perf_counter() - start
        steps = done[0]
        if not finished:
            await rt.cancel(handle.execution_id)
    return {
        "case": case,
        "steps": steps,
        "seconds": elapsed,
        "finished": finished,
        "status": status,
    }


def one(case: str, backend: str, limit: float, validators: bool = True) -> dict[str, Any]:
    # Without validators: what the runtime costs once the records' constructors no longer
    # re-check every id of every tuple (storage's part, measured apart).
    attrs.validators.set_disabled(not validators)
    return dict(anyio.run(run_case, case, limit, backend=backend))


def profiled(case: str, top: int, args: argparse.Namespace) -> str:
    profile = cProfile.Profile()
    profile.enable()
    outcome = one(case, args.backend, args.limit, not args.no_validators)
    profile.disable()
    out = io.StringIO()
    out.write(f"{case}: {_row(outcome)}\n\n")
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def _row(outcome: dict[str, Any]) -> str:
    rate = outcome["steps"] / outcome["seconds"] if outcome["seconds"] else 0.0
    mark = "" if outcome["finished"] else f" (stopped after {outcome['seconds']:.0f} s)"
    if outcome["finished"] and outcome["status"] != "completed":
        mark = f" (not completed: {outcome['status']})"
    return f"{outcome['steps']:,} steps in {outcome['seconds']:.2f} s: {rate:,.0f} steps/s{mark}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--limit", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--cases", nargs="*", help="e.g. linear-20 agent-10000")
    parser.add_argument("--profile", default="linear-10000", help="'' for none")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="runs per case (median)")
    parser.add_argument(
        "--no-validators",
        action="store_true",
        help="run with attrs validators off: the runtime's cost without the records' checks",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        outcome = one(args.one, args.backend, args.limit, not args.no_validators)
        print(json.dumps(outcome), flush=True)
        return
    every = [f"linear-{n}" for n in LINEAR] + [f"agent-{n}" for n in AGENT]
    cases = args.cases if args.cases is not None else every
    rows = []
    for case in cases:
        argv = [sys.executable, __file__, "--one", case, "--backend", args.backend]
        argv += ["--limit", str(args.limit)]
        if args.no_validators:
            argv.append("--no-validators")
        outcomes = []
        for _ in range(args.repeats):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{case} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
                break
            outcomes.append(json.loads(done.stdout.strip().splitlines()[-1]))
            if not outcomes[-1]["finished"] or outcomes[-1]["status"] != "completed":
                break  # a run that hit the limit or failed is not run again
        if not outcomes:
            rows.append((case, "failed"))
            continue
        outcomes.sort(key=lambda o: o["steps"] / o["seconds"])
        rows.append((case, _row(outcomes[len(outcomes) // 2])))
        print(f"{case}: {rows[-1][1]} ({len(outcomes)} runs)", file=sys.stderr, flush=True)
    checks = "validators off" if args.no_validators else "validators on"
    print(f"\n| case ({args.backend}, in-memory store, {checks}) | median of {args.repeats} |")
    print("|---|---|")
    for case, row in rows:
        print(f"| {case} | {row} |")
    if args.profile:
        print()
        print(profiled(args.profile, args.top, args))


if __name__ == "__main__":
    main()
