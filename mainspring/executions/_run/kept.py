"""What a runtime keeps in memory, never on disk, of its runs whose stored inputs are masked
(E10): the plan with its real inputs, a digest of the real input each agent task ran with,
and the real results of inner steps stored masked.

A resume in the same runtime runs such a run as planned instead of replanning it (its
stored inputs are redacted), reuses a task only if it ran with the same secret (R8), and
hands an agent the value it stored masked. One :class:`KeptInputs` belongs to a runtime's
registry of live runs (``_facade.live``); each ExecutionActor is given it, and what a run
kept goes once the run is terminal (:meth:`KeptInputs.forget`). It is bounded: the oldest
plans and digests go first.
"""

from __future__ import annotations

from typing import Any

from ...storage import Plan, PlanStep
from ...storage._seam import encode_value, sha256_hex

__all__ = ["MAX_LIVE_PLANS", "KeptInputs", "real_input_hash"]

#: The most plans kept (one per run); ten times as many task digests.
MAX_LIVE_PLANS = 1_000


def real_input_hash(step: PlanStep) -> str:
    """A digest of ``step``'s real input, secrets included: kept in memory, never stored."""
    return sha256_hex(encode_value(step.input))


class KeptInputs:
    """The real plans, task inputs and inner results of a runtime's runs (see the module
    docstring). Read and changed on the event loop's thread only: no lock."""

    def __init__(self) -> None:
        self._plans: dict[str, Plan] = {}
        self._digests: dict[str, str] = {}
        #: (task id, inner step) -> the real value, handed to the agent task that asks
        #: (``AgentTaskActor.kept``): the very dict, shared by the runs of the runtime.
        self.results: dict[tuple[str, str], Any] = {}

    def plan(self, execution_id: str) -> Plan | None:
        """The plan ``execution_id`` was last given here, with its real inputs, or None."""
        return self._plans.get(execution_id)

    def keep_plan(self, execution_id: str, plan: Plan) -> None:
        """Remember ``plan`` (with its real inputs) for ``execution_id``: the oldest go first."""
        plans = self._plans
        plans.pop(execution_id, None)
        plans[execution_id] = plan
        while len(plans) > MAX_LIVE_PLANS:
            del plans[next(iter(plans))]

    def input_digest(self, task_id: str) -> str | None:
        """The digest of the real input ``task_id`` ran with here, or None (R8, E10)."""
        return self._digests.get(task_id)

    def keep_input(self, task_id: str, digest: str) -> None:
        """Remember which real input ``task_id`` ran with: the oldest go first."""
        digests = self._digests
        digests.pop(task_id, None)
        digests[task_id] = digest
        while len(digests) > MAX_LIVE_PLANS * 10:
            del digests[next(iter(digests))]

    def forget(self, execution_id: str) -> None:
        """A finished run's real plan, inputs and results go."""
        self._plans.pop(execution_id, None)
        prefix = f"{execution_id}:t"
        for task_id in [t for t in self._digests if t.startswith(prefix)]:
            del self._digests[task_id]
        for key in [k for k in self.results if k[0].startswith(prefix)]:
            del self.results[key]
