"""The base of a worker step's driver (``_worker_driver``): what it holds, its way to the
execution's commit funnel (E2), its failure, and the small helpers it uses."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..actors import (
    ActorDeadError,
    ActorFailed,
    BudgetExhausted,
    Cancel,
    LeaseLost,
    ParentCancel,
    Pause,
    Timeout,
)
from ..storage import WorkerRecord, WorkerTask
from ._agent import CodedFailure, SaveRefused
from ._hosts import WorkerProcess
from ._worker_run import WorkerBoard, WorkerCommit

if TYPE_CHECKING:
    from ._agent_context import AgentContext
    from ._worker_agent import WorkerAgent

__all__ = ["DriverBase", "WorkerStepFailed", "digest_of", "sha", "why"]


class WorkerStepFailed(CodedFailure):
    """A worker-backed step failed; ``code`` says why (``no-progress:<class>``,
    ``worker-start-limit``, ``worker-not-dead``, ``worker-unknown-host``,
    ``worker-unconfirmed``, ``worker-blocked``, ``worker-protocol``, ``worker-finalized``,
    ``agent-call-budget``)."""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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

    # -- the run ---------------------------------------------------------------------------


def why(reason: Any) -> tuple[str, Any]:
    """The stop's reason as a worker reason, and the task state it leaves."""
    root = reason.root if isinstance(reason, ParentCancel) else reason
    if isinstance(reason, Cancel):  # the task itself was cancelled: stop-task
        return "stop-task", "blocked"
    if isinstance(root, Cancel):
        return "cancel", "blocked"
    if isinstance(root, Pause):
        return "pause", "ready"
    if isinstance(root, Timeout):
        return "timeout", "ready"
    if isinstance(root, BudgetExhausted):
        return "budget", "ready"
    if isinstance(root, LeaseLost):
        return "lease-lost", "ready"
    if reason is None:
        return "stopping", "ready"
    return "shutdown", "ready"


def digest_of(text: Any) -> str | None:
    return sha(text) if isinstance(text, str) and text else None
