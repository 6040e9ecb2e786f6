"""Review of #17: a finalized run (its proof recorded, no active writer) never starts a
worker afterwards: a worker step that had not started when the run was finalized fails
``worker-finalized`` instead of writing into a finalized run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent
from mainspring.testing import ScriptedHost

from ._kit import FAST, agent, plan_of, runtime, stored, tasks_of

pytestmark = pytest.mark.anyio


async def test_a_worker_step_after_finalize_does_not_start_a_worker(tmp_path: Path) -> None:
    gate, started = anyio.Event(), anyio.Event()

    async def waits(ctx: Any, input: Any) -> Any:
        started.set()
        await gate.wait()
        return 1

    host = ScriptedHost([[{"type": "result", "output": 1}]])
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1), "waits": waits}
    receipt = {"tests": "passed"}
    proof = ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        # a delivers (a proof needs a delivered worker task), b waits, c would start a worker.
        plan = plan_of(agent("a", "coder"), agent("b", "waits", "a"), agent("c", "coder", "b"))
        handle = await rt.start("g", plan)
        with anyio.fail_after(30):
            await started.wait()
            digest = await rt.finalize(handle.execution_id, proof)
            gate.set()
            assert (await handle.wait()).status == "failed"
        record = stored(rt, handle.execution_id)
        seen = await rt.workers(handle.execution_id)
    assert len(host.starts) == 1  # a's: no process started after the run was finalized
    assert not any(w.active for w in seen.workers)
    assert record.proof_digest == digest
    failures = [t.failure.code for t in tasks_of(record) if t.failure is not None]
    assert failures == ["worker-finalized"]


async def test_a_proof_recorded_by_another_runtime_survives_the_runs_commits(
    tmp_path: Path,
) -> None:
    gate, started = anyio.Event(), anyio.Event()

    async def waits(ctx: Any, input: Any) -> Any:
        started.set()
        await gate.wait()
        return 1

    receipt = {"tests": "passed"}
    proof = ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )
    host = ScriptedHost([[{"type": "result", "output": 1}]])
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1), "waits": waits}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        # a delivers (a proof needs a delivered worker task), then b and c run.
        plan = plan_of(agent("a", "coder"), agent("b", "waits", "a"), agent("c", "waits", "b"))
        handle = await rt.start("g", plan)
        with anyio.fail_after(30):
            await started.wait()
            async with runtime(tmp_path, agents=agents, **FAST) as other:
                digest = await other.finalize(handle.execution_id, proof)
            gate.set()
            assert (await handle.wait()).status == "completed"
        assert stored(rt, handle.execution_id).proof_digest == digest
