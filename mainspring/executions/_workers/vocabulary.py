"""The fleet's vocabulary: the worker moves, what a host can observe, what a caller believes
about a worker (:class:`Expect`), and the two refusals every lifecycle function may raise.
The rules themselves are in ``_fleet``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from ...actors import MainspringError
from ...storage import WorkerRecord, WorkerStatus

__all__ = [
    "MAX_REPAIR",
    "NOT_FAILED",
    "WORKER_MOVES",
    "Expect",
    "Observed",
    "StaleWorker",
    "WorkerRefused",
    "check",
    "expect",
]

#: A repair instruction is 1..MAX_REPAIR characters once trimmed.
MAX_REPAIR = 16_384

WORKER_MOVES: Mapping[WorkerStatus, frozenset[WorkerStatus]] = {
    "assigned": frozenset({"starting", "stopped", "blocked"}),
    "starting": frozenset({"running", "idle", "stopped", "blocked"}),
    "running": frozenset({"idle", "handing-off", "stopped", "blocked"}),
    "idle": frozenset({"running", "handing-off", "stopped", "blocked"}),
    "handing-off": frozenset({"fenced", "stopped", "blocked"}),
    "fenced": frozenset({"delivered"}),
    "delivered": frozenset(),
    # A stopped worker (its process confirmed dead) may be taken over: generation + 1.
    "stopped": frozenset({"assigned"}),
    "blocked": frozenset(),
}

#: Why a worker may be stopped without having failed: the run was paused, met its deadline,
#: ran out of budget (B3: it waits for more), lost its lease or shut down. A start that
#: ended so does not count against the task's start limit (its takeover gives the attempt
#: back): a paused run resumed any number of times keeps its starts for real failures.
NOT_FAILED = frozenset({"pause", "timeout", "budget", "lease-lost", "shutdown", "stopping"})

#: What a host can say about a process: alive and working, alive and waiting for input,
#: gone (with its exit status when known), or not knowable from here (another host).
Observed = Literal["running", "idle", "exited", "unknown"]


class StaleWorker(MainspringError):
    """A write about a worker was made from an out-of-date view of it: the worker's id,
    generation or status is not what the caller expected. Nothing was changed."""

    def __init__(self, worker_id: str, expected: str, found: str) -> None:
        super().__init__(f"worker {worker_id} is {found}, not {expected}: the caller is stale")
        self.worker_id = worker_id
        self.expected = expected
        self.found = found


class WorkerRefused(MainspringError):
    """A worker move that the fleet's rules do not allow now; ``code`` says which rule
    (``capacity``, ``task-busy``, ``not-dead``, ``digest-mismatch``, ``not-live``,
    ``bad-repair``, ``illegal-move``, ``wrong-task``, ``stale-usage``, ``proof``,
    ``active-writer``). Nothing was changed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@attrs.frozen
class Expect:
    """What a caller believes about a worker: its id, generation, and status (one of
    ``statuses``)."""

    worker_id: str
    generation: int
    statuses: frozenset[WorkerStatus]


def expect(worker: WorkerRecord, *statuses: WorkerStatus) -> Expect:
    """The belief matching ``worker`` now (in ``statuses``, or exactly its status)."""
    return Expect(worker.id, worker.generation, frozenset(statuses or (worker.status,)))


def check(worker: WorkerRecord, belief: Expect) -> None:
    if worker.id != belief.worker_id or worker.generation != belief.generation:
        raise StaleWorker(
            worker.id,
            f"{belief.worker_id} generation {belief.generation}",
            f"{worker.id} generation {worker.generation}",
        )
    if worker.status not in belief.statuses:
        raise StaleWorker(worker.id, " or ".join(sorted(belief.statuses)), worker.status)
