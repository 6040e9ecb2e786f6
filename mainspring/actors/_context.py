"""Which actor the running code belongs to: the context variables and their public getters.

Every actor task, and every task started inside one, carries its actor's cell in
``_current_cell``; ``_constructing`` is set while a factory builds an instance, so that
``Actor.__new__`` can attach the instance to its cell (``self.ref`` works in ``__init__``).
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._cell import Cell
    from ._reasons import CancelReason
    from ._ref import ActorRef

__all__ = ["cancel_reason", "current_actor"]

_current_cell: contextvars.ContextVar[Cell | None] = contextvars.ContextVar(
    "mainspring_current_actor", default=None
)
_constructing: contextvars.ContextVar[Cell | None] = contextvars.ContextVar(
    "mainspring_constructing_actor", default=None
)


def cancel_reason() -> CancelReason | None:
    """Why the actor this code runs in is stopping, or None if it is not.

    Works in the actor's own task and in every task started inside it (tasks inherit the
    actor's context); in a task started with ``Actor.start_task`` it is the reason that
    task was cancelled with. Meant for ``except``/``finally`` blocks and ``on_stop``: during a
    graceful stop it is the stop's reason; when an ancestor was cancelled it is a
    :class:`ParentCancel` whose ``root`` is the ancestor's reason.
    """
    from ._task import _current_task

    task = _current_task.get()
    if task is not None:  # a task the actor started: the reason it was cancelled with
        return task.reason
    cell = _current_cell.get()
    if cell is None:
        return None
    return cell.reason_if_stopping()


def current_actor() -> ActorRef | None:
    """The ref of the actor whose code is running now, or None outside any actor."""
    cell = _current_cell.get()
    return cell.ref if cell is not None else None
