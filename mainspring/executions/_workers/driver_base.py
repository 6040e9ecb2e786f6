"""The base of a worker step's driver (``_worker_driver``): what it holds, its way to the
execution's commit funnel (E2), its failure, and the small helpers it uses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...actors import ActorDeadError, ActorFailed
from ...storage import WorkerRecord, WorkerTask
from .._steps.children import CodedFailure, SaveRefused
from .._worker_run import WorkerBoard, WorkerCommit
from .hosts import WorkerProcess
from .words import sha

if TYPE_CHECKING:
    from .._steps.context import AgentContext
    from .agent import WorkerAgent

__all__ = ["DriverBase", "WorkerStepFailed"]


class WorkerStepFailed(CodedFailure):
    """A worker-backed step failed; ``code`` says why (``no-progress:<class>``,
    ``worker-start-limit``, ``worker-not-dead``, ``worker-unknown-host``,
    ``worker-unconfirmed``, ``worker-blocked``, ``worker-protocol``, ``worker-finalized``,
    ``agent-call-budget``)."""


class DriverBase:
    """What a driver holds and its small helpers: the funnel, its worker and task."""

    def __init__(self, agent: WorkerAgent, ctx: AgentContext, input: Any) -> None:
        self.agent = agent
        self.actor = ctx._actor
        self.input = input if isinstance(input, Mapping) else {}
        record = self.actor.record
        self.task_id = record.id
        self.step_id = record.step_id
        self.agent_id = record.agent_id
        self.contract = sha(f"{record.agent_id}\n{record.input_hash}")
        self.board: WorkerBoard
        self.process: WorkerProcess | None = None  # the live process this driver holds
        self.failed: str | None = None  # the code of the failure that ends the step

    # -- the funnel --------------------------------------------------------------------------

    async def commit(self) -> bool:
        try:
            return bool(await self.actor._execution.ask(WorkerCommit()))
        except (ActorDeadError, ActorFailed):
            return False

    async def save(self) -> None:
        if not await self.commit():
            raise SaveRefused("the execution refused the save: it is stopping")

    def worker(self) -> WorkerRecord | None:
        task = self.board.tasks[self.task_id]
        return self.board.workers.get(task.worker_id) if task.worker_id else None

    def task(self) -> WorkerTask:
        return self.board.tasks[self.task_id]
