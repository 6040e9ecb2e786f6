"""An execution's workers while it runs: the board its worker drivers write to, and the
ExecutionActor's side of it (``WorkerRun``).

The board holds the execution's worker records, the tasks they serve and the diagnostic
trail, parsed from the record when it is loaded. Every change a driver makes is a record a
``_fleet`` function returned (never an edit in place), put on the board with a trail entry;
the driver then asks the execution to commit (``WorkerCommit``, E2) before its next side
effect (phases with none between them share a commit: see ``_worker_agent``).

The board is shared, the way a :class:`~._usage.Meter` is: a change put on it after saves
are refused (the run stops: pause, cancel, stop-task, lease loss, deadline) is still in the
execution's next snapshot, so the final commit of the wind-down (or of a stopped task's end)
carries the worker's last true state: stopped only once its process was confirmed dead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from ..actors import CancelReason
from ..storage import (
    Edit,
    Execution,
    TrailEntry,
    WorkerRecord,
    WorkerTask,
    parse_worker_tasks,
    parse_workers,
    unstructure,
)
from ._run.events import WorkerChanged
from ._run_core import ExecutionCore
from ._workers import fleet as fleet
from ._workers.evidence import EvidenceShelf

__all__ = ["LiveWorker", "WorkerBoard", "WorkerCommit", "WorkerJoin", "WorkerRun"]


@attrs.frozen
class WorkerCommit:
    """A driver put a change on the board: commit it now (answered True once durable)."""


@attrs.frozen
class WorkerJoin:
    """A driver starts: answered with its execution's board."""


@attrs.define
class LiveWorker:
    """A worker process this runtime started and holds, for ``Runtime.repair_worker``."""

    host: Any
    process: Any  # its ProcessIdentity
    commit: Callable[[], Any]  # commits the board through the execution (E2)


def trail_entry(seq: int, worker: WorkerRecord, event: str, detail: str, now: float) -> TrailEntry:
    """A trail entry for ``worker`` after ``event``: ids, classes and digests only (V1)."""
    return TrailEntry(
        seq=seq,
        at=now,
        worker_id=worker.id,
        generation=worker.generation,
        event=event,
        status=worker.status,
        detail=detail[:256],
    )


class WorkerBoard:
    """The execution's workers, their tasks and the trail (see the module docstring)."""

    def __init__(self, record: Execution, shelf: EvidenceShelf, limit: int) -> None:
        workers, _ = parse_workers(record.workers)
        tasks, _ = parse_worker_tasks(record.worker_tasks)
        self.workers: dict[str, WorkerRecord] = {w.id: w for w in workers}
        self.tasks: dict[str, WorkerTask] = {t.id: t for t in tasks}
        parsed = {w.id for w in workers}
        parsed_tasks = {t.id for t in tasks}
        # E7: what does not parse is kept as it is, never dropped from the record.
        self.unparsed_workers = [r for r in record.workers if r.get("id") not in parsed]
        self.unparsed_tasks = [r for r in record.worker_tasks if r.get("id") not in parsed_tasks]
        # What the record says of each worker's (status, generation), and the workers put
        # since: a commit announces those that moved (WorkerChanged), at the cost of what
        # changed, as the history derives them (V2).
        self.committed = {w.id: (w.status, w.generation) for w in workers}
        self.moved: dict[str, None] = {}
        self.trail: tuple[dict[str, Any], ...] = tuple(record.worker_trail)
        self.next_seq = fleet.next_trail_seq(self.trail)  # kept as the trail grows
        # Each record's unstructured form, by its id, while it is the same (frozen) object:
        # a commit then unstructures only what changed, and hands the store the very dicts
        # it saw before, which its diff compares by identity (a run of N workers would
        # otherwise cost O(N) per commit twice over).
        self._raw: dict[tuple[str, str], tuple[object, dict[str, Any]]] = {}
        self.proof_digest = record.proof_digest
        self.shelf = shelf
        self.limit = limit  # min(max parallel steps, max workers) active workers (capacity)
        self.live: dict[str, LiveWorker] = {}  # by worker id: processes held here
        self.changed = anyio.Event()
        self.dirty = False
        self.commit: Callable[[], Any] | None = None  # set by the execution

    def put(
        self,
        worker: WorkerRecord,
        task: WorkerTask | None,
        event: str,
        detail: str = "",
    ) -> None:
        """Keep ``worker`` (and ``task``) as a fleet function returned them, with a trail
        entry; wakes whoever waits for capacity."""
        now = time.time()
        self.workers[worker.id] = worker
        self.moved[worker.id] = None
        if task is not None:
            self.tasks[task.id] = task
        seq = self.next_seq
        entry = trail_entry(seq, worker, event, detail, now)
        self.trail = fleet.trail_append(self.trail, entry, next_seq=seq)
        self.next_seq = seq + 1
        self.dirty = True
        self.changed.set()
        self.changed = anyio.Event()

    def put_task(self, task: WorkerTask) -> None:
        self.tasks[task.id] = task
        self.dirty = True

    def fields(self) -> dict[str, Any]:
        """The record's worker fields as they are now."""
        return {
            "workers": (
                *(self._unstructured("w", w) for w in self.workers.values()),
                *self.unparsed_workers,
            ),
            "worker_tasks": (
                *(self._unstructured("t", t) for t in self.tasks.values()),
                *self.unparsed_tasks,
            ),
            "worker_trail": self.trail,
            "proof_digest": self.proof_digest,
        }

    def _unstructured(self, kind: str, record: WorkerRecord | WorkerTask) -> dict[str, Any]:
        key = (kind, record.id)
        cached = self._raw.get(key)
        if cached is None or cached[0] is not record:
            cached = self._raw[key] = (record, unstructure(record))
        return cached[1]


#: A worker's ``reason`` announced as it is: a short code; anything else is left out (V1).
_REASON = re.compile(r"[a-z0-9._:-]{1,64}\Z")


def worker_changed(execution_id: str, worker: WorkerRecord, at: float) -> WorkerChanged:
    """The event for ``worker``'s durable move: ids, states and counts only (V1)."""
    reason = worker.reason if _REASON.match(worker.reason) else None
    return WorkerChanged(
        execution_id=execution_id,
        at=at,
        worker_id=worker.id,
        task_id=worker.task_id,
        step_id=worker.step_id,
        generation=worker.generation,
        status=worker.status,
        reason=reason,
    )


def worker_parts_edit(fields: dict[str, Any], epoch: int | None = None) -> Edit:
    """The edit that writes a stopped runner's worker parts (``fields``: the board's) to
    its record, paused or cancelled by a control from elsewhere, and nothing else: every
    other part stays as the control left it (E2). Not applied once anyone runs the record
    again (its status is theirs then), nor once anyone took the lease after the runner's
    tenure (``epoch``: a run resumed and paused again meanwhile has workers of its own),
    nor when the parts already say the same."""

    def change(stored: Execution, now: float) -> Execution | None:
        if stored.status not in ("paused", "cancelled"):
            return None
        if epoch is not None and stored.lease is not None and stored.lease.epoch != epoch:
            return None  # another tenure since ours: its worker parts are not ours
        if all(getattr(stored, key) == value for key, value in fields.items()):
            return None
        return attrs.evolve(stored, **fields, updated_at=now)

    return change


class WorkerRun(ExecutionCore):
    """The ExecutionActor's side of its workers: the board is built when the record is
    loaded, rides in every snapshot, and a driver's ``WorkerCommit`` goes through the one
    commit path (E2)."""

    _board: WorkerBoard | None = None
    #: The last snapshots' workers (the tuple each holds) and the moved workers each
    #: carries: the one committed is found by identity (a snapshot may follow it).
    _moves: tuple[tuple[Any, list[WorkerRecord]], ...] = ()

    def _worker_board(self) -> WorkerBoard:
        if self._board is None:
            cfg = self._cfg
            limit = min(cfg.max_parallel_steps, cfg.max_workers)
            self._board = WorkerBoard(self._rec, cfg.evidence, limit)
            self._board.commit = self._board_commit
            cfg.worker_boards[self._rec.id] = self._board
        return self._board

    async def _board_commit(self) -> bool:
        """A commit of the board from outside a driver (a repair, a proof), through the
        actor's mailbox like a driver's."""
        try:
            return bool(await self.ref.ask(WorkerCommit()))
        except Exception:
            return False

    async def _wind_down(self, reason: CancelReason) -> None:
        try:
            await super()._wind_down(reason)
            if self._refusal is not None and self._board is not None:
                await self._keep_board(self._board)
        finally:
            if self._board is not None:
                self._cfg.worker_boards.pop(self._rec.id, None)

    async def _keep_board(self, board: WorkerBoard) -> None:
        """A control written elsewhere (pause, cancel) refused our saves: the workers our
        drivers stopped while the run wound down are still written, as the same control
        issued here writes them, so no worker stays recorded active and a stop that did not
        fail gives its start back (``NOT_FAILED``). Invariant E11: a paused or cancelled
        record is not the runner's to overwrite; only its worker parts, which no control
        writes and whose processes this runner held, are (``worker_parts_edit``)."""
        fields = board.fields()
        moved = [board.workers[i] for i in board.moved if i in board.workers]
        try:
            lease = self._rec.lease
            edit = worker_parts_edit(fields, lease.epoch if lease is not None else None)
            written = await self._cfg.committer.edit(self._rec.id, edit)
        except Exception:  # the disk failed: the next resume confirms them dead (R3)
            return
        if written is None:
            return
        now = time.time()
        for worker in moved:  # announced once durable, as a commit announces them
            state = (worker.status, worker.generation)
            if board.committed.get(worker.id) != state:
                board.committed[worker.id] = state
                self._publish(worker_changed(self._rec.id, worker, now))
        board.moved.clear()

    def _snapshot(self, **changes: Any) -> Execution:
        board = self._board
        if board is None:
            return super()._snapshot(**changes)
        for key, value in board.fields().items():
            changes.setdefault(key, value)
        record = super()._snapshot(**changes)
        if board.moved:
            moves = [board.workers[i] for i in board.moved]
            self._moves = (*self._moves[-3:], (record.workers, moves))
        return record

    async def _commit(self, **changes: Any) -> bool:
        committed = await super()._commit(**changes)
        if committed:
            self._announce_workers()
        return committed

    async def _commit_record(self, record: Execution) -> bool:
        committed = await super()._commit_record(record)
        if committed:
            self._announce_workers()
        return committed

    def _announce_workers(self) -> None:
        """Publish the worker moves the record just committed carries (once durable, as
        the history has them: a worker's last state per commit)."""
        board, workers = self._board, self._rec.workers
        found = [i for i, (held, _) in enumerate(self._moves) if held is workers]
        if board is None or not found:
            return  # a record built from no snapshot of the board carries no move known
        moves = self._moves[found[0]][1]
        self._moves = self._moves[found[0] + 1 :]  # later snapshots may be committed next
        now = time.time()
        for worker in moves:
            state = (worker.status, worker.generation)
            if board.committed.get(worker.id) != state:
                board.committed[worker.id] = state
                self._publish(worker_changed(self._rec.id, worker, now))
            if board.workers.get(worker.id) is worker:
                board.moved.pop(worker.id, None)  # not put again since: announced

    async def _worker_message(self, message: Any) -> Any:
        if type(message) is WorkerJoin:
            return self._worker_board()
        if self._ended:
            return False  # saves are refused while the run stops: the board carries it
        return await self._commit()


WORKER_MESSAGES = (WorkerCommit, WorkerJoin)
