"""The commit funnel of one execution (E2): every write of a run goes through
:meth:`Funnel.commit` — the record built once from the run's state, a checkpoint when the
completed set changed (E1, E6), the write through the persistence actor, a refusal that
stops the run at once (E3), the worker moves the write made durable announced — and so do
the lease's renewals (L2, L5) and what a refusal leaves to be kept (E9, E11).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from ...actors import CancelReason, LeaseLost
from ...storage import Execution, PersistenceFailed, Plan, PlanStep, StorageError
from ...storage._seam import MAX_CHECKPOINTS, Checkpoint, CommitOutcome, capture_checkpoint, holder
from .._rules.lifecycle import execution_move
from .._steps.failures import log_dropped
from .._workers.board import WorkerBoard, worker_parts_edit
from . import log as _log
from .events import RunEvent, StepFinished, StepRetrying, StepStarted, worker_changed
from .lease_guard import LeaseWatch
from .messages import RunConfig, RunServices, Unstorable
from .refusals import add_calls, end_event, refusal_reason
from .results import config_hash, result_from
from .state import RunState

if TYPE_CHECKING:
    from .._telemetry.spans import RunSpans

__all__ = ["LATE_RENEWALS", "Funnel"]

#: L5: how many renewals in a row may be answered too late before the run stops with
#: LeaseLost (each one granted proves the lease was still ours when the store answered).
LATE_RENEWALS = 3

#: Refusals that mean our lease lapsed or another holds it (not an operator's control).
_LAPSED = (CommitOutcome.RELEASED, CommitOutcome.FOREIGN_LEASE)


class Funnel:
    """One execution's writes (see the module docstring), through the runtime's committer
    (``services``). ``halt`` stops the run with a reason (its children interrupted at once,
    E3); ``source`` is the run's actor path."""

    def __init__(
        self,
        state: RunState,
        services: RunServices,
        halt: Callable[[CancelReason], None],
        source: str,
    ) -> None:
        self._state = state
        self._cfg: RunConfig = state.cfg
        self._committer = services.committer
        self._publish = services.publish
        #: Whether an event published now reaches a subscriber: per-step events are built
        #: only then (each subscriber still gets every one, in order).
        self.listening = services.listening
        self._halt = halt
        self._source = source
        self.refusal: CommitOutcome | None = None
        self.refused_record: Execution | None = None  # the record that refused us
        # The last checkpoint's completed steps and ours, once found to be the same set (E6).
        self._same_set: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        # L5: how old our last confirmed renewal is, on this host's clock.
        self.lease_watch = LeaseWatch(state.cfg.lease_ttl, state.cfg.lease_clock)
        self._telemetry = services.telemetry
        #: O1: the run's spans, once it began (None: telemetry is off).
        self.spans: RunSpans | None = None

    def publish(self, event: RunEvent, reason: CancelReason | None = None) -> None:
        """Announce ``event`` and log it (``reason``: what stopped the run, for its end)."""
        _log.run_event(event, reason)
        if self.spans is not None and type(event) is StepRetrying:
            self.spans.step_retrying(event.step_id)
        self._publish(event)

    def step_started(self, step: PlanStep, now: float) -> None:
        """Announce and log (at DEBUG) that ``step`` started: built only when heard."""
        st = self._state
        if _log.steps_logged():
            _log.step_started(st.rec.id, step.id, step.kind, step.target)
        if self.listening():
            self._publish(
                StepStarted(execution_id=st.rec.id, at=now, step_id=step.id, kind=step.kind)
            )

    def publish_step(self, step_id: str, state: str) -> None:
        st = self._state
        if self.spans is not None:  # O1: the step's last attempt ended
            obs = st.obs.get(step_id)
            task = st.tasks.get(obs.agent_task_id or "") if obs is not None else None
            usage = task.usage if task is not None else None
            self.spans.step_ended(step_id, state, obs, usage)
        if _log.steps_logged():
            self._log_step(step_id, state)
        if not self.listening():
            return  # nobody hears it: not built
        self._publish(
            StepFinished(
                execution_id=st.rec.id,
                at=time.time(),
                step_id=step_id,
                state=state,
                done=st.sched.finished,
                total=len(st.sched.status),
                calls_used=st.rec.calls_used,
            )
        )

    def _log_step(self, step_id: str, state: str) -> None:
        """A step's end at DEBUG: how long it ran (its observation says when) and on which
        attempt, when it had a retry policy."""
        st = self._state
        observation = st.obs.get(step_id)
        duration = attempt = None
        if observation is not None:
            started, ended = observation.started_at, observation.ended_at
            if started is not None and ended is not None:
                duration = max(ended - started, 0.0)
            number = observation.data.get("attempt")
            attempt = number if type(number) is int else None
        done, total = st.sched.finished, len(st.sched.status)
        _log.step_finished(st.rec.id, step_id, state, duration, attempt, done, total)

    # -- the one commit --------------------------------------------------------------------

    async def commit(self, final: Execution | None = None, **changes: Any) -> bool:
        """Commit the run's state with ``changes`` (E2), True once durable. A refusal stops
        the run at once (E3); a record that cannot be written raises :class:`Unstorable`.

        ``final``: a record already built to end the run (a pause, a cancel, a shutdown:
        the wind-down's last write, E4), written as it is; a refusal then means another
        process's control landed first, and the record on disk says how the run ended."""
        st = self._state
        if final is not None:
            return await self._commit_final(final)
        if st.ended:
            return False
        if "status" in changes:  # E2: the lifecycle is checked in the one commit path
            execution_move(st.rec.id, st.rec.status, changes["status"])
        checkpoints = await self._checkpoints()
        if checkpoints is not None:
            changes["checkpoints"] = checkpoints
        record = st.snapshot(**changes)  # one record built per commit
        sent = self.lease_watch.sent()  # L5: when the answer comes is checked
        timed = time.perf_counter() if self._telemetry is not None else 0.0
        try:
            outcome = await self._committer.submit(record, self._cfg.owner)
        except PersistenceFailed:
            raise  # the disk failed: nothing more can be saved; the run crashes, resumable
        except (StorageError, ValueError) as exc:  # this record cannot be written (X2)
            raise Unstorable(str(exc)) from exc
        if self._telemetry is not None:  # O1: the commit's latency
            self._telemetry.committed(time.perf_counter() - timed)
        if outcome is CommitOutcome.OK:
            st.committed(record)
            self._announce_workers()
            settled = changes.get("status") not in (None, "running", "planned")
            if not self.lease_watch.in_time(sent) and not settled:
                # L5: durable, but nothing more may start until a renewal answered in time
                # shows the lease is still ours. (A run that just ended or began to wait
                # starts nothing more anyway: its late answer stands.)
                return await self.renew(late=sent) is not None
            return True
        await self._refused(outcome)
        return False

    async def _commit_final(self, record: Execution) -> bool:
        st = self._state
        execution_move(record.id, st.rec.status, record.status)
        try:
            outcome = await self._committer.submit(record, self._cfg.owner)
        except Exception as exc:  # not saved: the result says so; the lease lapses on its own
            st.result = result_from(st.rec, outputs=st.outputs, error=str(exc))
            return False
        if outcome is CommitOutcome.OK:
            st.committed(record)
            self._announce_workers()
            return True
        # Refused while winding down: another process's control landed first (E4). The
        # record, not our copy, says how the run ended and why (V3).
        self.refusal = outcome
        stored = await self.read_stored()
        reason = refusal_reason(outcome, stored, self._cfg.owner, time.time())
        if isinstance(reason, LeaseLost):
            _log.lease_lost(st.rec.id, reason, outcome.value)
        await self.after_refusal(reason, stored)
        return False

    # -- checkpoints (E1, E6) ---------------------------------------------------------------

    async def _checkpoints(self) -> tuple[Checkpoint, ...] | None:
        """The checkpoints with a new one when the completed set changed (E6: at most 5
        kept), or None when it did not; the first commit of a plan always has one (E1)."""
        st = self._state
        plan = st.current_plan()
        completed = st.sched.completed_steps() if plan is not None else ()
        version = plan.version if plan is not None else st.rec.plan_version
        kept = st.rec.checkpoints
        last = kept[-1] if kept else None
        if last is not None and last.plan_version == version:
            before = last.completed_steps
            same = self._same_set
            if before is completed or (same[0] is before and same[1] is completed):
                return None
            # Compared once: after a load the two tuples are equal but not the same object.
            if len(before) == len(completed) and set(before) == set(completed):
                self._same_set = (before, completed)
                return None
        checkpoint = await self.capture(plan, completed)
        return (*kept, checkpoint)[-MAX_CHECKPOINTS:]

    async def capture(self, plan: Plan | None, completed: tuple[str, ...]) -> Checkpoint:
        cfg = self._cfg
        tools = self._state.plan_tool_hashes(plan)
        if cfg.workspace is None:
            digest = config_hash(cfg.config)
            return Checkpoint(
                at=time.time(),
                plan_version=plan.version if plan is not None else 0,
                config_hash=digest,
                skill_versions=dict(cfg.skill_versions),
                completed_steps=completed,
                tool_hashes=tools,
                absent=("config",) if digest is None else (),  # its appearing is drift (R6)
            )
        return await anyio.to_thread.run_sync(
            lambda: capture_checkpoint(
                cfg.workspace,  # type: ignore[arg-type]
                plan,
                cfg.skill_versions,
                completed,
                tools,
                config=cfg.config,
            )
        )

    # -- the lease (L2, L3, L5) ----------------------------------------------------------------

    async def lease_fresh(self) -> bool:
        """L5: whether new work (a step, a tool or model call, a planner) may start now.
        When the last confirmed renewal is too old the lease is renewed first; False if
        the run is stopping instead (the renewal was refused or answered too late)."""
        if self._state.ended:
            return False
        if self.lease_watch.fresh():
            return True
        return await self.renew() is not None

    async def renew(self, late: float | None = None) -> Execution | None:
        """Renew the lease (L2); the stored record, or None if the run is stopping (a
        refusal, E3, or answers too late to count, L5). ``late``: the stamp of a request
        whose answer came too late, which this renewal is to vouch for.

        L5: an answer that comes late is not taken for a lost lease at once: a renewal is
        fenced by the lease's epoch and a lapsed lease is never renewed, so a renewal the
        store grants proves nobody took the run over meanwhile, and one answered in time
        shows the lease runs on (a busy event loop, a loaded machine). The renewal is asked
        again, at most :data:`LATE_RENEWALS` times, while its answers keep coming late."""
        cfg = self._cfg
        st = self._state
        for _ in range(LATE_RENEWALS):
            sent = self.lease_watch.sent()
            try:
                lease = st.rec.lease
                outcome, stored = await self._committer.renew(
                    st.rec.id, cfg.owner, cfg.lease_ttl, epoch=lease.epoch if lease else None
                )
            except Exception as exc:  # any Store's error: we can no longer prove the lease (E3)
                outcome, stored = CommitOutcome.RELEASED, None
                log_dropped("renewing its lease failed", exc, execution_id=st.rec.id)
            if outcome is not CommitOutcome.OK:
                if late is not None and outcome in _LAPSED:
                    await self._lapsed(late)  # the late answer was right to be doubted
                else:
                    await self._refused(outcome)
                return None
            if self.lease_watch.confirmed(sent):
                assert stored is not None
                return stored
            late = sent
        assert late is not None
        await self._lapsed(late)
        return None

    async def _lapsed(self, sent: float) -> None:
        """L5, E3: the store's answer came after our lease could have lapsed; another host
        may hold the run now. Nothing more is started or written by us: the run stops with
        ``LeaseLost``, and its result is the record as the store has it now."""
        st = self._state
        age = self.lease_watch.age(sent) or 0.0
        st.ended = True
        stored = await self.read_stored()
        other = holder(stored.lease, time.time()) if stored is not None else None
        limit = self.lease_watch.limit
        detail = (
            f"the store's answer came {age:.1f} s after the request, past the {limit:g} s "
            "the lease is counted on: another host may hold the run now"
        )
        owner = other if other is not None and other != self._cfg.owner else ""
        reason = LeaseLost(owner, detail=detail, source=self._source)
        _log.lease_lost(st.rec.id, reason, None)
        record = stored if stored is not None else st.rec
        st.result = result_from(record, outputs=st.outputs, stopped_by=reason)
        self._halt(reason)

    async def _refused(self, outcome: CommitOutcome) -> None:
        st = self._state
        self.refusal = outcome
        st.ended = True
        # V3: the record says why (an operator's cancel or pause, with its detail and who
        # issued it); the refusal alone would only say that we must stop.
        stored = await self.read_stored()
        self.refused_record = stored
        reason = refusal_reason(outcome, stored, self._cfg.owner, time.time())
        if isinstance(reason, LeaseLost):
            _log.lease_lost(st.rec.id, reason, outcome.value)
        # E3: no further call by this owner. Children are interrupted now, not after the
        # current message, and nothing of ours is written again.
        self._halt(reason)

    async def release(self) -> None:
        # Only where no final write released it (a crash, a refusal): L3.
        # A failed release is harmless: the lease lapses by itself after its ttl.
        try:
            await self._committer.release(self._state.rec.id, self._cfg.owner)
        except Exception as exc:  # whatever the store raised (any Store may): logged
            log_dropped("releasing its lease failed", exc, execution_id=self._state.rec.id)

    async def read_stored(self) -> Execution | None:
        try:
            return await anyio.to_thread.run_sync(self._committer.store.get, self._state.rec.id)
        except Exception as exc:  # unreadable now, whatever the store raised: our copy stands
            log_dropped(
                "reading the stored record failed; the run's own copy stands",
                exc,
                execution_id=self._state.rec.id,
                level=logging.WARNING,
            )
            return None

    # -- after a refusal (E3, E9, E11) ----------------------------------------------------------

    async def after_refusal(self, reason: CancelReason, stored: Execution | None) -> None:
        """The run ended by a control written elsewhere: the calls it made that no commit
        recorded are added to the record (E9: accounting never goes backwards), the result
        is the record's, and the end is announced as if the control had been issued here."""
        st = self._state
        if stored is not None and (stored.status == "cancelled" or stored.status == "paused"):
            stored = await self._keep_unsaved_calls() or stored
        record = stored if stored is not None else st.rec
        st.result = result_from(record, outputs=st.outputs, stopped_by=reason)
        if stored is not None:
            event = end_event(stored, time.time())
            if event is not None:
                self.publish(event, reason)  # V3: with the control's reason

    async def _keep_unsaved_calls(self) -> Execution | None:
        st = self._state
        for running in st.running.values():
            st.charge_unsaved(running)  # calls made before the interruption (P4, E9)
        extra = st.rec.calls_used - st.durable_calls
        spent = st.rec.usage.since(st.durable_usage)  # B3: tokens and cost likewise
        if extra <= 0 and not spent:
            return None
        used = {task.id: task.calls_used for task in st.tasks.values()}
        usage = {task.id: task.usage for task in st.tasks.values()}
        try:
            edit = add_calls(max(extra, 0), used, spent, usage)
            return await self._committer.edit(st.rec.id, edit)
        except Exception as exc:  # any Store's error: nothing more can be kept
            log_dropped(
                "keeping the calls no commit recorded failed",
                exc,
                execution_id=st.rec.id,
                level=logging.WARNING,
            )
            return None

    async def keep_board(self, board: WorkerBoard) -> None:
        """A control written elsewhere (pause, cancel) refused our saves: the workers our
        drivers stopped while the run wound down are still written, as the same control
        issued here writes them, so no worker stays recorded active and a stop that did not
        fail gives its start back (``NOT_FAILED``). Invariant E11: a paused or cancelled
        record is not the runner's to overwrite; only its worker parts, which no control
        writes and whose processes this runner held, are (``worker_parts_edit``)."""
        st = self._state
        fields = board.fields()
        moved = [board.workers[i] for i in board.moved if i in board.workers]
        try:
            lease = st.rec.lease
            edit = worker_parts_edit(fields, lease.epoch if lease is not None else None)
            written = await self._committer.edit(st.rec.id, edit)
        except Exception as exc:  # any Store's error: the next resume confirms them dead (R3)
            log_dropped(
                "writing its stopped workers failed",
                exc,
                execution_id=st.rec.id,
                level=logging.WARNING,
            )
            return
        if written is None:
            return
        now = time.time()
        for worker in moved:  # announced once durable, as a commit announces them
            state = (worker.status, worker.generation)
            if board.committed.get(worker.id) != state:
                board.committed[worker.id] = state
                self.publish(worker_changed(st.rec.id, worker, now))
        board.moved.clear()

    # -- worker moves, announced once durable (V2) -------------------------------------------

    def _announce_workers(self) -> None:
        """Publish the worker moves the record just committed carries (once durable, as
        the history has them: a worker's last state per commit)."""
        st = self._state
        board = st.board
        if board is None:
            return
        workers = st.rec.workers
        found = [i for i, (held, _) in enumerate(st.moves) if held is workers]
        if not found:
            return  # a record built from no snapshot of the board carries no move known
        moves = st.moves[found[0]][1]
        st.moves = st.moves[found[0] + 1 :]  # later snapshots may be committed next
        now = time.time()
        for worker in moves:
            state = (worker.status, worker.generation)
            if board.committed.get(worker.id) != state:
                board.committed[worker.id] = state
                self.publish(worker_changed(st.rec.id, worker, now))
            if board.workers.get(worker.id) is worker:
                board.moved.pop(worker.id, None)  # not put again since: announced
