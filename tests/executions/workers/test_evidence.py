"""Review #17: a worker's delivery is sealed redacted (E5), and a delivery read back with
secrets masked is not replayed as if it were the original (E10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent

from .._kit import FAST, agent, plan_of, runtime, stored, tasks_of
from .._worker_fake import FakeHost, Script

pytestmark = pytest.mark.anyio

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
OUTPUT = {"patch": f"diff {TOKEN}", "n": 3}
RESULT = ("result", {"output": OUTPUT})


def coder(host: FakeHost) -> dict[str, Any]:
    return {"coder": WorkerAgent(["fake-agent"], host=host, grace=0.1)}


def _files(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


async def test_E5_a_delivery_with_a_secret_is_sealed_redacted(tmp_path: Path) -> None:
    host = FakeHost([Script([RESULT])])
    store = ms.storage.FileStore(tmp_path / "fs")
    async with runtime(store, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            result = await handle.wait()
    assert result.status == "completed"
    assert result.outputs["a"] == OUTPUT  # the live result is not slimmed (E5)
    assert list((tmp_path / "fs" / "evidence").iterdir())  # the delivery was sealed
    assert TOKEN.encode() not in _files(tmp_path / "fs")  # E5: nor on disk


async def test_E10_a_masked_delivery_read_back_is_marked_not_replayed_as_the_original(
    tmp_path: Path,
) -> None:
    host = FakeHost([Script([RESULT])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            live = await handle.wait()
        done = stored(rt, handle.execution_id)
    assert live.outputs["a"] == OUTPUT
    # The run crashed after the delivery, before its step's completion was committed.
    raw = [attrs.evolve(t, state="running", ended_at=None) for t in done.task_records]
    assert done.plan is not None
    plan = attrs.evolve(
        done.plan, steps=tuple(attrs.evolve(s, status="running") for s in done.plan.steps)
    )
    crashed = attrs.evolve(
        done,
        status="running",
        lease=None,
        agent_tasks=tuple(raw),
        plan=plan,
        completed_steps=(),
        observations=(),
    )
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    store.delete(done.id)
    store.create(crashed)
    async with runtime(store, agents=coder(host), **FAST) as rt:
        with anyio.fail_after(30):
            resumed = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert resumed.status == "completed"
    assert len(host.specs) == 1  # a delivered task is never run again
    assert TOKEN not in repr(resumed.outputs["a"])
    assert resumed.redacted == ("a",)  # E10: marked, not taken for the original
    (observation,) = [o for o in resumed.observations if o.step_id == "a"]
    assert observation.redacted
    (task,) = tasks_of(record)
    assert any("masked" in line for line in task.diagnostics)  # and says why


OPENAI = "sk-proj-" + "abcdefghijklmnopqrstuvwx"  # a key shape that fits a failure class
AWS = "AKIA" + "ABCDEFGHIJKLMNOP"  # one that fits an id


async def test_E5_a_failure_whose_class_or_ids_are_secrets_is_kept_masked(tmp_path: Path) -> None:
    failure = (
        "failure",
        {"class": OPENAI, "check_id": AWS, "pin_id": AWS, "phase": OPENAI, "fingerprint": "f"},
    )
    host = FakeHost([Script([failure, failure])])
    store = ms.storage.FileStore(tmp_path / "fs")
    async with runtime(store, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            result = await handle.wait()
        seen = await rt.workers(handle.execution_id)
    assert result.status == "failed"  # the no-progress rule still holds
    (worker,) = seen.workers
    assert worker.status == "blocked"
    assert worker.reason.startswith("no-progress:")
    on_disk = _files(tmp_path / "fs")
    assert OPENAI.encode() not in on_disk  # E5, V1
    assert AWS.encode() not in on_disk


async def test_W1_a_step_failed_by_a_bad_result_keeps_its_reason_on_the_worker(
    tmp_path: Path,
) -> None:
    bad = ("result", {"output": {"n": 1}, "source_commit": "not-a-commit"})
    host = FakeHost([Script([bad])])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            result = await handle.wait()
        seen = await rt.workers(handle.execution_id)
        (record,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "failed"
    assert record.failure is not None
    assert record.failure.code == "worker-protocol"
    (worker,) = seen.workers
    assert worker.status == "stopped"  # its process was stopped and confirmed dead
    assert worker.reason == "worker-protocol"  # why, not "stopping"
    (task,) = seen.tasks
    assert task.state == "blocked"  # the step failed: nothing will run it again
    assert task.reason == "worker-protocol"


async def test_W3_a_proof_whose_receipt_holds_a_secret_is_refused_not_sealed(
    tmp_path: Path,
) -> None:
    host = FakeHost([Script([("result", {"output": {"n": 1}})])])
    store = ms.storage.FileStore(tmp_path / "fs")
    receipt = {"tests": "passed", "ci_token": TOKEN}
    proof = ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )
    async with runtime(store, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "completed"
        with pytest.raises(ms.executions._workers.fleet.WorkerRefused, match="secret"):
            await rt.finalize(handle.execution_id, proof)
        assert stored(rt, handle.execution_id).proof_digest is None
    assert TOKEN.encode() not in _files(tmp_path / "fs")  # E5
