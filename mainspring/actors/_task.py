"""Tasks an actor starts (``Actor.start_task``): lighter than a child actor — no mailbox, no
name, no loop — but bound to the actor the same way: the actor never finishes before its
tasks have, a cancel of the actor cancels them (each seeing a :class:`ParentCancel`), and a
task cancelled with a reason reads that reason with ``cancel_reason()``, in the task and in
every thread or task it starts. Its end reaches the actor as a :class:`TaskEnded`, ahead of
queued user messages, with what the task returned.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ._context import _current_cell
from ._crash_log import log_error
from ._reasons import CancelReason, Crash, Stop
from ._util import NoPublicConstructor

if TYPE_CHECKING:
    import logging

    from ._cell import Cell

__all__ = ["ActorTask", "TaskEnded"]


def _asyncio_cancelled() -> type[BaseException]:
    """asyncio's cancellation exception, which code may raise on any backend (on trio it is a
    plain BaseException, never a cancellation), or a type no exception has when asyncio is
    not loaded."""
    import sys

    module = sys.modules.get("asyncio")
    return module.CancelledError if module is not None else _Never


class _Never(BaseException):
    """Raised by nothing: stands for asyncio's CancelledError when asyncio is not loaded."""


def _log() -> logging.Logger:
    import logging

    return logging.getLogger("mainspring.actors")


#: The task of ``start_task`` whose code runs now (inherited by the threads it starts).
_current_task: contextvars.ContextVar[ActorTask | None] = contextvars.ContextVar(
    "mainspring_current_task", default=None
)


@attrs.frozen(eq=False)
class TaskEnded:
    """Delivered to the actor that started ``task`` once it has ended: ``value`` is what it
    returned (None if it raised or was cancelled), ``reason`` why it ended — the reason it
    was cancelled with, a :class:`Crash` if it raised, else :class:`Stop`."""

    task: ActorTask
    value: Any
    reason: CancelReason


class ActorTask(metaclass=NoPublicConstructor):
    """A task started by ``Actor.start_task``. Cancel it with a reason, or wait for it."""

    __slots__ = ("__weakref__", "_args", "_cell", "_done", "_ended", "_fn", "_reason", "_scope")

    def __init__(self, cell: Cell, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]):
        self._cell = cell
        self._fn = fn
        self._args = args
        self._scope: anyio.CancelScope | None = None
        self._reason: CancelReason | None = None
        self._ended = False
        self._done: anyio.Event | None = None

    @property
    def reason(self) -> CancelReason | None:
        """The reason it was cancelled with (the first one wins), or None."""
        return self._reason

    def cancel(self, reason: CancelReason) -> None:
        """Interrupt the task with ``reason``; harmless once it ended or when cancelled twice."""
        if not isinstance(reason, CancelReason):
            raise TypeError(f"cancel() needs a CancelReason, not {type(reason).__qualname__}")
        if self._ended or self._reason is not None:
            return
        self._reason = reason
        if self._scope is not None:
            self._scope.cancel(str(reason))

    async def wait_stopped(self) -> CancelReason | None:
        """Wait until the task has ended; its reason (None if it was never cancelled)."""
        if not self._ended:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()
        return self._reason

    async def _run(self) -> None:
        cell = self._cell
        _current_cell.set(cell)
        _current_task.set(self)
        value: Any = None
        crash: CancelReason | None = None
        try:
            # Shielded like an actor's own scope: only ``cancel(reason)`` reaches the task, so
            # it always knows why it stops; a host's cancel arrives through the system's
            # shutdown, as a reason (V3).
            with anyio.CancelScope(shield=True) as scope:
                self._scope = scope
                if self._reason is not None:
                    scope.cancel(str(self._reason))
                value = await self._fn(*self._args)
        except Exception as exc:  # a task's code failing is its crash: recorded, its actor told
            crash = Crash.from_exception(exc, source=cell.path)
        except BaseException as exc:  # cancellation and exits too: sorted below
            if isinstance(exc, anyio.get_cancelled_exc_class()) and self._reason is not None:
                raise  # its own cancel, which its scope did not swallow: let it pass
            if isinstance(
                exc, GeneratorExit | anyio.get_cancelled_exc_class() | _asyncio_cancelled()
            ):
                # The task's own code raised it: no generator is being closed here, and
                # nobody cancelled the task (its scope is shielded: only ``cancel`` reaches
                # it, and that records a reason first). It ended because it raised, like
                # any exception, and the system lives on.
                crash = Crash.from_exception(exc, source=cell.path)
                return
            # SystemExit, KeyboardInterrupt: the program is to end, as from an actor's code
            # (``Cell._fatal``): the system is told and shuts down; the actor hears a Crash.
            crash = Crash.from_exception(exc, source=cell.path)
            log_error(
                _log(), "a task of actor %s raised %s", cell.path, crash, exc=exc, actor=cell.path
            )
            cell.system._fail(exc)
        finally:
            self._ended = True
            self._scope = None
            if cell.tasks is not None:
                cell.tasks.discard(self)
            reason = self._reason or crash or Stop(source=cell.path)
            cell.deliver_control(TaskEnded(self, value if crash is None else None, reason))
            if self._done is not None:
                self._done.set()
            cell._dependent_ended()
