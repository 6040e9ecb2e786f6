"""Review #17, the public surface of workers: a worker whose usage exhausts the run's
budget is stopped (confirmed dead) and the run waits for budget with the work kept (B3,
P4); ``WorkerAgent`` refuses a bad command or environment where it is built; the errors
``repair_worker`` and ``finalize`` raise are public names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent
from mainspring.testing import ScriptedHost

from ._kit import FAST, agent, plan_of, runtime, stored, tasks_of

RESULT = {"type": "result", "output": {"ok": True}}
SPENT = {"type": "usage", "input_tokens": 150, "output_tokens": 10, "cost": "0.5"}


def coder(host: ScriptedHost) -> dict[str, WorkerAgent]:
    return {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}


@pytest.mark.anyio
async def test_B3_a_worker_that_exhausts_the_token_budget_is_stopped_and_the_run_waits(
    tmp_path: Path,
) -> None:
    host = ScriptedHost([[SPENT, ScriptedHost.until_stopped()], [RESULT]])
    async with runtime(tmp_path, agents=coder(host), max_tokens=100, **FAST) as rt:
        with anyio.fail_after(30):
            first = await (await rt.start("g", plan_of(agent("a", "coder")))).wait()
        assert first.status == "waiting_for_budget"
        assert first.pending is not None
        assert first.pending.budget is not None
        assert first.pending.budget.budget == "tokens"
        assert not host.processes[0].alive  # stopped, not left spending
        seen = await rt.workers(first.execution_id)
        (worker,) = seen.workers
        assert worker.status == "stopped"
        assert worker.reason == "budget"
        assert seen.tasks[0].state == "ready"
        (task,) = tasks_of(stored(rt, first.execution_id))
        assert task.state == "queued"
        assert task.usage.tokens == 160  # charged in full (B3)
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, max_tokens=10_000)).wait()
        seen = await rt.workers(first.execution_id)
    assert done.status == "completed"
    assert done.outputs["a"] == {"ok": True}
    assert [spec.generation for spec in host.starts] == [1, 2]  # taken over, not a new task
    assert seen.workers[0].status == "delivered"


@pytest.mark.anyio
async def test_B3_a_worker_that_exhausts_the_cost_budget_waits_naming_cost(
    tmp_path: Path,
) -> None:
    host = ScriptedHost([[SPENT, ScriptedHost.until_stopped()]])
    async with runtime(tmp_path, agents=coder(host), max_cost="0.25", **FAST) as rt:
        with anyio.fail_after(30):
            first = await (await rt.start("g", plan_of(agent("a", "coder")))).wait()
        seen = await rt.workers(first.execution_id)
    assert first.status == "waiting_for_budget"
    assert first.pending is not None
    assert first.pending.budget is not None
    assert first.pending.budget.budget == "cost"
    assert not host.processes[0].alive
    assert seen.workers[0].status == "stopped"


@pytest.mark.anyio
async def test_B3_usage_within_the_budget_does_not_stop_the_worker(tmp_path: Path) -> None:
    host = ScriptedHost([[SPENT, RESULT]])
    async with runtime(tmp_path, agents=coder(host), max_tokens=1_000, **FAST) as rt:
        with anyio.fail_after(30):
            done = await (await rt.start("g", plan_of(agent("a", "coder")))).wait()
    assert done.status == "completed"
    assert len(host.starts) == 1


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (5, TypeError),
        (None, TypeError),
        ({"echo": "x"}, TypeError),
        (b"echo", TypeError),
        ([], ValueError),
        (["echo", 1], ValueError),
        (["ec\x00ho"], ValueError),
    ],
)
def test_a_bad_command_is_refused_clearly(command: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="worker command"):
        WorkerAgent(command, host=ScriptedHost())


@pytest.mark.parametrize(
    "env",
    [
        {"A": "b\x00c"},
        {"A\x00": "b"},
        {"A=B": "b"},
        {"": "b"},
        {"A": 1},
        {1: "b"},
        "A=b",
    ],
)
def test_a_bad_environment_is_refused_where_the_agent_is_built(env: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="env"):
        WorkerAgent(["echo"], host=ScriptedHost(), env=env)


def test_the_errors_of_worker_controls_are_public() -> None:
    for name in ("WorkerRefused", "StaleWorker"):
        cls = getattr(ms.executions, name)
        assert cls.__module__ == "mainspring.executions"
        assert issubclass(cls, ms.MainspringError)


@pytest.mark.anyio
async def test_P4_a_worker_past_its_task_reservation_is_stopped_and_the_step_fails(
    tmp_path: Path,
) -> None:
    host = ScriptedHost([[SPENT, ScriptedHost.until_stopped()]])
    options: dict[str, Any] = {"max_tokens": 10_000, "token_reservation": lambda left: 100}
    async with runtime(tmp_path, agents=coder(host), **options, **FAST) as rt:
        with anyio.fail_after(30):
            done = await (await rt.start("g", plan_of(agent("a", "coder")))).wait()
        seen = await rt.workers(done.execution_id)
        (task,) = tasks_of(stored(rt, done.execution_id))
    assert done.status == "failed"
    assert task.failure is not None
    assert task.failure.code == "agent-call-budget"
    assert not host.processes[0].alive
    assert seen.workers[0].status == "stopped"


@pytest.mark.anyio
async def test_finalize_refuses_a_run_without_any_worker_task(tmp_path: Path) -> None:
    """Before: a run with no worker task (or whose worker steps had not begun) was
    finalized: "every task delivered" held vacuously."""
    receipt = {"tests": "passed"}
    proof = ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )
    async with runtime(tmp_path, **FAST) as rt:
        with anyio.fail_after(30):
            done = await (await rt.start("g", plan_of(ms.PlanStep(id="a", tool="inc")))).wait()
        with pytest.raises(ms.executions.WorkerRefused) as refused:
            await rt.finalize(done.execution_id, proof)
        assert refused.value.code == "proof"
        assert stored(rt, done.execution_id).proof_digest is None
