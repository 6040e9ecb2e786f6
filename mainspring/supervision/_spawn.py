"""Starting a supervisor: from an actor (a child supervisor) or on a system (a top-level one).

The kernel builds no supervisors; it only starts an actor with a given ref class and waits for
its start (``spawn_started``, part of its overseer contract). This module is where a
:class:`Supervisor` over child specs becomes a running actor with a :class:`SupervisorRef`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from ..actors import Actor, ActorSystem
from ..actors._seam import RestartType, spawn_started
from ._ref import SupervisorRef
from ._spec import Backoff, ChildSpec, Strategy
from ._supervisor import Supervisor

__all__ = ["spawn_supervisor"]


async def spawn_supervisor(
    parent: Actor | ActorSystem,
    children: Sequence[ChildSpec],
    *,
    name: str,
    strategy: Strategy = "one_for_one",
    max_restarts: int = 3,
    period: float = 5.0,
    backoff: Backoff | None = None,
    restart: RestartType = "permanent",
    clock: Callable[[], float] | None = None,
) -> SupervisorRef:
    """Start a :class:`Supervisor` over ``children`` (a list of :class:`ChildSpec`) and return
    its :class:`SupervisorRef` once every child has started, in order.

    ``parent`` is either an actor (call it from that actor's own code, e.g. ``await
    spawn_supervisor(self, specs, name="workers")``): the supervisor is its child, and stops,
    with its children, when it stops; or an :class:`~mainspring.ActorSystem`: a top-level
    supervisor, which the system's root supervisor restarts by ``restart`` (``permanent`` by
    default; ``restart`` does not apply under an actor). See :class:`Supervisor` for the
    strategies, the restart intensity (``max_restarts`` within ``period`` seconds) and
    ``backoff``; ``clock`` replaces the monotonic clock they read (tests).

    A checkpoint. Raises ``TypeError`` / ``ValueError`` for bad specs or options (nothing is
    started), :class:`~mainspring.NameTaken` if a live sibling has ``name``, and
    :class:`~mainspring.MainspringError` if the supervisor failed to start (a child's
    ``on_start`` kept failing) or the system is shutting down.
    """
    if not isinstance(parent, Actor | ActorSystem):
        raise TypeError(f"parent must be an Actor or an ActorSystem, not {type(parent).__name__}")
    factory = partial(
        Supervisor,
        children,
        strategy=strategy,
        max_restarts=max_restarts,
        period=period,
        backoff=backoff,
        clock=clock,
    )
    ref = await spawn_started(parent, factory, name=name, ref_class=SupervisorRef, restart=restart)
    assert isinstance(ref, SupervisorRef)
    return ref
