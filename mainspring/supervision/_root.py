"""The system's root supervisor: the overseer of top-level actors, given to the kernel.

It implements the kernel's ``RootOverseer`` contract (``mainspring.actors``): one_for_one over
the top-level actors, each with the restart type it was spawned with and its own restart
intensity window.
``mainspring.open_system`` and the Runtime pass it as the root of their systems;
``open_system(root=...)`` takes another, e.g. ``partial(RootSupervisor, clock=fake_clock)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..actors import CancelReason, Supervised
from ..actors._seam import RestartType
from ._events import ChildFailed, ChildRestarted, IntensityExceeded
from ._intensity import RestartWindow
from ._spec import should_restart

if TYPE_CHECKING:
    from ..actors import ActorSystem

__all__ = ["RootSupervisor"]

_log = logging.getLogger("mainspring.supervision")


class RootSupervisor:
    """Supervises a system's top-level actors; its path in events is ``/``.

    A top-level actor restarts by its restart type (``system.spawn(restart=...)``); past
    ``max_restarts`` restarts within ``period`` seconds (measured with ``clock``, default the
    event loop's) it is stopped for good rather than restarted forever. Crashes, restarts and
    exceeded intensity are published on ``system.events()``. Nothing restarts once the
    system's shutdown began (the kernel does not ask then).
    """

    def __init__(
        self,
        system: ActorSystem,
        *,
        max_restarts: int = 3,
        period: float = 5.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.system = system
        self.max_restarts = max_restarts
        self.period = period
        self._clock = clock
        self._types: dict[Supervised, RestartType] = {}
        self._windows: dict[Supervised, RestartWindow] = {}

    def adopt(self, child: Supervised, restart: RestartType) -> None:
        """Remember a new top-level actor's restart type."""
        if restart != "temporary":  # the default needs no bookkeeping
            self._types[child] = restart

    def may_restart(self, child: Supervised, reason: CancelReason, crashed: bool) -> bool:
        """The restart rule for the actor's restart type."""
        return should_restart(self._types.get(child, "temporary"), crashed=crashed)

    def child_ended(
        self, child: Supervised, reason: CancelReason, crashed: bool, final: bool
    ) -> None:
        """Report the end; restart at once unless the actor's intensity is exceeded."""
        bus = self.system.event_bus
        if final:
            self._types.pop(child, None)
            self._windows.pop(child, None)
            if crashed:
                bus.publish(
                    ChildFailed(supervisor="/", child=child.path, reason=reason, restarting=False)
                )
            return
        window = self._windows.get(child)
        if window is None:
            window = self._windows[child] = RestartWindow(
                self.max_restarts, self.period, self._clock
            )
        if not window.add():
            bus.publish(IntensityExceeded(supervisor="/", restarts=len(window), period=self.period))
            _log.error(
                "%s restarted more than %d times within %g s; stopping it for good",
                child.path,
                self.max_restarts,
                self.period,
            )
            child.finish()  # ends as final: child_ended reports the failure
            return
        if crashed:
            bus.publish(
                ChildFailed(supervisor="/", child=child.path, reason=reason, restarting=True)
            )
        child.restart()
        bus.publish(
            ChildRestarted(supervisor="/", child=child.path, restarts=child.restarts, reason=reason)
        )
