"""What a worker spends (B3, P4): a ``usage`` report charged to the worker's epoch, to its
task and so to the run, and which budget that exhausted, if any.

The driver of a worker step holds one :class:`SpendingLedger`; what happens once a budget is
reached (the process stopped and confirmed dead first, as for a Python agent whose usage
reached one) is the driver's to carry out (``Driver.over_budget``)."""

from __future__ import annotations

import time
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from ...storage import Usage, WorkerRecord
from . import fleet as fleet
from .hosts import Report

if TYPE_CHECKING:
    from .._steps.children import AgentTaskActor
    from .board import WorkerBoard

__all__ = ["SpendingLedger"]


class SpendingLedger:
    """Charges the usage reports of one agent task's workers: to the worker record on the
    run's ``board`` (its (generation, session, job) epoch) and to the task's ``actor``."""

    def __init__(self, actor: AgentTaskActor, board: WorkerBoard) -> None:
        self.actor = actor
        self.board = board

    def charge(self, worker: WorkerRecord, report: Report) -> tuple[str, str] | None:
        """Charge a ``usage`` report (B3); the budget it exhausted, if any: ``("tokens" |
        "cost", why)`` for the run's, ``("task", why)`` for the task's reservation.

        What it puts on the board (the worker's usage, or ``bad-usage`` for a report that
        does not parse or is for an older epoch) is not committed here: the caller commits
        it with its next flush, or at once when a budget was exhausted."""
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
            return None
        self.actor.add_usage(usage)  # B3: charged to the task, so to the run
        self.board.put(worker, None, "usage")
        return self.actor.over_budget()
