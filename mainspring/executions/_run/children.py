"""An execution's children: the step and planner children it starts and tracks, their
deadlines and retries (B1), and what their ends mean.

- A step (tool, skill or agent) with a timeout gets a timer when its child starts; if the
  child is still running when it fires, the child is cancelled with ``Timeout`` (its code
  reads it with ``cancel_reason()``). A tool or skill step then fails with an observation
  coded ``step-timeout``; an agent step's task fails with ``Failure(code="agent-timeout")``
  and the observation ``agent-timeout``: its inner steps completed so far stay durable on
  the task record.
- The planner with a timeout is cancelled the same way; the run fails saying so.
- The execution that armed a timeout decides what its child's end is, not the child: once
  its timer fired for an attempt, whatever that attempt reports (a value its blocking code
  returned late, a failure while it unwound, an agent's result or question, a plan) is the
  timeout failure above, retried when the step's policy retries timeouts; so is a report
  handled once the timeout passed by the clock although the timer's message was not handled
  yet (a plain call blocked the event loop past it). A report handled before the timeout
  passed wins: its value is recorded (B1). A child that has not ended ``UNWIND`` seconds
  after its timeout fired (code that cannot be interrupted) is not waited for: its timeout
  is recorded then, as if it had ended; it stays a child until it ends.
- A failed tool or skill step whose retry policy allows another attempt is not failed: the
  failed attempt is committed on its observation (so a crash keeps the count), the step
  waits for its backoff without holding a slot (its timer sends ``RetryDue``; other steps
  run meanwhile), then goes back to the scheduler, which starts it under the same capacity
  and budget rules as any step (a skill attempt costs a call, P4).
- The run's deadline (``Execution.deadline_at``) stops the run with ``Timeout``, which winds
  down like a pause (R1): tasks requeued, ``paused`` committed with the reason on the
  controls, the lease released; ``resume`` goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs

from ...actors import (
    Actor,
    ActorDeadError,
    ActorRef,
    ActorTask,
    CancelReason,
    Crash,
    Timeout,
    Timer,
)
from ...storage import Failure, Observation, PlanStep, RetryPolicy, StepStatus, TaskState, redact
from ...storage._seam import MAX_ATTEMPTS
from .._rules.deadlines import (
    UNWIND,
    Attempt,
    DeadlinePassed,
    PlannerTimedOut,
    RetryDue,
    StepTimedOut,
    UnwindOver,
    attempts_data,
    attempts_of,
    new_attempt,
)
from .._rules.lifecycle import task_move
from .._rules.plan import observe
from .._rules.transitions import clamp_count
from .._steps.children import TaskSave
from .._steps.failures import MAX_TYPE_NAME, Caught, log_failure
from . import events as ev
from .funnel import Funnel
from .messages import Running, Unstorable, for_children
from .state import RunState
from .tasks import TaskBook

__all__ = ["TIMER_MESSAGES", "Children"]

#: The messages of the timers this module arms (B1).
TIMER_MESSAGES = (StepTimedOut, PlannerTimedOut, UnwindOver, RetryDue, DeadlinePassed)

_PROGRAM_ENDING = frozenset({("builtins", "SystemExit"), ("builtins", "KeyboardInterrupt")})

Finish = Callable[[str], Awaitable[None]]  # the run fails with this error

#: A child of the run: an actor (an agent task, the planner) or a task (a tool or skill step).
Child = ActorRef | ActorTask


@attrs.frozen(eq=False)
class _Ended:
    """A child's end, whichever kind of child it was."""

    ref: Child
    reason: CancelReason


class Children:
    """What an execution's children are doing and how long they may (see the module
    docstring). ``advance`` is the run's scheduling loop; ``fail`` ends the run failed."""

    def __init__(
        self,
        actor: Actor,
        state: RunState,
        funnel: Funnel,
        tasks: TaskBook,
        advance: Callable[[], Awaitable[None]],
        fail: Finish,
    ) -> None:
        self._actor = actor
        self._state = state
        self._cfg = state.cfg
        self._funnel = funnel
        self._tasks = tasks
        self._advance = advance
        self._fail = fail
        self._source = actor.ref.path
        self._timers: dict[Any, Timer] = {}  # a child's timeout, until it ends
        #: Steps waiting for their next attempt, with its number. Their status stays
        #: ``running`` (nothing else may start them; a crash resumes them as in flight) but
        #: they hold no slot: they are not in ``running``.
        self.backoff: dict[str, int] = {}
        self._planner_timeout: float | None = None
        #: Children whose timeout fired and that were cancelled with ``Timeout``, until they
        #: end: what they report from then on is the timeout, never a success (B1).
        self._fired: set[Any] = set()
        #: Each child's timeout as a time on the event loop's clock, and what its timer
        #: says when it fires: a report handled once it passed is late even if the timer's
        #: message was not handled yet (B1: see ``_overdue``).
        self._due: dict[Any, tuple[float, str]] = {}
        #: Steps whose timeout was recorded while their child still unwound (``UnwindOver``),
        #: by child: what it reports as it ends (its usage) is charged then (B3).
        self._unwinding: dict[Any, Running] = {}

    # -- starting and tracking ---------------------------------------------------------------

    async def spawn(
        self, step: PlanStep, factory: Callable[..., Actor], *args: Any
    ) -> ActorRef | None:
        """A child for ``step``, or None if this actor started stopping meanwhile (the step
        goes back to pending; what ends the run decides what becomes of it)."""
        try:
            return await self._actor.spawn(factory, *args)
        except ActorDeadError:
            self._state.sched.set(step.id, StepStatus.PENDING)
            return None

    def track(self, running: Running) -> None:
        """A child now runs ``running.step``: known by step and by ref, and watched (a
        task of ours reports its end by itself)."""
        self._state.track(running)
        if isinstance(running.ref, ActorRef):
            self._actor.watch(running.ref)
        self._arm_step(running)  # B1

    async def stop_all(self, reason: CancelReason) -> None:
        """Every child not yet ended is cancelled and awaited: the steps running, the
        planner (step id ""), and an agent that asked, which was told to stop once its
        question was saved (P5)."""
        refs = list(self._state.by_ref)
        for ref in refs:
            ref.cancel(for_children(reason, self._source))
        for ref in refs:
            await ref.wait_stopped()

    # -- arming --------------------------------------------------------------------------------

    def arm_deadline(self) -> None:
        """B1: the run stops with ``Timeout`` when its deadline passes (at once if it has)."""
        at = self._state.rec.deadline_at
        if at is not None:
            self._actor.send_after(max(0.0, at - time.time()), DeadlinePassed())

    def expired(self) -> bool:
        """B1: the run's deadline has passed (a run recovered after it): it stops now with
        ``Timeout``, before anything runs. True if it does."""
        at = self._state.rec.deadline_at
        if at is None or at > time.time():
            return False
        self._actor.stop_self(self._deadline_reason(at))
        return True

    def _deadline_reason(self, at: float) -> Timeout:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
        return Timeout(detail=f"the run's deadline passed ({when} UTC)", source=self._cfg.owner)

    def _arm_step(self, running: Running) -> None:
        seconds = self._cfg.bounds.timeout_for(running.step)
        if seconds is not None:
            message = StepTimedOut(running.step.id, running.ref, seconds)
            self._timers[running.ref] = self._actor.send_after(seconds, message)
            detail = f"step {running.step.id} ran past its timeout of {seconds:g} s"
            self._due[running.ref] = (anyio.current_time() + seconds, detail)

    def arm_planner(self, ref: ActorRef) -> None:
        seconds = self._cfg.bounds.planner_timeout
        self._planner_timeout = seconds
        if seconds is not None:
            self._timers[ref] = self._actor.send_after(seconds, PlannerTimedOut(ref, seconds))
            detail = f"the planner ran past its timeout of {seconds:g} s"
            self._due[ref] = (anyio.current_time() + seconds, detail)

    # -- the timers' messages ----------------------------------------------------------------

    async def timer_message(self, message: Any) -> None:
        st = self._state
        if st.ended:
            return
        if type(message) is StepTimedOut:
            running = st.running.get(message.step_id)
            stopping = running is not None and running.task_id in st.stopping_tasks
            # B1: a step whose report was handled before this message is no longer running
            # (or runs again as another attempt, another ref): the value that arrived first
            # won, and this timer is stale.
            if running is not None and running.ref is message.ref and not stopping:
                detail = f"step {message.step_id} ran past its timeout of {message.seconds:g} s"
                self._fired.add(message.ref)  # B1: from now on its reports are the timeout
                message.ref.cancel(Timeout(detail=detail, source=self._source))  # B1
                self._bound_unwind(message.step_id, message.ref)
        elif type(message) is PlannerTimedOut:
            if st.planning and st.by_ref.get(message.ref) == "":
                detail = f"the planner ran past its timeout of {message.seconds:g} s"
                self._fired.add(message.ref)  # B1: a plan it sends now is not used
                message.ref.cancel(Timeout(detail=detail, source=self._source))  # B1
                self._bound_unwind("", message.ref)
        elif type(message) is UnwindOver:
            await self._unwind_over(message)
        elif type(message) is RetryDue:
            if self.backoff.get(message.step_id) != message.attempt:
                return
            del self.backoff[message.step_id]
            if st.sched.status.get(message.step_id) == "running":
                st.sched.set(message.step_id, StepStatus.PENDING)  # the scheduler starts it again
            await self._advance()
        elif type(message) is DeadlinePassed:
            at = st.rec.deadline_at
            if at is not None and at <= time.time() + 0.001:
                # B1: wound down like a pause (R1), with Timeout as the reason (V3).
                self._actor.stop_self(self._deadline_reason(at))
            elif at is not None:  # the timer woke a little early: wait for the rest
                self.arm_deadline()

    # -- children that do not end when their timeout fired (B1) -------------------------------

    def _bound_unwind(self, step_id: str, ref: Any) -> None:
        """B1: child ``ref`` was cancelled by its timeout; if it has not ended in
        ``UNWIND`` seconds (more for a worker-backed agent, whose process gets its grace),
        its timeout is recorded without it."""
        seconds = UNWIND
        running = self._state.running.get(step_id) if step_id else None
        if running is not None and running.task_id is not None:
            grace = getattr(self._cfg.agents.get(running.step.target), "grace", 0.0)
            if isinstance(grace, int | float) and not isinstance(grace, bool):
                seconds += 2 * float(grace)
        self._actor.send_after(seconds, UnwindOver(step_id, ref))

    async def _unwind_over(self, message: UnwindOver) -> None:
        """B1: a child cancelled by its timeout is still running (code that cannot be
        interrupted: blocking code in a worker thread): its step fails with its timeout now,
        or the run with the planner's, and its retry policy applies, as if it had ended. It
        stays a child until it ends (a wind-down cancels and awaits it); nothing it reports
        is taken (it is cancelled with ``Timeout``), and what it spent is charged as it ends."""
        st = self._state
        if message.ref not in self._fired:
            return  # it ended meanwhile: its end was recorded as usual
        if message.step_id == "":
            if st.planning and st.by_ref.get(message.ref) == "":
                st.planning = False
                seconds = self._planner_timeout or 0.0
                await self._fail(f"the planner timed out after {seconds:g} s")
            return
        running = st.running.get(message.step_id)
        if running is None or running.ref is not message.ref:
            return
        if running.task_id in st.stopping_tasks:
            return
        del st.running[running.step.id]
        self._unwinding[message.ref] = running
        seconds = self._cfg.bounds.timeout_for(running.step) or 0.0
        if running.task_id is not None:
            await self._agent_timed_out(running, seconds)
        else:
            await self.step_timed_out(running, seconds)

    # -- children reporting after their timeout fired (B1) --------------------------------------

    def _overdue(self, ref: Any) -> bool:
        """B1: whether child ``ref``'s timeout has passed, by the clock, whether or not its
        timer's message was handled yet. One that passed is fired now, as the timer would:
        a report handled after a child's timeout is late even when the timer could not run
        in time (a plain tool blocking the event loop past its timeout, a loaded machine),
        so the run decides the same way whichever of the two it handles first."""
        if ref in self._fired:
            return True
        due = self._due.get(ref)
        if due is None or anyio.current_time() < due[0]:
            return False
        self._fired.add(ref)
        ref.cancel(Timeout(detail=due[1], source=self._source))
        return True

    def late(self, running: Running) -> bool:
        """B1: ``running``'s timeout passed (its child is cancelled with ``Timeout``) before
        its report was handled: the report is the timeout, whatever it says."""
        return running.task_id not in self._state.stopping_tasks and self._overdue(running.ref)

    async def step_done_late(self, running: Running) -> bool:
        """B1: a tool or skill step reported after its timeout fired (blocking code in a
        worker thread returns its value whatever the cancellation): it fails
        ``step-timeout``, or waits for its next attempt when its policy retries timeouts,
        exactly as if it had unwound without reporting. False: the report is not taken."""
        # Still a child until it ends (a wind-down cancels and awaits it); its end, no
        # longer running its step, changes nothing.
        del self._state.running[running.step.id]
        seconds = self._cfg.bounds.timeout_for(running.step) or 0.0
        await self.step_timed_out(running, seconds)
        return False

    async def saved_late(self, save: TaskSave) -> bool:
        """B1: an agent whose timeout fired ends with ``agent-timeout`` whatever it reports
        now (a result, a failure, a question, a wait for budget); True if so. Its inner
        steps saved before stay durable; progress it saves while it unwinds (state
        ``running``) is recorded as usual."""
        st = self._state
        task = save.record
        running = st.running.get(task.step_id)
        if (
            running is None
            or running.task_id != task.id
            or task.state == "running"
            or st.ended
            or not self.late(running)
        ):
            return False
        del st.running[running.step.id]  # its end changes nothing (see above)
        seconds = self._cfg.bounds.timeout_for(running.step) or 0.0
        await self._agent_timed_out(running, seconds)
        return True

    def planned_late(self) -> bool:
        """B1: the planner's timeout fired before its plan (or question) was handled: it is
        not used; the planner's end, with ``Timeout``, fails the run."""
        return any(
            step_id == "" and self._overdue(ref)
            for ref, step_id in list(self._state.by_ref.items())
        )

    # -- children ending -----------------------------------------------------------------------

    async def ended(self, ref: Child, reason: CancelReason) -> None:
        """Child ``ref`` ended with ``reason``: a timeout it ran into is recorded (B1); one
        that ended without reporting crashed; a task being stopped is recorded stopped (S1)."""
        st = self._state
        notice = _Ended(ref, reason)
        self._fired.discard(notice.ref)
        self._due.pop(notice.ref, None)
        unwound = self._unwinding.pop(notice.ref, None)
        if unwound is not None:  # B3: what it spent while it unwound still counts
            st.charge_unsaved(unwound)
        timer = self._timers.pop(notice.ref, None)
        if timer is not None:
            timer.cancel()
        if isinstance(notice.reason, Timeout) and not st.ended:
            step_id = st.by_ref.get(notice.ref)
            if step_id == "":
                del st.by_ref[notice.ref]
                planning, st.planning = st.planning, False
                if st.plan is None or planning:
                    seconds = self._planner_timeout or 0.0
                    await self._fail(f"the planner timed out after {seconds:g} s")
                return
            running = st.running.get(step_id) if step_id is not None else None
            if (
                running is not None
                and running.ref is notice.ref
                and running.task_id not in st.stopping_tasks
            ):
                del st.by_ref[notice.ref]
                del st.running[running.step.id]
                seconds = self._cfg.bounds.timeout_for(running.step) or 0.0
                if running.task_id is not None:
                    await self._agent_timed_out(running, seconds)
                else:
                    await self.step_timed_out(running, seconds)
                return
        await self._ended_otherwise(notice)

    async def _ended_otherwise(self, notice: _Ended) -> None:
        st = self._state
        step_id = st.by_ref.pop(notice.ref, None)
        if step_id is None or st.ended:
            return
        reason = notice.reason
        if isinstance(reason, Crash) and (reason.module, reason.error_type) in _PROGRAM_ENDING:
            # SystemExit / KeyboardInterrupt in the child's code: the program is ending and
            # the system shuts down (this run with it). Nothing failed: the run is left as a
            # shutdown leaves it, for a resume (R3); its unsaved calls are charged then.
            return
        if step_id == "":  # the planner ended; it reported unless it crashed
            planning, st.planning = st.planning, False
            if (st.plan is None or planning) and isinstance(notice.reason, Crash):
                await self._fail(f"the planner crashed: {notice.reason}")
            return
        running = st.running.get(step_id)
        if running is None or running.ref is not notice.ref:
            return
        del st.running[step_id]
        now = time.time()
        step = running.step
        st.charge_unsaved(running)
        if running.task_id is not None and running.task_id in st.stopping_tasks:
            await self._tasks.stopped(running, now)
            return
        # The child ended without reporting: it crashed. O2: what it crashed with, as the
        # agent task's actor described it before it ended (the kernel does not log it), is
        # kept on the task and logged here, once, with its traceback.
        crash = running.meter.crash if running.meter is not None else None
        error = redact(str(notice.reason))
        error_type = crash.error_type if crash is not None else None
        if error_type is None and isinstance(reason, Crash):
            error_type = reason.error_type[:MAX_TYPE_NAME] or None
        traceback = crash.traceback if crash is not None else None
        st.sched.set(step_id, StepStatus.FAILED)
        st.obs[step_id] = observe(
            step,
            ok=False,
            error=error,
            code="agent-failed" if step.kind == "agent" else None,
            agent_task_id=running.task_id,
            error_type=error_type,  # the traceback is kept once, on the task's failure
            traceback=traceback if running.task_id is None else None,
            started_at=running.started_at,
            ended_at=now,
        )
        log_failure(  # O2
            f"step {step_id} ({step.kind} {step.target}) crashed",
            execution_id=st.rec.id,
            step_id=step_id,
            agent_task_id=running.task_id,
            error=error,
            traceback=traceback,
        )
        if running.task_id is not None:
            task = st.tasks[running.task_id]
            failure = Failure(
                code="agent-failed", message=error, error_type=error_type, traceback=traceback
            )
            st.set_task(
                attrs.evolve(task, state="failed", ended_at=now, updated_at=now, failure=failure)
            )
        if await self._funnel.commit():
            self._funnel.publish_step(step_id, "failed")
            await self._advance()

    async def step_timed_out(self, running: Running, seconds: float) -> None:
        st = self._state
        step = running.step
        started_at = running.started_at
        st.charge_unsaved(running)  # B3: what a late result reported still counts
        error = f"timed out after {seconds:g} s"
        changes: dict[str, Any] = {}
        if step.kind == "skill":  # the model call was made, whatever came of it (P4)
            changes["calls_used"] = clamp_count(st.rec.calls_used + 1)
        if await self.retry_later(
            step, error, (), timed_out=True, changes=changes, started_at=started_at
        ):
            return
        st.sched.set(step.id, StepStatus.FAILED)
        message, data = self.last_attempt(
            step, ok=False, error=error, timed_out=True, started_at=started_at
        )
        st.obs[step.id] = observe(
            step, ok=False, error=message, code="step-timeout", data=data,
            calls_used=1 if step.kind == "skill" else 0,
            started_at=started_at, ended_at=time.time(),
        )  # fmt: skip
        log_failure(  # O2
            f"step {step.id} ({step.kind} {step.target}) failed",
            execution_id=st.rec.id,
            step_id=step.id,
            error=message,
            attempt=data.get("attempt"),
        )
        if await self._funnel.commit(**changes):
            self._funnel.publish_step(step.id, "failed")
            await self._advance()

    async def _agent_timed_out(self, running: Running, seconds: float) -> None:
        """The task fails with ``agent-timeout``; its durable inner steps stay (B1)."""
        assert running.task_id is not None
        st = self._state
        st.charge_unsaved(running)
        now = time.time()
        step = running.step
        error = f"the agent timed out after {seconds:g} s"
        task = st.tasks[running.task_id]
        if not task.terminal:
            task = attrs.evolve(
                task,
                state=task_move(task.id, task.state, TaskState.FAILED),
                failure=Failure(code="agent-timeout", message=error),
                ended_at=now,
                updated_at=now,
            )
            st.set_task(task)
        st.sched.set(step.id, StepStatus.FAILED)
        st.obs[step.id] = Observation(
            step_id=step.id,
            agent=step.target,
            agent_task_id=task.id,
            ok=False,
            error=error,
            code="agent-timeout",
            finding_ids=tuple(f.id for f in task.findings),
            calls_used=task.calls_used,
            started_at=task.started_at,
            ended_at=task.ended_at,
        )
        log_failure(  # O2
            f"step {step.id} (agent {step.target}) failed",
            execution_id=st.rec.id,
            step_id=step.id,
            agent_task_id=task.id,
            error=error,
        )
        if not await self._funnel.commit():
            return
        self._funnel.publish(
            ev.AgentTaskCompleted(
                execution_id=st.rec.id,
                at=now,
                task_id=task.id,
                state="failed",
                calls_used=task.calls_used,
            )
        )
        self._funnel.publish_step(step.id, "failed")
        await self._advance()

    # -- retries -----------------------------------------------------------------------------

    def _attempts_so_far(self, step: PlanStep) -> list[Attempt]:
        observation = self._state.obs.get(step.id)
        if observation is not None and (observation.tool, observation.skill) != (
            step.tool,
            step.skill,
        ):
            return []  # a replan gave the step id another target (R6): its own count
        return attempts_of(observation)

    def attempt_of(self, step: PlanStep) -> int:
        """The number of ``step``'s attempt that starts now: one past its failed attempts
        kept on the record (a run resumed while the step waited to retry goes on counting)."""
        before = self._attempts_so_far(step)
        return before[-1].attempt + 1 if before else 1

    async def retry_later(
        self,
        step: PlanStep,
        error: str,
        error_types: tuple[str, ...],
        *,
        timed_out: bool = False,
        changes: dict[str, Any] | None = None,
        caught: Caught | None = None,
        started_at: float | None = None,
    ) -> bool:
        """True if ``step``'s failed attempt was committed and another is due after its
        backoff; False if the policy gives up (or there is none): the caller fails it.
        ``caught`` and ``started_at``: the attempt's exception and start, kept with it (O2)."""
        st = self._state
        policy = self._cfg.bounds.retry_for(step)
        if policy is None or not policy.retries(error_types, timed_out=timed_out):
            return False
        before = self._attempts_so_far(step)
        number = before[-1].attempt + 1 if before else 1
        if number >= policy.max_attempts:
            return False
        attempt = _failed_attempt(number, error, timed_out, caught, started_at)
        attempts = [*before, attempt]
        delay = policy.delay(number)
        st.obs[step.id] = observe(
            step,
            ok=False,
            error=redact(f"attempt {number} of {policy.max_attempts} failed: {error}")[:500],
            code="step-timeout" if timed_out else None,
            data=attempts_data(attempts, policy, "retrying", delay),
            error_type=attempt.error_type,
            traceback=attempt.traceback,
            started_at=started_at,
            ended_at=attempt.at,
        )
        log_failure(  # O2
            f"step {step.id} ({step.kind} {step.target}) failed on attempt {number} of "
            f"{policy.max_attempts}; it will be tried again",
            execution_id=st.rec.id,
            step_id=step.id,
            error=error,
            traceback=attempt.traceback,
            attempt=number,
            level=logging.WARNING,  # not failed for good: the step is tried again
        )
        # The step stays ``running`` while it waits; it holds no slot (not in running).
        self.backoff[step.id] = number + 1
        try:
            committed = await self._funnel.commit(**(changes or {}))
        except Unstorable:
            self.backoff.pop(step.id, None)
            return False
        if not committed:
            return True  # the run is stopping; nothing more is ours to do
        self._funnel.publish(
            ev.StepRetrying(
                execution_id=st.rec.id,
                at=time.time(),
                step_id=step.id,
                attempt=number,
                max_attempts=policy.max_attempts,
                delay=delay,
                timed_out=timed_out,
            )
        )
        self._actor.send_after(delay, RetryDue(step.id, number + 1))
        await self._advance()
        return True

    def last_attempt(
        self,
        step: PlanStep,
        *,
        ok: bool,
        error: str | None,
        timed_out: bool = False,
        caught: Caught | None = None,
        started_at: float | None = None,
    ) -> tuple[str | None, dict[str, Any]]:
        """The error and ``data`` of the observation that ends ``step``: with its attempts
        when it had a policy (every failed one, and this one if it failed)."""
        policy: RetryPolicy | None = self._cfg.bounds.retry_for(step)
        before = self._attempts_so_far(step)
        if not before and (policy is None or ok):
            return error, {}
        if policy is None:
            # B1: the attempts are durable even when this runtime lacks the policy that made
            # them (another process's default): kept, and this one is the last.
            stored = self._state.obs[step.id].data.get("max_attempts")
            most = stored if type(stored) is int and 1 <= stored <= MAX_ATTEMPTS else 1
            policy = RetryPolicy(max_attempts=min(max(most, before[-1].attempt + 1), MAX_ATTEMPTS))
        number = before[-1].attempt + 1 if before else 1
        attempts = list(before)
        if not ok:
            attempts.append(_failed_attempt(number, error or "", timed_out, caught, started_at))
            if number >= policy.max_attempts > 1:
                error = f"{error} (gave up after {number} attempts)"
            elif number < policy.max_attempts:
                error = f"{error} (attempt {number}; this error is not retried)"
        data = attempts_data(attempts, policy, "ended")
        data["attempt"] = number
        return error, data


def _failed_attempt(
    number: int,
    error: str,
    timed_out: bool,
    caught: Caught | None,
    started_at: float | None,
) -> Attempt:
    return new_attempt(
        number,
        error,
        timed_out=timed_out,
        started_at=started_at,
        error_type=caught.error_type if caught is not None else None,
        traceback=caught.traceback if caught is not None else None,
    )
