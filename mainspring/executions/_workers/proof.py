"""Finalizing a run (its proof) and the bounded diagnostic trail: the fleet rules that look
at a run's workers together rather than at one worker (see ``_fleet``)."""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

from ...storage import (
    MAX_TRAIL,
    TrailEntry,
    WorkerRecord,
    WorkerTask,
    check_digest,
    sha256_hex,
    unstructure,
)
from .vocabulary import WorkerRefused

__all__ = ["Proof", "finalize", "next_trail_seq", "trail_append"]


Verdict = Literal["passed", "failed"]


def _verdict(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in ("passed", "failed"):
        raise ValueError(f"{attribute.name} is passed or failed, not {value!r}")


def _receipt(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"a receipt is a mapping, not {type(value).__name__}")
    return types.MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class Proof:
    """What finalizing a run needs: verification and review passed, and a receipt (a JSON
    mapping of ids and digests) with the sha256 of its canonical JSON."""

    verification: Verdict = attrs.field(validator=_verdict)
    review: Verdict = attrs.field(validator=_verdict)
    receipt: Mapping[str, Any] = attrs.field(converter=_receipt, hash=False)
    receipt_digest: str = attrs.field(validator=lambda _, a, v: check_digest(v, a.name))

    def plain(self) -> dict[str, Any]:
        """The proof as plain JSON data (what its digest is of)."""
        return {
            "receipt": dict(self.receipt),
            "receipt_digest": self.receipt_digest,
            "review": self.review,
            "verification": self.verification,
        }


def finalize(tasks: Iterable[WorkerTask], workers: Iterable[WorkerRecord], proof: Proof) -> str:
    """The digest of the proof (sha256 of its canonical JSON) that lets the run finalize:
    refused while a worker is active (``active-writer``), or when the proof does not hold
    (``proof``: verification or review not passed, no worker task, a task not delivered, a
    receipt whose digest is not its own)."""
    live = sorted(w.id for w in workers if w.active)
    if live:
        raise WorkerRefused("active-writer", f"workers still active: {', '.join(live[:8])}")
    if proof.verification != "passed" or proof.review != "passed":
        raise WorkerRefused(
            "proof", f"verification {proof.verification}, review {proof.review}: not passed"
        )
    if not (tasks := list(tasks)):  # "the task complete" never holds vacuously
        raise WorkerRefused("proof", "the run has no worker task: nothing was delivered")
    open_tasks = sorted(t.id for t in tasks if t.state != "delivered")
    if open_tasks:
        raise WorkerRefused("proof", f"tasks not delivered: {', '.join(open_tasks[:8])}")
    if sha256_hex(dict(proof.receipt)) != proof.receipt_digest:
        raise WorkerRefused("proof", "the receipt's digest is not the receipt's")
    return sha256_hex(proof.plain())


def next_trail_seq(trail: tuple[dict[str, Any], ...]) -> int:
    """The seq the next trail entry takes: one past the highest in ``trail`` (1 at first)."""
    seqs = [e.get("seq") for e in trail if isinstance(e, dict)]
    return max((s for s in seqs if type(s) is int), default=0) + 1


def trail_append(
    trail: tuple[dict[str, Any], ...], entry: TrailEntry, *, next_seq: int | None = None
) -> tuple[dict[str, Any], ...]:
    """``trail`` with ``entry`` (unstructured) appended, keeping the last :data:`MAX_TRAIL`
    entries; ``entry.seq`` must come after every seq in the trail (ValueError).

    ``next_seq`` is ``next_trail_seq(trail)`` when the caller keeps it as the trail grows
    (a run's board does): the trail is then not scanned again on every append."""
    if not isinstance(entry, TrailEntry):
        raise TypeError(f"a trail entry is a TrailEntry, not {type(entry).__name__}")
    if entry.seq < (next_trail_seq(trail) if next_seq is None else next_seq):
        raise ValueError(f"trail seq {entry.seq} does not come after the trail's")
    raw: dict[str, Any] = unstructure(entry)
    return (*trail[-(MAX_TRAIL - 1) :], raw)
