"""Timers: ``send_after`` / ``send_every`` messages that die with their actor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import anyio

from ._context import _current_cell
from ._errors import ActorDeadError
from ._util import NoPublicConstructor

if TYPE_CHECKING:
    from ._cell import Cell

__all__ = ["Timer"]


@final
class Timer(metaclass=NoPublicConstructor):
    """A pending ``send_after``/``send_every``. Cancel it, or let it die with its actor."""

    __slots__ = ("_cancelled", "_cell", "_delay", "_interval", "_message", "_scope")

    def __init__(self, cell: Cell, delay: float, interval: float | None, message: Any) -> None:
        self._cell = cell
        self._delay = delay
        self._interval = interval
        self._message = message
        self._scope: anyio.CancelScope | None = None
        self._cancelled = False

    @property
    def active(self) -> bool:
        """True until it fired (one-shot), was cancelled, or its actor stopped."""
        return not self._cancelled

    def cancel(self) -> None:
        """Stop the timer; harmless if it already fired or was cancelled."""
        if not self._cancelled:
            self._cancelled = True
            if self._scope is not None:
                self._scope.cancel("timer cancelled")

    async def _run(self) -> None:
        cell = self._cell
        _current_cell.set(cell)
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self._cancelled:
                    return
                await anyio.sleep(self._delay)
                if self._interval is None:
                    await cell.tell(self._message)
                    return
                interval = self._interval
                due = anyio.current_time()
                while True:
                    await cell.tell(self._message)
                    now = anyio.current_time()
                    due += interval
                    if due <= now:  # skip ticks we slept through instead of bunching them
                        due += (now - due) // interval * interval + interval
                    await anyio.sleep_until(due)
        except ActorDeadError:
            pass  # the actor is stopping; timers die with it
        finally:
            self._cancelled = True
            if cell.timers is not None:
                cell.timers.discard(self)
            cell._dependent_ended()
