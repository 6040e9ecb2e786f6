"""The children of an ExecutionActor: what runs each step, and the context an agent gets.

A tool or skill step runs in a task of its execution (``run_step``, started with
``Actor.start_task``: its own cancel scope and reason, no mailbox); an agent step runs in an
``AgentTaskActor`` whose :class:`AgentContext` makes inner steps durable (each is committed,
through the execution, before ``ctx.step`` returns) and meters model and tool calls against
the task's reservation. A planner call runs in a ``PlannerActor``. User code therefore never
runs in the ExecutionActor's own task: the execution stays responsive to pause, cancel and
heartbeats, and cancelling one child interrupts exactly that step, with its reason.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, final

import anyio
import anyio.lowlevel
import anyio.to_thread
import attrs

from ...actors import (
    Actor,
    ActorDeadError,
    ActorFailed,
    ActorRef,
    MainspringError,
    Timeout,
    cancel_reason,
)
from ...storage import (
    AgentTaskRecord,
    Failure,
    Finding,
    Interruption,
    Observation,
    Plan,
    PlanStep,
    Usage,
    redact,
)
from ...storage._seam import (
    MAX_DIAGNOSTICS,
    MAX_FINDINGS,
    MAX_TOUCHED_PATHS,
    appended,
    check_relative_path,
    hash_files,
)
from .._memory.memory import Memory
from .._rules.deadlines import error_types
from .._rules.usage import Allowance, Meter, split_usage
from .context import MAX_INNER_STEPS, AgentContext, call
from .failures import Caught, describe_off_loop
from .findings import new_finding
from .outputs import Stored, prepare_output_off_loop

if TYPE_CHECKING:
    from .._telemetry.spans import TaskSpans

__all__ = [
    "AgentContext",
    "AgentTaskActor",
    "ClarificationNeeded",
    "LeaseCheck",
    "Meter",
    "PlannerActor",
    "PlannerContext",
    "run_step",
]


# -- messages to the execution ---------------------------------------------------------------

#: What a step that reported no usage spent: one frozen record shared by every report.
_NOTHING_SPENT = Usage()


@attrs.frozen
class StepDone:
    """A tool or skill step ended (asked: the answer comes once it is durable)."""

    step_id: str
    ok: bool
    output: Any = None
    error: str | None = None
    stored: Stored | None = None  # the output as it is stored, when ok
    usage: Usage = _NOTHING_SPENT  # what a skill reported (B3), ok or not
    #: The names a retry policy matches the exception by (empty: no exception was raised).
    error_types: tuple[str, ...] = ()
    #: O2: the exception, as a failure keeps it (None: none was raised).
    caught: Caught | None = None
    #: When the call began and ended (the runtime's wall clock; None: not measured).
    started_at: float | None = None
    ended_at: float | None = None


@attrs.frozen
class TaskSave:
    """An agent task's record changed (an inner step, a question, the end); ``output`` is the
    agent's return value when ``record`` is completed."""

    record: AgentTaskRecord
    output: Any = None
    stored: Stored | None = None  # the output as it is stored, when completed
    #: False when ``output`` is itself a masked copy read back from disk (E10): it is not
    #: given to the caller as what the agent returned; the stored, marked one is.
    live: bool = True


@attrs.frozen
class LeaseCheck:
    """An agent asks its execution whether new work may start (L5): answered True at once
    while the lease is fresh, else after a renewal; False if the run is stopping."""


@attrs.frozen
class Planned:
    plan: Plan | None
    error: str | None = None
    question: str | None = None
    caught: Caught | None = None  # O2: the planner's exception, when it raised


class ClarificationNeeded(MainspringError):
    """Raised by a planner that needs a human answer before it can plan.

    The execution waits for clarification; ``resume(id, answer=...)`` appends the answer to
    the goal (R10) and calls the planner again.
    """

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


class SaveRefused(MainspringError):
    """An agent's durable call (``ctx.step``, ``ctx.ask``, a finding) could not be saved:
    its execution is stopping, or this task was stopped or is waiting for an answer.

    Raised into agent code, for example into cleanup that runs after the task was cancelled.
    Nothing more of this task will be saved in this run; let it propagate and unwind.
    """


class CodedFailure(MainspringError):
    """An agent task fails with ``code`` (its record's failure code) and the message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _OverBudget(CodedFailure):
    """An agent task spent its reserved calls or its tool calls: the task fails with
    ``code`` (raised in the agent's code by ``call_skill`` / ``call_tool``)."""


def _timed_out() -> bool:
    """B1: this child was cancelled with ``Timeout`` (its step's, its planner's or its run's
    deadline). What its code returns now came too late: it is not reported as a success
    (blocking code in a worker thread returns whatever the cancellation). The execution,
    which armed the deadline, decides anyway; this keeps the child from claiming otherwise."""
    return isinstance(cancel_reason(), Timeout)


# -- tool and skill steps --------------------------------------------------------------------


async def run_step(step: PlanStep, fn: Callable[..., Any], meter: Meter) -> StepDone | None:
    """Run one tool or skill step, in a task its execution started (``Actor.start_task``),
    and return its report, which reaches the execution with the task's end: no actor and
    no second message per step. The output is prepared for disk here, once (E5, E10, X2).
    None if the step was cancelled with ``Timeout`` (B1): its end is the report then, and
    its usage reaches the execution on ``meter`` (B3)."""
    started = time.time()
    try:
        output, usage = split_usage(await call(fn, **step.input))
        meter.usage = usage  # B3: what the call spent reaches the execution even if stopping
    except (Exception, GeneratorExit) as exc:  # a tool's own GeneratorExit is its failure (O2)
        ended = time.time()
        caught = await describe_off_loop(exc)  # O2
        done = StepDone(
            step.id,
            ok=False,
            error=caught.message,
            error_types=error_types(exc),
            caught=caught,
            started_at=started,
            ended_at=ended,
        )
    else:
        ended = time.time()
        what = f"the output of {step.kind} {step.target}"
        stored = await prepare_output_off_loop(output, what)
        if isinstance(stored, str):  # the call was made: its usage counts (B3)
            done = StepDone(
                step.id, ok=False, error=stored, usage=usage, started_at=started, ended_at=ended
            )
        else:
            done = StepDone(
                step.id,
                ok=True,
                output=output,
                stored=stored,
                usage=usage,
                started_at=started,
                ended_at=ended,
            )
    # Timed out: its end (with Timeout) is the report; the execution decides (B1).
    return None if _timed_out() else done


class PlannerActor(Actor):
    """Calls the user's planner once and reports the plan (or why there is none)."""

    def __init__(self, execution: ActorRef, planner: Callable[..., Any], context: Any) -> None:
        self._execution = execution
        self._planner = planner
        self._context = context

    async def receive(self, message: Any) -> Any:
        try:
            plan = await call(self._planner, self._context.goal, self._context)
        except ClarificationNeeded as exc:
            planned = Planned(None, question=str(exc.question))
        except Exception as exc:  # the user's planner: its failure, stored
            caught = await describe_off_loop(exc)  # O2
            planned = Planned(None, error=caught.message, caught=caught)
        else:
            if isinstance(plan, Plan):
                planned = Planned(plan)
            else:
                planned = Planned(None, error=f"it returned {type(plan).__name__}, not a Plan")
        if not _timed_out():  # B1: a plan made after the timeout is not reported
            with contextlib.suppress(ActorDeadError, ActorFailed):
                await self._execution.ask(planned)
        await self.ref.stop()


@final
@attrs.frozen(kw_only=True)
class PlannerContext:
    """What a planner is told: the goal, and on a replan why and what came before.

    ``failure`` is the evidence of a failed step; ``findings`` is a bounded, fenced brief of
    the active findings (after drift, R6); ``drift`` lists what changed in the workspace.
    """

    goal: str
    execution_id: str
    previous_plan: Plan | None = None
    failure: str | None = None
    findings: str | None = None
    drift: tuple[str, ...] = ()


# -- agent steps -----------------------------------------------------------------------------


AgentFn = Callable[[AgentContext, Any], Awaitable[Any]]


def _leading_out(root: Path, paths: Iterable[str]) -> str | None:
    """The first of ``paths`` that resolves (through symlinks) outside ``root``, or None. A
    path that does not exist yet stays inside; a symlink loop counts as leading out."""
    base = root.resolve()
    for path in paths:
        try:
            inside = (base / path).resolve().is_relative_to(base)
        except (OSError, RuntimeError):  # a symlink loop
            inside = False
        if not inside:
            return path
    return None


class AgentTaskActor(Actor):
    """Runs one agent step as one agent task (its record is the durable state).

    Its crashes (what escapes :meth:`receive`: an agent raising what is no ``Exception``, a
    fault of ours) are logged by its execution, which keeps them on the task (O2): the kernel
    does not log them too. Before it ends, the actor describes what it crashed with on its
    meter, where the execution finds it."""

    _mainspring_crashes_reported = True

    def __init__(
        self,
        execution: ActorRef,
        record: AgentTaskRecord,
        step: PlanStep,
        agent: AgentFn,
        tools: Mapping[str, Callable[..., Any]],
        skills: Mapping[str, Callable[..., Any]],
        max_tool_calls: int,
        meter: Meter | None = None,
        waits_for_budget: bool = False,
        workspace: Path | None = None,
        kept: dict[tuple[str, str], Any] | None = None,
        exhausted: Callable[[], str | None] | None = None,
        allowance: Allowance | None = None,
        memory: Memory | None = None,
        lease_fresh: Callable[[], bool] | None = None,
        spans: TaskSpans | None = None,
    ) -> None:
        #: O1: this task's spans (None: telemetry is off); read by its AgentContext.
        self.spans = spans
        self.memory = memory  # the runtime's (ctx.memory is made from it)
        # L5: whether the execution's lease is known to be live now (read, never awaited)
        self._lease_fresh = lease_fresh
        self._execution = execution
        self._exhausted = exhausted  # the run's token or cost budget that ran out, if any
        self._allowance = allowance  # what this task may spend of tokens and cost (P4)
        self._waits_for_budget = waits_for_budget
        self._workspace = workspace
        # E10: real results of inner steps stored masked, kept by this runtime (memory only)
        self.kept = kept if kept is not None else {}
        self._meter = meter if meter is not None else Meter(record.calls_used, record.usage)
        self.record = record
        self._step = step
        self._agent = agent
        self.tools = tools
        self.skills = skills
        self._max_tool_calls = max_tool_calls
        # Indexes of the record, kept as it grows: looking a step up never scans the steps.
        self._index = {obs.step_id: obs for obs in record.inner_observations}
        self._position = {obs.step_id: i for i, obs in enumerate(record.inner_observations)}
        self._done = set(record.inner_completed)
        self._masked = False  # the output is a masked copy read back from disk (E10)

    def recorded(self, name: str) -> Observation | None:
        if name in self._done:
            return self._index.get(name)
        return None

    def _touch(self, **changes: Any) -> None:
        self.record = attrs.evolve(self.record, updated_at=time.time(), **changes)

    async def _save(
        self,
        output: Any = None,
        stored: Stored | None = None,
        *,
        live: bool = True,
    ) -> None:
        save = TaskSave(self.record, output, stored, live)
        try:
            accepted = await self._execution.ask(save)
        except (ActorDeadError, ActorFailed) as exc:
            raise SaveRefused("the execution is stopping") from exc
        if not accepted:
            raise SaveRefused("the execution refused the save: it is stopping")

    async def live_lease(self) -> None:
        """L5: before a tool call, a model call, a program or a durable step starts, the
        run's lease must be known to be live (a renewal answered in time, younger than the
        lease minus its margin); when it is not, the execution renews it first. An agent
        long at work between saves (a slow model call) never starts its next side effect on
        a lease that lapsed meanwhile. ``SaveRefused`` if the run is stopping instead."""
        if self._lease_fresh is None or self._lease_fresh():
            return
        try:
            live = await self._execution.ask(LeaseCheck())
        except (ActorDeadError, ActorFailed) as exc:
            raise SaveRefused("the execution is stopping") from exc
        if not live:
            raise SaveRefused("the execution is stopping: its lease is not known to be live")

    async def declared(self, paths: Iterable[str]) -> tuple[str, ...]:
        """``paths`` checked (X1: in the workspace, through symlinks too) and within the
        task's bound; raises ValueError before the step runs."""
        if isinstance(paths, str):
            raise TypeError("paths takes a list of paths, not one string")
        declared = tuple(dict.fromkeys(check_relative_path(path) for path in paths))
        known = set(self.record.touched_paths)
        if len(known | set(declared)) > MAX_TOUCHED_PATHS:
            raise ValueError(f"an agent task declares at most {MAX_TOUCHED_PATHS} paths")
        root = self._workspace
        if declared and root is not None:
            out = await anyio.to_thread.run_sync(_leading_out, root, declared)
            if out is not None:
                raise ValueError(f"{out[:200]!r} leads out of the workspace through a symlink")
        return declared

    async def record_inner(
        self, name: str, stored: Stored, paths: tuple[str, ...] = (), *, rerun: bool = False
    ) -> None:
        if _timed_out():
            # B1: the task's timeout fired while the inner step ran (blocking code in a
            # worker thread returns whatever the cancellation): its late value is not
            # recorded as done (``ctx.step``: a cancellation while ``fn`` runs leaves the
            # step unrecorded). The cancellation goes on from here.
            await anyio.lowlevel.checkpoint()
        root = self._workspace
        hashes: dict[str, str] = {}
        if paths and root is not None:  # before reading the record: steps may run in parallel
            hashes = await anyio.to_thread.run_sync(hash_files, root, paths)
        observation = Observation(
            step_id=name, ok=True, output=stored.value, redacted=stored.redacted
        )
        self._index[name] = observation
        record = self.record
        changes: dict[str, Any] = {}
        if paths:
            # R8: the files as this step left them join the task's own checkpoint; one
            # missing now is left out, so its appearing later is drift too.
            touched = tuple(dict.fromkeys((*record.touched_paths, *paths)))
            changes["touched_paths"] = touched
            checkpoint = record.inner_checkpoint
            if root is not None and checkpoint is not None:
                files = {
                    key: value
                    for key, value in (checkpoint.file_hashes or {}).items()
                    if key not in paths
                }
                files.update(hashes)
                changes["inner_checkpoint"] = attrs.evolve(checkpoint, file_hashes=files)
        if rerun:
            # E10: the re-run's result replaces the masked one, and the task says why.
            why = f"inner step {name} ran again on resume: its stored result had been redacted"
            kept = [line for line in record.diagnostics if line != why]
            observations = list(record.inner_observations)
            position = self._position.get(name)
            if position is not None:  # found by index: the steps are not scanned
                observations[position] = observation
            self._touch(
                inner_observations=tuple(observations),
                diagnostics=(*kept, why)[-MAX_DIAGNOSTICS:],
                **changes,
            )
        else:
            # Appended: the previous sequences are left as they are (the execution reuses
            # what it stored of them, see storage._stored_form).
            self._position[name] = len(record.inner_observations)
            self._done.add(name)
            self._touch(
                # Appended to the lists the previous record's views share: step n costs
                # what it adds, not the n before it (AppendOnly).
                inner_completed=appended(record.inner_completed, name),
                inner_observations=appended(record.inner_observations, observation),
                inner_steps_done=min(record.inner_steps_done + 1, MAX_INNER_STEPS),
                **changes,
            )
        await self._save()

    async def wait_for_answer(self, question: str) -> NoReturn:
        """Save the question (P5), then wait to be stopped. The execution cancels this actor
        with ``Stop`` as soon as the question is committed (while this save is still being
        answered), so the agent's code unwinds through anyio's own cancellation, never through
        an exception of ours. ``SaveRefused`` if the save was refused: the execution is stopping.
        """
        self._touch(
            state="waiting_for_clarification",
            pending_question=redact(question),
            pending_question_at=time.time(),
        )
        await self._save()
        await anyio.sleep_forever()  # pragma: no cover - cancelled during the save above
        raise AssertionError("unreachable")  # pragma: no cover

    async def _wait_for_budget(self, budget: str = "calls") -> NoReturn:
        """P4: the run's budget, not this task's reservation, is short. Save the task back
        to queued (interruption ``budget``), then wait to be stopped, as in
        :meth:`wait_for_answer`; the execution waits for budget."""
        now = time.time()
        used = self.record.calls_used
        why = f"the run's {budget} budget ran out after {used} calls of this task"
        self._touch(state="queued", interruption=Interruption(kind="budget", at=now, detail=why))
        await self._save()
        await anyio.sleep_forever()  # pragma: no cover - cancelled during the save above
        raise AssertionError("unreachable")  # pragma: no cover

    def add_finding(self, claim: str, fields: Mapping[str, Any]) -> Finding:
        record = self.record
        if len(record.findings) >= MAX_FINDINGS:
            raise ValueError(f"an agent task keeps at most {MAX_FINDINGS} findings")
        finding = new_finding(record, claim, fields)
        self._touch(findings=(*record.findings, finding))
        return finding

    async def chargecall(self) -> None:
        budget = self._exhausted() if self._exhausted is not None else None
        if budget is not None:  # B3: no model call once the run's tokens or cost ran out
            await self._wait_for_budget(budget)
        over = self._allowance.over(self.record.usage) if self._allowance else None
        if over is not None:
            raise _OverBudget("agent-call-budget", over)
        record = self.record
        if record.calls_used >= record.calls_reserved and self._waits_for_budget:
            await self._wait_for_budget()
        if record.calls_used >= record.calls_reserved:
            raise _OverBudget(
                "agent-call-budget", f"the task's {record.calls_reserved} reserved calls are used"
            )
        self._touch(calls_used=record.calls_used + 1)
        self._meter.calls_used = self.record.calls_used

    def over_budget(self) -> tuple[str, str] | None:
        """B3: the budget this task's usage has reached, if any, as :meth:`chargecall`
        sees it: the run's (``tokens`` / ``cost``) or the task's reservation (``task``)."""
        budget = self._exhausted() if self._exhausted is not None else None
        if budget is not None:
            return budget, f"the run's {budget} budget is exhausted"
        over = self._allowance.over(self.record.usage) if self._allowance else None
        return ("task", over) if over is not None else None

    async def wait_for_budget(self, budget: str) -> NoReturn:
        """The run's ``budget`` ran out under a worker-backed step (see _wait_for_budget)."""
        await self._wait_for_budget(budget)

    def add_usage(self, usage: Usage) -> None:
        if usage:  # B3: only grows; the meter carries it to the execution even unsaved
            self._touch(usage=self.record.usage + usage)
            self._meter.usage = self.record.usage

    def charge_tool(self) -> None:
        record = self.record
        if record.tool_calls_used >= self._max_tool_calls:
            raise _OverBudget(
                "agent-tool-budget", f"the task used its {self._max_tool_calls} tool calls"
            )
        self._touch(tool_calls_used=record.tool_calls_used + 1)

    def output_masked(self, why: str) -> None:
        """The output this task is about to return was read back from disk with secrets
        masked (a worker's sealed delivery): it is stored and reported as redacted, never
        as the original, and the task says why (E10)."""
        self._masked = True
        kept = [line for line in self.record.diagnostics if line != why]
        self._touch(diagnostics=(*kept, why)[-MAX_DIAGNOSTICS:])

    def _fail(self, code: str, message: str, caught: Caught | None = None) -> None:
        failure = Failure(code=code, message=redact(message))
        if caught is not None:  # O2: the traceback is already redacted and bounded
            failure = attrs.evolve(
                failure, error_type=caught.error_type, traceback=caught.traceback
            )
        self._touch(state="failed", ended_at=time.time(), failure=failure)

    async def receive(self, message: Any) -> Any:
        try:
            await self._run()
        except BaseException as exc:
            if not isinstance(exc, SystemExit | KeyboardInterrupt) and cancel_reason() is None:
                # A crash (nobody is stopping this actor): described for the execution, off
                # the loop, shielded so that a cancel meanwhile does not turn it into another
                # end. A cancellation of ours, or the program's end, passes untouched.
                with anyio.CancelScope(shield=True):
                    caught = await describe_off_loop(exc)
                self._meter.crash = Failure(
                    code="agent-failed",
                    message=redact(caught.message),
                    error_type=caught.error_type,
                    traceback=caught.traceback,
                )
            raise

    async def _run(self) -> None:
        output: Any = None
        stored: Stored | None = None
        try:
            try:
                if self.spans is None:
                    output = await self._agent(AgentContext(self), self._step.input)
                else:  # O1: the agent runs with its step's span current
                    with self.spans.running():
                        output = await self._agent(AgentContext(self), self._step.input)
            except CodedFailure as exc:  # over budget, a worker-backed step's failure
                self._fail(exc.code, str(exc))
            except SaveRefused:
                raise
            except Exception as exc:  # the user's agent: its failure, stored
                caught = await describe_off_loop(exc)  # O2
                self._fail("agent-failed", caught.message, caught)
            else:
                what = f"the result of agent {self.record.agent_id}"
                prepared = await prepare_output_off_loop(output, what)
                if isinstance(prepared, str):
                    self._fail("agent-failed", prepared)
                    output = None
                else:
                    stored = Stored(prepared.value, True) if self._masked else prepared
                    self._touch(state="completed", ended_at=time.time())
            # B1: timed out, the task does not end here: the execution fails it with
            # ``agent-timeout`` when this actor ends (its calls reach it on the meter).
            if not _timed_out():
                await self._save(output, stored, live=not self._masked)
        except SaveRefused:
            pass
        await self.ref.stop()
