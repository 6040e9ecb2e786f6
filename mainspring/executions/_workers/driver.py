"""The driver of a worker-backed agent step: one run of one agent task's workers, as
``agent.py`` describes (the rules are the fleet's, ``fleet.py``; this is how they are carried
out).

A :class:`Driver` holds what it works with: the agent (its host and limits), the task's
actor, the run's worker board (joined through the execution, whose funnel every save goes
through, E2), the process it started, and a :class:`~.spending.SpendingLedger` that charges
what its workers report spending (B3). At the end of the module: what a worker's reports and
stops become on their way to disk (masked words, digests, a sealed delivery, a stop's
reason)."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from ...actors import (
    ActorDeadError,
    ActorFailed,
    BudgetExhausted,
    Cancel,
    LeaseLost,
    ParentCancel,
    Pause,
    Timeout,
    cancel_reason,
)
from ...storage import TrailEntry, WorkerRecord, WorkerStatus, WorkerTask
from ...storage._seam import ACTIVE_WORKER, StopIntent, WorkerFailure, redact_flagged
from .._steps.children import CodedFailure, SaveRefused
from .._steps.failures import log_dropped
from .._steps.outputs import keep_result
from . import fleet as fleet
from .board import LiveWorker, WorkerBoard, WorkerCommit, WorkerJoin
from .find import find_start, host_of
from .hosts import Report, WorkerProcess, WorkerSpec, WorkerStartFailed
from .spending import SpendingLedger

if TYPE_CHECKING:
    from .._steps.context import AgentContext
    from .agent import WorkerAgent

__all__ = ["Driver", "WorkerStepFailed", "sha"]


#: Chatter from a worker is committed at most this often (seconds).
_FLUSH = 0.1


class WorkerStepFailed(CodedFailure):
    """A worker-backed step failed; ``code`` says why (``no-progress:<class>``,
    ``worker-start-limit``, ``worker-not-dead``, ``worker-unknown-host``,
    ``worker-unconfirmed``, ``worker-blocked``, ``worker-task-unreadable``,
    ``worker-protocol``, ``worker-finalized``, ``agent-call-budget``)."""


class Driver:
    """Drives the workers of one agent task (one run of it)."""

    board: WorkerBoard  # the run's, joined when the driver runs
    spending: SpendingLedger  # charges usage reports to the board and the task (B3)
    unsaved: anyio.Event  # set: chatter on the board waits for the flusher

    def __init__(self, agent: WorkerAgent, ctx: AgentContext, input: Any) -> None:
        self.agent = agent
        self.actor = ctx._actor
        self.input = input if isinstance(input, Mapping) else {}
        record = self.actor.record
        self.task_id = record.id
        self.step_id = record.step_id
        self.agent_id = record.agent_id
        self.contract = sha(f"{record.agent_id}\n{record.input_hash}")
        self.process: WorkerProcess | None = None  # the live process this driver holds
        self.failed: str | None = None  # the code of the failure that ends the step

    # -- the funnel (E2) and the board -----------------------------------------------------

    async def commit(self) -> bool:
        """Commit the board through the execution's funnel; False when it was refused (the
        run is stopping) or the execution is gone."""
        try:
            return bool(await self.actor._execution.ask(WorkerCommit()))
        except (ActorDeadError, ActorFailed):
            return False

    async def save(self) -> None:
        """Commit the board, or raise :class:`SaveRefused`: the run is stopping."""
        if not await self.commit():
            raise SaveRefused("the execution refused the save: it is stopping")

    def worker(self) -> WorkerRecord | None:
        """The task's worker as the board has it now (None before the first is assigned)."""
        task = self.board.tasks[self.task_id]
        return self.board.workers.get(task.worker_id) if task.worker_id else None

    def task(self) -> WorkerTask:
        """The task as the board has it now."""
        return self.board.tasks[self.task_id]

    # -- serving the task ------------------------------------------------------------------

    async def run(self) -> Any:
        self.board = await self.actor._execution.ask(WorkerJoin())
        self.spending = SpendingLedger(self.actor, self.board)
        if self.task_id not in self.board.tasks:
            if any(t.key == self.task_id for t in self.board.unparsed_tasks):
                # E8: a stored task that does not parse is not an absent one: serving it
                # again from a fresh record could start a second process and replace its
                # delivery (E10). It fails closed, kept as it was read (E7).
                raise WorkerStepFailed(
                    "worker-task-unreadable",
                    f"the stored record of worker task {self.task_id} does not parse: "
                    "it is not served again",
                )
            now = time.time()
            self.board.put_task(WorkerTask(id=self.task_id, step_id=self.step_id, updated_at=now))
        task = self.task()
        if task.state == "delivered" and task.delivery_digest:
            return await self.read_delivery(task.delivery_digest)  # E10: not run again
        if task.state == "blocked":
            raise WorkerStepFailed("worker-blocked", f"task {task.id} is blocked: {task.reason}")
        try:
            delivered = await self.recover()
            if delivered is not None:
                return delivered[0]
            return await self.serve()
        except CodedFailure as exc:
            self.failed = exc.code  # the step fails for good: its worker says why
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self.release()

    async def recover(self) -> tuple[Any] | None:
        """A worker left active (or mid-handoff) by a runtime that ended without stopping
        it (R3): confirmed dead before anything else happens."""
        worker = self.worker()
        if worker is None:
            return None
        if worker.status in (WorkerStatus.HANDING_OFF, "fenced") and worker.intent is not None:
            if worker.status == WorkerStatus.HANDING_OFF:
                await self.confirm_dead(worker, takeover=False)
                worker = self.board.workers[worker.id]
                await self.not_late(worker)
                worker, task = fleet.fence(
                    worker, self.task(), fleet.expect(worker), confirmed_dead=True, now=time.time()
                )
                self.board.put(worker, task, "fenced")  # committed with the delivery (deliver)
            return (await self.deliver(worker),)
        if not worker.active or worker.status == "assigned":
            return None
        await self.confirm_dead(worker, takeover=True)
        return None

    async def confirm_dead(self, worker: WorkerRecord, *, takeover: bool) -> None:
        host = self.agent.host
        if worker.process is None:
            if await self.start_gone(worker):
                await self.takeover(worker, "start-searched")
                return
            self.board.put(worker, None, "takeover-refused", "start-unconfirmed")
            await self.commit()
            raise WorkerStepFailed(
                "worker-unconfirmed",
                f"worker {worker.id} was starting when its runtime ended; its process was "
                "never recorded and cannot be looked for here, so it cannot be confirmed dead",
            )
        seen = await host.inspect(worker.process)
        if seen.state == "unknown":
            self.board.put(worker, None, "takeover-refused", "unknown-host")
            await self.commit()
            raise WorkerStepFailed(
                "worker-unknown-host",
                f"worker {worker.id}'s process cannot be inspected from here (another host)",
            )
        if not seen.dead:
            seen = await host.stop(worker.process, grace=self.agent.grace)
        if not seen.dead:
            self.board.put(worker, None, "takeover-refused", "not-dead")
            await self.commit()
            raise WorkerStepFailed("worker-not-dead", f"worker {worker.id} could not be stopped")
        if takeover:
            await self.takeover(worker, "confirmed-dead")

    async def start_gone(self, worker: WorkerRecord) -> bool:
        """A start whose process was never recorded: on the machine that made it (its
        trail says which), its processes are found by session and stopped; True once none
        is alive (see ``find.py``)."""
        here = host_of(self.agent.host)
        made = f"host={here}"[:256]
        starts = [
            e
            for e in self.board.trail
            if isinstance(e, TrailEntry)
            and e.worker_id == worker.id
            and e.generation == worker.generation
            and e.event == "starting"
        ]
        if here is None or worker.session is None or not starts:
            return False
        if starts[-1].detail != made:
            return False
        found = await find_start(self.agent.host, worker.session)
        if found is None:
            return False
        for process in found:
            seen = await self.agent.host.stop(process, grace=self.agent.grace)
            if not seen.dead:
                return False
        again = await find_start(self.agent.host, worker.session)
        return again == []

    async def serve(self) -> Any:
        while True:
            starts = self.starts()
            if starts >= self.agent.max_starts:
                await self.give_up()  # before a worker is assigned: none is left active
                raise WorkerStepFailed(
                    "worker-start-limit",
                    f"task {self.task_id} tried {starts} worker starts "
                    f"(max_starts {self.agent.max_starts}) and none delivered",
                )
            worker = await self.assigned()
            process = await self.start(worker)
            if process is None:
                continue  # native-start: a new worker
            outcome, data = await self.supervise(process)
            if outcome == "result":
                return await self.handoff(data)
            if outcome == "budget":
                await self.over_budget(data)
            # exited unexpectedly: recorded; a takeover starts it again

    async def give_up(self) -> None:
        """No start is left: a worker assigned (never started: no process) is blocked, so
        it holds no capacity and does not refuse finalize as an active writer."""
        worker = self.worker()
        if worker is not None and worker.status == "assigned" and worker.process is None:
            worker, task = fleet.block(
                worker,
                self.task(),
                fleet.expect(worker),
                confirmed_dead=True,  # assigned: this generation never had a process
                reason="worker-start-limit",
                now=time.time(),
            )
            self.board.put(worker, task, "blocked", "worker-start-limit")
            await self.save()

    def starts(self) -> int:
        """The task's starts so far: those that started (``attempts``: a start stopped by a
        pause, the deadline or a lease loss was given back at its takeover) and those that
        failed (its workers blocked ``native-start``)."""
        failed = sum(
            1
            for w in self.board.workers.values()
            if w.task_id == self.task_id and w.status == "blocked" and w.reason == "native-start"
        )
        worker = self.worker()
        # Its takeover (next) gives back a start stopped without failing: not counted now.
        back = (
            worker is not None and worker.status == "stopped" and worker.reason in fleet.NOT_FAILED
        )
        return max(self.task().attempts - back, 0) + failed

    async def assigned(self) -> WorkerRecord:
        """The worker to start: the task's own (assigned, or stopped: taken over) or a new
        one (the first, or after a failed start), once the run has capacity."""
        self.not_final()
        worker = self.worker()
        if worker is not None and worker.status == "assigned":
            return worker
        if worker is not None and worker.status == "stopped":
            return await self.takeover(worker)  # recorded stopped only once confirmed dead
        while True:
            self.not_final()
            n = sum(1 for w in self.board.workers.values() if w.task_id == self.task_id)
            try:
                task, worker = fleet.assign(
                    self.task(),
                    self.board.workers.values(),
                    f"{self.task_id}:w{n + 1}",
                    agent_id=self.agent_id,
                    limit=self.board.limit,
                    now=time.time(),
                    lease=self.agent.lease,
                )
            except fleet.WorkerRefused as exc:
                if exc.code != "capacity":
                    raise
                await self.board.changed.wait()  # a worker of this run stopped
                continue
            # Committed with ``starting`` (start): nothing happens between the two.
            self.board.put(worker, task, "assigned")
            return worker

    def not_final(self) -> None:
        """A finalized run (its proof recorded) gets no new writer (``worker-finalized``)."""
        if self.board.proof_digest is not None:
            raise WorkerStepFailed("worker-finalized", f"the run of task {self.task_id} is final")

    async def takeover(self, worker: WorkerRecord, detail: str = "") -> WorkerRecord:
        """Generation + 1 of ``worker``, whose process is confirmed dead (once the run has
        capacity for it again, when it was stopped)."""
        while True:
            worker = self.board.workers[worker.id]
            try:
                worker, task = fleet.takeover(
                    worker,
                    self.task(),
                    fleet.expect(worker),
                    workers=self.board.workers.values(),
                    limit=self.board.limit,
                    confirmed_dead=True,
                    now=time.time(),
                )
            except fleet.WorkerRefused as exc:
                if exc.code != "capacity":
                    raise
                await self.board.changed.wait()
                continue
            # Committed with ``starting`` (start), or with the step's end if it goes no
            # further (a start limit): the old process is confirmed dead, so a crash before
            # that commit finds it dead again and takes it over again (R3).
            self.board.put(worker, task, "takeover", detail)
            return worker

    async def start(self, worker: WorkerRecord) -> WorkerProcess | None:
        now = time.time()
        session = f"s{secrets.token_hex(8)}"
        worker = fleet.mark_starting(
            worker,
            fleet.expect(worker, WorkerStatus.ASSIGNED),
            session=session,
            job=self.task_id,
            now=now,
        )
        here = host_of(self.agent.host)  # where to look for it if this runtime dies now
        self.board.put(worker, None, "starting", f"host={here}" if here else "")
        await self.save()
        spec = WorkerSpec(
            command=self.agent.command,
            worker_id=worker.id,
            generation=worker.generation,
            task_id=self.task_id,
            session=session,
            job=self.task_id,
            workspace=self.actor._workspace,
            input=dict(self.input),
            env=self.agent.env,
        )
        try:
            process = await self.agent.host.start(spec)
        except WorkerStartFailed as exc:
            worker, task = fleet.start_failed(
                worker,
                self.task(),
                fleet.expect(worker, WorkerStatus.STARTING),
                now=time.time(),
                digest=sha(str(exc)),
            )
            self.board.put(worker, task, "start-failed", "native-start")
            await self.save()
            return None
        self.process = process  # held: whatever happens next, release stops it
        # Raises StaleWorker if the run stopped meanwhile: release stops the new process.
        worker, task = fleet.mark_started(
            self.board.workers[worker.id],
            self.task(),
            fleet.expect(worker, WorkerStatus.STARTING),
            process.identity,
            now=time.time(),
        )
        self.board.put(worker, task, "started")
        self.board.live[worker.id] = LiveWorker(self.agent.host, process.identity)
        await self.save()
        return process

    # -- supervising a live process --------------------------------------------------------

    async def supervise(self, process: WorkerProcess) -> tuple[str, Any]:
        errors: list[Exception] = []
        self.unsaved = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.heartbeats, errors, tg.cancel_scope)
            tg.start_soon(self.flusher, errors, tg.cancel_scope)
            try:
                outcome = await self.reports(process)
            except Exception as exc:  # raised below, not wrapped in a group
                errors.append(exc)
            tg.cancel_scope.cancel()
        await process.reports.aclose()  # nothing more is read from it
        if errors:
            raise errors[0]
        if outcome[0] == "exited":
            await self.exited(process)
        return outcome

    async def heartbeats(self, errors: list[Exception], scope: anyio.CancelScope) -> None:
        try:
            while True:
                await anyio.sleep(self.agent.lease / 3)
                worker = self.worker()
                if worker is None or not worker.active:
                    return
                worker = fleet.heartbeat(worker, fleet.expect(worker), now=time.time())
                self.board.put(worker, None, "heartbeat")
                await self.save()
        except Exception as exc:  # a refused save: the run stops
            errors.append(exc)
            scope.cancel()

    async def flusher(self, errors: list[Exception], scope: anyio.CancelScope) -> None:
        """Chatter (idle / busy, usage, protocol lines, progress) is committed together, at
        most every ``_FLUSH`` seconds, so a worker that floods reports does not make a commit
        of each (bounded); what ends the supervision (result, exit, failure, stop) commits
        whatever is still unsaved before its next phase (E2)."""
        try:
            while True:
                await self.unsaved.wait()
                await anyio.sleep(_FLUSH)
                self.unsaved = anyio.Event()
                await self.save()
        except Exception as exc:  # a refused save: the run stops
            errors.append(exc)
            scope.cancel()

    async def reports(self, process: WorkerProcess) -> tuple[str, Any]:
        protocol = 0  # lines that are not reports: the 1st, 2nd, 4th, ... are recorded
        async for report in process.reports:
            worker = self.worker()
            assert worker is not None
            if (report.generation, report.session) != (worker.generation, worker.session):
                continue  # a late report of an older process
            if report.type == "progress":
                if report.data.get("useful") is True and worker.repeats:
                    # Useful progress: the no-progress rule starts over (committed once).
                    worker = fleet.progress(worker, fleet.expect(worker), now=time.time())
                    self.board.put(worker, None, "progress", "useful")
                    self.unsaved.set()
            elif report.type in ("idle", "busy"):
                seen: fleet.Observed = "idle" if report.type == "idle" else "running"
                if seen == worker.status:
                    continue  # nothing changed: a chatty worker does not flood the trail
                worker, task = fleet.observe(
                    worker,
                    self.task(),
                    fleet.expect(worker, WorkerStatus.RUNNING, WorkerStatus.IDLE),
                    seen,
                    now=time.time(),
                )
                self.board.put(worker, task, report.type)
                self.unsaved.set()
            elif report.type == "usage":
                over = self.spending.charge(worker, report)
                self.unsaved.set()  # committed with the next flush, or by over_budget at once
                if over is not None:
                    return ("budget", over)
            elif report.type == "failure":
                if await self.failure(worker, report):
                    return ("no-progress", None)
            elif report.type == "result":
                return ("result", report.data)
            elif report.type == "protocol":
                protocol += 1
                if protocol & (protocol - 1) == 0:  # bounded: log2(n) entries and commits
                    why = str(report.data.get("reason", ""))
                    self.board.put(worker, None, "protocol", f"{why} n={protocol}")
                    self.unsaved.set()
        return ("exited", None)

    async def failure(self, worker: WorkerRecord, report: Report) -> bool:
        data = report.data
        try:
            failure = WorkerFailure(
                failure_class=word(data.get("class", "failure")),
                fingerprint=sha(repr(data.get("fingerprint", data.get("class", "")))),
                check_id=word(data.get("check_id")),
                pin_id=word(data.get("pin_id")),
                diagnostic_digest=digest_of(data.get("diagnostic")),
                progress_digest=digest_of(data.get("progress")),
                phase=word(data.get("phase", "run")),
                round=data.get("round", 0),
                useful_progress=data.get("useful_progress", False) is True,
                at=time.time(),
            )
        except (ValueError, TypeError):
            self.board.put(worker, None, "protocol", "bad-failure")
            await self.save()
            return False
        worker, stop = fleet.report_failure(
            worker,
            fleet.expect(worker, WorkerStatus.RUNNING, WorkerStatus.IDLE),
            failure,
            now=time.time(),
        )
        self.board.put(worker, None, "failure", failure.failure_class)
        await self.save()
        if not stop:
            return False
        code = f"no-progress:{failure.failure_class}"
        await self.stop_confirmed(worker)
        worker = self.board.workers[worker.id]
        worker, task = fleet.block(
            worker,
            self.task(),
            fleet.expect(worker),
            confirmed_dead=True,
            reason=code,
            now=time.time(),
        )
        self.board.put(worker, task, "blocked", code)
        await self.save()
        raise WorkerStepFailed(code, f"worker {worker.id} reported the same failure twice")

    async def over_budget(self, over: tuple[str, str]) -> None:
        """B3, P4, as for a Python agent whose usage reached a budget: the process is
        stopped and confirmed dead, then the run's budget (tokens, cost) puts the task back
        to ready and the run waits for budget with the work kept (a resume with more
        budget takes the worker over); the task's own reservation fails the step
        ``agent-call-budget``."""
        budget, why = over
        worker = self.worker()
        assert worker is not None
        await self.stop_confirmed(worker)
        worker = self.board.workers[worker.id]
        worker, task = fleet.mark_stopped(
            worker,
            self.task(),
            fleet.expect(worker),
            confirmed_dead=True,
            reason="budget" if budget != "task" else "agent-call-budget",
            task_state="ready" if budget != "task" else "blocked",
            now=time.time(),
        )
        self.board.put(worker, task, "stopped", f"budget:{budget}")
        await self.save()
        if budget == "task":
            raise WorkerStepFailed("agent-call-budget", why)
        await self.actor.wait_for_budget(budget)

    async def stop_confirmed(self, worker: WorkerRecord) -> None:
        """Stop the held process; it must be confirmed dead (``worker-not-dead`` else)."""
        assert worker.process is not None
        seen = await self.agent.host.stop(worker.process, grace=self.agent.grace)
        if not seen.dead:
            self.board.put(self.board.workers[worker.id], None, "stop-unconfirmed")
            await self.commit()
            raise WorkerStepFailed("worker-not-dead", f"worker {worker.id} could not be stopped")
        await self.reap()
        self.board.live.pop(worker.id, None)

    async def reap(self) -> None:
        """The held process is dead: its exit status is collected (bounded), so the host
        lets go of it, and it is no longer held."""
        process, self.process = self.process, None
        if process is not None:
            # Shielded, bounded: a cancellation arriving now must not skip what follows a
            # confirmed death (recording it, B1); the wait only collects an exit status.
            with anyio.CancelScope(shield=True), anyio.move_on_after(max(self.agent.grace, 1.0)):
                await process.wait()

    async def exited(self, process: WorkerProcess) -> None:
        """Its reports ended without a result: once inspected dead (stopped if need be),
        recorded ``native-process-exited``; the task is ready for a takeover."""
        worker = self.worker()
        assert worker is not None
        assert worker.process is not None
        with anyio.move_on_after(self.agent.grace):
            await process.wait()
        seen = await self.agent.host.inspect(worker.process)
        if not seen.dead:
            await self.stop_confirmed(worker)
        self.process = None
        self.board.live.pop(worker.id, None)
        worker = self.board.workers[worker.id]
        worker, task = fleet.observe(
            worker,
            self.task(),
            fleet.expect(worker, WorkerStatus.RUNNING, WorkerStatus.IDLE),
            "exited",
            now=time.time(),
        )
        # Committed on its own (rare): the durable history says generation 1 stopped before
        # generation 2 starts (V2); a crash before it finds the process dead again (R3).
        self.board.put(worker, task, "exited", "native-process-exited")
        await self.save()

    # -- handing off and delivering --------------------------------------------------------

    async def handoff(self, data: Mapping[str, Any]) -> Any:
        output = data.get("output")
        commit = data.get("source_commit")
        worker = self.worker()
        assert worker is not None
        now = time.time()
        # Sealed first: from here on, whatever ends this runtime, the delivery can be read.
        # E5: redacted, saying whether it was; the original is kept in memory only (E10).
        try:
            masked, redacted = await anyio.to_thread.run_sync(redact_flagged, output)
        except ValueError as exc:
            raise WorkerStepFailed("worker-protocol", f"a bad result: {exc}") from exc
        digest = await self.board.shelf.seal({"output": masked, "redacted": redacted})
        worker = self.board.workers[worker.id]  # V2: as it is now (a repair, a heartbeat)
        if redacted:
            keep_result(self.actor.kept, (self.task_id, f"delivery:{digest}"), output)
        try:
            intent = StopIntent(
                delivery_digest=digest,
                contract_digest=self.contract,
                source_commit=commit if isinstance(commit, str) else None,
                expires_at=now + worker.lease,
                at=now,
            )
        except ValueError as exc:
            raise WorkerStepFailed("worker-protocol", f"a bad result: {exc}") from exc
        worker = fleet.begin_handoff(
            worker, fleet.expect(worker, WorkerStatus.RUNNING, WorkerStatus.IDLE), intent
        )
        self.board.put(worker, None, "handoff", digest)
        await self.save()
        await self.stop_confirmed(worker)
        worker = self.board.workers[worker.id]
        await self.not_late(worker)
        worker, task = fleet.fence(
            worker,
            self.task(),
            fleet.expect(worker, WorkerStatus.HANDING_OFF),
            confirmed_dead=True,
            now=time.time(),
        )
        self.board.put(worker, task, "fenced")  # committed with the delivery (deliver)
        return await self.deliver(worker, output)

    async def not_late(self, worker: WorkerRecord) -> None:
        """B1: the step's own timeout fired while its worker handed off (the process was
        being stopped): the delivery came too late and is not recorded. The worker, whose
        process was confirmed dead, is recorded stopped (``timeout``) with its task, as a
        timeout outside a handoff leaves them; the cancellation then ends the driver, and
        the execution fails the step ``agent-timeout`` with the board as it is here. A
        record saying ``handing_off`` (active) or ``delivered`` under a step that failed
        would contradict it for good."""
        if not isinstance(cancel_reason(), Timeout):
            return
        reason, state = why(cancel_reason())
        worker, task = fleet.mark_stopped(
            worker,
            self.task(),
            fleet.expect(worker, WorkerStatus.HANDING_OFF),
            confirmed_dead=True,
            reason=reason,
            task_state=state,
            now=time.time(),
        )
        self.board.put(worker, task, "stopped", reason)
        await anyio.lowlevel.checkpoint()  # cancelled: raises, nothing after it runs
        raise AssertionError("unreachable: the step's scope is cancelled")  # pragma: no cover

    async def deliver(self, worker: WorkerRecord, *output: Any) -> Any:
        assert worker.intent is not None
        digest = worker.intent.delivery_digest
        value = output[0] if output else await self.read_delivery(digest)
        worker, task = fleet.deliver(
            worker,
            self.task(),
            fleet.expect(worker, WorkerStatus.FENCED),
            delivery_digest=digest,
            now=time.time(),
        )
        # Not committed here: the step's output is published by the task's own save, whose
        # commit carries the board (E2), so fenced, delivered and the output become durable
        # together. Until then the record says handing_off, with the evidence sealed and the
        # process confirmed dead: a crash resumes from there (recover: confirmed dead again
        # by a look, fenced, delivered from the evidence, E10). Nothing outside the record
        # happens in between, so no phase a crash must resume from is skipped (E1).
        self.board.put(worker, task, "delivered", digest)
        return value

    async def read_delivery(self, digest: str) -> Any:
        """The delivery sealed as ``digest``, read back (failing closed). One sealed with
        secrets masked is the original only if this runtime still holds it; else the task
        returns the masked copy marked as such, and says why (E10)."""
        output, masked = unsealed(await self.board.shelf.read(digest))
        if not masked:
            return output
        kept = self.actor.kept.get((self.task_id, f"delivery:{digest}"), MISSING)
        if kept is not MISSING:
            return kept
        self.actor.output_masked(
            f"the worker's delivery {digest[:16]} was read back from sealed evidence with "
            "secrets masked: it is not the original"
        )
        return output

    # -- stopping --------------------------------------------------------------------------

    async def release(self) -> None:
        """Whatever ends this driver: a process it holds is stopped and confirmed dead, and
        only then recorded stopped (see the module docstring); the board carries it to the
        final commit when saves are refused."""
        worker = self.worker()
        if self.process is None or worker is None:
            return
        self.board.live.pop(worker.id, None)
        await self.process.reports.aclose()
        identity = self.process.identity
        reason, state = why(cancel_reason(), self.failed)
        try:
            seen = await self.agent.host.stop(identity, grace=self.agent.grace)
        except Exception as exc:  # the host is the user's: whatever it raised, no death seen
            seen = None  # recorded below as a stop not confirmed; what the host said, logged
            log_dropped(
                f"worker {worker.id}: its host's stop raised",
                exc,
                execution_id=self.actor.record.execution_id,
                level=logging.WARNING,
            )
        worker = self.board.workers[worker.id]
        if seen is None or not seen.dead:
            self.board.put(worker, None, "stop-unconfirmed", reason)
            await self.commit()
            return
        await self.reap()
        if worker.status not in ACTIVE_WORKER:
            return
        worker, task = fleet.mark_stopped(
            worker,
            self.task(),
            fleet.expect(worker),
            confirmed_dead=True,
            reason=reason,
            task_state=state,
            now=time.time(),
        )
        self.board.put(worker, task, "stopped", reason)
        await self.commit()  # refused while the run stops: the board carries it


# -- what a worker's reports and stops become on their way to disk -------------------------
#
# Words shaped like secrets masked (E5, V1), text replaced by its digest, a sealed delivery's
# output and whether it was masked (E10), a stop's reason as the worker's.


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def why(reason: Any, failed: str | None = None) -> tuple[str, Any]:
    """The stop's reason as a worker reason, and the task state it leaves: a step that
    failed (``failed``, its code) leaves its task blocked, saying why."""
    if reason is None and failed is not None:
        return failed, "blocked"
    root = reason.root if isinstance(reason, ParentCancel) else reason
    if isinstance(reason, Cancel):  # the task itself was cancelled: stop-task
        return "stop-task", "blocked"
    if isinstance(root, Cancel):
        return "cancel", "blocked"
    if isinstance(root, Pause):
        return "pause", "ready"
    if isinstance(root, Timeout):
        return "timeout", "ready"
    if isinstance(root, BudgetExhausted):
        return "budget", "ready"
    if isinstance(root, LeaseLost):
        return "lease-lost", "ready"
    if reason is None:
        return "stopping", "ready"
    return "shutdown", "ready"


MISSING = object()  # a kept result that is not there


def unsealed(document: Any) -> tuple[Any, bool]:
    """A sealed delivery's output and whether it was masked (E5, E10)."""
    if (
        type(document) is dict
        and document.keys() == {"output", "redacted"}
        and type(document["redacted"]) is bool
    ):
        return document["output"], document["redacted"]
    return document, False  # sealed whole, before deliveries said whether they were masked


def word(value: Any) -> Any:
    """A class, id or phase as a worker reported it, or ``redacted`` if it has the shape of
    a secret (an AWS key fits an id, an OpenAI key a class): words are stored as they are,
    so one that is a secret must not be (E5, V1). Not the fingerprint: it is a digest."""
    if type(value) is str and redact_flagged(value)[1]:
        return "redacted"
    return value


def digest_of(text: Any) -> str | None:
    return sha(text) if isinstance(text, str) and text else None
