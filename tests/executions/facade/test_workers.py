"""The edges of the worker surface (#17): the evidence shelf of a store that keeps no
evidence (sealed by content, read back checked, failing closed like the store's own),
``Runtime.workers`` / ``repair_worker`` / ``finalize`` refusals and finalizing a live run,
finding an unrecorded start's processes by session, and the record validators."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import SubprocessHost, WorkerAgent, WorkerNotLive
from mainspring.executions._workers.evidence import EvidenceShelf
from mainspring.executions._workers.find import find_start, host_of
from mainspring.storage import TrailEntry, WorkerRecord
from mainspring.storage._seam import (
    MAX_EVIDENCE_BYTES,
    EvidenceError,
    ProcessIdentity,
    StopIntent,
    WorkerFailure,
    check_lease,
    parse_workers,
)
from mainspring.testing import ScriptedHost

from .._kit import FAST, Gate, MemoryStore, agent, plan_of, runtime, stored, tasks_of, tool

RESULT = {"type": "result", "output": {"ok": True}}
DIGEST = "a" * 64


def _proof(receipt: dict[str, Any] | None = None) -> ms.executions.Proof:
    receipt = receipt or {"tests": "passed"}
    return ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )


def coder(host: ScriptedHost) -> dict[str, WorkerAgent]:
    return {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}


# -- the evidence shelf of a store without evidence -------------------------------------------


@pytest.mark.anyio
async def test_the_memory_shelf_seals_by_content_and_reads_back() -> None:
    shelf = EvidenceShelf(None, MemoryStore())  # type: ignore[arg-type]
    digest = await shelf.seal({"b": 1, "a": [1, 2]})
    assert digest == ms.storage._seam.sha256_hex({"a": [1, 2], "b": 1})
    assert await shelf.seal({"a": [1, 2], "b": 1}) == digest  # the same document, once
    assert await shelf.read(digest) == {"a": [1, 2], "b": 1}


@pytest.mark.anyio
async def test_the_memory_shelf_fails_closed() -> None:
    shelf = EvidenceShelf(None, MemoryStore())  # type: ignore[arg-type]
    with pytest.raises(EvidenceError, match="no evidence"):
        await shelf.read(DIGEST)  # missing
    digest = await shelf.seal({"verdict": "passed"})
    shelf._memory[digest] = b'{"verdict":"failed"}'  # tampered after sealing
    with pytest.raises(EvidenceError):
        await shelf.read(digest)
    with pytest.raises(EvidenceError, match="limited"):
        await shelf.seal({"text": "x" * MAX_EVIDENCE_BYTES})
    assert len(shelf._memory) == 1  # nothing over the bound was kept


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_malformed_digest_is_an_evidence_error_on_either_shelf(
    tmp_path: Path, kind: str
) -> None:
    """Before: the memory shelf raised a bare ValueError where the store's shelf raises
    EvidenceError, so a caller handling EvidenceError missed it (fail closed, either way)."""
    store: Any = MemoryStore() if kind == "memory" else tmp_path
    async with runtime(store, **FAST) as rt:
        for bad in ("A" * 64, "a" * 63, "../" + "a" * 61):
            with pytest.raises(EvidenceError):
                await rt._services.evidence.read(bad)


# -- Runtime.workers, repair_worker, finalize -------------------------------------------------


@pytest.mark.anyio
async def test_worker_controls_refuse_unknown_runs_and_bad_arguments(tmp_path: Path) -> None:
    async with runtime(tmp_path, **FAST) as rt:
        with pytest.raises(ms.executions.UnknownExecution):
            await rt.workers("nope")
        with pytest.raises(ms.storage.InvalidId):
            await rt.workers("../etc")
        with pytest.raises(WorkerNotLive, match="not a live worker"):
            await rt.repair_worker("nope", "w1", "fix it")
        with pytest.raises(ms.storage.InvalidId):
            await rt.repair_worker("nope", "../w", "fix it")
        with pytest.raises(ms.executions.UnknownExecution):
            await rt.finalize("nope", _proof())
        with pytest.raises(TypeError, match="finalize takes a Proof, not dict"):
            await rt.finalize("nope", {"verification": "passed"})  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_view_counts_trail_entries_that_do_not_parse(tmp_path: Path) -> None:
    host = ScriptedHost([[RESULT]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            await handle.wait()
        record = stored(rt, handle.execution_id)
    import attrs

    broken = attrs.evolve(record, worker_trail=(*record.worker_trail, {"seq": "x"}))
    view = ms.executions._facade.workers.view_of(broken)
    assert view.dropped == 1
    assert len(view.trail) == len(record.worker_trail)  # the good entries are kept


@pytest.mark.anyio
async def test_finalize_a_live_run_through_its_commit_funnel(tmp_path: Path) -> None:
    gate = Gate()
    host = ScriptedHost([[RESULT]])
    plan = plan_of(agent("a", "coder"), tool("b", "gate", "a"))
    async with runtime(tmp_path, agents=coder(host), tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan)
        with anyio.fail_after(30):
            await gate.entered.wait()  # the worker delivered; the run is live
            digest = await rt.finalize(handle.execution_id, _proof())
            assert stored(rt, handle.execution_id).proof_digest == digest  # committed
            assert await rt.finalize(handle.execution_id, _proof()) == digest
            with pytest.raises(ms.executions.WorkerRefused) as refused:
                await rt.finalize(handle.execution_id, _proof({"tests": "other"}))
            assert refused.value.code == "proof"
            gate.opened.set()
            done = await handle.wait()
        assert done.status == "completed"
        assert stored(rt, handle.execution_id).proof_digest == digest  # kept to the end
        assert await rt._services.evidence.read(digest) == _proof().plain()


@pytest.mark.anyio
async def test_finalize_a_stored_run_from_another_runtime(tmp_path: Path) -> None:
    host = ScriptedHost([[RESULT]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            await handle.wait()
    async with runtime(tmp_path, **FAST) as rt:
        digest = await rt.finalize(handle.execution_id, _proof())
        assert stored(rt, handle.execution_id).proof_digest == digest
        assert await rt.finalize(handle.execution_id, _proof()) == digest
        with pytest.raises(ms.executions.WorkerRefused):
            await rt.finalize(handle.execution_id, _proof({"tests": "other"}))
        assert stored(rt, handle.execution_id).proof_digest == digest


# -- finding an unrecorded start's processes (R3) --------------------------------------------


@pytest.mark.anyio
async def test_a_host_that_cannot_search_finds_nothing_and_says_so() -> None:
    host = ScriptedHost()
    assert host_of(host) is None
    assert await find_start(host, "any-session") is None  # None: cannot confirm anything


@pytest.mark.anyio
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
async def test_an_unrecorded_start_is_found_by_its_session_and_stopped() -> None:
    host = SubprocessHost(grace=0.5)
    session = f"s-{uuid.uuid4().hex}"
    assert host_of(host) == host.host
    assert await find_start(host, session) == []  # none of it: a takeover may go on
    env = {**os.environ, "MAINSPRING_WORKER_SESSION": session}
    code = "import sys; sys.stdout.write('up\\n'); sys.stdout.flush(); sys.stdin.read()"
    async with await anyio.open_process(
        [sys.executable, "-c", code], env=env, start_new_session=True
    ) as proc:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            await proc.stdout.receive()  # it runs
            found = await find_start(host, session)
            assert found is not None
            assert [(p.host, p.pid, p.group) for p in found] == [(host.host, proc.pid, proc.pid)]
            seen = await host.stop(found[0], grace=0.5)
            assert seen.dead
            assert await find_start(host, session) == []
            await proc.wait()
    assert proc.returncode is not None
    assert proc.returncode < 0  # killed by a signal


# -- record validators ------------------------------------------------------------------------


def _worker(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "id": "w1",
        "task_id": "t1",
        "step_id": "a",
        "agent_id": "coder",
        "created_at": 1.0,
        "updated_at": 1.0,
    }
    raw.update(changes)
    return raw


def test_a_worker_record_that_does_not_validate_is_dropped_and_counted() -> None:
    good = _worker()
    bad = [
        _worker(lease=0.5),
        _worker(lease=601),
        _worker(generation=0),
        _worker(status="zombie"),
        _worker(delivered_digest="A" * 64),
        _worker(process={"host": "h", "pid": -1, "group": 1}),
        _worker(process={"host": "h", "pid": 1, "group": 1, "started": -1}),
        _worker(reason="x" * 257),
        _worker(created_at=float("nan")),
        _worker(created_at=True),
        _worker(lease_expires_at="soon"),
    ]
    parsed, dropped = parse_workers((good, *bad))
    assert [w.id for w in parsed] == ["w1"]
    assert dropped == len(bad)


@pytest.mark.parametrize("value", [1.0, 30, 600.0])
def test_a_lease_within_bounds_is_accepted(value: float) -> None:
    assert check_lease(value) == float(value)


@pytest.mark.parametrize(
    ("value", "error"),
    [(0.99, ValueError), (600.5, ValueError), (float("nan"), ValueError), (True, TypeError)],
)
def test_a_lease_out_of_bounds_is_refused(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="lease"):
        check_lease(value)
    with pytest.raises((ValueError, TypeError)):
        WorkerRecord(
            id="w1",
            task_id="t1",
            step_id="a",
            agent_id="c",
            lease=value,
            created_at=0,
            updated_at=0,
        )


@pytest.mark.parametrize("value", ["lint", "e501", "ruff.e501", "type:mypy", "x", "a-b_c"])
def test_a_failure_class_that_is_a_word_is_accepted(value: str) -> None:
    assert WorkerFailure(failure_class=value, fingerprint=DIGEST).failure_class == value


@pytest.mark.parametrize("value", ["", "Lint", "-lint", "lint me", "x" * 65, "lint\n", 5, None])
def test_a_failure_class_that_is_not_a_word_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="failure_class"):
        WorkerFailure(failure_class=value, fingerprint=DIGEST)
    with pytest.raises(ValueError, match="event"):
        TrailEntry(seq=1, at=0, worker_id="w1", generation=1, event=value, status="running")


@pytest.mark.parametrize("value", ["A" * 64, "a" * 63, "g" * 64, None, 64])
def test_a_fingerprint_that_is_not_a_sha256_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="fingerprint must be a sha256"):
        WorkerFailure(failure_class="lint", fingerprint=value)


@pytest.mark.parametrize("commit", [None, "abc1234", "0" * 40, "f" * 64])
def test_a_source_commit_id_is_accepted(commit: str | None) -> None:
    intent = StopIntent(
        delivery_digest=DIGEST, contract_digest=DIGEST, source_commit=commit, expires_at=1, at=0
    )
    assert intent.source_commit == commit


@pytest.mark.parametrize("commit", ["abc123", "ABC1234", "f" * 65, "main", "abc1234\n", 1234567])
def test_a_source_commit_that_is_not_a_commit_id_is_refused(commit: Any) -> None:
    with pytest.raises(ValueError, match="source_commit must be a commit id"):
        StopIntent(
            delivery_digest=DIGEST,
            contract_digest=DIGEST,
            source_commit=commit,
            expires_at=1,
            at=0,
        )


def test_a_process_identity_is_bounded() -> None:
    assert ProcessIdentity(host="h", pid=2**31 - 1, group=0).started == 0
    with pytest.raises(ValueError, match="pid"):
        ProcessIdentity(host="h", pid=2**31, group=1)
    with pytest.raises(ValueError, match="host"):
        ProcessIdentity(host="h\x00", pid=1, group=1)


# ----------------------------------------------------------------------
# The public surface of workers: a worker whose usage exhausts the run's
# budget is stopped (confirmed dead) and the run waits for budget with the work kept (B3,
# P4); ``WorkerAgent`` refuses a bad command or environment where it is built; the errors
# ``repair_worker`` and ``finalize`` raise are public names.
SPENT = {"type": "usage", "input_tokens": 150, "output_tokens": 10, "cost": "0.5"}


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
def test_X4_a_bad_command_is_refused_clearly(command: Any, error: type[Exception]) -> None:
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
def test_X4_a_bad_environment_is_refused_where_the_agent_is_built(env: Any) -> None:
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
async def test_W3_finalize_refuses_a_run_without_any_worker_task(tmp_path: Path) -> None:
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
