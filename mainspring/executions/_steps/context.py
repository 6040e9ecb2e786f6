"""The context an agent gets: durable inner steps, questions, findings, metered calls, and
programs it runs. Every method works through the agent task's actor (``_agent``), which
commits through the execution; this module holds only what the agent's code sees.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Literal, final

import anyio.lowlevel

from ...actors import CancelReason, cancel_reason
from ...storage import Finding, QuestionId, Usage
from ...storage._seam import check_id
from .._memory.memory import AgentMemory
from .._programs.programs import ProgramResult, run_program_result
from .._rules.usage import split_usage
from .outputs import keep_result, prepare_output_off_loop

if TYPE_CHECKING:
    from .children import AgentTaskActor

__all__ = ["MAX_INNER_STEPS", "AgentContext", "call"]

#: The most durable inner steps one agent task keeps (each is one save; their counters are
#: bounded far above this by the record, E8).
MAX_INNER_STEPS = 100_000

#: O1: an inner step's span says whether it ran again on resume (its stored result masked).
_RERUN = "mainspring.inner_step.rerun"


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, awaited if it returned an awaitable (user code may be
    either)."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _no_new_call() -> None:
    """B1: a task that was cancelled (its timeout fired, a pause, a cancel) starts no new
    call: its code may still run on after a cancellation it did not see (blocking code in a
    worker thread returns whatever the cancellation), and the call it starts next (a plain
    tool or step function, which never awaits) would run whole, its side effects and its
    spend after the deadline. The cancellation is raised here instead."""
    await anyio.lowlevel.checkpoint_if_cancelled()


@final
class AgentContext:
    """What an agent gets: durable inner steps, questions, findings, metered calls.

    Created by the runtime, one per run of an agent task; not constructed by users.
    """

    def __init__(self, actor: AgentTaskActor) -> None:
        self._actor = actor
        self._seen: set[str] = set()
        self._asks = 0
        self._memory: AgentMemory | None = None

    @property
    def execution_id(self) -> str:
        """The execution this task belongs to."""
        return self._actor.record.execution_id

    @property
    def task_id(self) -> str:
        """This agent task's id (``<execution id>:t<n>``)."""
        return self._actor.record.id

    @property
    def step_id(self) -> str:
        """The plan step this task runs."""
        return self._actor.record.step_id

    @property
    def calls_remaining(self) -> int:
        """Model calls left in this task's reservation (P4)."""
        record = self._actor.record
        return max(0, record.calls_reserved - record.calls_used)

    @property
    def memory(self) -> AgentMemory:
        """Agent memory (:class:`~mainspring.executions.AgentMemory`): ``remember`` records
        where a fact came from and is idempotent on replay; ``search``, ``get`` and ``list``
        are live reads, not replayed on resume (to replay one, return what you use of it,
        as storable values, from a ``ctx.step`` function)."""
        if self._memory is None:
            base = self._actor.memory
            if base is None:
                raise TypeError("this agent runs without a runtime's memory")
            self._memory = AgentMemory(
                base, execution_id=self.execution_id, task_id=self.task_id, step_id=self.step_id
            )
        return self._memory

    def cancel_reason(self) -> CancelReason | None:
        """Why this task is being cancelled (``Pause``, ``Cancel``, ``ParentCancel``...), or
        None while it is not: read it in ``except``/``finally`` blocks."""
        return cancel_reason()

    async def run(self, argv: Sequence[str] | str, **options: Any) -> ProgramResult:
        """Run a program: :func:`~mainspring.executions.run_program` (same arguments and
        defaults), returning the :class:`~mainspring.executions.ProgramResult`. Not durable
        by itself: a resume runs it again unless it is inside ``ctx.step``. If this task is
        stopped, the program's whole process tree is stopped with it."""
        await _no_new_call()
        await self._actor.live_lease()  # L5
        spans = self._actor.spans
        if spans is None:
            return await run_program_result(argv, **options)
        program = argv if isinstance(argv, str) else (argv[0] if argv else "")
        with spans.span("program", PurePath(str(program).split(" ", 1)[0]).name):
            return await run_program_result(argv, **options)

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        paths: Iterable[str] = (),
        on_redacted: Literal["rerun", "replay"] = "rerun",
    ) -> Any:
        """Run ``fn(*args)`` once, durably: the result is committed before this returns, and
        on a resume of this task it is returned from the record instead of run again (unless
        the task's own checkpoint drifted, R8). ``name`` is an id unique within the task.

        ``paths`` are the workspace files the step reads or writes (relative to the
        workspace, never leading out of it; at most 200 per task). They are hashed as the
        step leaves them and join the task's own checkpoint: if one of them changes (or
        appears, or goes) before a resume, the task's inner work restarts (R8). ``ValueError``,
        before ``fn`` runs, for a path that is not inside the workspace (or leads out of it
        through a symlink).

        The result must be storable exactly (JSON values, or the typed encoding's tuples,
        sets, bytes, datetimes...: see the manual); anything else raises ``ValueError``
        naming the path, before anything is recorded. What is stored is redacted (E5), while
        the first run gets the value itself. A result that redaction changed is not replayed
        as if it were the original (E10): on resume ``fn`` runs again and a diagnostic on
        the task says so; ``on_redacted="replay"`` returns the masked value instead,
        knowingly. Raises ``ValueError`` for a repeated or invalid name. If ``fn`` raises,
        nothing is recorded and the error propagates. A cancellation while ``fn`` runs leaves
        the step unrecorded: it runs again on resume (at-least-once for steps in flight).
        """
        if on_redacted not in ("rerun", "replay"):
            raise ValueError(f"on_redacted must be 'rerun' or 'replay', not {on_redacted!r}")
        check_id(name)
        if QuestionId.is_question(name):
            raise ValueError(f"step names starting with {QuestionId.PREFIX!r} are reserved")
        if name in self._seen:
            raise ValueError(f"inner step {name} ran twice in one task")
        declared = await self._actor.declared(paths)
        self._seen.add(name)
        recorded = self._actor.recorded(name)
        if recorded is not None:
            if not recorded.redacted or on_redacted == "replay":
                return recorded.output
            key = (self.task_id, name)
            if key in self._actor.kept:
                return self._actor.kept[key]  # the value itself, handed over in this process
            # E10: the stored result is masked, not what fn returned: run it again.
        elif len(self._actor.record.inner_completed) >= MAX_INNER_STEPS:
            raise ValueError(f"an agent task keeps at most {MAX_INNER_STEPS} durable steps")
        await _no_new_call()
        await self._actor.live_lease()  # L5: nothing new starts on a lease not known live
        # B3: a model call's WithUsage is charged with the step, so a replay charges nothing.
        spans = self._actor.spans
        if spans is None:
            result, usage = split_usage(await call(fn, *args))
        else:  # O1: the inner step's span, current while fn runs
            with spans.span("inner_step", name, **{_RERUN: recorded is not None}) as span:
                result, usage = split_usage(await call(fn, *args))
                spans.usage(span, usage)
        self._actor.add_usage(usage)  # the call was made: charged even if unstorable
        stored = await prepare_output_off_loop(result, f"inner step {name}")
        if isinstance(stored, str):  # documented: the agent's code gets a ValueError
            raise ValueError(stored)  # noqa: TRY004 - a value that cannot be stored
        rerun = recorded is not None
        await self._actor.record_inner(name, stored, declared, rerun=rerun)
        if stored.redacted:
            keep_result(self._actor.kept, (self.task_id, name), result)
        return result

    async def ask(self, question: str) -> str:
        """Ask a human. The first time, the question is saved, this task's step stays pending
        and the execution waits for clarification (P5): this call does not return in this run.
        Once the question is durable the execution stops this task with a ``Stop`` reason:
        the agent sees an ordinary cancellation (``ctx.cancel_reason()`` says why), which it
        must let propagate (clean up in ``finally``, shielded if the cleanup awaits). On the
        resume that brings the answer, the agent runs again and this call returns it.
        """
        key = QuestionId(self._asks).step_id
        self._asks += 1
        recorded = self._actor.recorded(key)
        if recorded is None:
            await self._actor.wait_for_answer(str(question))  # stopped there, in this run
        return str(recorded.output)

    def report_finding(self, claim: str, **fields: Any) -> Finding:
        """Record a finding on this task (E5: stored once, redacted). It is saved with the
        task's next commit.

        ``fields`` are those of :class:`~mainspring.storage.Finding` an agent may set:
        ``type``, ``subject``, ``verdict``, ``confidence``, ``coverage``, ``source_steps``,
        ``status`` (``active``, ``superseded``, ``contradicted``), ``superseded_by`` and
        ``evidence``: a list of ``{"kind", "ref", "detail", "step_id"}`` mappings (``kind``
        required). A plain string is not evidence: it is refused (``TypeError``); write
        ``{"kind": "note", "detail": text}``. The id, the agent and task ids, the provenance
        (execution and plan version) and the time are the runtime's. Everything the agent
        wrote is redacted. Raises ``ValueError`` past 200 findings or for invalid fields.
        """
        return self._actor.add_finding(claim, fields)

    async def call_skill(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call a skill (a model call): costs 1 call of this task's reservation (P4).

        Once the reservation is spent the task fails with ``agent-call-budget`` — unless the
        reservation was all the run's budget had left: then the task is saved (its durable
        steps kept), the run waits for budget, and this call does not return in this run
        (the agent is stopped like an asking one, see :meth:`ask`); ``resume(id,
        max_calls=...)`` runs the agent again, its recorded steps replayed. Likewise once
        the run's ``max_tokens`` or ``max_cost`` is reached, before the call is made. A skill
        that returns ``WithUsage`` has its usage added to this task's and the run's, and
        this returns its value alone."""
        await _no_new_call()
        await self._actor.live_lease()  # L5
        await self._actor.chargecall()
        value, usage = await self._call("skill", name, self._actor.skills, args, kwargs)
        self._actor.add_usage(usage)
        return value

    def report_usage(self, *, input_tokens: int = 0, output_tokens: int = 0, cost: Any = 0) -> None:
        """Add what a model call made here (not through ``call_skill``) spent to this task's
        and the run's usage (B3), kept even if the task is interrupted before its next save.
        ``ValueError`` / ``TypeError`` for a bad value; nothing is added then."""
        self._actor.add_usage(
            Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost=cost)
        )

    async def call_tool(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call a tool: free in calls, but counted against the per-task tool limit. A tool
        that returns ``WithUsage`` is taken as a tool step takes it (B3): this returns its
        value and its usage is added to this task's and the run's."""
        await _no_new_call()
        self._actor.charge_tool()
        await self._actor.live_lease()  # L5
        value, usage = await self._call("tool", name, self._actor.tools, args, kwargs)
        self._actor.add_usage(usage)
        return value

    async def _call(
        self,
        kind: str,
        name: str,
        registry: Mapping[str, Callable[..., Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Any, Usage]:
        """``registry[name](*args, **kwargs)`` as (value, usage), in its own span when
        telemetry is on (O1)."""
        spans = self._actor.spans
        if spans is None:
            return split_usage(await call(registry[name], *args, **kwargs))
        with spans.span(kind, name) as span:
            value, usage = split_usage(await call(registry[name], *args, **kwargs))
            spans.usage(span, usage)
        return value, usage
