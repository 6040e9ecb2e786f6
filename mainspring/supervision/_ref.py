"""SupervisorRef, what it answers with (ChildInfo), and the messages it sends its supervisor."""

from __future__ import annotations

from typing import Any, Literal, final

import attrs

from ..actors import ActorRef, CancelReason, Supervised
from ..actors._seam import RestartType, find_child
from ._spec import ChildSpec

__all__ = ["ChildInfo", "ChildStatus", "SupervisorRef"]

ChildStatus = Literal["running", "restarting", "stopping", "stopped"]


@attrs.frozen(kw_only=True)
class ChildInfo:
    """One row of :meth:`SupervisorRef.which_children`, in start order."""

    name: str
    ref: ActorRef
    restart: RestartType
    status: ChildStatus
    restarts: int


# -- messages to the supervisor (private: users go through SupervisorRef) -------------------


@attrs.frozen
class _ChildEnded:
    cell: Supervised
    reason: CancelReason
    crashed: bool
    final: bool
    life: int  # cell.restarts when it ended: a notice from an older life is stale


@attrs.frozen
class _StartChild:
    spec: ChildSpec


@attrs.frozen
class _TerminateChild:
    name: str


@attrs.frozen
class _RestartChild:
    name: str


@attrs.frozen
class _WhichChildren:
    pass


@attrs.frozen
class _Refused:
    error: Exception


@final
class SupervisorRef(ActorRef):
    """An :class:`ActorRef` to a :class:`Supervisor`, with the supervisor's own operations.

    Each ``await``-ed method is an ``ask`` to the supervisor, so it runs after the restarts
    already under way. Mistakes (an unknown name, a name in use) raise to the caller and leave
    the supervisor running.
    """

    __slots__ = ()

    def child(self, name: str) -> ActorRef | None:
        """The child named ``name`` (alive or restarting), or None."""
        return find_child(self, name)

    async def _command(self, message: object) -> Any:
        answer = await self.ask(message)
        if isinstance(answer, _Refused):
            raise answer.error
        return answer

    async def start_child(self, spec: ChildSpec) -> ActorRef:
        """Start a new child after the others; returns once its ``on_start`` finished."""
        result: ActorRef = await self._command(_StartChild(spec))
        return result

    async def terminate_child(self, name: str) -> bool:
        """Stop a child for good (stop, then cancel after its ``shutdown``); False if it was
        already stopped. Its spec stays (unless temporary), so :meth:`restart_child` can
        bring it back."""
        result: bool = await self._command(_TerminateChild(name))
        return result

    async def restart_child(self, name: str) -> ActorRef:
        """Restart a running child with a fresh instance, or start a stopped one again."""
        result: ActorRef = await self._command(_RestartChild(name))
        return result

    async def which_children(self) -> list[ChildInfo]:
        """Every child in start order: name, ref, restart type, status and restart count."""
        result: list[ChildInfo] = await self._command(_WhichChildren())
        return result
