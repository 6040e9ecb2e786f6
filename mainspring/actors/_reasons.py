"""Why an actor stopped: a small hierarchy of frozen values.

A reason is data, not control flow. It is recorded on an actor *before* its cancel scope is
cancelled, so any code unwinding inside that actor can read it with
:func:`mainspring.cancel_reason`. Reasons hold strings, never live objects (an exception, an
actor), so they can be logged, compared, pickled and persisted without dragging a traceback or a
task along.
"""

from __future__ import annotations

import time

import attrs

__all__ = [
    "BudgetExhausted",
    "Cancel",
    "CancelReason",
    "Crash",
    "LeaseLost",
    "ParentCancel",
    "Pause",
    "Shutdown",
    "Stop",
    "Timeout",
]


@attrs.frozen(kw_only=True)
class CancelReason:
    """Base class of every reason. ``detail`` is free text; ``at`` is wall-clock seconds.

    ``source`` says who issued the reason (an actor path, ``"system"``, a user-chosen label), as
    a string so that a reason never keeps anything alive. ``str(reason)`` is a readable sentence.
    """

    detail: str = ""
    at: float = attrs.field(factory=time.time, eq=False)
    source: str = ""

    #: Short kind used in logs, events and on disk; each subclass sets its own.
    kind = "cancel-reason"

    def _summary(self) -> str:
        return "it was cancelled"

    def _clause(self) -> str:
        # This reason as a clause inside a longer sentence (a ParentCancel's).
        return f"{self._summary()} ({self.detail})" if self.detail else self._summary()

    def __str__(self) -> str:
        text = self._summary()
        if self.detail:
            text = f"{text}: {self.detail}"
        if self.source:
            text = f"{text} (by {self.source})"
        return text

    @property
    def root(self) -> CancelReason:
        """The reason at the origin of a :class:`ParentCancel` chain; itself for any other."""
        return self


@attrs.frozen(kw_only=True)
class Stop(CancelReason):
    """An orderly stop that nobody called a failure: ``ref.stop()`` without a reason."""

    kind = "stop"

    def _summary(self) -> str:
        return "it was asked to stop"


@attrs.frozen(kw_only=True)
class Pause(CancelReason):
    """Work stops so that it can resume later; nothing is lost or failed."""

    kind = "pause"

    def _summary(self) -> str:
        return "it was paused"


@attrs.frozen(kw_only=True)
class Cancel(CancelReason):
    """Work was cancelled on purpose; it will not resume."""

    kind = "cancel"

    def _summary(self) -> str:
        return "it was cancelled"


@attrs.frozen(kw_only=True)
class Shutdown(CancelReason):
    """The actor system (or a supervisor) is shutting down around the actor."""

    kind = "shutdown"

    def _summary(self) -> str:
        return "the system is shutting down"


@attrs.frozen(kw_only=True)
class Timeout(CancelReason):
    """A deadline passed."""

    kind = "timeout"

    def _summary(self) -> str:
        return "its time ran out"


@attrs.frozen(kw_only=True)
class BudgetExhausted(CancelReason):
    """The run has no budget left for more work."""

    kind = "budget-exhausted"

    def _summary(self) -> str:
        return "its budget is exhausted"


@attrs.frozen(kw_only=True)
class Crash(CancelReason):
    """The actor's own code raised. ``error`` is the exception rendered as ``Type: message``;
    ``error_type`` its type's qualified name alone, so code can match on it without parsing
    the text (``module`` says where the type is defined)."""

    error: str = attrs.field(kw_only=False)
    error_type: str = ""
    module: str = ""

    kind = "crash"

    def _summary(self) -> str:
        return f"it crashed with {self.error}"

    @classmethod
    def from_exception(cls, exc: BaseException, *, source: str = "") -> Crash:
        """Build a crash reason that describes ``exc`` without holding on to it."""
        message = str(exc)
        kind = type(exc)
        name = kind.__qualname__
        return cls(
            f"{name}: {message}" if message else name,
            error_type=name,
            module=kind.__module__,
            source=source,
        )


@attrs.frozen(kw_only=True)
class LeaseLost(CancelReason):
    """Another owner (``owner``) holds the lease this work needed; it must not write again."""

    owner: str = attrs.field(kw_only=False)

    kind = "lease-lost"

    def _summary(self) -> str:
        return f"it lost its lease to {self.owner or 'an unknown owner'}"


@attrs.frozen(kw_only=True)
class ParentCancel(CancelReason):
    """An ancestor stopped; ``cause`` is the ancestor's own reason, ``root`` the origin."""

    cause: CancelReason = attrs.field(kw_only=False)

    kind = "parent-cancel"

    def _summary(self) -> str:
        where = f" {self.source}" if self.source else ""
        return f"its parent{where} stopped because {self.cause._clause()}"

    def _clause(self) -> str:
        return self._summary()

    def __str__(self) -> str:
        return self._summary() if not self.detail else f"{self._summary()}: {self.detail}"

    @property
    def root(self) -> CancelReason:
        """Follow ``cause`` to the reason that started the cancellation."""
        reason: CancelReason = self
        while isinstance(reason, ParentCancel):
            reason = reason.cause
        return reason
