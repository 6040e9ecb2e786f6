"""Which agent task runs an agent step: a stored one claimed again (R8), or a new one."""

from __future__ import annotations

import anyio.to_thread
import attrs

from ..storage import (
    MAX_DIAGNOSTICS,
    AgentTaskRecord,
    Checkpoint,
    Plan,
    PlanStep,
    reconcile,
    redact,
)
from ._rules.plan import step_input_hash
from ._rules.transitions import ASK_PREFIX, clamp_count
from ._run.messages import keep_secret_input, real_input_hash
from ._worker_run import WorkerRun


class TaskClaims(WorkerRun):
    """R8 for an ExecutionActor: a stored task is matched to a step by (agent id, input
    hash), claimed at most once per resume, and restarts its inner work if its agent or its
    own checkpoint changed; otherwise the step gets a new task."""

    def _claim(self, step: PlanStep) -> AgentTaskRecord | None:
        """R8: a stored task matches a step by (agent id, input hash), never by step id; each
        record is claimed at most once per resume. Completed ones first, then unfinished."""
        known: str | None = None
        if step.id in self._rec.masked_inputs:
            # The input hash is of the masked input: a task of another secret would match.
            # Only a task this runtime ran with this very input (known in memory, never on
            # disk) is reused; what ran with which secret elsewhere cannot be told (E10).
            if self._live_plan is None:
                return None
            known = real_input_hash(step)
        digest = step_input_hash(step)
        candidates = [
            task
            for task in self._tasks.values()
            if task.agent_id == step.agent
            and task.input_hash == digest
            and task.id not in self._claimed
            and task.state not in ("failed", "cancelled", "waiting_for_clarification")
            # R8: a changed agent's finished task is not its result; an unfinished one is
            # claimed and restarts its inner work (see _revalidated).
            and not (task.state == "completed" and self._redefined(task))
            and (known is None or self._cfg.secret_inputs.get(task.id) == known)
        ]
        if not candidates:
            return None
        candidates.sort(key=lambda t: (t.state != "completed", t.created_at))
        task = candidates[0]
        self._claimed.add(task.id)
        if task.step_id != step.id:
            task = attrs.evolve(task, step_id=step.id)
        return task

    def _redefined(self, task: AgentTaskRecord) -> bool:
        """R8: the agent's definition changed since ``task`` was created. A task stored
        before definitions were recorded (empty hash) is unknown and taken as unchanged."""
        current = self._cfg.agent_hashes.get(task.agent_id, "")
        return bool(task.definition_hash) and task.definition_hash != current

    def _note_kept_under_new_definitions(self) -> None:
        """R7 on a resume without drift: a completed agent step stays completed and is not
        run again, even when its agent's definition changed since it ran (R8's hashes).
        That is said, never silent: its task gets ``kept_under_definition`` (the hash in
        force now, durable with the next commit) and a diagnostic naming both hashes, which
        ``mainspring show`` prints and ``ExecutionResult.stale_steps`` derives from. Once
        per new definition: resuming again under the same one adds nothing."""
        for step_id, state in self._sched.status.items():
            observation = self._obs.get(step_id)
            if state != "succeeded" or observation is None or not observation.agent_task_id:
                continue
            task = self._tasks.get(observation.agent_task_id)
            if task is None or task.state != "completed" or not self._redefined(task):
                continue
            current = self._cfg.agent_hashes.get(task.agent_id, "")
            if not current or task.kept_under_definition == current:
                continue  # an agent this runtime lacks is not a new definition of it
            note = (
                f"step {step_id} kept (R7), not run again, though agent {task.agent_id} "
                f"changed since: ran under definition {task.definition_hash[:12]}, "
                f"kept under {current[:12]}"
            )
            self._set_task(
                attrs.evolve(
                    task,
                    kept_under_definition=current,
                    diagnostics=(*task.diagnostics, note)[-MAX_DIAGNOSTICS:],
                )
            )

    def _new_task(self, step: PlanStep, now: float) -> AgentTaskRecord:
        number = len(self._tasks) + len(self._unparsed) + 1
        digest = step_input_hash(step)
        replaced = [
            t.id
            for t in self._tasks.values()
            if t.state == "completed"
            and t.agent_id == step.target
            and t.input_hash == digest
            and self._redefined(t)
        ]
        task = AgentTaskRecord(
            id=f"{self._rec.id}:t{number}",
            agent_id=step.target,
            step_id=step.id,
            state="created",
            created_at=now,
            updated_at=now,
            execution_id=self._rec.id,
            plan_version=self._plan.version if self._plan else 1,
            definition_hash=self._cfg.agent_hashes.get(step.target, ""),
            envelope_hash=self._cfg.agent_envelope,
            input_hash=digest,
            diagnostics=tuple(
                f"agent {step.target} changed since task {old} completed: not reused (R8)"
                for old in replaced[-MAX_DIAGNOSTICS:]
            ),
        )
        self._claimed.add(task.id)
        self._charged[task.id] = 0
        if step.id in self._rec.masked_inputs and self._live_plan is not None:
            # E10: which secret this task ran with is known here only, never on disk.
            keep_secret_input(self._cfg.secret_inputs, task.id, real_input_hash(step))
        return task

    async def _task_checkpoint(self, step: PlanStep) -> Checkpoint | None:
        if self._cfg.workspace is None:
            return None
        plan = Plan(id="task", goal="", steps=(step,))
        return await self._capture(plan, ())

    async def _inner_drift(self, task: AgentTaskRecord, step: PlanStep) -> tuple[str, ...]:
        """What changed in the task's own checkpoint: the files its step names and those its
        inner steps declared, the configuration, git (R8)."""
        if task.inner_checkpoint is None or self._cfg.workspace is None:
            return ()
        plan = Plan(id="task", goal="", steps=(step,))
        checkpoint = attrs.evolve(task.inner_checkpoint, tool_hashes=None, skill_versions=None)
        root = self._cfg.workspace
        paths = task.touched_paths
        config = self._cfg.config  # compared with the config the checkpoint was taken with
        found = await anyio.to_thread.run_sync(
            lambda: reconcile(checkpoint, root, plan, config=config, paths=paths)
        )
        return found.reasons

    async def _revalidated(self, task: AgentTaskRecord, step: PlanStep) -> AgentTaskRecord:
        """An unfinished task claimed for ``step`` (R8): its inner work restarts (a new
        attempt, with a diagnostic saying why) if its agent's definition changed or its own
        checkpoint drifted. Answers it was given stay: they are the human's, not derived
        from the code or the workspace."""
        current = self._cfg.agent_hashes.get(step.target, "")
        why = ""
        if self._redefined(task):
            why = f"agent {step.target}'s definition changed"
        else:
            drift = await self._inner_drift(task, step)
            if drift:
                why = f"its checkpoint drifted ({'; '.join(drift)})"
        envelope = self._cfg.agent_envelope
        if not why:  # an unknown (old) hash is known from now on
            return attrs.evolve(task, definition_hash=current, envelope_hash=envelope)
        answers = tuple(o for o in task.inner_observations if o.step_id.startswith(ASK_PREFIX))
        attempt = clamp_count(task.attempt + 1)
        note = redact(f"attempt {attempt}: the inner work restarts: {why} (R8)")
        return attrs.evolve(
            task,
            inner_completed=tuple(o.step_id for o in answers),
            inner_observations=answers,
            inner_steps_done=0,
            inner_checkpoint=None,  # taken again before the new attempt runs
            touched_paths=(),
            attempt=attempt,
            diagnostics=(*task.diagnostics, note)[-MAX_DIAGNOSTICS:],
            definition_hash=current,
            envelope_hash=envelope,
        )
