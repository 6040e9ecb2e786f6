"""Stopping a cell: graceful stops, cancels with reasons, and the verdicts between two lives.

``request_stop`` lets the current message finish; ``cancel`` interrupts it and takes the whole
subtree along, each descendant recording a :class:`ParentCancel` before its scope is
cancelled. The first reason recorded wins. A cell overseen by a supervisor may end one
incarnation and wait in RESTARTING for a verdict (``restart`` or ``finish``, see
``_overseer.py``); a stop or cancel from outside (``final``) ends it for good.
"""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from ._cellstate import CellState
from ._context import _current_cell
from ._lifecycle import ActorState
from ._reasons import Cancel, CancelReason, ParentCancel, Stop

__all__ = ["Stopping"]


class Stopping(CellState):
    """Stop, cancel, wait for the end, and the overseer's verdicts."""

    __slots__ = ()

    def _record(self, reason: CancelReason) -> CancelReason:
        if self._reason is None:
            self._reason = reason
        return self._reason

    def _called_from_inside(self) -> bool:
        # The actor itself (or a task it started) asking to stop: a "normal exit" in the
        # supervision sense, which a permanent child's supervisor answers with a restart.
        return _current_cell.get() is self

    def request_stop(self, reason: CancelReason, *, final: bool = True) -> None:
        """Graceful: the current message finishes, then the actor stops.

        ``final`` ends the actor for good even under a supervisor; the supervisor's own
        restarts and an actor stopping itself pass ``final=False``.
        """
        if self.state is ActorState.STOPPED:
            return
        if self.state is ActorState.RESTARTING:
            if final:
                self._end_between_lives(reason)
            return
        self._record(reason)
        self._final = self._final or final
        if final:  # otherwise a restart may follow: keep taking messages for the next life
            self._accepting = False
        if not self._halt:
            self._halt = True
            self.mailbox.wake()

    async def request_stop_and_wait(self, reason: CancelReason | None) -> CancelReason:
        inside = self._called_from_inside()
        self.request_stop(reason if reason is not None else Stop(), final=not inside)
        current = _current_cell.get()
        while current is not None:
            if current is self:  # stopping ourselves or an ancestor: waiting would deadlock
                await checkpoint()
                assert self._reason is not None
                return self._reason
            current = current.parent
        return await self.wait_stopped()

    def cancel(self, reason: CancelReason, *, final: bool | None = None) -> None:
        """Hard: interrupt whatever runs now; the subtree is cancelled with it."""
        if not isinstance(reason, CancelReason):
            raise TypeError(f"cancel() needs a CancelReason, not {type(reason).__qualname__}")
        if self.state is ActorState.STOPPED:
            return
        if final is None:
            final = not self._called_from_inside()
        if self.state is ActorState.RESTARTING:
            if final:
                self._end_between_lives(reason)
            return
        recorded = self._record(reason)
        self._final = self._final or final
        if final:
            self._accepting = False
        self._halt = True
        if self._hard:
            return
        self._hard = True
        if self.mailbox.parked:
            # Idle in its mailbox: nothing to interrupt, so waking it is enough (its loop sees
            # _halt). Far cheaper than a scope cancellation, which for a subtree of thousands
            # of idle actors is most of the cost.
            self.mailbox.wake()
        elif self._scope is not None:
            self._scope.cancel(str(recorded))
        if self._stop_scope is not None:
            self._stop_scope.cancel(str(recorded))
        # The whole subtree goes with it, each link recording which parent it came from, so
        # every descendant's `.root` is this actor's reason (or the one it already had).
        if self._children:
            cause = self._cause_for_children(recorded)
            for child in list(self._children.values()):
                child.cancel(cause, final=True)
        if self.timers:
            for timer in list(self.timers):
                timer.cancel()
        if self.tasks:
            cause = self._cause_for_children(recorded)
            for task in list(self.tasks):
                task.cancel(cause)

    def _end_between_lives(self, reason: CancelReason) -> None:
        # A stop or cancel from outside while the cell waits between two lives (even with a
        # restart already granted but not yet begun) ends it for good, for this new reason.
        self._reason = reason
        self._final = True
        self._give_verdict(restart=False)

    def _cause_for_children(self, reason: CancelReason) -> CancelReason:
        actor = self.actor
        if actor is not None and actor._mainspring_passes_reason:
            return reason  # a supervisor's children observe the supervisor's own reason
        return ParentCancel(reason, source=self.path)

    def reason_if_stopping(self) -> CancelReason | None:
        return self._reason

    def final_reason(self) -> CancelReason:
        reason = self.reason_if_stopping()
        if reason is None:  # cannot happen through the public API; say so rather than guess
            return Cancel(detail="stopped without a recorded reason")
        return reason

    async def wait_stopped(self) -> CancelReason:
        if self.state is not ActorState.STOPPED:
            if self._stopped_event is None:
                self._stopped_event = self.system.new_event()
            await self._stopped_event.wait()
        else:
            await checkpoint()
        return self.final_reason()

    async def wait_incarnation_over(self) -> CancelReason:
        """Wait until the current incarnation ended (RESTARTING or STOPPED); return why."""
        if self.state in (ActorState.RESTARTING, ActorState.STOPPED):
            await checkpoint()
        else:
            if self._over_event is None:
                self._over_event = self.system.new_event()
            await self._over_event.wait()
        return self.final_reason()

    async def wait_started(self) -> bool:
        """Wait until on_start finished (True) or the incarnation ended first (False)."""
        restarting = self.state is ActorState.RESTARTING and self._verdict is True
        if self.state is ActorState.STARTING or restarting:
            if self._started_event is None:
                self._started_event = self.system.new_event()
            await self._started_event.wait()
        else:
            await checkpoint()
        return self.state is ActorState.RUNNING

    @property
    def ending_for_good(self) -> bool:
        """Stopped, or on its way to stopping with no restart possible."""
        return self.state is ActorState.STOPPED or (self._final and self._halt)

    @property
    def crashed_last(self) -> bool:
        """Whether the latest incarnation ended by crashing."""
        return self._crashed_last

    @property
    def awaiting_verdict(self) -> bool:
        """Between two incarnations, with no restart-or-stop decision made yet."""
        return self.state is ActorState.RESTARTING and self._verdict is None

    def restart(self) -> bool:
        """Overseer's verdict: run a fresh instance. False if the cell is not waiting for one."""
        return self._give_verdict(restart=True)

    def finish(self) -> bool:
        """Overseer's verdict: stop for good. False if the cell is not waiting for one."""
        return self._give_verdict(restart=False)

    def _restart_granted(self) -> bool:
        return self._verdict is True

    def _give_verdict(self, *, restart: bool) -> bool:
        if self.state is not ActorState.RESTARTING:
            return False
        if self._verdict is not None:
            if restart or self._verdict is False:
                return False
            self.restarts -= 1  # a granted restart that never began is taken back
        self._verdict = restart
        if restart:
            self.restarts += 1  # now, so a notice about the previous life is already stale
        if self._verdict_event is not None:
            self._verdict_event.set()
        return True
