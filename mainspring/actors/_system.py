"""The actor system: the root of the tree, living inside the caller's ``async with``."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.abc
from anyio.lowlevel import checkpoint, checkpoint_if_cancelled

from ._cell import DEFAULT_MAILBOX_SIZE, Actor, Cell, _current_cell
from ._errors import MainspringError
from ._reasons import CancelReason, Shutdown
from ._ref import ActorRef
from ._util import NoPublicConstructor

__all__ = ["ActorSystem", "open_system"]


class ActorSystem(metaclass=NoPublicConstructor):
    """The root of one actor tree. Made by :func:`open_system`; not constructible by hand."""

    def __init__(
        self,
        name: str,
        task_group: anyio.abc.TaskGroup,
        shutdown_timeout: float,
        stop_timeout: float,
    ) -> None:
        self.name = name
        self.shutdown_timeout = shutdown_timeout
        self.stop_timeout = stop_timeout
        self._tg = task_group
        self._children: dict[str, Cell] = {}
        self._ids = itertools.count(1)
        self._closed = False
        # The running backend's concrete Event class: anyio.Event() looks the backend up on
        # every call, and the kernel makes one or two events per ask.
        self.new_event: Callable[[], anyio.Event] = type(anyio.Event())

    def _next_id(self) -> int:
        return next(self._ids)

    async def spawn(
        self,
        factory: Callable[..., Actor],
        *args: Any,
        name: str | None = None,
        mailbox_size: int = DEFAULT_MAILBOX_SIZE,
    ) -> ActorRef:
        """Start a top-level actor: ``factory(*args)`` must return an :class:`Actor`.

        Returns once the actor is registered and scheduled; its ``on_start`` runs in its own
        task before its first message, and messages sent meanwhile wait in its mailbox.
        Raises :class:`NameTaken` if a live top-level actor has ``name``, ``ValueError`` for a
        name outside ``[A-Za-z0-9._:-]{1,256}``, :class:`MainspringError` after shutdown began.
        Not a schedule point (only a cancellation check), so spawning many actors is cheap.
        """
        await checkpoint_if_cancelled()
        if self._closed:
            raise MainspringError(f"actor system {self.name!r} is shutting down")
        cell = Cell.create(self, None, self._children, factory, args, name, mailbox_size)
        self._start(cell.run, cell.path)
        return cell.ref

    def _start(self, run: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        # Every actor and timer task of the system runs in this one task group; the tree is
        # kept by the cells (see _cell's module docstring).
        self._tg.start_soon(run, name=name)

    def lookup(self, path: str) -> ActorRef | None:
        """The live actor at ``path`` (``/a/b``), or None."""
        names = [part for part in path.split("/") if part]
        if not names:
            return None
        cell = self._children.get(names[0])
        for name in names[1:]:
            if cell is None:
                return None
            cell = cell.child(name)
        return cell.ref if cell is not None and cell.accepting else None

    async def shutdown(self, reason: CancelReason | None = None) -> None:
        """Stop every actor with ``reason`` (default :class:`Shutdown`) and wait for them.

        Top-level actors are asked to stop in reverse start order (each finishes its current
        message, then its children stop, then ``on_stop``); those still running after
        ``shutdown_timeout`` seconds are cancelled with the same reason. New spawns are refused
        from the first call on; calling it again is harmless. Called from inside one of this
        system's actors it does not wait (that actor is among those stopping): the rest of the
        shutdown carries on in the background.
        """
        self._closed = True
        if reason is None:
            reason = Shutdown(source="system")
        cells = list(self._children.values())
        for cell in reversed(cells):
            cell.request_stop(reason)
        inside = _current_cell.get()
        if inside is not None and inside.system is self:
            self._start(partial(self._escalate, cells, reason), "shutdown")
            await checkpoint()
            return
        await self._escalate(cells, reason)

    async def _escalate(self, cells: list[Cell], reason: CancelReason) -> None:
        with anyio.move_on_after(self.shutdown_timeout):
            for cell in cells:
                await cell.wait_stopped()
        for cell in cells:
            cell.cancel(reason)
        for cell in cells:
            await cell.wait_stopped()

    def __repr__(self) -> str:
        return f"<ActorSystem {self.name!r} actors={len(self._children)}>"


@asynccontextmanager
async def open_system(
    name: str = "mainspring",
    *,
    shutdown_timeout: float = 5.0,
    stop_timeout: float = 5.0,
) -> AsyncIterator[ActorSystem]:
    """Run an actor system for the duration of the ``async with`` block.

    Every actor lives inside the block, so the system nests in a server's lifespan and leaves
    no task behind. Leaving the block stops every actor with :class:`Shutdown` (whose detail
    says whether the block ended, raised or was cancelled); an exception raised in the block
    propagates, unwrapped, after that cleanup. ``shutdown_timeout`` bounds the graceful phase
    of that shutdown; ``stop_timeout`` bounds each actor's ``on_stop``.
    """
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        system = ActorSystem._create(name, tg, shutdown_timeout, stop_timeout)
        detail = "the open_system block ended"
        try:
            yield system
        except Exception as exc:
            detail = f"the open_system block raised {type(exc).__qualname__}"
            failure = exc  # re-raised below, outside the task group, so it is not wrapped
        except BaseException as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                detail = "the open_system block was cancelled"
            else:
                detail = f"the open_system block raised {type(exc).__qualname__}"
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await system.shutdown(Shutdown(detail=detail, source=f"system {name}"))
    if failure is not None:
        raise failure
