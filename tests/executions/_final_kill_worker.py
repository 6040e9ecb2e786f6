"""Subprocess for test_execution's kill right after a run's final write (L3): no tests here.

    python -m tests.executions._final_kill_worker <store directory> <execution id>

Runs a one-step plan on a FileStore that SIGKILLs its own process as soon as the write that
holds the run's final status is durable: nothing after that write (a second write, the
actor's wind-down, the runtime's exit) ever happens. Exits 3 if it was not killed.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio

import mainspring as ms


class _KilledAfterTheFinalWrite(ms.storage.FileStore):
    def commit_runs(self, commits: Sequence[tuple[ms.storage.Execution, str]]) -> Any:
        results = super().commit_runs(commits)
        for (execution, _), result in zip(commits, results, strict=True):
            if result is ms.storage._seam.CommitOutcome.OK and execution.terminal:
                os.kill(os.getpid(), signal.SIGKILL)
        return results


async def _inc(x: int = 0) -> int:
    return x + 1


async def _main(path: str, execution_id: str) -> None:
    store = _KilledAfterTheFinalWrite(path)
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="s", tool="inc", input={"x": 1}),))
    async with ms.open_runtime(store=store, tools={"inc": _inc}) as rt:
        await (await rt.start("g", plan, execution_id=execution_id)).wait()


if __name__ == "__main__":
    anyio.run(_main, sys.argv[1], sys.argv[2])
    sys.exit(3)  # never reached: killed at the final write
