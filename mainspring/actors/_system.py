"""The actor system: the root of the tree, living inside the caller's ``async with``."""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.abc
from anyio.lowlevel import checkpoint

from ._actor import DEFAULT_MAILBOX_SIZE, Actor
from ._cell import Cell
from ._context import _current_cell
from ._errors import MainspringError
from ._events import EventBus
from ._overseer import (
    RESTART_TYPES,
    RestartType,
    RootOverseer,
    RootOverseerFactory,
    Supervised,
)
from ._reasons import CancelReason, Shutdown
from ._ref import ActorRef
from ._util import NoPublicConstructor, SpawnPacer

if TYPE_CHECKING:
    pass

__all__ = ["ActorSystem", "open_system"]


class _KernelRoot:
    """The kernel's own minimal root policy: it restarts nothing.

    Top-level actors are temporary: a spawn asking for another restart type is refused, not
    silently downgraded (a crash is still logged by the actor's cell). It is the root of a
    system opened here without ``root=...``; ``mainspring.open_system`` passes the supervision
    package's root supervisor, so nothing is registered globally.
    """

    def __init__(self, system: ActorSystem) -> None:
        self.system = system

    def adopt(self, child: Supervised, restart: RestartType) -> None:
        pass

    def may_restart(self, child: Supervised, reason: CancelReason, crashed: bool) -> bool:
        return False

    def child_ended(
        self, child: Supervised, reason: CancelReason, crashed: bool, final: bool
    ) -> None:
        pass


@final
class ActorSystem(metaclass=NoPublicConstructor):
    """The root of one actor tree. Made by :func:`open_system`; not constructible by hand."""

    def __init__(
        self,
        name: str,
        task_group: anyio.abc.TaskGroup,
        shutdown_timeout: float,
        stop_timeout: float,
        root: RootOverseerFactory,
    ) -> None:
        self.name = name
        self.shutdown_timeout = shutdown_timeout
        self.stop_timeout = stop_timeout
        self._tg = task_group
        self._children: dict[str, Cell] = {}
        self._ids = itertools.count(1)
        self._closed = False
        # A BaseException (SystemExit, KeyboardInterrupt) an actor raised, the first one: it
        # ends the open_system block and comes out of it (see _fail).
        self._fatal: BaseException | None = None
        self._block: anyio.CancelScope | None = None  # the caller's open_system block
        # The running backend's concrete Event class: anyio.Event() looks the backend up on
        # every call, and the kernel makes one or two events per ask.
        self.new_event: Callable[[], anyio.Event] = type(anyio.Event())
        self.event_bus: EventBus[object] = EventBus(self.new_event)
        self._spawn_pacer = SpawnPacer()
        self._root: RootOverseer = root(self)  # oversees the top-level actors

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
        name outside ``[A-Za-z0-9._:-]{1,256}`` (or ``.`` or ``..``) or an unknown restart type,
        :class:`MainspringError` after shutdown began. A cancellation check, and a schedule
        point once every 10 ms of back-to-back spawning: spawning a few actors stays cheap,
        and a loop spawning thousands does not hold the event loop. If cancelled, no actor
        was started.
        """
        await self._spawn_pacer.pace()
        self._check_top_level(restart)
        return self._spawn_top_level(factory, args, name, mailbox_size, restart, ActorRef).ref

    def _check_top_level(self, restart: RestartType) -> None:
        if restart not in RESTART_TYPES:
            raise ValueError(f"restart must be one of {', '.join(RESTART_TYPES)}, not {restart!r}")
        if self._closed:
            raise MainspringError(f"actor system {self.name!r} is shutting down")
        if restart != "temporary" and isinstance(self._root, _KernelRoot):
            raise MainspringError(
                f"actor system {self.name!r} has no supervision, so nothing would restart a "
                f"{restart} actor: use mainspring.open_system, or open_system(root=...)"
            )

    def _spawn_top_level(
        self,
        factory: Callable[..., Actor],
        args: tuple[Any, ...],
        name: str | None,
        mailbox_size: int,
        restart: RestartType,
        ref_class: type[ActorRef],
    ) -> Cell:
        root = self._root
        cell = Cell.create(
            self, None, self._children, factory, args, name, mailbox_size, root, ref_class
        )
        root.adopt(cell, restart)
        self._start(cell.run, cell.path)
        return cell

    def _spawn_started(
        self,
        factory: Callable[[], Actor],
        name: str,
        restart: RestartType,
        ref_class: type[ActorRef],
    ) -> Cell:
        """A top-level actor for ``spawn_started`` (``_overseer``): not paced, ``ref_class``."""
        self._check_top_level(restart)
        return self._spawn_top_level(factory, (), name, DEFAULT_MAILBOX_SIZE, restart, ref_class)

    def events(self, *, buffer: int = 1000) -> AsyncGenerator[object, None]:
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

    def _fail(self, exc: BaseException) -> None:
        """An actor's code raised ``exc``, a BaseException that is not cancellation: the
        program is to end. The ``open_system`` block is cancelled, the system shuts down as
        when the block ends, and ``exc`` comes out of ``open_system`` unwrapped."""
        if self._fatal is None:
            self._fatal = exc
        if self._block is not None:
            self._block.cancel(f"an actor raised {type(exc).__qualname__}")

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
    root: RootOverseerFactory | None = None,
) -> AsyncIterator[ActorSystem]:
    """Run an actor system for the duration of the ``async with`` block.

    Every actor lives inside the block, so the system nests in a server's lifespan and leaves
    no task behind. Leaving the block stops every actor with :class:`Shutdown` (whose detail
    says whether the block ended, raised or was cancelled); an exception raised in the block
    propagates, unwrapped, after that cleanup. A BaseException other than cancellation
    (``SystemExit``, ``KeyboardInterrupt``) raised in an actor's code (a handler, a hook, a
    tool) crashes that actor for good (no restart), ends the block as a cancellation would,
    and after the cleanup propagates unwrapped in place of whatever the block raised.
    ``shutdown_timeout`` bounds the graceful phase
    of that shutdown; ``stop_timeout`` bounds each actor's ``on_stop``.

    ``root`` builds the overseer of the top-level actors (the root supervisor, whose restart
    policy ``spawn(restart=...)`` uses);
    by default the kernel's own minimal policy, which restarts nothing.
    ``mainspring.open_system`` passes ``mainspring.supervision.RootSupervisor``.
    """
    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:
        system = ActorSystem._create(
            name, tg, shutdown_timeout, stop_timeout, root if root is not None else _KernelRoot
        )
        detail = "the open_system block ended"
        with anyio.CancelScope() as block:  # cancelled when an actor raises SystemExit...
            system._block = block
            try:
                yield system
            except Exception as exc:  # whatever the caller's block raised
                detail = f"the open_system block raised {type(exc).__qualname__}"
                failure = exc  # re-raised below, outside the task group, so it is not wrapped
            except BaseException as exc:  # cancellation passes; exits are re-raised
                if isinstance(exc, anyio.get_cancelled_exc_class() | GeneratorExit):
                    # Cancellation belongs to the task group's scope (or an outer one, or
                    # the block's own): it must pass through them, which know what to do.
                    detail = "the open_system block was cancelled"
                    raise
                # SystemExit, KeyboardInterrupt...: like an Exception, re-raised unwrapped.
                detail = f"the open_system block raised {type(exc).__qualname__}"
                failure = exc
            finally:
                system._block = None
                if system._fatal is not None:
                    detail = f"an actor raised {type(system._fatal).__qualname__}"
                with anyio.CancelScope(shield=True):
                    await system.shutdown(Shutdown(detail=detail, source=f"system {name}"))
    if system._fatal is not None:
        # It ends the program: it wins over what the block raised (kept as its context).
        fatal, system._fatal = system._fatal, None
        if failure is not None and failure is not fatal and fatal.__context__ is None:
            fatal.__context__ = failure
        raise fatal
    if failure is not None:
        raise failure
