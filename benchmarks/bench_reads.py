"""What reading a big store costs: ``list()`` and a ``get()`` of every execution, and the
memory a listing keeps.

Run ``PYTHONPATH=. python benchmarks/bench_reads.py``. It writes ``--count`` executions
(default 2,000; each with a plan of 3 agent steps, 3 agent tasks of 6 inner steps and a
finding, 2 workers, 2 worker tasks and 5 trail entries) to a FileStore and a SqliteStore
under ``--dir`` (default: a temp dir; given an existing one, it reads what is there), then
measures on each, in this process:

- ``list()`` and ``get()`` of every id: CPU time of this process (``time.process_time``, so a
  shared machine's other work counts less), the fastest of ``--runs`` (default 7);
- the memory the listing holds once made, and its peak while made (``tracemalloc``).

It uses the public API only, so it measures whichever ``mainspring`` is first on
``PYTHONPATH`` (an older tree included, to compare with).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any


def _task(e: int, t: int) -> dict[str, Any]:
    observations = [
        {"step_id": f"s{k}", "tool": "search", "ok": True, "calls_used": 1,
         "output": {"hits": [k, k + 1], "query": "x" * 40}}
        for k in range(6)
    ]  # fmt: skip
    return {
        "v": 1, "id": f"t-{e}-{t}", "agent_id": "researcher", "step_id": f"step-{t}",
        "state": "completed", "created_at": 1.0, "updated_at": 2.0, "execution_id": f"ex-{e}",
        "definition_hash": "d" * 64, "envelope_hash": "e" * 64, "input_hash": "i" * 64,
        "inner_completed": [f"s{k}" for k in range(6)], "inner_observations": observations,
        "touched_paths": ["a.py", "b.py"], "inner_steps_total": 6, "inner_steps_done": 6,
        "calls_reserved": 6, "calls_used": 6, "tool_calls_used": 6,
        "findings": [{"id": f"f-{t}", "claim": "the sky is blue", "confidence": 0.9,
                      "coverage": 0.5, "evidence": [{"kind": "file", "ref": "a.py"}]}],
    }  # fmt: skip


def _execution(e: int) -> Any:
    import mainspring as ms

    s = ms.storage
    steps = tuple(s.PlanStep(id=f"step-{t}", agent="researcher") for t in range(3))
    return s.Execution(
        id=f"ex-{e}", goal="find things", status="completed", plan_version=1,
        plan=s.Plan(id=f"p-{e}", goal="find things", steps=steps),
        agent_tasks=tuple(_task(e, t) for t in range(3)),
        workers=tuple(
            {"v": 1, "id": f"w-{e}-{w}", "task_id": f"t-{e}-{w}", "step_id": f"step-{w}",
             "agent_id": "researcher", "status": "running", "created_at": 1.0, "updated_at": 2.0}
            for w in range(2)
        ),
        worker_tasks=tuple(
            {"v": 1, "id": f"t-{e}-{w}", "step_id": f"step-{w}", "state": "running",
             "worker_id": f"w-{e}-{w}", "attempts": 1, "updated_at": 2.0}
            for w in range(2)
        ),
        worker_trail=tuple(
            {"seq": n + 1, "at": 1.0, "worker_id": f"w-{e}-0", "generation": 1,
             "event": "started", "status": "running"}
            for n in range(5)
        ),
        created_at=1.0, updated_at=2.0,
    )  # fmt: skip


def _stores(where: Path) -> dict[str, Any]:
    import mainspring as ms

    return {
        "file": ms.storage.FileStore(where / "files"),
        "sqlite": ms.storage.SqliteStore(where / "store.sqlite3"),
    }


def measure(store: Any, runs: int) -> tuple[float, float, float, float, int]:
    """(list s, get-all s, MB held by a listing, MB peak while listing, executions)."""
    ids = [execution.id for execution in store.list().executions]  # warm: imports, caches
    lists, gets = [], []
    for _ in range(runs):
        gc.collect()
        start = time.process_time()
        listing = store.list()
        lists.append(time.process_time() - start)
        assert not listing.problems
        assert len(listing.executions) == len(ids)
        del listing
        gc.collect()
        start = time.process_time()
        for execution_id in ids:
            store.get(execution_id)
        gets.append(time.process_time() - start)
    gc.collect()
    tracemalloc.start()
    listing = store.list()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del listing
    return min(lists), min(gets), held / 1e6, peak / 1e6, len(ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where the stores are (default: a temp dir)")
    args = parser.parse_args()
    where = Path(args.dir or tempfile.mkdtemp(prefix="mainspring-reads-"))
    stores = _stores(where)
    if not stores["sqlite"].list().executions:
        for e in range(args.count):
            execution = _execution(e)
            for store in stores.values():
                assert store.create(execution)
    print(f"\nreads of {where} (CPU time, fastest of {args.runs})\n")
    print("| store | executions | list() | get() of each | held by the listing | peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, store in stores.items():
        listed, got, held, peak, count = measure(store, args.runs)
        print(
            f"| {name} | {count:,} | {listed * 1000:,.0f} ms | {got * 1000:,.0f} ms "
            f"| {held:,.1f} MB | {peak:,.1f} MB |",
            flush=True,
        )
    for store in stores.values():
        getattr(store, "close", lambda: None)()


if __name__ == "__main__":
    main()
