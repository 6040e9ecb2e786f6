"""The Runtime: the facade users hold to start, steer and watch durable executions.

``open_runtime`` (``_open``) runs an actor system, one persistence actor (the only writer) and
an ``executions`` actor under which every ExecutionActor lives. Controls reach a run live in this
process directly (its actor stops with ``Pause`` or ``Cancel``); a run live in another process
is reached through the store (an atomic ``edit``), which that runner meets at its next commit
or heartbeat (E2, E3). Those edits are in ``_record_controls``; handles and the errors naming
an execution in ``_handle``; the default home and store selection live in storage.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Collection
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any, final, overload

import anyio
import anyio.to_thread
import attrs

from ...actors import (
    Actor,
    ActorDeadError,
    ActorRef,
    Cancel,
    CancelReason,
    EventsDropped,
    MainspringError,
    NameTaken,
    Pause,
)
from ...storage import (
    AgentTaskRecord,
    Execution,
    HistoryEvent,
    Lease,
    Plan,
    Store,
    redact,
)
from ...storage._seam import EXECUTION_TERMINAL, MAX_COUNTER, Edit, check_id, holder, owner_gone
from .._memory.memory import Memory
from .._rules.deadlines import check_deadline, resumed_deadline
from .._rules.plan import InvalidPlan, check_plan, unrunnable
from .._rules.transitions import bounded_reason
from .._rules.usage import check_limits
from .._run import log as _log
from .._run.actor import ExecutionActor
from .._run.events import RunEvent, RunEventBus
from .._run.kept import KeptInputs
from .._run.messages import Begin, RunConfig, RunServices, RunWatcher, StopTask
from .._run.refusals import end_event
from .._run.results import ExecutionResult, StopResult, result_from, stored_plan
from .._steps.failures import log_dropped
from .._workers import fleet
from .answers import answer_elsewhere, check_answer, request_answer
from .handle import ExecutionBusy, ExecutionExists, ExecutionHandle, NotWaiting, UnknownExecution
from .history_follow import EventStreams, HistoryFollowers
from .live import LiveRun, LiveRuns
from .prune import PRUNABLE, PruneReport, prune
from .record_controls import (
    StoredTaskStop,
    answer_waiting,
    cancel_edit,
    pause_edit,
    prepare_resume,
    question_answered,
    unreadable_asker,
    unreadable_asker_error,
    waits_for_answer,
)
from .recovery import Recovery, RecoveryReport, recoverable
from .workers import WorkerControls, WorkersView

__all__ = ["Executions", "Runtime"]

MAX_EXECUTION_ID = 200  # leaves room for task ids (execution id + ":t<n>") within 256


@attrs.frozen
class _Spawn:
    cfg: RunConfig
    services: RunServices
    kept: KeptInputs
    record: Execution
    live_plan: Plan | None
    begin: Begin
    watcher: RunWatcher


class Executions(Actor):
    """The parent of every ExecutionActor of a runtime."""

    async def receive(self, message: Any) -> Any:
        assert isinstance(message, _Spawn)
        try:
            ref = await self.spawn(
                ExecutionActor,
                message.cfg,
                message.services,
                message.kept,
                message.record,
                message.watcher,
                message.live_plan,
                name=message.record.id,
            )
        except NameTaken as exc:  # answered, not raised: one bad request must not crash us
            return exc
        ref.tell_nowait(message.begin)
        return ref


#: Why an answer to a question that has one stored already is refused.
_ANSWERED = "its open question has an answer already, waiting for its task to take it"


class _NotOrphaned(Exception):
    """Recovery's resume found, under the store's lock, a run that is no longer one to
    recover (paused, or waiting, from elsewhere since it was read): its status."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


@final
class Runtime:
    """Start, steer and watch durable executions; see :func:`open_runtime`.

    It holds the runtime's options (``cfg``), its services, and the registry of its runs
    (:class:`LiveRuns`), which it alone writes; a live run is reached through its actor's
    mailbox only."""

    def __init__(
        self,
        cfg: RunConfig,
        services: RunServices,
        executions: ActorRef,
        bus: RunEventBus,
    ) -> None:
        committer = services.committer
        self._cfg = cfg
        self._services = services
        self._committer = committer
        self._store = committer.store
        self._executions = executions
        self._bus = bus
        self._followers = HistoryFollowers(committer.store, committer.durable)
        self._streams = EventStreams(bus, self._followers)
        self._live = LiveRuns()
        self._workers = WorkerControls(services, self._live)
        # L8: finds runs nobody runs (here on request, and all along once open_runtime
        # starts its watch).
        telemetry = services.telemetry
        self._recovery = Recovery(
            committer.store,
            self._live,
            self._recover_one,
            rescan=cfg.heartbeat_interval,
            recovered=telemetry.recovered if telemetry is not None else None,
        )
        # One control at a time per execution in this runtime: two resumes of one id must
        # not both spawn it, a stop must not interleave with a resume.
        self._locks: dict[str, list[Any]] = {}
        # Out-of-run edits (stopping a stored task) take the lease under their own name, so
        # they never release a lease a run of this runtime holds.
        self._stop_stored_task = StoredTaskStop(
            committer=committer,
            owner=cfg.owner,
            operator=f"{cfg.owner}:ops",
            lease_ttl=cfg.lease_ttl,
            publish=bus.publish,
            agents=cfg.agents,
        )

    @asynccontextmanager
    async def _exclusive(self, execution_id: str) -> AsyncIterator[None]:
        entry = self._locks.setdefault(execution_id, [anyio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[execution_id]

    async def _settled(self, execution_id: str) -> LiveRun | None:
        """The run live here, or None; a run that is already ending is waited for first,
        so that a control never lands on an actor that can no longer act on it."""
        live = self._live.get(execution_id)
        if live is not None and (live.settling or not live.ref.is_alive):
            await live.handle.wait()
            return None
        return live

    @property
    def owner(self) -> str:
        """This runtime's lease owner id (``host:pid:random:started.boot.ns``, see
        ``storage.new_owner_id``)."""
        return self._cfg.owner

    @property
    def memory(self) -> Memory:
        """Agent memory: facts that outlive runs (see :class:`Memory`)."""
        assert self._services.memory is not None  # open_runtime always makes one
        return self._services.memory

    @property
    def store(self) -> Store:
        """The backend this runtime writes to (through its persistence actor only)."""
        return self._store

    # -- starting and resuming -------------------------------------------------------------

    async def start(
        self,
        goal: str,
        plan: Plan | None = None,
        *,
        execution_id: str | None = None,
        max_calls: int | None = None,
        max_tokens: int | None = None,
        max_cost: Decimal | float | int | str | None = None,
        deadline: float | None = None,
    ) -> ExecutionHandle:
        """Store a new execution and run it; the planner plans when no ``plan`` is given.
        ``max_calls``, ``max_tokens`` and ``max_cost`` bound this run instead of the
        runtime's defaults (P4, B3).

        ``deadline`` (seconds) bounds the whole run, wall-clock from now, across resumes:
        when it passes the run stops with ``Timeout`` and is left ``paused`` (B1); see
        :meth:`resume`.

        Raises ``InvalidPlan`` for a plan that is not a runnable DAG (P1),
        :class:`ExecutionExists` for an id already stored, ``RecordError`` (a
        ``StorageError``) for an id whose stored record cannot be read (a journal cut short
        included: unreadable is not absent, and it is never written over) and ``ValueError``
        (``InvalidId``) for an invalid one; nothing is stored then. Returns once the execution is
        durable and its actor started. If the caller is cancelled meanwhile, the execution may
        already be stored (the write itself is never interrupted): ``get`` or ``recover``
        tells.
        """
        if not isinstance(goal, str):
            raise TypeError(f"goal must be a string, not {type(goal).__name__}")
        if execution_id is None:  # "" is refused like everywhere else, never replaced
            execution_id = f"ex-{secrets.token_hex(8)}"
        check_id(execution_id)
        if len(execution_id) > MAX_EXECUTION_ID:
            raise ValueError(f"execution ids are at most {MAX_EXECUTION_ID} characters")
        if max_calls is not None and not 0 <= max_calls <= MAX_COUNTER:
            raise ValueError(f"max_calls must be within 0..{MAX_COUNTER:,}")
        tokens, cost = check_limits(max_tokens, max_cost)
        deadline = check_deadline(deadline)
        cfg = self._cfg
        if plan is not None:
            check_plan(plan, tools=cfg.tools, skills=cfg.skills, agents=cfg.agents)
            # Only a step not pending already is rebuilt (a plan is usually given fresh).
            plan = attrs.evolve(
                plan,
                version=max(plan.version, 1),
                requires_approval=plan.requires_approval or cfg.require_plan_approval,
                steps=tuple(
                    step if step.status == "pending" else attrs.evolve(step, status="pending")
                    for step in plan.steps
                ),
            )
        stored, masked = stored_plan(plan) if plan is not None else (None, ())
        now = time.time()
        record = Execution(
            id=execution_id,
            goal=redact(goal),
            status="planned",
            plan=stored,
            masked_inputs=masked,
            plan_version=plan.version if plan is not None else 0,
            lease=Lease(owner=cfg.owner, expires_at=now + cfg.lease_ttl, epoch=1),
            max_calls=max_calls,
            max_tokens=tokens,
            max_cost=cost,
            deadline_at=now + deadline if deadline is not None else None,
            created_at=now,
            updated_at=now,
        )
        # The lease's expiry is the store's clock's (a shared server's), never this host's.
        if not await self._committer.create(record, lease_ttl=cfg.lease_ttl):
            raise ExecutionExists(execution_id)
        if plan is not None and record.masked_inputs:
            self._live.kept.keep_plan(record.id, plan)
        return await self._spawn(record, plan, Begin(resumed=False))

    async def _spawn(
        self, record: Execution, live_plan: Plan | None, begin: Begin
    ) -> ExecutionHandle:
        handle = ExecutionHandle(record.id)
        runs = self._live

        class Watch:
            def settling(self) -> None:
                runs.settling(record.id, handle)

            def ended(self, result: ExecutionResult, *, settled: bool = True) -> None:
                runs.ended(record.id, handle, terminal=result.status in EXECUTION_TERMINAL)
                handle._resolve(result, None if settled else settle)

        async def settle(result: ExecutionResult) -> ExecutionResult:
            # E2: the writer handles one message at a time, so once it answers this ask the
            # write under way when the wind-down was cut short is done (or failed): the store
            # then says where the run stands. The live outputs are kept (E10).
            try:
                await self._committer.stats()
                stored = await self._require(record.id)
            except (MainspringError, OSError):
                return result  # the runtime closed: the runner's last state is all there is
            if stored.status == result.status:
                return result
            return result_from(stored, outputs=result.outputs, stopped_by=result.stopped_by)

        telemetry = self._services.telemetry
        if telemetry is not None:  # O1: the run is traced under the caller's span
            begin = attrs.evolve(begin, caller=telemetry.current())
        spawn = _Spawn(self._cfg, self._services, runs.kept, record, live_plan, begin, Watch())
        ref = await self._executions.ask(spawn)
        if isinstance(ref, NameTaken):
            raise ExecutionBusy(record.id, record.lease, "it is already running in this runtime")
        runs.add(record.id, LiveRun(ref, handle))
        handle._ran_here = True
        return handle

    async def get(self, execution_id: str) -> Execution | None:
        """The stored execution, or None. Reading never writes (E7). Raises ``InvalidId`` for
        a malformed id, ``RecordError``/``TooLarge`` for an unreadable record. The read runs
        in a worker thread; cancelling the caller abandons it."""
        check_id(execution_id)
        return await anyio.to_thread.run_sync(self._store.get, execution_id)

    async def _require(self, execution_id: str) -> Execution:
        stored = await self.get(execution_id)
        if stored is None:
            raise UnknownExecution(execution_id)
        return stored

    async def resume(
        self,
        execution_id: str,
        *,
        answer: str | None = None,
        approve: bool = False,
        max_calls: int | None = None,
        max_tokens: int | None = None,
        max_cost: Decimal | float | int | str | None = None,
        deadline: float | None = None,
    ) -> ExecutionHandle:
        """Continue a stored execution here (after a pause, a question, a crash, elsewhere).

        A terminal execution is left alone and its result returned (R4); one waiting for an
        agent's answer with no ``answer`` given is left alone (R5). Otherwise the lease is
        acquired (``ExecutionBusy`` if another owner holds it), tasks left running by a crash
        are requeued (R3), the answer goes to the task that asked (R8, R9) or, for an outer
        question, is appended to the goal (R10), and the run goes on: from its plan, or from
        a new one if the workspace drifted (R6, R7). ``max_calls``, ``max_tokens`` and
        ``max_cost`` set the run's budgets (B3: a run waiting for budget goes on once the one
        that ran out has room again).
        ``deadline`` (seconds from now) replaces the run's deadline; without it a deadline
        not yet passed stands, and one that passed is dropped for a paused or waiting run
        (resuming is the decision to go on) but kept for a run a crash left running, which
        then stops again with ``Timeout`` at once (B1).
        Raises :class:`UnknownExecution` for an id not stored, and :class:`NotWaiting` for an
        ``answer`` to a run that waits for none (finished, or with no clarification open):
        the answer is never dropped silently, and nothing changes; likewise
        :class:`ExecutionBusy` for an ``answer`` to a question that has one stored already
        (by :meth:`answer`), and :class:`InvalidPlan` for a run whose unfinished steps name
        a tool, skill or agent this runtime does not have. Cancelling the caller before the
        run is started here lets go of a lease it had taken (the resume's edit may have
        landed: the run is then one to recover). To answer without running the rest of the
        run here, see :meth:`answer`.
        """
        if max_calls is not None and not 0 <= max_calls <= MAX_COUNTER:
            raise ValueError(f"max_calls must be within 0..{MAX_COUNTER:,}")
        if answer is not None:
            check_answer(answer)
        limits = check_limits(max_tokens, max_cost)
        deadline = check_deadline(deadline)
        async with self._exclusive(execution_id):
            return await self._resume(execution_id, answer, approve, max_calls, limits, deadline)

    async def _resume(
        self,
        execution_id: str,
        answer: str | None,
        approve: bool,
        max_calls: int | None,
        limits: tuple[int | None, Decimal | None] = (None, None),
        deadline: float | None = None,
        *,
        recovering: bool = False,
    ) -> ExecutionHandle:
        # A budget or a deadline is set: not something an answer to a live run can carry.
        raises = max_calls is not None or limits != (None, None) or deadline is not None
        if answer is not None:
            waiting = await self._waiting(execution_id)  # NotWaiting: never dropped
            unreadable = unreadable_asker(waiting)
            if unreadable is not None:
                raise unreadable_asker_error(execution_id, unreadable)  # E8: not "busy"
            if question_answered(waiting):
                raise ExecutionBusy(execution_id, None, _ANSWERED)
        live = await self._settled(execution_id)
        if live is not None:
            if answer is not None and not approve and not raises:
                owner = self._cfg.owner
                if await request_answer(self._committer, owner, execution_id, answer, live.ref):
                    return live.handle  # R8: its task takes the answer at once
            if answer is not None or approve or raises:
                raise ExecutionBusy(
                    execution_id,
                    None,
                    "it is running in this runtime; approve or raise its budget once it "
                    "waits (handle.wait() returns then)",
                )
            return live.handle
        stored = await self._require(execution_id)
        handle = ExecutionHandle(execution_id)
        pending = stored.pending
        if stored.terminal or (
            pending is not None
            and pending.kind == "clarification"
            and pending.agent_task_id is not None
            and answer is None
            # A run that crashed after the question was saved still has work in flight to
            # recover; one that waits (or was paused while waiting) has nothing to do, unless
            # an answer written for it waits to be given (R8).
            and stored.status not in ("running", "planned")
            and not answer_waiting(stored)
        ):
            handle._resolve(result_from(stored))  # R4, R5: nothing changes
            return handle
        cfg = self._cfg
        handed: list[bool] = []
        try:
            taken = await self._take_and_run(
                execution_id, answer, approve, max_calls, limits, deadline, raises, handle,
                handed, recovering,
            )  # fmt: skip
        except BaseException:  # cancelled too: released, re-raised
            # Cancelled (a closing runtime's recovery, a caller giving up) or failed after
            # the lease may have been taken and before a run was asked to hold it: let it
            # go, so that no lease is left held by nobody for its ttl (a no-op unless it is
            # ours: L3). Refused, nothing was taken; once the run's actor may exist, the lease
            # is its own to release.
            if not handed:
                with anyio.move_on_after(cfg.lease_ttl, shield=True):
                    try:
                        await self._committer.release(execution_id, cfg.owner)
                    except Exception as exc:  # any Store's error; what ended the run goes on
                        log_dropped("releasing its lease failed", exc, execution_id=execution_id)
            raise
        if taken._ran_here and stored.status in ("running", "planned"):
            # R3: it was left running with no live owner (a crash, a shutdown, a lost
            # lease): taken over here, its tasks in flight requeued as interrupted.
            previous = stored.lease.owner if stored.lease is not None else None
            _log.recovered(execution_id, stored.status, previous or None, recovery=recovering)
        return taken

    async def _take_and_run(
        self,
        execution_id: str,
        answer: str | None,
        approve: bool,
        max_calls: int | None,
        limits: tuple[int | None, Decimal | None],
        deadline: float | None,
        raises: bool,
        handle: ExecutionHandle,
        handed: list[bool],
        recovering: bool,
    ) -> ExecutionHandle:
        """The rest of :meth:`_resume`: take the lease, edit, run. ``handed`` gets an item
        once no lease of ours is left to let go on failure (refused, or the run spawned)."""
        cfg = self._cfg
        acquired = await self._committer.acquire(execution_id, cfg.owner, cfg.lease_ttl)
        gone = acquired.lease
        if (
            not acquired.acquired
            and gone is not None
            and gone.owner
            and await anyio.to_thread.run_sync(owner_gone, gone.owner)
        ):
            # L7: its owner is a process of this host that is gone. Taken over only if the
            # lease on disk is still the one seen (owner and epoch): one resumer wins.
            acquired = await self._committer.acquire(
                execution_id, cfg.owner, cfg.lease_ttl, gone=gone
            )
        if not acquired.acquired:
            handed.append(True)  # refused: there is no lease of ours to let go
            if answer is not None and not approve and not raises:
                # R8 across hosts: the run is live elsewhere; its runner takes the answer.
                how = await answer_elsewhere(
                    self._committer, cfg.owner, execution_id, answer, cfg, acquired
                )
                if how == "released":  # it ended first: the stored answer goes with a resume
                    return await self._resume(execution_id, None, False, None)
                if how == "taken":
                    handle._resolve(result_from(await self._require(execution_id)))
                    return handle
            raise ExecutionBusy(execution_id, acquired.lease, acquired.reason)
        stored = await self._require(execution_id)
        missing = unrunnable(stored.plan, tools=cfg.tools, skills=cfg.skills, agents=cfg.agents)
        # With a planner, a vanished tool is drift and the run replans (R6); without one,
        # P1: refused, the lease given back (by _resume), nothing else changes.
        if missing and cfg.planner is None:
            raise InvalidPlan(
                f"execution {execution_id} cannot run here: its plan names "
                + ", ".join(f"unknown {name}" for name in missing)
            )
        begins: list[Begin] = []

        def change(stored: Execution, now: float) -> Execution | None:
            # Under the store's lock: still ours, still not terminal (someone may have
            # cancelled it between our acquire and now).
            if holder(stored.lease, now) != cfg.owner or stored.terminal:
                return None
            if recovering and not recoverable(stored):
                # L8: paused (or set waiting) from elsewhere since recovery read it: a
                # takeover must not undo that control; only a resume by hand decides to go on.
                return None
            unreadable = unreadable_asker(stored) if answer is not None else None
            if unreadable is not None:
                raise unreadable_asker_error(execution_id, unreadable)  # E8, as above
            if answer is not None and question_answered(stored):
                # Answered by Runtime.answer since the check above: refused, not dropped
                # (the lease is given back as for any refused edit).
                raise ExecutionBusy(execution_id, None, _ANSWERED)
            record, begin = prepare_resume(
                stored, cfg.owner, answer, approve, max_calls, limits=limits
            )
            # B1: a deadline is wall-clock (set at start and checked by the run on
            # time.time()); ``now`` is the store's lease clock, which may read otherwise.
            record = resumed_deadline(stored, record, deadline, time.time())
            begins.append(begin)
            return record

        # Un-pausing and answering are the resumer's own out-of-band edit: a paused record
        # is not a runner's to overwrite through the commit funnel (E2).
        try:
            record = await self._committer.edit(execution_id, change)
        except Exception:  # any Store's error: released, re-raised
            # The edit was refused (a record grown past the store's limit by the answer,
            # the store away): nothing changed, so the lease just taken is given back,
            # not left to block every other resume until it lapses. (A cancelled caller
            # leaves it held, as documented: the edit may have landed.)
            try:
                await self._committer.release(execution_id, cfg.owner)
            except Exception as exc:  # any Store's error; the edit's refusal goes on
                log_dropped("releasing its lease failed", exc, execution_id=execution_id)
            raise
        if record is None:
            await self._committer.release(execution_id, cfg.owner)
            stored = await self._require(execution_id)
            if stored.terminal:
                handle._resolve(result_from(stored))
                return handle
            if recovering and not recoverable(stored):
                raise _NotOrphaned(stored.status)
            raise ExecutionBusy(execution_id, stored.lease, "the lease was lost while resuming")
        # E10: a plan planned here runs with its real inputs, whatever disk holds of them.
        planned = self._live.kept.plan(execution_id)
        if planned is not None and (
            record.plan is None
            or (planned.id, planned.version) != (record.plan.id, record.plan.version)
        ):
            planned = None
        handed.append(True)
        return await self._spawn(record, planned, begins[-1])

    async def recover(self) -> RecoveryReport:
        """Resume every stored execution that was running and that nobody runs: its lease
        released or lapsed (on the store's clock), or held by a process of this host that is
        gone (L7: e.g. after this process was killed and restarted at once).

        Returns a :class:`RecoveryReport`: a list of the handles of the runs this runtime
        took over (by this call, or by its background recovery since the last call: see
        ``open_runtime(recover=...)``), with ``skipped`` naming each unfinished run left
        alone and why (another owner's live lease, paused or waiting, finished elsewhere
        meanwhile, unreadable). Of several runtimes recovering at once, exactly one takes
        each run (L1). Cancelling the caller lets go of a lease it had just taken for a
        run not yet started (a runtime closing mid-sweep leaves no lease held)."""
        return await self._recovery.recover()

    async def _recover_one(self, execution_id: str) -> ExecutionHandle | str:
        """Resume ``execution_id`` if it is still a run to recover (running or planned, not
        live here), under its control lock; else the status that made it not one (``live``:
        it is live here, resumed by hand meanwhile: not recovery's to report)."""
        async with self._exclusive(execution_id):
            live = await self._settled(execution_id)
            if live is not None:
                return "live"
            stored = await self._require(execution_id)
            if not recoverable(stored):
                return "terminal" if stored.terminal else stored.status
            cfg = self._cfg
            missing = unrunnable(stored.plan, tools=cfg.tools, skills=cfg.skills, agents=cfg.agents)
            if stored.plan is None and cfg.planner is None:
                missing.append("planner")  # not planned yet: failed here for want of one
            if missing:  # left to a runtime that has them, not crashed at the step
                return "missing:" + ",".join(name.replace(" ", ":") for name in missing)
            try:
                return await self._resume(execution_id, None, False, None, recovering=True)
            except _NotOrphaned as changed:
                return changed.status

    async def _waiting(self, execution_id: str) -> Execution:
        stored = await self._require(execution_id)
        if not waits_for_answer(stored):
            raise NotWaiting(execution_id, stored.status)
        return stored

    async def answer(self, execution_id: str, text: str) -> None:
        """Answer the run's open question without running anything here: the answer is
        stored (redacted, E5; its sha256 on the ``answer`` audit line) for whichever
        runtime runs the run or next resumes it.

        A run live in this runtime or on another host (holding the lease) takes it the way
        it takes a pause: at once here, else at its next heartbeat (at once on PostgreSQL,
        whose notices wake it); the task that asked gets it (R8, R9). A run that waits with
        nothing live keeps it: the next :meth:`resume` (by hand, or :meth:`recover`, which
        picks such runs up) gives it to the task that asked, or, for the run's own
        question, appends it to the goal (R10). So a server that holds the application
        can be answered from any process that reaches its store (``mainspring answer ID
        TEXT``), without the application.

        Raises :class:`NotWaiting` if the run waits for no answer (finished, running with
        no question open, waiting for an approval or budget), :class:`ExecutionBusy` if
        every open question has an answer waiting already, :class:`UnknownExecution` for an
        id not stored; nothing is stored then. Cancelling the caller does not undo an
        answer already stored.
        """
        check_answer(text)
        check_id(execution_id)
        async with self._exclusive(execution_id):
            await self._waiting(execution_id)
            live = await self._settled(execution_id)
            runner = live.ref if live is not None else None
            owner = self._cfg.owner
            written = await request_answer(
                self._committer, owner, execution_id, text, runner, live_only=False
            )
            if written is None:  # it stopped waiting between the read and the edit
                stored = await self._require(execution_id)
                raise NotWaiting(execution_id, stored.status)
            _log.control(execution_id, "answer", live=runner is not None)

    # -- controls --------------------------------------------------------------------------

    async def pause(self, execution_id: str, *, reason: str = "") -> ExecutionResult:
        """Pause a run (R1): live work stops with ``Pause``, agent tasks go back to queued
        with an interruption, and the lease is released. For a run live in another process
        the pause is written to the store and that runner stops within one heartbeat; a
        run that waits (for an answer, an approval, budget) is marked paused. Pausing a
        terminal or paused execution changes nothing. Returns where the run stands; raises
        :class:`UnknownExecution` for an id not stored. Cancelling the caller does not undo a
        pause already requested."""
        detail = bounded_reason(reason or f"paused by {self._cfg.owner}")
        change = pause_edit(self._cfg.owner, detail)
        pause = Pause(detail=detail, source=self._cfg.owner)  # V3: who issued it
        return await self._control(execution_id, pause, change)

    async def cancel(self, execution_id: str, *, reason: str = "") -> ExecutionResult:
        """Cancel a run for good (R2): in-flight steps see ``ParentCancel(Cancel)``, tasks
        are stamped ``parent-cancel``, unstarted steps skipped (P6). A run live elsewhere
        stops within one heartbeat. Cancelling a terminal execution changes nothing.
        Raises :class:`UnknownExecution` for an id not stored. Cancelling the caller does not
        undo a cancel already requested."""
        detail = bounded_reason(reason or f"cancelled by {self._cfg.owner}")
        change = cancel_edit(self._cfg.owner, detail)
        cancel = Cancel(detail=detail, source=self._cfg.owner)  # V3: who issued it
        return await self._control(execution_id, cancel, change)

    async def _control(
        self, execution_id: str, reason: CancelReason, change: Edit
    ) -> ExecutionResult:
        async with self._exclusive(execution_id):
            live = await self._settled(execution_id)
            _log.control(execution_id, reason.kind, live=live is not None)
            result: ExecutionResult | None = None
            if live is not None:
                await live.ref.stop(reason)
                result = await live.handle.wait()
            # The control applies to the record as it is now, never dropped: a run that
            # wound down as asked left nothing to change; one that was ending for another
            # reason, or whose last write a control from elsewhere refused (E4), still
            # gets it (a paused record can be cancelled).
            await self._require(execution_id)
            changed = await self._committer.edit(execution_id, change)
            if changed is None and result is not None and result.stopped_by is reason:
                return result  # with the live outputs, unredacted
            if changed is not None:
                event = end_event(changed, time.time())
                if event is not None:
                    _log.run_event(event, reason)
                    self._bus.publish(event)
            return result_from(await self._require(execution_id))

    async def stop_agent_task(self, task_id: str, *, cascade: bool = False) -> StopResult:
        """Stop one agent task, never silently (S1, S2); the run goes on.

        The task ends ``cancelled``; its step counts as done without a result (``stopped``),
        so the steps depending on it run. With ``cascade=True`` the step is ``cancelled``
        instead, and so are its dependents (P2). Either way a run ends ``completed`` only if
        some step succeeded and none was cancelled or failed.

        A task live in this process is cancelled with ``Cancel`` (state ``stopping`` until it
        has unwound, then recorded). A stored unfinished task is marked cancelled under a
        properly acquired lease, re-reading the record first; if another process runs it, a
        stop request (with the cascade choice) is written that it acts on within one
        heartbeat. A finished task is reported and left alone; an unknown id is reported as
        unknown. Raises nothing for a bad id (that is "unknown" too). A stop already
        requested stands if the caller is cancelled.
        """
        operation = f"op-{secrets.token_hex(6)}"
        execution_id = task_id.rsplit(":t", 1)[0] if isinstance(task_id, str) else ""
        unknown = StopResult(
            ok=False,
            state="unknown",
            reason="no such agent task",
            task_id=str(task_id),
            operation_id=operation,
        )
        try:
            check_id(task_id)
            check_id(execution_id)
        except ValueError:
            return unknown
        async with self._exclusive(execution_id):
            live = await self._settled(execution_id)
            _log.control(execution_id, "stop-task", live=live is not None, task_id=task_id)
            if live is not None:
                try:
                    request = StopTask(task_id, operation, cascade)
                    result: StopResult = await live.ref.ask(request)
                except ActorDeadError:
                    await live.handle.wait()  # it is ending: the record decides below
                else:
                    return result
            return await self._stop_stored_task(
                execution_id, task_id, operation, unknown, cascade=cascade
            )

    # -- reading ---------------------------------------------------------------------------

    async def executions(self) -> list[Execution]:
        """Every stored execution that reads (those that do not are left alone, E7)."""
        listing = await anyio.to_thread.run_sync(self._store.list)
        return list(listing.executions)

    async def agent_tasks(self, execution_id: str | None = None) -> list[AgentTaskRecord]:
        """The agent task records of one execution, or of all; unreadable ones are skipped."""
        if execution_id is not None:
            return (await self._require(execution_id)).task_records
        return [task for ex in await self.executions() for task in ex.task_records]

    async def prune(
        self, *, older_than: float, statuses: Collection[str] = PRUNABLE, dry_run: bool = False
    ) -> PruneReport:
        """Delete finished executions (with their history) not updated for ``older_than``
        seconds (with ``dry_run``, only name them); ValueError for a status that is not
        terminal. Returns a :class:`PruneReport`: the ids ``deleted`` and those ``skipped``
        (:class:`PruneSkip`: still live in this runtime, unreadable, or no longer stored or
        finished when the store decided), each with why."""
        return await prune(self._committer, self._live, older_than, statuses, dry_run)

    def live(self) -> list[str]:
        """Ids of the executions running in this process now."""
        return list(self._live)

    # -- events --------------------------------------------------------------------------------

    @overload
    def events(
        self,
        execution_id: str | None = None,
        *,
        after: None = None,
        buffer: int = 1000,
        poll: float = 0.5,
    ) -> AsyncGenerator[RunEvent | EventsDropped, None]: ...

    @overload
    def events(
        self,
        execution_id: str | None = None,
        *,
        after: int,
        buffer: int = 1000,
        poll: float = 0.5,
    ) -> AsyncGenerator[HistoryEvent, None]: ...

    @overload
    def events(
        self,
        execution_id: str | None = None,
        *,
        after: int | None,
        buffer: int = 1000,
        poll: float = 0.5,
    ) -> AsyncGenerator[RunEvent | EventsDropped, None] | AsyncGenerator[HistoryEvent, None]: ...

    def events(
        self,
        execution_id: str | None = None,
        *,
        after: int | None = None,
        buffer: int = 1000,
        poll: float = 0.5,
    ) -> AsyncGenerator[RunEvent | EventsDropped, None] | AsyncGenerator[HistoryEvent, None]:
        """Iterate over what happens to executions (V1: ids, states, counts), of one
        execution or of all. Iteration ends, normally, when the runtime begins to close or
        :meth:`close_streams` is called (V4).

        Without ``after``: the runtime's live events, one of the :data:`RunEvent` classes
        each, from the first ``__anext__`` on, of the runs in this process only. A
        subscriber that falls more than ``buffer`` events behind gets an ``EventsDropped``
        instead of stalling the runtime.

        With ``after=seq`` (0 for everything): the durable history (V2), as
        :class:`~mainspring.storage.HistoryEvent` objects, every committed entry with a
        sequence number above ``seq`` and then each one as it is committed, by this process
        (seen as soon as its write is durable) or by another one on the same store (seen
        within ``poll`` seconds). None is yielded twice or skipped; a follower that stops
        can start again with ``after=`` the last ``seq`` it saw and misses nothing. When the
        runtime closes, a follower that waits for news (or is reading) reads once more what
        is durable (up to 1,000 entries) and ends; one whose consumer is busy elsewhere ends
        once it has yielded the entries it read; the rest is there for a follower started
        with ``after=`` its last ``seq`` (a server's ``Last-Event-ID``). ``buffer`` applies
        to live events only.

        Raises ``ValueError`` for a bad id, an ``after`` that is not a whole number >= 0, a
        ``poll`` that is not a positive finite number or a ``buffer`` below 1 (at the call).
        """
        return self._streams.open(execution_id, after=after, buffer=buffer, poll=poll)

    def close_streams(self) -> None:
        """End every stream :meth:`events` handed out, and every one it hands out from now
        on, while the runtime goes on running (V4).

        For a server's shutdown: a server waits for its open responses before it runs its
        lifespan's exit, where the runtime closes, so a streaming response (server-sent
        events) would hold the server until its client gave up. Call this when the server
        begins to stop; each ``async for`` then finishes normally: a live stream once it has
        yielded what it already holds, a history follower once it has read what is durable
        (at most 1,000 entries; a client resumes with ``after=`` the last ``seq`` it got,
        missing nothing, V2). A stream asked for later ends at once (live) or after one read
        (history). Runs, controls and reads are untouched. Synchronous (call it on the
        event loop's thread), idempotent; the runtime calls it when it begins to close.
        """
        self._streams.close()

    # -- workers -------------------------------------------------------------------------------

    async def workers(self, execution_id: str) -> WorkersView:
        """The execution's workers, their tasks and the trail, read from the store (it
        never writes, E7); ``UnknownExecution`` if it is not stored."""
        return await self._workers.view(execution_id)

    async def repair_worker(self, execution_id: str, worker_id: str, text: str) -> str:
        """Send a repair instruction to a live worker of this runtime (one JSON line
        ``{"type": "repair", "text": ...}`` on its stdin); only its sha256 is persisted
        (V1). Returns the digest. ``WorkerRefused`` (``bad-repair``, ``not-live``) if the
        rules refuse it, :class:`WorkerNotLive` if no live process of it is held here (or it
        ended before the line reached it, or did not read it within
        :data:`REPAIR_SEND_TIMEOUT`), ``StaleWorker`` if the worker moved on while the line
        was on its way."""
        return await self._workers.repair(execution_id, worker_id, text)

    async def finalize(self, execution_id: str, proof: fleet.Proof) -> str:
        """Finalize the run with its :class:`Proof` (``fleet.finalize``: verification and
        review passed, every worker task delivered, the receipt's digest its own, no worker
        active; a receipt holding a secret is refused too). The proof is sealed as evidence
        and its digest recorded (``proof_digest``, through the run's commit funnel when it
        is live here). Finalizing again with the same proof answers the same digest;
        another proof is refused (``proof``)."""
        return await self._workers.finalize(execution_id, proof)
