"""The state of one cell, shared by the modules that implement its behaviour.

A cell is split by concern: :class:`CellState` holds every field (slotted: the kernel makes one
per actor, tens of thousands in a load test), ``_messaging.py`` sends to it, ``_stopping.py``
stops, cancels and restarts it, and ``_cell.py`` creates it, runs its task and keeps the tree.
Each of those is a class over this one with no fields of its own; :class:`Cell` combines them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from ._lifecycle import ActorState
from ._mailbox import Mailbox
from ._ref import ActorRef

if TYPE_CHECKING:
    from ._actor import Actor
    from ._cell import Cell
    from ._messaging import _Ask
    from ._overseer import Overseer
    from ._reasons import CancelReason
    from ._system import ActorSystem
    from ._task import ActorTask
    from ._timer import Timer

__all__ = ["CellState"]


class CellState:
    """Every field of a cell (see the module docstring); behaviour lives in the subclasses."""

    __slots__ = (
        "_accepting",
        "_children",
        "_control",
        "_crashed_last",
        "_current",
        "_dependents_gone",
        "_final",
        "_halt",
        "_hard",
        "_over_event",
        "_reason",
        "_scope",
        "_started_event",
        "_stop_scope",
        "_stopped_event",
        "_verdict",
        "_verdict_event",
        "actor",
        "args",
        "factory",
        "mailbox",
        "name",
        "overseer",
        "parent",
        "path",
        "ref",
        "restarts",
        "state",
        "system",
        "tasks",
        "timers",
        "watchers",
        "watching",
    )

    def __init__(
        self,
        system: ActorSystem,
        parent: Cell | None,
        name: str,
        mailbox_size: int,
        ref_class: type[ActorRef] = ActorRef,
    ) -> None:
        self.system = system
        self.parent = parent
        self.name = name
        self.path: str = f"{parent.path}/{name}" if parent is not None else f"/{name}"
        self.mailbox = Mailbox(mailbox_size, system.new_event)
        self.ref: ActorRef = ref_class._create(self)
        self.actor: Actor | None = None
        self.state = ActorState.STARTING
        self._accepting = True
        self._halt = False  # the loop must end: stop or cancel requested
        self._hard = False  # cancel requested: our scope is (or will be) cancelled
        self._reason: CancelReason | None = None  # first reason wins
        self._scope: anyio.CancelScope | None = None
        self._stop_scope: anyio.CancelScope | None = None
        self._dependents_gone: anyio.Event | None = None  # children and timers all ended
        self._children: dict[str, Cell] | None = None
        self._control: deque[Any] | None = None
        self._current: _Ask | None = None
        self._stopped_event: anyio.Event | None = None
        self.timers: set[Timer] | None = None
        self.tasks: set[ActorTask] | None = None  # started by start_task, until they end
        self.watchers: set[Cell] | None = None
        self.watching: set[Cell] | None = None
        # Supervision (see _overseer.py): how to build a fresh instance, and who decides.
        self.factory: Callable[..., Actor] | None = None
        self.args: tuple[Any, ...] = ()
        self.overseer: Overseer | None = None
        self.restarts = 0
        self._final = False  # this end was asked for from outside: never restart it
        self._crashed_last = False
        self._verdict: bool | None = None  # True: restart, False: stop for good
        self._verdict_event: anyio.Event | None = None
        self._over_event: anyio.Event | None = None  # waiters for the incarnation's end
        self._started_event: anyio.Event | None = None  # waiters for on_start to finish
