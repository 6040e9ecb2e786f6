"""One exception tree, split by whose fault it is (see STYLE.md, habit 7).

Every error mainspring raises on purpose derives from :class:`MainspringError`. Errors keep
their data as attributes so callers can branch on it instead of parsing messages. Cancellation
is never wrapped: it stays the backend's own ``BaseException``. Each error reports its
public home (``mainspring``) in tracebacks and reprs: ``mainspring/_public.py`` sets it for
every public namespace in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._reasons import CancelReason
    from ._ref import ActorRef

__all__ = [
    "ActorDeadError",
    "ActorFailed",
    "AskTimeout",
    "IllegalTransition",
    "MailboxFull",
    "MainspringError",
    "NameTaken",
]


class MainspringError(Exception):
    """Root of every error mainspring raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses keep their data as attributes and build their message in __init__, so
        # the default (calling the class with ``args``) cannot rebuild them: rebuild from the
        # message and the attributes instead, so errors cross pickle, copy and processes.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[MainspringError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class MailboxFull(MainspringError):
    """``tell_nowait`` found the mailbox at capacity; the message was not delivered.

    Load, not a bug: the caller chose not to wait. Use ``await tell(...)`` to wait for room.
    """

    def __init__(self, ref: ActorRef, capacity: int) -> None:
        super().__init__(f"the mailbox of {ref.path} is full ({capacity} messages)")
        self.ref = ref
        self.capacity = capacity


class ActorDeadError(MainspringError):
    """The actor has stopped (or is stopping) and will not process the message.

    ``reason`` is why it stopped, when known. A message that raised this was not delivered, or
    was delivered but dropped unprocessed because the actor stopped first.
    """

    def __init__(self, ref: ActorRef, reason: CancelReason | None) -> None:
        why = f": {reason}" if reason is not None else ""
        super().__init__(f"actor {ref.path} is not running{why}")
        self.ref = ref
        self.reason = reason


class AskTimeout(MainspringError, TimeoutError):
    """No answer came within the ``ask`` timeout; a late answer is dropped."""

    def __init__(self, ref: ActorRef, timeout: float) -> None:
        super().__init__(f"{ref.path} did not answer within {timeout:g} s")
        self.ref = ref
        self.timeout = timeout


class ActorFailed(MainspringError):
    """The actor's handler raised while processing this ask; the exception is ``__cause__``.

    The fault is in the actor's code (or its input). The actor itself ended with a ``Crash``.
    """

    def __init__(self, ref: ActorRef, error: BaseException) -> None:
        super().__init__(f"actor {ref.path} failed: {type(error).__qualname__}: {error}")
        self.ref = ref


class NameTaken(MainspringError):
    """A sibling with this name is already alive under the same parent."""

    def __init__(self, name: str, parent_path: str) -> None:
        super().__init__(f"an actor named {name!r} already exists under {parent_path}")
        self.name = name
        self.parent_path = parent_path


class IllegalTransition(MainspringError, RuntimeError):
    """A state was about to move where its lifecycle table does not allow: a bug in
    mainspring, never the user's fault (please report it). Nothing was changed.

    The one class for every lifecycle: an actor's (the kernel's table) and an execution's,
    a plan step's, an agent task's, a worker's and a worker task's (the execution layer's
    tables). ``kind`` says which lifecycle (``"actor"``, ``"execution"``, ``"step"``,
    ``"agent task"``, ``"worker"``, ``"worker task"``), ``name`` which one of them, ``old``
    and ``new`` the refused move.
    """

    def __init__(self, kind: str, name: str, old: str, new: str) -> None:
        super().__init__(f"illegal {kind} move for {name}: {old} -> {new}")
        self.kind = kind
        self.name = name
        self.old = old
        self.new = new
