"""What is persisted about external agent workers: the worker, the task it serves, and the
diagnostic trail.

A *worker* is one external process (a coding agent's CLI, a script, a model server) that
serves one agent task of a run. Its record is keyed by worker id and kept in the execution
(``Execution.workers``), like agent task records: parsed once, one by one, when first
looked at (``_entries``), so a record that does not parse is an :class:`Unreadable` that
readers leave out and count, never coerced, and that is written back as it was (E7, E8).
The task's fleet state is a :class:`WorkerTask` (``Execution.worker_tasks``, keyed by the
agent task id); the trail is a bounded list of :class:`TrailEntry`
(``Execution.worker_trail``, the last :data:`MAX_TRAIL`), read the same way.

Records say ids, states, classes, counts and digests only: what a worker wrote (its output,
its diagnostics, a repair instruction) is stored elsewhere (sealed evidence) or not at all,
and only its sha256 is kept here (V1, E5).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, Literal

import attrs

from ._entries import Entries
from ._unreadable import Unreadable
from ._usage import valid_cost, valid_tokens
from ._validators import (
    _at_most,
    _counter,
    _counter_field,
    _id,
    _member,
    _optional_digest,
    _optional_id,
)

__all__ = [
    "ACTIVE_WORKER",
    "LEASE_DEFAULT",
    "LEASE_MAX",
    "LEASE_MIN",
    "MAX_TRAIL",
    "MAX_USAGE_EPOCHS",
    "ProcessIdentity",
    "StopIntent",
    "TrailEntry",
    "UsageEpoch",
    "WorkerFailure",
    "WorkerRecord",
    "WorkerStatus",
    "WorkerTask",
    "WorkerTaskState",
    "check_digest",
    "check_lease",
    "parse_trail",
    "parse_worker_tasks",
    "parse_workers",
]


class WorkerStatus(enum.StrEnum):
    """Where an external worker stands. Stored as its value, snake_case (storage v3; v2
    wrote ``handing-off``: ``mainspring migrate`` respells it)."""

    ASSIGNED = "assigned"
    STARTING = "starting"
    RUNNING = "running"
    IDLE = "idle"
    HANDING_OFF = "handing_off"
    FENCED = "fenced"
    DELIVERED = "delivered"
    STOPPED = "stopped"
    BLOCKED = "blocked"


#: The statuses in which a worker may still write into its task's workspace: at most one
#: worker per task is in one of them, and at most min(jobs, the global maximum) per run.
ACTIVE_WORKER: frozenset[WorkerStatus] = frozenset(
    {
        WorkerStatus.ASSIGNED,
        WorkerStatus.STARTING,
        WorkerStatus.RUNNING,
        WorkerStatus.IDLE,
        WorkerStatus.HANDING_OFF,
    }
)


class WorkerTaskState(enum.StrEnum):
    """Where an agent task served by workers stands in the fleet. Stored as its value,
    snake_case (storage v3; v2 wrote ``awaiting-delivery``)."""

    READY = "ready"
    RUNNING = "running"
    BLOCKED = "blocked"
    AWAITING_DELIVERY = "awaiting_delivery"
    DELIVERED = "delivered"


def worker_status(value: object) -> WorkerStatus:
    """``value`` as a :class:`WorkerStatus` (a member or its value); ValueError if not."""
    return _member(WorkerStatus, value, "status")


def worker_task_state(value: object) -> WorkerTaskState:
    """``value`` as a :class:`WorkerTaskState` (a member or its value); ValueError if not."""
    return _member(WorkerTaskState, value, "state")


#: A worker's lease, in seconds: renewed by its heartbeat; when it lapses the worker is not
#: assumed dead (takeover still inspects the process), only no longer vouched for.
LEASE_MIN = 1.0
LEASE_MAX = 600.0
LEASE_DEFAULT = 30.0
#: The diagnostic trail keeps the last this many entries per execution.
MAX_TRAIL = 2_000
#: A worker keeps the usage of at most this many (generation, session, job) epochs.
MAX_USAGE_EPOCHS = 64
_CLASS = re.compile(r"[a-z0-9][a-z0-9._:-]{0,63}\Z")
_COMMIT = re.compile(r"[0-9a-f]{7,64}\Z")


def check_digest(value: Any, what: str = "digest") -> str:
    """``value`` if it is a sha256 in lowercase hex; ValueError otherwise."""
    if type(value) is not str or len(value) != 64 or value.strip("0123456789abcdef"):
        raise ValueError(f"{what} must be a sha256 in lowercase hex (64 characters)")
    return value


def check_lease(value: Any) -> float:
    """A lease length in seconds within ``LEASE_MIN .. LEASE_MAX``; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a worker lease must be a number of seconds, not {type(value).__name__}")
    if not LEASE_MIN <= value <= LEASE_MAX:  # NaN fails both
        raise ValueError(
            f"a worker lease must be within {LEASE_MIN:g}..{LEASE_MAX:g} s, not {value!r}"
        )
    return float(value)


def _digest(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_digest(value, attribute.name)


def _failure_class(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not str or not _CLASS.match(value):
        raise ValueError(
            f"{attribute.name} must be a lowercase word of 1..64 characters "
            f"([a-z0-9._:-], starting with a letter or digit), not {value!r}"
        )


def _commit(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (type(value) is not str or not _COMMIT.match(value)):
        raise ValueError(f"{attribute.name} must be a commit id (7..64 lowercase hex digits)")


#: The largest pid or process group (``pid_t`` is a 32-bit int; Linux allows up to 2**22).
MAX_PID = 2**31 - 1


def _pid(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or not 0 <= value <= MAX_PID:
        raise ValueError(f"{attribute.name} must be a process id in 0..{MAX_PID:,}")


def _positive(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    _counter(_, attribute, value)
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1")


def _time(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValueError(f"{attribute.name} must be a time in seconds, not {value!r}")


def _optional_time(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _time(instance, attribute, value)


def _lease(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_lease(value)


def _short(limit: int) -> Any:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if type(value) is not str or len(value) > limit or "\x00" in value:
            raise ValueError(f"{attribute.name} must be text of at most {limit} characters")

    return check


@attrs.frozen(kw_only=True)
class ProcessIdentity:
    """Which process a worker is, precisely enough to tell it from a later process that
    reused its pid: the host it runs on, its pid and process group, and its start time
    (clock ticks after boot, from ``/proc``; 0 where the system does not say)."""

    host: str = attrs.field(validator=_short(256))
    pid: int = attrs.field(validator=_pid)
    group: int = attrs.field(validator=_pid)
    started: int = attrs.field(default=0)

    @started.validator
    def _started(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if type(value) is not int or value < 0:
            raise ValueError("started must be a whole number of clock ticks")


@attrs.frozen(kw_only=True)
class WorkerFailure:
    """A failure a worker reported, structured: what failed (``failure_class``, the check
    and the pin it concerns), a fingerprint that says whether two failures are the same,
    digests of the diagnostics and of the progress so far, the phase and round, and whether
    the attempt made useful progress. Text is never stored: digests stand for it."""

    failure_class: str = attrs.field(validator=_failure_class)
    fingerprint: str = attrs.field(validator=_digest)
    check_id: str | None = attrs.field(default=None, validator=_optional_id)
    pin_id: str | None = attrs.field(default=None, validator=_optional_id)
    diagnostic_digest: str | None = attrs.field(default=None, validator=_optional_digest)
    progress_digest: str | None = attrs.field(default=None, validator=_optional_digest)
    phase: str = attrs.field(default="run", validator=_failure_class)
    round: int = _counter_field()
    useful_progress: bool = False
    at: float = attrs.field(default=0.0, validator=_time)

    def same_as(self, other: WorkerFailure | None) -> bool:
        """Whether ``other`` is the same failure (what the no-progress rule compares)."""
        return other is not None and (
            self.failure_class,
            self.fingerprint,
            self.check_id,
            self.pin_id,
            self.diagnostic_digest,
            self.progress_digest,
            self.phase,
        ) == (
            other.failure_class,
            other.fingerprint,
            other.check_id,
            other.pin_id,
            other.diagnostic_digest,
            other.progress_digest,
            other.phase,
        )


@attrs.frozen(kw_only=True)
class StopIntent:
    """A handoff under way: what is being delivered (digest of the delivery and of the
    contract it answers), from which source commit, until when the intent holds."""

    delivery_digest: str = attrs.field(validator=_digest)
    contract_digest: str = attrs.field(validator=_digest)
    source_commit: str | None = attrs.field(default=None, validator=_commit)
    expires_at: float = attrs.field(validator=_time)
    at: float = attrs.field(validator=_time)

    def same_digests(self, other: StopIntent) -> bool:
        return (self.delivery_digest, self.contract_digest, self.source_commit) == (
            other.delivery_digest,
            other.contract_digest,
            other.source_commit,
        )


@attrs.frozen(kw_only=True)
class UsageEpoch:
    """What a worker spent during one (generation, session, job) epoch."""

    generation: int = attrs.field(validator=_positive)
    session: str = attrs.field(validator=_id)
    job: str = attrs.field(validator=_id)
    input_tokens: int = attrs.field(default=0, validator=valid_tokens)
    output_tokens: int = attrs.field(default=0, validator=valid_tokens)
    total_tokens: int = attrs.field(default=0, validator=valid_tokens)
    cost: Decimal = attrs.field(default=Decimal(0), validator=valid_cost)


@attrs.frozen(kw_only=True)
class WorkerRecord:
    """One worker, as stored: its generation (1 at first, + 1 at each takeover), its status,
    its lease, the process it is, its last failure and how often in a row it repeated, a
    handoff under way, the digest of what it delivered and of the last repair instruction,
    its usage per epoch, and why it last changed (``reason``)."""

    v: Literal[1] = 1
    id: str = attrs.field(validator=_id)
    task_id: str = attrs.field(validator=_id)
    step_id: str = attrs.field(validator=_id)
    agent_id: str = attrs.field(validator=_id)
    generation: int = attrs.field(default=1, validator=_positive)
    status: WorkerStatus = attrs.field(default=WorkerStatus.ASSIGNED, converter=worker_status)
    lease: float = attrs.field(default=LEASE_DEFAULT, validator=_lease)
    lease_expires_at: float | None = attrs.field(default=None, validator=_optional_time)
    session: str | None = attrs.field(default=None, validator=_optional_id)
    job: str | None = attrs.field(default=None, validator=_optional_id)
    process: ProcessIdentity | None = None
    failure: WorkerFailure | None = None
    repeats: int = _counter_field()  # the same failure without useful progress, in a row
    intent: StopIntent | None = None
    delivered_digest: str | None = attrs.field(default=None, validator=_optional_digest)
    repair_digest: str | None = attrs.field(default=None, validator=_optional_digest)
    repairs: int = _counter_field()
    usage: tuple[UsageEpoch, ...] = attrs.field(default=(), validator=_at_most(MAX_USAGE_EPOCHS))
    reason: str = attrs.field(default="", validator=_short(256))
    created_at: float = attrs.field(validator=_time)
    updated_at: float = attrs.field(validator=_time)

    @property
    def active(self) -> bool:
        """Whether the worker's status is one of a live worker's (``ACTIVE_WORKER``)."""
        return self.status in ACTIVE_WORKER


@attrs.frozen(kw_only=True)
class WorkerTask:
    """An agent task served by workers: its fleet state, why it is there, the worker that
    serves it now (or last did), how many worker starts count against its limit (every
    start, but one stopped without failing, by a pause, the deadline or a lease loss, is
    given back at its takeover), and the digest of its sealed delivery once delivered."""

    v: Literal[1] = 1
    id: str = attrs.field(validator=_id)
    step_id: str = attrs.field(validator=_id)
    state: WorkerTaskState = attrs.field(default=WorkerTaskState.READY, converter=worker_task_state)
    reason: str = attrs.field(default="", validator=_short(256))
    worker_id: str | None = attrs.field(default=None, validator=_optional_id)
    attempts: int = _counter_field()
    delivery_digest: str | None = attrs.field(default=None, validator=_optional_digest)
    updated_at: float = attrs.field(validator=_time)


@attrs.frozen(kw_only=True)
class TrailEntry:
    """One event of the diagnostic trail: which worker (and generation), what happened
    (``event``, a word), the status after it, and a short detail made of ids, classes and
    digests only (V1)."""

    seq: int = attrs.field(validator=_positive)
    at: float = attrs.field(validator=_time)
    worker_id: str = attrs.field(validator=_id)
    generation: int = attrs.field(validator=_positive)
    event: str = attrs.field(validator=_failure_class)
    status: WorkerStatus = attrs.field(converter=worker_status)
    detail: str = attrs.field(default="", validator=_short(256))


#: The items of ``Execution.workers``, ``worker_tasks`` and ``worker_trail``: the record, or
#: what was stored if it does not parse (E8).
WorkerEntry = WorkerRecord | Unreadable
WorkerTaskEntry = WorkerTask | Unreadable
TrailItem = TrailEntry | Unreadable
#: Each field's record kind and the key an unreadable one is known by.
ENTRY_KINDS: dict[str, tuple[type[Any], str]] = {
    "workers": (WorkerRecord, "id"),
    "worker_tasks": (WorkerTask, "id"),
    "worker_trail": (TrailEntry, "seq"),
}


def _entries(value: Any, field: str) -> Any:
    items = value if type(value) is tuple or type(value) is Entries else tuple(value)
    if type(items) is not Entries and dict not in map(type, items):  # (in C: no loop)
        return items
    from ._stored_form import held_entries

    return held_entries(items, ENTRY_KINDS[field][0])


# The converters of ``Execution.workers``, ``worker_tasks`` and ``worker_trail``: the entries
# as a tuple; stored objects (an execution built from stored data) held as read, each parsed
# once when first looked at (``_stored_form.held_entries``, E8).


def worker_entries(value: Iterable[WorkerRecord | Unreadable | dict[str, Any]]) -> Any:
    return _entries(value, "workers")


def worker_task_entries(value: Iterable[WorkerTask | Unreadable | dict[str, Any]]) -> Any:
    return _entries(value, "worker_tasks")


def trail_entries(value: Iterable[TrailEntry | Unreadable | dict[str, Any]]) -> Any:
    return _entries(value, "worker_trail")


def _split(kind: type[Any], entries: Any, key: str = "id") -> tuple[list[Any], int]:
    from ._stored_form import read_entry

    parsed: list[Any] = []
    dropped = 0
    for entry in entries:
        if type(entry) is dict:  # as stored: parsed here (E8)
            entry = read_entry(entry, kind, key)
        if type(entry) is kind:
            parsed.append(entry)
        else:
            dropped += 1  # E8: left out of the view (and counted)
    return parsed, dropped


def parse_workers(entries: Any) -> tuple[list[WorkerRecord], int]:
    """The worker records among ``entries`` (``Execution.workers``: each parsed once, when
    first looked at) and how many did not parse (E7, E8: fail closed per record). A stored
    object among them is parsed here."""
    return _split(WorkerRecord, entries)


def parse_worker_tasks(entries: Any) -> tuple[list[WorkerTask], int]:
    """The worker task records among ``entries`` and how many did not parse."""
    return _split(WorkerTask, entries)


def parse_trail(entries: Any) -> tuple[list[TrailEntry], int]:
    """The trail entries among ``entries`` and how many did not parse."""
    return _split(TrailEntry, entries, "seq")
