"""An execution's workers while it runs: the board its worker drivers write to, which the
ExecutionActor holds and commits through its one funnel (``_funnel``).

The board holds the execution's worker records, the tasks they serve and the diagnostic
trail, parsed from the record when it is loaded. Every change a driver makes is a record a
``_fleet`` function returned (never an edit in place), put on the board with a trail entry;
the driver then asks the execution to commit (``WorkerCommit``, E2) before its next side
effect (phases with none between them share a commit: see ``_worker_agent``).

The runtime never touches a board: it asks the execution (``BOARD_REQUESTS``: what the board
holds, where a repair line goes, a repair or a proof to record), which answers from its board
with :func:`answer` and commits what changed through its funnel like a driver's change (a
repair line is sent by a task of the execution, so a worker slow to read never holds it).

The board is shared with the drivers, the way a :class:`~._usage.Meter` is: a change put
on it after saves are refused (the run stops: pause, cancel, stop-task, lease loss, deadline)
is still in the execution's next snapshot, so the final commit of the wind-down (or of a
stopped task's end) carries the worker's last true state: stopped only once its process was
confirmed dead.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import anyio
import attrs

from ...actors import ActorDeadError, Cancel, CancelReason
from ...storage import Execution, TrailEntry, Unreadable, WorkerRecord, WorkerStatus, WorkerTask
from ...storage._seam import Edit
from . import fleet as fleet
from .evidence import EvidenceShelf

__all__ = [
    "BOARD_REQUESTS",
    "WORKER_MESSAGES",
    "BoardState",
    "BoardView",
    "LiveWorker",
    "RepairTicket",
    "RepairWorker",
    "SealProof",
    "WorkerBoard",
    "WorkerCommit",
    "WorkerJoin",
    "answer",
]


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

    def __init__(
        self,
        record: Execution,
        shelf: EvidenceShelf,
        limit: int,
    ) -> None:
        workers = [w for w in record.workers if type(w) is WorkerRecord]
        self.workers: dict[str, WorkerRecord] = {w.id: w for w in workers}
        self.tasks: dict[str, WorkerTask] = {
            t.id: t for t in record.worker_tasks if type(t) is WorkerTask
        }
        # E7: what does not parse is kept as it was read, never dropped from the record.
        self.unparsed_workers = [w for w in record.workers if type(w) is Unreadable]
        self.unparsed_tasks = [t for t in record.worker_tasks if type(t) is Unreadable]
        # What the record says of each worker's (status, generation), and the workers put
        # since: a commit announces those that moved (WorkerChanged), at the cost of what
        # changed, as the history derives them (V2).
        self.committed = {w.id: (w.status, w.generation) for w in workers}
        self.moved: dict[str, None] = {}
        self.trail: tuple[TrailEntry | Unreadable, ...] = tuple(record.worker_trail)
        self.next_seq = fleet.next_trail_seq(self.trail)  # kept as the trail grows
        self.proof_digest = record.proof_digest
        self.shelf = shelf
        self.limit = limit  # min(max parallel steps, max workers) active workers (capacity)
        self.live: dict[str, LiveWorker] = {}  # by worker id: processes held here
        self.repairs: set[RepairTicket] = set()  # repair lines being sent (RepairWorker)
        self.changed = anyio.Event()
        self.dirty = False

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
            # The records themselves: the store compares them by identity and makes the
            # stored form of those that changed only.
            "workers": (*self.workers.values(), *self.unparsed_workers),
            "worker_tasks": (*self.tasks.values(), *self.unparsed_tasks),
            "worker_trail": self.trail,
            "proof_digest": self.proof_digest,
        }


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


WORKER_MESSAGES = (WorkerCommit, WorkerJoin)


# -- what the runtime asks of a live run's board (``Runtime.repair_worker``, ``finalize``) --


@attrs.frozen
class BoardView:
    """The board as it is now: answered with a :class:`BoardState` (the board is made if no
    driver joined yet, so that a proof recorded next goes with the run's next commit)."""


@attrs.frozen(kw_only=True)
class BoardState:
    """A live run's workers, their tasks and its proof's digest, as its board holds them."""

    workers: tuple[WorkerRecord, ...]
    tasks: tuple[WorkerTask, ...]
    proof_digest: str | None


@attrs.frozen
class RepairWorker:
    """Send a repair instruction to ``worker_id``'s live process, then count it on the worker
    (``Runtime.repair_worker``). Answered at once with a :class:`RepairTicket` (the line is
    sent by a task of the execution, waiting at most ``patience`` seconds for the worker to
    read it), None if no process of it is held here, False if the run is stopping, or the
    rules' refusal (``WorkerRefused``, ``StaleWorker``: answered, not raised)."""

    worker_id: str
    text: str
    patience: float


@attrs.define(eq=False)
class RepairTicket:
    """A repair under way in its run: ``done`` is set once it ended; ``outcome`` is None once
    the repair is counted and durable, else why not: a refusal (``StaleWorker``), or a
    sentence saying why the worker cannot be reached."""

    digest: str
    outcome: Exception | str | None = "the run is stopping"
    done: anyio.Event = attrs.field(factory=anyio.Event)
    task: Any = None  # the execution's task that sends it

    def abandon(self, reason: CancelReason | None = None) -> None:
        """The caller gave up, or the run stops (``reason``): a send still waiting for the
        worker to read is interrupted, and nothing is counted then."""
        if self.task is not None:
            self.task.cancel(reason or Cancel(detail="the repair's caller was cancelled"))


async def _send_repair(
    board: WorkerBoard,
    live: LiveWorker,
    request: RepairWorker,
    belief: fleet.Expect,
    line: str,
    ticket: RepairTicket,
    commit: Callable[[], Awaitable[bool]],
) -> None:
    """The line sent to the live process, then counted on the worker and committed: a task
    of the execution, so that a worker slow to read never holds its mailbox."""
    worker_id = request.worker_id
    try:
        with anyio.move_on_after(request.patience) as waited:
            await live.host.send(live.process, {"type": "repair", "text": line})
        if waited.cancelled_caught:
            ticket.outcome = f"worker {worker_id} does not read its stdin: not delivered"
            return
        # V2: the driver may have recorded something while the line was on its way (a
        # failure, idle, a handoff): the repair is counted on the worker as it is now
        # (StaleWorker if it is no longer that generation, running or idle), never on the
        # copy read before the send. Nothing awaits between the send and the put.
        now = time.time()
        worker, _, _ = fleet.repair(board.workers[worker_id], belief, request.text, now=now)
        board.put(worker, None, "repair", ticket.digest)
        if not await commit():
            ticket.outcome = f"the run of worker {worker_id} is stopping"
            return
        ticket.outcome = None
    except ProcessLookupError:
        ticket.outcome = f"worker {worker_id}'s process no longer reads"
    except (fleet.WorkerRefused, fleet.StaleWorker) as refused:
        ticket.outcome = refused
    finally:
        board.repairs.discard(ticket)
        ticket.done.set()


@attrs.frozen
class SealProof:
    """The proof, sealed as ``digest``, is the run's: record it and commit (E2). Checked
    again against the board now: a finalize that ran meanwhile (another proof) or a worker
    that became active is never overwritten nor ignored. Answered True once durable, False if
    the run is stopping (the board carries it), or the rules' refusal."""

    proof: fleet.Proof
    digest: str


BoardRequest: TypeAlias = BoardView | RepairWorker | SealProof
BOARD_REQUESTS = (BoardView, RepairWorker, SealProof)


async def answer(
    request: BoardRequest,
    board: WorkerBoard | None,
    join: Callable[[], WorkerBoard],
    commit: Callable[[], Awaitable[bool]],
    execution: Any,
) -> Any:
    """What a live run answers to ``request`` from its ``board`` (None until a driver joined;
    ``join`` makes it), committing a change with ``commit`` (its funnel, E2). Called by the
    execution (``execution``: the actor) in its own task, one message at a time: the board
    needs no lock. A repair's line is sent by a task of the execution, which asks it to
    commit (``WorkerCommit``) like a driver does."""
    try:
        return await _answer(request, board, join, commit, execution)
    except (fleet.WorkerRefused, fleet.StaleWorker) as refused:
        return refused


async def _answer(
    request: BoardRequest,
    board: WorkerBoard | None,
    join: Callable[[], WorkerBoard],
    commit: Callable[[], Awaitable[bool]],
    execution: Any,
) -> Any:
    if isinstance(request, BoardView):
        made = join()
        return BoardState(
            workers=tuple(made.workers.values()),
            tasks=tuple(made.tasks.values()),
            proof_digest=made.proof_digest,
        )
    if isinstance(request, RepairWorker):
        live = board.live.get(request.worker_id) if board is not None else None
        if board is None or live is None:
            return None
        worker = board.workers[request.worker_id]
        belief = fleet.expect(worker, WorkerStatus.RUNNING, WorkerStatus.IDLE)
        _, line, digest = fleet.repair(worker, belief, request.text, now=time.time())
        ticket = RepairTicket(digest=digest)

        async def commit_later() -> bool:
            try:
                return bool(await execution.ref.ask(WorkerCommit()))
            except ActorDeadError:
                return False

        try:
            ticket.task = execution.start_task(
                _send_repair, board, live, request, belief, line, ticket, commit_later
            )
        except ActorDeadError:  # stopping: nothing is sent
            return False
        board.repairs.add(ticket)
        return ticket
    made = join()
    fleet.finalize(made.tasks.values(), made.workers.values(), request.proof)
    if made.proof_digest not in (None, request.digest):
        raise fleet.WorkerRefused("proof", "the run was finalized with another proof")
    made.proof_digest = request.digest
    return await commit()
