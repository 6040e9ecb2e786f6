"""What the Runtime hands back besides results: the handle of a run, and the errors that
name an execution (unknown, busy, already there, not waiting for an answer)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

import anyio

from ...actors import MainspringError
from ...storage import Lease
from .._run.results import ExecutionResult

__all__ = [
    "ExecutionBusy",
    "ExecutionExists",
    "ExecutionHandle",
    "NotWaiting",
    "UnknownExecution",
]


class UnknownExecution(MainspringError, LookupError):
    """No execution with this id is stored."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(f"no execution {execution_id!r} in this store")
        self.execution_id = execution_id


class ExecutionBusy(MainspringError):
    """Another owner holds the execution's lease; it can be resumed once that lapses."""

    def __init__(self, execution_id: str, lease: Lease | None, reason: str) -> None:
        super().__init__(f"execution {execution_id} is busy: {reason}")
        self.execution_id = execution_id
        self.lease = lease


class ExecutionExists(MainspringError, ValueError):
    """``start`` was given the id of an execution already stored; nothing was written.

    The caller's fault: ids name one execution for good. A ``ValueError`` too, which is what
    ``start`` raised for this before.
    """

    def __init__(self, execution_id: str) -> None:
        super().__init__(f"an execution {execution_id} already exists")
        self.execution_id = execution_id


class NotWaiting(MainspringError):
    """An answer was given for an execution that is not waiting for one: it is finished,
    or no clarification is open on it (it runs, waits for an approval or budget, or is
    paused with no question). Nothing was stored or changed.

    The caller's fault, or a race the caller lost (the question was answered, or the run
    was cancelled, meanwhile). ``status`` is the execution's status when it was refused.
    """

    def __init__(self, execution_id: str, status: str) -> None:
        super().__init__(
            f"execution {execution_id} is not waiting for an answer (it is {status}); "
            "nothing was stored"
        )
        self.execution_id = execution_id
        self.status = status


@final
class ExecutionHandle:
    """A started or resumed execution: ``await handle.wait()`` gives its result.

    The result comes when the run stops in this process: finished, waiting (for an answer,
    an approval, budget), paused, cancelled, or stopped because its lease was lost.
    """

    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        self._done = anyio.Event()
        self._result: ExecutionResult | None = None
        self._settle: Callable[[ExecutionResult], Awaitable[ExecutionResult]] | None = None
        self._settling = anyio.Lock()
        self._ran_here = False  # set when this runtime spawned the run (recover counts these)

    @property
    def done(self) -> bool:
        """True once the run has stopped in this process (``wait`` returns at once)."""
        return self._result is not None

    def _resolve(
        self,
        result: ExecutionResult,
        settle: Callable[[ExecutionResult], Awaitable[ExecutionResult]] | None = None,
    ) -> None:
        """The run ended here with ``result``; ``settle``, when the runner could not confirm
        its last write, reads where the run stands once that write is done (E2): the first
        ``wait`` runs it, once, for every waiter."""
        if self._result is None:
            self._result = result
            self._settle = settle
            self._done.set()

    async def wait(self) -> ExecutionResult:
        """Wait until the run stops here and return where it stands. Cancelling the wait
        does not affect the run."""
        await self._done.wait()
        settle = self._settle
        if settle is not None:
            async with self._settling:
                if self._settle is not None:
                    assert self._result is not None
                    self._result = await settle(self._result)
                    self._settle = None
        assert self._result is not None
        return self._result

    def __repr__(self) -> str:
        state = self._result.status if self._result is not None else "live"
        return f"<ExecutionHandle {self.execution_id} {state}>"
