"""What a runtime reports while executions run (V1): ids, states and counts, never text an
agent, a tool or a user wrote. Every event carries the execution id it belongs to.

:data:`RunEvent` is the union of the event classes (what ``Runtime.events()`` yields, with
the kernel's :class:`EventsDropped` when a subscriber fell behind); :class:`RunEventBus`
fans them out to subscribers without ever blocking a run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TypeAlias

import anyio
import attrs

from ..actors import EventsDropped

__all__ = [
    "AgentTaskCompleted",
    "AgentTaskProgress",
    "AgentTaskStarted",
    "AgentTaskStopped",
    "AgentTaskWaiting",
    "ExecutionCancelled",
    "ExecutionCompleted",
    "ExecutionEvent",
    "ExecutionFailed",
    "ExecutionPaused",
    "ExecutionResumed",
    "ExecutionStarted",
    "ExecutionWaiting",
    "RunEvent",
    "RunEventBus",
    "StepFinished",
    "StepStarted",
]


@attrs.frozen(kw_only=True)
class ExecutionEvent:
    """Base of every runtime event."""

    execution_id: str
    at: float


@attrs.frozen(kw_only=True)
class ExecutionStarted(ExecutionEvent):
    """A run began (or resumed) in this process: its plan version and step count."""

    plan_version: int
    steps: int


@attrs.frozen(kw_only=True)
class ExecutionResumed(ExecutionEvent):
    """A resume picked the run up; ``completed`` steps are kept and will not run again."""

    completed: int
    drifted: bool


@attrs.frozen(kw_only=True)
class StepStarted(ExecutionEvent):
    """A step began: ``kind`` is tool, skill or agent."""

    step_id: str
    kind: str


@attrs.frozen(kw_only=True)
class StepFinished(ExecutionEvent):
    """A step ended: ``state`` is succeeded, failed, skipped or cancelled."""

    step_id: str
    state: str
    done: int
    total: int
    calls_used: int


@attrs.frozen(kw_only=True)
class AgentTaskStarted(ExecutionEvent):
    """An agent step's task began (or began again on a resume), holding ``calls_reserved``."""

    task_id: str
    step_id: str
    calls_reserved: int


@attrs.frozen(kw_only=True)
class AgentTaskProgress(ExecutionEvent):
    """An agent's inner step became durable."""

    task_id: str
    inner_done: int
    calls_used: int


@attrs.frozen(kw_only=True)
class AgentTaskWaiting(ExecutionEvent):
    """An agent asked a question; the answer comes with a resume (P5)."""

    task_id: str


@attrs.frozen(kw_only=True)
class AgentTaskCompleted(ExecutionEvent):
    """An agent task ended: ``state`` is completed, failed or cancelled."""

    task_id: str
    state: str
    calls_used: int


@attrs.frozen(kw_only=True)
class AgentTaskStopped(ExecutionEvent):
    """An out-of-band stop of one agent task; ``operation_id`` names that request."""

    task_id: str
    operation_id: str
    state: str


@attrs.frozen(kw_only=True)
class ExecutionWaiting(ExecutionEvent):
    """The run stopped to wait: ``status`` says for what (clarification, approval, budget)."""

    status: str
    task_id: str | None = None


@attrs.frozen(kw_only=True)
class ExecutionPaused(ExecutionEvent):
    """The run paused (R1); ``requeued`` agent tasks went back to queued."""

    requeued: int


@attrs.frozen(kw_only=True)
class ExecutionCancelled(ExecutionEvent):
    """The run was cancelled for good (R2); ``cancelled_tasks`` were stamped."""

    cancelled_tasks: int


@attrs.frozen(kw_only=True)
class ExecutionCompleted(ExecutionEvent):
    """Every step of the run succeeded."""

    steps: int
    calls_used: int


@attrs.frozen(kw_only=True)
class ExecutionFailed(ExecutionEvent):
    """The run failed (``failed`` steps) or stopped without finishing (``status`` is what is
    on disk, e.g. running after a lost lease)."""

    status: str
    failed: int


#: Every event a runtime publishes; ``Runtime.events()`` yields these and ``EventsDropped``.
RunEvent: TypeAlias = (
    ExecutionStarted
    | ExecutionResumed
    | StepStarted
    | StepFinished
    | AgentTaskStarted
    | AgentTaskProgress
    | AgentTaskWaiting
    | AgentTaskCompleted
    | AgentTaskStopped
    | ExecutionWaiting
    | ExecutionPaused
    | ExecutionCancelled
    | ExecutionCompleted
    | ExecutionFailed
)


class _Subscriber:
    __slots__ = ("buffer", "dropped", "items", "wake")

    def __init__(self, buffer: int) -> None:
        self.buffer = buffer
        self.items: deque[RunEvent] = deque()
        self.dropped = 0
        self.wake: anyio.Event | None = None


class RunEventBus:
    """Fan-out of run events to any number of bounded subscribers; closed with the runtime.

    Publishing never blocks and never fails: a subscriber more than ``buffer`` events behind
    loses the oldest and is told how many with an :class:`EventsDropped`, so a slow consumer
    can neither stall a run nor grow memory, and never misses data silently.
    """

    def __init__(self, new_event: Callable[[], anyio.Event]) -> None:
        self._subscribers: set[_Subscriber] = set()
        self._new_event = new_event
        self._closed = False

    @property
    def subscribers(self) -> int:
        """How many iterators are subscribed now."""
        return len(self._subscribers)

    def publish(self, event: RunEvent) -> None:
        """Hand ``event`` to every subscriber (synchronously; never blocks)."""
        for sub in self._subscribers:
            if len(sub.items) >= sub.buffer:
                sub.items.popleft()
                sub.dropped += 1
            sub.items.append(event)
            if sub.wake is not None:
                sub.wake.set()
                sub.wake = None

    def close(self) -> None:
        """End every subscription once it has drained what it holds."""
        self._closed = True
        for sub in self._subscribers:
            if sub.wake is not None:
                sub.wake.set()
                sub.wake = None

    async def subscribe(self, buffer: int) -> AsyncIterator[RunEvent | EventsDropped]:
        """Iterate over events published from the first ``__anext__`` on."""
        if buffer < 1:
            raise ValueError(f"buffer must be at least 1, not {buffer}")
        sub = _Subscriber(buffer)
        self._subscribers.add(sub)
        try:
            while True:
                if sub.dropped:
                    dropped, sub.dropped = sub.dropped, 0
                    yield EventsDropped(dropped)
                elif sub.items:
                    yield sub.items.popleft()
                elif self._closed:
                    return
                else:
                    sub.wake = self._new_event()
                    await sub.wake.wait()
        finally:
            self._subscribers.discard(sub)
