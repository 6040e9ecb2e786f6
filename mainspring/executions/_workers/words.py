"""What a worker's reports and stops become on their way to disk: words shaped like secrets
masked (E5, V1), text replaced by its digest, a sealed delivery's output and whether it was
masked (E10), a stop's reason as the worker's. Helpers of ``_worker_driver``."""

from __future__ import annotations

import hashlib
from typing import Any

from ...actors import BudgetExhausted, Cancel, LeaseLost, ParentCancel, Pause, Timeout
from ...storage import redact_flagged

__all__ = ["MISSING", "digest_of", "sha", "unsealed", "why", "word"]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def why(reason: Any, failed: str | None = None) -> tuple[str, Any]:
    """The stop's reason as a worker reason, and the task state it leaves: a step that
    failed (``failed``, its code) leaves its task blocked, saying why."""
    if reason is None and failed is not None:
        return failed, "blocked"
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


MISSING = object()  # a kept result that is not there


def unsealed(document: Any) -> tuple[Any, bool]:
    """A sealed delivery's output and whether it was masked (E5, E10)."""
    if (
        type(document) is dict
        and document.keys() == {"output", "redacted"}
        and type(document["redacted"]) is bool
    ):
        return document["output"], document["redacted"]
    return document, False  # sealed whole, before deliveries said whether they were masked


def word(value: Any) -> Any:
    """A class, id or phase as a worker reported it, or ``redacted`` if it has the shape of
    a secret (an AWS key fits an id, an OpenAI key a class): words are stored as they are,
    so one that is a secret must not be (E5, V1). Not the fingerprint: it is a digest."""
    if type(value) is str and redact_flagged(value)[1]:
        return "redacted"
    return value


def digest_of(text: Any) -> str | None:
    return sha(text) if isinstance(text, str) and text else None
