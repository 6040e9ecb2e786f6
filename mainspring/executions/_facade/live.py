"""The registry of a runtime's runs: which are live here (each one's ExecutionActor and the
handle its callers wait on), and what the runtime keeps in memory of their real inputs
(E10, :class:`~.._run.kept.KeptInputs`).

The :class:`~mainspring.Runtime` owns one and is its only writer; recovery, the store's
watcher, prune and the worker controls read it. A live run is reached only through its
actor's mailbox (a control, a stop, a question about its workers): nothing here holds a
run's state.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import attrs

from ...actors import ActorRef
from .._run.kept import KeptInputs
from .handle import ExecutionHandle

__all__ = ["LiveRun", "LiveRuns"]


@attrs.define(eq=False)
class LiveRun:
    """One run live here: its actor, and the handle its callers wait on."""

    ref: ActorRef
    handle: ExecutionHandle
    settling: bool = False  # its final or waiting state is being written


class LiveRuns(Mapping[str, LiveRun]):
    """The runs live in one runtime, by execution id (a read-only mapping to its readers),
    and :attr:`kept`, what the runtime keeps of its runs' real inputs."""

    def __init__(self) -> None:
        self._runs: dict[str, LiveRun] = {}
        self.kept = KeptInputs()

    def __getitem__(self, execution_id: str) -> LiveRun:
        return self._runs[execution_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def add(self, execution_id: str, run: LiveRun) -> None:
        """``run`` is live here now."""
        self._runs[execution_id] = run

    def settling(self, execution_id: str, handle: ExecutionHandle) -> None:
        """The run of ``handle`` is writing its final or waiting state: controls wait for
        it to end instead of reaching an actor that can no longer act on them."""
        run = self._runs.get(execution_id)
        if run is not None and run.handle is handle:
            run.settling = True

    def ended(self, execution_id: str, handle: ExecutionHandle, *, terminal: bool) -> None:
        """The run of ``handle`` ended (a newer run of the same id is left alone); a terminal
        one's kept inputs go."""
        run = self._runs.get(execution_id)
        if run is not None and run.handle is handle:
            del self._runs[execution_id]
        if terminal:
            self.kept.forget(execution_id)
