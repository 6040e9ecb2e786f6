"""The actor system: the root of the tree, living inside the caller's ``async with``."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import anyio.abc
from anyio.lowlevel import checkpoint, checkpoint_if_cancelled

from ._cell import DEFAULT_MAILBOX_SIZE, Actor, Cell, Overseer, _current_cell
from ._errors import MainspringError
from ._events import EventBus
from ._reasons import CancelReason, Shutdown
from ._ref import ActorRef
from ._util import NoPublicConstructor, SpawnPacer

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["ActorSystem", "RestartType", "install_supervision", "open_system"]

RestartType = Literal["permanent", "transient", "temporary"]
_RESTART_TYPES = ("permanent", "transient", "temporary")


class RootOverseer(Overseer, Protocol):
    """The system's root supervisor, as the kernel sees it (supervision provides it)."""

    def adopt(self, cell: Cell, restart: RestartType) -> None: ...


class _SupervisionHooks(Protocol):
    def root_overseer(self, system: ActorSystem) -> RootOverseer: ...

    async def spawn_supervisor(
        self,
        system: ActorSystem,
        parent: Cell | None,
        children: Sequence[Any],
        options: dict[str, Any],
    ) -> ActorRef: ...


# Layering: actors/ never imports supervision/. Supervision plugs itself in here when
# ``mainspring.supervision`` is imported (which ``import mainspring`` always does).
_hooks: _SupervisionHooks | None = None


def install_supervision(hooks: _SupervisionHooks) -> None:
    """Called once by ``mainspring.supervision`` at import time."""
    global _hooks
    _hooks = hooks


def _supervision() -> _SupervisionHooks:
    if _hooks is None:  # pragma: no cover - only if someone imports mainspring.actors alone
        raise MainspringError("supervision is not available: import mainspring first")
    return _hooks


async def spawn_supervisor_under(
    system: ActorSystem,
    parent: Cell | None,
    children: Sequence[Any],
    name: str,
    strategy: str,
    max_restarts: int,
    period: float,
    backoff: Any,
    restart: RestartType,
    clock: Callable[[], float] | None,
) -> ActorRef:
    """Start a Supervisor under ``parent`` (None: the system's root) through the plug-in."""
    options = {
        "name": name,
        "strategy": strategy,
        "max_restarts": max_restarts,
        "period": period,
        "backoff": backoff,
        "restart": restart,
        "clock": clock,
    }
    return await _supervision().spawn_supervisor(system, parent, children, options)


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
        self.event_bus = EventBus(self.new_event)
        self._spawn_pacer = SpawnPacer()
        self._root: RootOverseer | None = _hooks.root_overseer(self) if _hooks else None

    def _next_id(self) -> int:
        return next(self._ids)

    async def spawn(
        self,
        factory: Callable[..., Actor],
        *args: Any,
        name: str | None = None,
        mailbox_size: int = DEFAULT_MAILBOX_SIZE,
        restart: RestartType = "temporary",
    ) -> ActorRef:
        """Start a top-level actor: ``factory(*args)`` must return an :class:`Actor`.

        The actor lives under the system's root supervisor with restart type ``restart``:
        ``"temporary"`` (the default) reports a crash as an event and does not restart;
        ``"transient"`` restarts after a crash; ``"permanent"`` restarts after any end it did
        not get from outside (see :class:`ChildSpec`). Past the root's restart intensity the
        actor is stopped for good rather than restarted forever.

        Returns once the actor is registered and scheduled; its ``on_start`` runs in its own
        task before its first message, and messages sent meanwhile wait in its mailbox.
        Raises :class:`NameTaken` if a live top-level actor has ``name``, ``ValueError`` for a
        name outside ``[A-Za-z0-9._:-]{1,256}`` or an unknown restart type,
        :class:`MainspringError` after shutdown began. A cancellation check, and a schedule
        point once every 10 ms of back-to-back spawning: spawning a few actors stays cheap,
        and a loop spawning thousands does not hold the event loop. If cancelled, no actor
        was started.
        """
        await self._spawn_pacer.pace()
        if restart not in _RESTART_TYPES:
            raise ValueError(f"restart must be one of {', '.join(_RESTART_TYPES)}, not {restart!r}")
        if self._closed:
            raise MainspringError(f"actor system {self.name!r} is shutting down")
        cell = Cell.create(
            self, None, self._children, factory, args, name, mailbox_size, self._root
        )
        if self._root is not None:
            self._root.adopt(cell, restart)
        self._start(cell.run, cell.path)
        return cell.ref

    async def spawn_supervisor(
        self,
        children: Sequence[Any],
        *,
        name: str,
        strategy: str = "one_for_one",
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Any = None,
        restart: RestartType = "permanent",
        clock: Callable[[], float] | None = None,
    ) -> Any:
        """Start a top-level :class:`Supervisor` over ``children`` (a list of ChildSpec).

        Returns a :class:`SupervisorRef` once every child has started, in order. See
        :class:`Supervisor` for the strategies and the restart intensity.
        """
        await checkpoint_if_cancelled()
        if self._closed:
            raise MainspringError(f"actor system {self.name!r} is shutting down")
        return await spawn_supervisor_under(
            self, None, children, name, strategy, max_restarts, period, backoff, restart, clock
        )

    def events(self, *, buffer: int = 1000) -> AsyncIterator[object]:
        """Iterate over supervision events (child started, restarted, failed, ...).

        Events carry names, paths, reasons and counts only. Each iterator keeps up to
        ``buffer`` events; one that falls further behind gets an :class:`EventsDropped` in place
        of what it lost. Subscription starts at the first ``__anext__``; iteration ends when
        the system shuts down.
        """
        return self.event_bus.subscribe(buffer)

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
        self.event_bus.close()  # subscribers drain what is left, then their iteration ends

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
