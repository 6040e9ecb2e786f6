"""What a worker spends (B3, P4): its ``usage`` reports charged to its epoch, its task and
the run, and what happens when that reaches a budget, as for a Python agent whose usage
reached one: the process is stopped and confirmed dead first."""

from __future__ import annotations

import time
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

import anyio

from ...storage import Usage, WorkerRecord, WorkerTask
from . import fleet as fleet
from .driver_base import WorkerStepFailed
from .hosts import Report

if TYPE_CHECKING:
    from .._steps.children import AgentTaskActor
    from .._worker_run import WorkerBoard

__all__ = ["Spending"]


class Spending:
    """Mixed into the worker driver."""

    actor: AgentTaskActor
    board: WorkerBoard
    unsaved: anyio.Event  # set: chatter on the board waits for the driver's flusher

    if TYPE_CHECKING:

        def worker(self) -> WorkerRecord | None: ...
        def task(self) -> WorkerTask: ...
        async def save(self) -> None: ...
        async def stop_confirmed(self, worker: WorkerRecord) -> None: ...

    async def usage(self, worker: WorkerRecord, report: Report) -> tuple[str, str] | None:
        """Charge a ``usage`` report (B3); the budget it exhausted, if any: ``("tokens" |
        "cost", why)`` for the run's, ``("task", why)`` for the task's reservation."""
        data = report.data
        try:
            tokens_in = int(data.get("input_tokens", 0))
            tokens_out = int(data.get("output_tokens", 0))
            cost = Decimal(str(data.get("cost", 0)))
            usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out, cost=cost)
            worker = fleet.add_usage(
                worker,
                generation=report.generation,
                session=report.session,
                job=report.job,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                cost=cost,
                now=time.time(),
            )
        except (ValueError, TypeError, InvalidOperation, fleet.WorkerRefused):
            self.board.put(worker, None, "protocol", "bad-usage")
            self.unsaved.set()
            return None
        self.actor.add_usage(usage)  # B3: charged to the task, so to the run
        self.board.put(worker, None, "usage")
        self.unsaved.set()  # committed with the next flush, or by over_budget at once
        return self.actor.over_budget()

    async def over_budget(self, over: tuple[str, str]) -> None:
        """B3, P4, as for a Python agent whose usage reached a budget: the process is
        stopped and confirmed dead, then the run's budget (tokens, cost) puts the task back
        to ready and the run waits for budget with the work kept (a resume with more
        budget takes the worker over); the task's own reservation fails the step
        ``agent-call-budget``."""
        budget, why = over
        worker = self.worker()
        assert worker is not None
        await self.stop_confirmed(worker)
        worker = self.board.workers[worker.id]
        worker, task = fleet.mark_stopped(
            worker,
            self.task(),
            fleet.expect(worker),
            confirmed_dead=True,
            reason="budget" if budget != "task" else "agent-call-budget",
            task_state="ready" if budget != "task" else "blocked",
            now=time.time(),
        )
        self.board.put(worker, task, "stopped", f"budget:{budget}")
        await self.save()
        if budget == "task":
            raise WorkerStepFailed("agent-call-budget", why)
        await self.actor.wait_for_budget(budget)
