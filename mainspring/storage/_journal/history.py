"""The durable history (V2): what each commit changed, as entries with ids, states and
counts only (V1), in the store's global order and each execution's own.

Entries are written by the backends in the same atomic write as the commit that made them
(``storage._journal.commit_events``), so a follower that restarts with ``after=seq`` misses
nothing and never sees a change that was not durable.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import attrs

from .._errors import RecordError
from .._usage import check_cost

__all__ = ["HistoryEvent", "HistoryKind", "check_after", "parse_event"]

HistoryKind = Literal[
    "created",
    "status",
    "plan",
    "step",
    "task",
    "pending",
    "control",
    "worker",
    "takeover",
    "crash",
    "lapse",
    "shutdown",
    "retry",
]
_KINDS: tuple[str, ...] = get_args(HistoryKind)
_TEXT = (
    "execution_id",
    "status",
    "was",
    "step_id",
    "task_id",
    "agent_id",
    "state",
    "pending",
    "worker_id",
    "reason",
    "owner",
    "previous_owner",
)
_COUNTS = (
    "generation",
    "plan_version",
    "done",
    "total",
    "calls_used",
    "inner_done",
    "input_tokens",
    "output_tokens",
    "attempt",
    "max_attempts",
)
#: Times and durations (seconds), numbers only.
_NUMBERS = ("last_seen", "lapsed_at", "delay")


@attrs.frozen(kw_only=True)
class HistoryEvent:
    """One committed change. ``seq`` orders the whole store, ``execution_seq`` one execution
    (the commit that made it); the other fields are set where the kind has them:

    - ``created`` / ``status``: ``status`` (and ``was``, the status before);
    - ``plan``: ``plan_version``, ``total`` steps;
    - ``step``: ``step_id``, its ``status``, ``done`` / ``total`` steps, ``calls_used``, and
      the run's ``input_tokens`` / ``output_tokens`` / ``cost`` (B3);
    - ``task``: ``task_id``, ``agent_id``, ``step_id``, ``state``, ``inner_done``,
      ``calls_used``, and the task's ``input_tokens`` / ``output_tokens`` / ``cost``;
    - ``pending``: ``pending`` (approval, clarification, budget or None), ``task_id``;
    - ``control``: ``action`` (pause, resume, cancel, answer, approve, stop-task);
    - ``worker``: an external worker's transition: ``worker_id``, ``task_id``, ``step_id``,
      its ``generation`` and ``status``, and ``reason``, a short code (``native-start``,
      ``no-progress:lint``) or None: never text a worker wrote (V1);
    - ``takeover``: a new tenure of the lease: ``owner`` took it from ``previous_owner``
      (None when the lease had been released), ``reason`` says why it was free:
      ``lease-expired``, ``owner-gone`` (its process on this host is gone, L7),
      ``after-pause``, ``after-shutdown`` or ``released``;
    - ``crash``: a takeover found the run live (planned or running) under an owner whose
      process is gone: ``owner`` (the dead one), ``last_seen`` (its last commit or heartbeat,
      a heartbeat's time estimated as its lease's expiry less the new lease's length),
      ``lapsed_at`` (its lease's expiry), ``reason`` (``owner-gone``);
    - ``lapse``: the live run's lease ran out while ``owner`` held it and nobody knows that
      owner dead (it stalled, lost the store, or died on another host): written by whoever
      meets it first, the next owner taking over or the owner itself letting it go;
      ``lapsed_at``, and ``last_seen`` when a takeover found it;
    - ``shutdown``: ``owner`` let its lease go while the run was live (its runtime closed):
      the run is left ``status`` (planned or running) and resumable;
    - ``retry``: a failed attempt of ``step_id`` that its retry policy tries again:
      ``attempt`` (the one that failed), ``max_attempts``, ``reason`` (the failure's kind:
      the exception's class name, or ``timeout``) and ``delay`` (seconds before the next).

    Entries of older stores lack the fields and kinds added since; every field is optional
    but ``seq``, ``execution_seq``, ``execution_id``, ``kind`` and ``at``.
    """

    seq: int
    execution_seq: int
    execution_id: str
    kind: HistoryKind
    at: float
    status: str | None = None
    was: str | None = None
    step_id: str | None = None
    task_id: str | None = None
    agent_id: str | None = None
    state: str | None = None
    pending: str | None = None
    action: str | None = None
    plan_version: int | None = None
    done: int | None = None
    total: int | None = None
    calls_used: int | None = None
    inner_done: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: A cost as decimal text (exact, as stored; see ``Usage``): a number, not free text (V1).
    cost: str | None = None
    worker_id: str | None = None
    generation: int | None = None
    reason: str | None = None
    owner: str | None = None
    previous_owner: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    last_seen: float | None = None
    lapsed_at: float | None = None
    delay: float | None = None


#: The largest sequence number a store can hold (SQLite's and PostgreSQL's 64-bit integers).
MAX_SEQ = 2**63 - 1


def check_after(after: Any) -> int:
    """``after`` as a sequence number: a whole number >= 0. One past every sequence number
    a store can hold (a client's ``Last-Event-ID`` from far in the future) reads as the
    largest one: nothing comes after it, rather than an overflow in the database driver."""
    if type(after) is not int or after < 0:
        raise ValueError(f"after must be a sequence number (a whole number >= 0), not {after!r}")
    return min(after, MAX_SEQ)


def parse_event(seq: int, execution_seq: int, raw: Any) -> HistoryEvent:
    """One stored history entry, checked field by field (fail closed: a bad entry is a
    :class:`RecordError`, never a half-filled event)."""
    kind = f"history entry {seq}"
    if type(raw) is not dict:
        raise RecordError(kind, ["(top level): not an object"])
    fields: dict[str, Any] = {}
    for name, value in raw.items():
        if name in _TEXT or name == "action":
            if value is not None and type(value) is not str:
                raise RecordError(kind, [f"{name}: expected a string"])
        elif name in _COUNTS:
            if value is not None and type(value) is not int:
                raise RecordError(kind, [f"{name}: expected a whole number"])
        elif name == "cost":
            if value is not None:
                try:
                    check_cost(value if type(value) is str else None)
                except (TypeError, ValueError):
                    raise RecordError(kind, ["cost: expected decimal text"]) from None
        elif name == "at" or name in _NUMBERS:
            if name != "at" and value is None:
                pass
            elif type(value) not in (int, float):
                raise RecordError(kind, [f"{name}: expected a number"])
            else:
                value = float(value)
        elif name != "kind":
            raise RecordError(kind, [f"{name}: unknown field"])
        fields[name] = value
    if raw.get("kind") not in _KINDS or type(raw.get("execution_id")) is not str:
        raise RecordError(kind, ["kind / execution_id: missing or unknown"])
    if "at" not in fields:
        raise RecordError(kind, ["at: missing"])
    return HistoryEvent(seq=seq, execution_seq=execution_seq, **fields)
