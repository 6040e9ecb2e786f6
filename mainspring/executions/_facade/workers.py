"""The Runtime's worker controls: a read-only view of a run's workers, repair instructions
for a live worker, and finalizing a run with its proof (#17). :class:`WorkerControls` does
that work for :class:`~mainspring.Runtime`, which holds one and states the contracts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, final

import anyio
import anyio.to_thread
import attrs

from ...actors import ActorDeadError, ActorFailed, ActorRef, MainspringError
from ...storage import Execution, TrailEntry, WorkerRecord, WorkerTask
from ...storage._seam import (
    check_id,
    parse_trail,
    parse_worker_tasks,
    parse_workers,
    redact_flagged,
)
from .._run.messages import RunServices
from .._workers import fleet as fleet
from .._workers.board import BoardState, BoardView, RepairTicket, RepairWorker, SealProof
from .handle import UnknownExecution

__all__ = ["WorkerControls", "WorkerNotLive", "WorkersView"]

#: How long a repair instruction may wait for a worker to read its stdin (seconds): a
#: worker that never reads (its pipe full) must not block the caller forever (STYLE 5).
REPAIR_SEND_TIMEOUT = 30.0


class WorkerNotLive(MainspringError):
    """The worker is not a live process of this runtime (unknown, stopped, or held by
    another runtime): a repair instruction cannot reach it."""


@final
@attrs.frozen(kw_only=True)
class WorkersView:
    """What :meth:`Runtime.workers` returns: an execution's workers as stored, the records
    that parse, the tasks they serve, the diagnostic trail, and how many records did not
    parse (E7, E8).

    A snapshot read from the store, made by the runtime (never by users): it is what an
    operator's tool or a test reads to see which worker serves which task, in which state,
    and why it moved."""

    execution_id: str
    workers: tuple[WorkerRecord, ...]
    tasks: tuple[WorkerTask, ...]
    trail: tuple[TrailEntry, ...]
    dropped: int
    proof_digest: str | None


def view_of(record: Execution) -> WorkersView:
    workers, bad_workers = parse_workers(record.workers)
    tasks, bad_tasks = parse_worker_tasks(record.worker_tasks)
    trail, bad_trail = parse_trail(record.worker_trail)
    return WorkersView(
        execution_id=record.id,
        workers=tuple(workers),
        tasks=tuple(tasks),
        trail=tuple(trail),
        dropped=bad_workers + bad_tasks + bad_trail,
        proof_digest=record.proof_digest,
    )


class _HasRef(Protocol):
    ref: ActorRef


class WorkerControls:
    """The worker controls of one runtime, over its services (the committer, the evidence
    shelf) and its runs live here (id -> entry with a ``ref``). A live run's board is its
    own: these ask its ExecutionActor (``_workers.board``'s requests), never touch it. Each
    method is the work of the :class:`~mainspring.Runtime` method of the same job."""

    def __init__(self, services: RunServices, live: Mapping[str, _HasRef]) -> None:
        self._committer = services.committer
        self._store = services.committer.store
        self._evidence = services.evidence
        self._live = live

    async def view(self, execution_id: str) -> WorkersView:
        """``Runtime.workers``: the stored record's workers (E7: a read)."""
        check_id(execution_id)
        record = await anyio.to_thread.run_sync(self._store.get, execution_id)
        if record is None:
            raise UnknownExecution(execution_id)
        return view_of(record)

    async def _ask(self, execution_id: str, request: Any) -> Any:
        """``request`` answered by the run live here (a refusal it answers is raised); None
        if no run of ``execution_id`` is live here, False if it stopped before answering."""
        live = self._live.get(execution_id)
        if live is None:
            return None
        try:
            answer = await live.ref.ask(request)
        except (ActorDeadError, ActorFailed):  # it stopped (or failed) before answering
            return False
        if isinstance(answer, fleet.WorkerRefused | fleet.StaleWorker):
            raise answer
        return answer

    async def repair(self, execution_id: str, worker_id: str, text: str) -> str:
        """``Runtime.repair_worker``: the line sent to the live process by its run, then
        counted on the worker through the run's commit funnel."""
        check_id(execution_id)
        check_id(worker_id)
        ticket = await self._ask(execution_id, RepairWorker(worker_id, text, REPAIR_SEND_TIMEOUT))
        if ticket is False:
            raise WorkerNotLive(f"the run of worker {worker_id} is stopping")
        if not isinstance(ticket, RepairTicket):
            raise WorkerNotLive(f"worker {worker_id} is not a live worker of this runtime")
        # The run's task sends the line and counts it on the worker as it is once the line
        # is read (V2: never on the copy read before the send).
        try:
            await ticket.done.wait()
        except BaseException:  # cancelled too: abandoned, re-raised
            ticket.abandon()
            raise
        if isinstance(ticket.outcome, Exception):
            raise ticket.outcome
        if ticket.outcome is not None:
            raise WorkerNotLive(ticket.outcome)
        return ticket.digest

    async def finalize(self, execution_id: str, proof: fleet.Proof) -> str:
        """``Runtime.finalize``: checked by ``fleet.finalize``, sealed, then recorded by the
        live run on its board, or by a store edit when nothing runs it here."""
        check_id(execution_id)
        if not isinstance(proof, fleet.Proof):
            raise TypeError(f"finalize takes a Proof, not {type(proof).__name__}")
        record = await anyio.to_thread.run_sync(self._store.get, execution_id)
        if record is None:
            raise UnknownExecution(execution_id)
        # Live here: through its board, so its next commit carries the proof and its
        # drivers see it (a store edit would be undone by the run).
        board = await self._ask(execution_id, BoardView())
        if board is False:  # its last writes are its own: a store edit could be undone
            raise WorkerNotLive("the run is stopping: finalize it once it stopped")
        if isinstance(board, BoardState):
            workers, tasks = list(board.workers), list(board.tasks)
            current = board.proof_digest
        else:
            workers = parse_workers(record.workers)[0]
            tasks = parse_worker_tasks(record.worker_tasks)[0]
            current = record.proof_digest
        digest = fleet.finalize(tasks, workers, proof)
        if redact_flagged(proof.plain())[1]:  # E5: sealed as it is, it cannot be masked
            raise fleet.WorkerRefused("proof", "the receipt holds a secret: ids and digests only")
        if current == digest:
            return digest
        if current is not None:
            raise fleet.WorkerRefused("proof", "the run was finalized with another proof")
        sealed = await self._evidence.seal(proof.plain())
        if sealed != digest:  # pragma: no cover - one canonical form on both sides
            raise fleet.WorkerRefused("proof", "the sealed proof is not the proof finalized")
        if isinstance(board, BoardState):
            # Checked again by the run after the seal's await: a finalize that ran
            # meanwhile (another proof) or a worker that became active is never
            # overwritten nor ignored.
            if not await self._ask(execution_id, SealProof(proof, digest)):
                raise WorkerNotLive("the run is stopping: finalize it once it stopped")
            return digest

        def change(stored: Execution, now: float) -> Execution | None:
            if stored.proof_digest == digest:
                return None
            if stored.proof_digest is not None:
                raise fleet.WorkerRefused("proof", "the run was finalized with another proof")
            fleet.finalize(
                parse_worker_tasks(stored.worker_tasks)[0], parse_workers(stored.workers)[0], proof
            )
            return attrs.evolve(stored, proof_digest=digest, updated_at=now)

        await self._committer.edit(execution_id, change)
        return digest
