"""Review of #17 (worker lifecycle driven through WorkerAgent): useful progress resets the
no-progress rule, a chatty worker does not flood the trail nor the store, and two
finalizes racing with different proofs never overwrite each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent
from mainspring.testing import ScriptedHost

from ._kit import FAST, RecordingSqliteStore, agent, plan_of, runtime, stored, tasks_of

pytestmark = pytest.mark.anyio

FAIL = {"type": "failure", "class": "tests-fail", "fingerprint": "x"}
RESULT = {"type": "result", "output": {"ok": 1}}


def coder(host: ScriptedHost) -> dict[str, Any]:
    return {"coder": WorkerAgent(["fake"], host=host, grace=0.1)}


async def test_useful_progress_between_two_same_failures_resets_the_no_progress_rule(
    tmp_path: Path,
) -> None:
    useful = {"type": "progress", "useful": True}
    host = ScriptedHost([[FAIL, useful, FAIL, RESULT]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            result = await handle.wait()
        assert result.status == "completed", tasks_of(stored(rt, handle.execution_id))
        assert result.outputs["a"] == {"ok": 1}


async def test_progress_that_is_not_useful_does_not_reset_it(tmp_path: Path) -> None:
    host = ScriptedHost([[FAIL, {"type": "progress"}, {"type": "progress", "useful": "yes"}, FAIL]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert task.failure is not None
    assert task.failure.code == "no-progress:tests-fail"


async def test_a_chatty_worker_keeps_the_trail_and_the_commits_bounded(tmp_path: Path) -> None:
    chatter: list[Any] = []
    for _ in range(1500):
        chatter += ["a log line, not a report", {"type": "busy"}, {"type": "progress"}]
    host = ScriptedHost([[*chatter, RESULT]])
    store = RecordingSqliteStore(tmp_path / "store.sqlite3")
    async with runtime(store, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(60):
            assert (await handle.wait()).status == "completed"
        seen = await rt.workers(handle.execution_id)
    events = [e.event for e in seen.trail]
    # the lifecycle is still in the trail: chatter did not push it out
    assert events[:3] == ["assigned", "starting", "started"]
    protocol = [e.detail for e in seen.trail if e.event == "protocol"]
    assert protocol[0] == "not-json n=1"
    assert len(protocol) <= 12  # 1, 2, 4, ... 1024 of 1500
    assert len(store.versions) < 60  # not one commit per line


def _proof(receipt: dict[str, Any]) -> ms.executions.Proof:
    return ms.executions.Proof(
        verification="passed",
        review="passed",
        receipt=receipt,
        receipt_digest=ms.storage._seam.sha256_hex(receipt),
    )


async def test_two_finalizes_racing_with_different_proofs_never_overwrite(
    tmp_path: Path,
) -> None:
    gate, started = anyio.Event(), anyio.Event()

    async def waits(ctx: Any, input: Any) -> Any:  # keeps the run (and its board) live
        started.set()
        await gate.wait()
        return 1

    host = ScriptedHost([[RESULT]])
    async with runtime(tmp_path, agents={**coder(host), "waits": waits}, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder"), agent("b", "waits", "a")))
        with anyio.fail_after(30):
            await started.wait()  # b depends on a: a was delivered
        answers: list[Any] = []

        async def finalize(receipt: dict[str, Any]) -> None:
            try:
                answers.append(await rt.finalize(handle.execution_id, _proof(receipt)))
            except ms.executions._workers.fleet.WorkerRefused as exc:
                answers.append(exc.code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(finalize, {"x": 1})
            tg.start_soon(finalize, {"x": 2})
        (digest,) = [a for a in answers if a != "proof"]
        assert answers.count("proof") == 1
        assert stored(rt, handle.execution_id).proof_digest == digest
        gate.set()
        with anyio.fail_after(30):
            await handle.wait()
        assert stored(rt, handle.execution_id).proof_digest == digest


async def test_a_long_failure_class_reaches_the_step_failure_whole(tmp_path: Path) -> None:
    name = "c" * 64  # the longest failure class
    failure = {"type": "failure", "class": name, "fingerprint": "x"}
    host = ScriptedHost([[failure, failure]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        (task,) = tasks_of(stored(rt, handle.execution_id))
        seen = await rt.workers(handle.execution_id)
    assert task.failure is not None
    assert task.failure.code == f"no-progress:{name}"
    assert seen.workers[0].reason == task.failure.code
    assert seen.tasks[0].reason == task.failure.code


async def test_a_flood_of_state_and_usage_reports_is_committed_together(tmp_path: Path) -> None:
    flood: list[Any] = []
    for _ in range(2000):
        flood += [{"type": "busy"}, {"type": "idle"}, {"type": "usage", "input_tokens": 1}]
    host = ScriptedHost([[*flood, RESULT]])
    store = RecordingSqliteStore(tmp_path / "store.sqlite3")
    async with runtime(store, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(60):
            assert (await handle.wait()).status == "completed"
        record = stored(rt, handle.execution_id)
        seen = await rt.workers(handle.execution_id)
    # every report counted, but not one commit each (6,000 reports)
    assert record.usage.input_tokens == 2000
    assert seen.workers[0].usage[0].input_tokens == 2000
    assert len(store.versions) < 600
