"""Retries (B1): a failed tool or skill step is tried again by its policy, every attempt and
its error durable on the step's observation and shown by ``mainspring show``; a step fails
only when the policy gives up. Backoff waits hold no slot; a pause or a crash between
attempts keeps the count.

Backoffs are tiny (0.001 s) where the test waits through them, and a day where the test acts
during one: nothing here depends on how long anything takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.storage import RetryPolicy

from ..._cli_kit import run_cli
from .._kit import Ledger, plan_of, recorded_events, runtime, skill, stored, tool

QUICK = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001)
A_DAY = RetryPolicy(max_attempts=3, base_delay=86_400.0, max_delay=86_400.0)


class Flaky:
    """Fails with ``error`` on its first ``failures`` calls, then returns ``"ok"``."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self, **_: Any) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"boom {self.calls}")
        return "ok"


@asynccontextmanager
async def seen(rt: ms.Runtime, predicate: Callable[[object], bool]) -> AsyncIterator[anyio.Event]:
    """An event set once the runtime publishes an event ``predicate`` accepts."""
    found = anyio.Event()

    async def watch() -> None:
        async with contextlib.aclosing(rt.events()) as stream:  # type: ignore[type-var]
            async for event in stream:
                if predicate(event):
                    found.set()
                    return

    async with anyio.create_task_group() as tg:
        before = rt._bus.subscribers
        tg.start_soon(watch)
        while rt._bus.subscribers == before:  # subscribed: nothing published is missed
            await anyio.lowlevel.checkpoint()
        yield found
        tg.cancel_scope.cancel()


def _obs(execution: ms.storage.Execution, step_id: str) -> ms.storage.Observation:
    return next(o for o in execution.observations if o.step_id == step_id)


def _attempts(observation: ms.storage.Observation) -> list[tuple[int, str]]:
    return [(a["attempt"], a["error"]) for a in observation.data["attempts"]]


@pytest.mark.anyio
async def test_B1_a_step_succeeds_on_attempt_3_of_3_and_show_lists_attempts_1_and_2(
    tmp_path: Path,
) -> None:
    flaky = Flaky(2)
    plan = plan_of(attrs.evolve(tool("a", "flaky"), retry=QUICK), tool("b", "inc", "a", x=1))
    async with runtime(tmp_path, tools={"flaky": flaky}) as rt:
        async with recorded_events(rt) as events:
            handle = await rt.start("g", plan, execution_id="ex-retry")
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert flaky.calls == 3
    observation = _obs(record, "a")
    assert observation.ok
    assert _attempts(observation) == [
        (1, "ConnectionError: boom 1"),
        (2, "ConnectionError: boom 2"),
    ]
    assert observation.data["attempt"] == 3
    assert "retrying" not in observation.data
    retrying = [e for e in events if isinstance(e, ms.events.StepRetrying)]
    assert [(e.step_id, e.attempt, e.max_attempts) for e in retrying] == [
        ("a", 1, 3),
        ("a", 2, 3),
    ]
    code, out = run_cli("--store", str(tmp_path / "store.sqlite3"), "show", "ex-retry")
    assert code == 0
    assert "step a: attempt 1 of 3 failed" in out
    assert "ConnectionError: boom 1" in out
    assert "step a: attempt 2 of 3 failed" in out
    assert "ConnectionError: boom 2" in out
    assert "step a: attempt 3 of 3 succeeded" in out
    code, out = run_cli("--store", str(tmp_path / "store.sqlite3"), "show", "--json", "ex-retry")
    shown = json.loads(out)
    (a,) = [o for o in shown["observations"] if o["step_id"] == "a"]
    assert [x["attempt"] for x in a["data"]["attempts"]] == [1, 2]
    (step,) = [s for s in shown["plan"]["steps"] if s["id"] == "a"]
    assert step["retry"]["max_attempts"] == 3


@pytest.mark.anyio
async def test_B1_the_policy_gives_up_after_max_attempts_and_the_step_fails(
    tmp_path: Path,
) -> None:
    flaky = Flaky(10)
    plan = plan_of(tool("a", "flaky"), tool("b", "inc", "a", x=1))
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool:flaky": QUICK}) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert flaky.calls == 3
    assert result.status == "failed"
    observation = _obs(record, "a")
    assert not observation.ok
    assert observation.error == "ConnectionError: boom 3 (gave up after 3 attempts)"
    assert [n for n, _ in _attempts(observation)] == [1, 2, 3]
    assert {s.id: s.status for s in record.plan.steps} == {  # type: ignore[union-attr]
        "a": "failed",
        "b": "skipped",
    }


@pytest.mark.anyio
async def test_B1_an_error_the_policy_does_not_name_is_not_retried(tmp_path: Path) -> None:
    flaky = Flaky(10, error=ValueError)
    policy = attrs.evolve(QUICK, retry_on=("ConnectionError", "TimeoutError"))
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool": policy}) as rt:
        handle = await rt.start("g", plan_of(tool("a", "flaky")))
        await handle.wait()
        record = stored(rt, handle.execution_id)
    assert flaky.calls == 1
    observation = _obs(record, "a")
    assert "not retried" in (observation.error or "")
    assert [n for n, _ in _attempts(observation)] == [1]


@pytest.mark.anyio
async def test_B1_a_subclass_matches_its_bases_name(tmp_path: Path) -> None:
    flaky = Flaky(1, error=ConnectionResetError)
    policy = attrs.evolve(QUICK, retry_on=("OSError",))
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool": policy}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "flaky")))).wait()
    assert result.status == "completed"
    assert flaky.calls == 2


@pytest.mark.anyio
async def test_B1_timeouts_are_retried_or_not_as_the_policy_says(tmp_path: Path) -> None:
    calls = {"n": 0}

    async def slow_once(**_: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            await anyio.sleep_forever()
        return "ok"

    step = attrs.evolve(tool("a", "slow"), timeout=0.05, retry=QUICK)
    async with runtime(tmp_path, tools={"slow": slow_once}) as rt:
        result = await (await rt.start("g", plan_of(step))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed"
    (first,) = _obs(record, "a").data["attempts"]
    assert first["timed_out"] is True
    calls["n"] = 0
    step = attrs.evolve(step, retry=attrs.evolve(QUICK, retry_timeouts=False))
    async with runtime(tmp_path, tools={"slow": slow_once}) as rt:
        result = await (await rt.start("g", plan_of(step))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "failed"
    assert calls["n"] == 1
    assert _obs(record, "a").code == "step-timeout"


@pytest.mark.anyio
async def test_B1_each_skill_attempt_costs_a_call(tmp_path: Path) -> None:
    flaky = Flaky(2)
    async with runtime(tmp_path, skills={"flaky": flaky}, retries={"skill": QUICK}) as rt:
        result = await (await rt.start("g", plan_of(skill("a", "flaky")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed"
    assert record.calls_used == 3  # P4, E9: every model call made is counted


@pytest.mark.anyio
async def test_B1_a_step_waiting_for_backoff_holds_no_slot_and_a_pause_keeps_its_count(
    tmp_path: Path,
) -> None:
    # One slot: if the waiting step held it, b could not run before a's next attempt.
    flaky = Flaky(1)
    ledger = Ledger()
    plan = plan_of(tool("a", "flaky"), tool("b", "inc", x=1))
    options: dict[str, Any] = {"max_parallel_steps": 1, "retries": {"tool:flaky": A_DAY}}
    async with runtime(tmp_path, ledger, tools={"flaky": flaky}, **options) as rt:
        b_done = seen(rt, lambda e: isinstance(e, ms.events.StepFinished) and e.step_id == "b")
        async with b_done as finished:
            handle = await rt.start("g", plan)
            with anyio.fail_after(60):  # a hang guard only
                await finished.wait()
        assert ledger.names() == ["inc:1"]
        record = stored(rt, handle.execution_id)
        assert record.status == "running"
        assert _obs(record, "a").data["retrying"] is True
        # A pause while a waits: it goes back to pending with its failed attempt kept.
        await rt.pause(handle.execution_id)
        record = stored(rt, handle.execution_id)
        assert {s.id: s.status for s in record.plan.steps}["a"] == "pending"  # type: ignore[union-attr]
        assert [n for n, _ in _attempts(_obs(record, "a"))] == [1]
        # Resume tries it again at once, counting on from the durable attempt.
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert flaky.calls == 2
    assert _obs(record, "a").data["attempt"] == 2
    assert ledger.names() == ["inc:1"]


@pytest.mark.anyio
async def test_B1_closing_the_runtime_mid_retries_keeps_the_attempt_count(
    tmp_path: Path,
) -> None:
    # The first runtime stops (Shutdown, as a crash leaves it for recover) while attempt 2
    # waits for a day; the next one recovers it and must make attempts 2 and 3 only.
    flaky = Flaky(10)
    plan = plan_of(tool("a", "flaky"))
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool": A_DAY}) as rt:
        async with seen(rt, lambda e: isinstance(e, ms.events.StepRetrying)) as retrying:
            handle = await rt.start("g", plan)
            with anyio.fail_after(60):  # a hang guard only
                await retrying.wait()
        execution_id = handle.execution_id
    assert flaky.calls == 1
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool": QUICK}) as rt:
        (handle,) = await rt.recover()
        result = await handle.wait()
        record = stored(rt, execution_id)
    assert flaky.calls == 3
    assert result.status == "failed"
    observation = _obs(record, "a")
    assert [n for n, _ in _attempts(observation)] == [1, 2, 3]
    assert "gave up after 3 attempts" in (observation.error or "")


@pytest.mark.anyio
async def test_B1_a_retry_policy_on_an_agent_step_is_refused() -> None:
    with pytest.raises(ValueError, match="tool and skill steps"):
        ms.PlanStep(id="a", agent="worker", retry=QUICK)


# ----------------------------------------------------------------------
# kill -9 between two attempts of a retried step, then a fresh process resumes it (slow).
#
# B1: attempts are durable; a crash does not reset the count. The first process makes
# attempt 1, commits it and waits a day for attempt 2; it is killed. The next process
# recovers the run and makes attempts 2 and 3 only: three calls in all, and the step's
# observation lists attempts 1, 2 and 3 before the policy gives up.

REPO = Path(__file__).resolve().parents[3]
WORKER = Path(__file__).parents[1] / "_retry_worker.py"


def _spawn(mode: str, where: Path, backend: str) -> subprocess.Popen[bytes]:
    store, ledger = str(where / "store.sqlite3"), str(where / "ledger")
    with (where / f"{mode}.err").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, WORKER, mode, store, ledger, backend],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


def _line(child: subprocess.Popen[bytes], where: Path, mode: str) -> bytes:
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 60.0)
    line = child.stdout.readline().strip() if readable else b"timed out"
    if not line or line == b"timed out":
        child.kill()
        child.communicate(timeout=10)
        pytest.fail(f"{mode}: {line!r}\n{(where / f'{mode}.err').read_text()[-3000:]}")
    return line


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_B1_a_kill_between_attempts_keeps_the_attempt_count(tmp_path: Path, backend: str) -> None:
    start = _spawn("start", tmp_path, backend)
    assert _line(start, tmp_path, "start") == b"retrying"
    start.kill()  # SIGKILL: no shutdown, no release; the lease lapses by itself
    start.communicate(timeout=10)
    assert (tmp_path / "ledger").read_text().splitlines() == ["call"]
    resume = _spawn("resume", tmp_path, backend)
    assert _line(resume, tmp_path, "resume") == b"failed"
    resume.communicate(timeout=30)
    assert resume.returncode == 0
    assert (tmp_path / "ledger").read_text().splitlines() == ["call"] * 3
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    try:
        record = store.get("ex-retry")
    finally:
        store.close()
    assert record is not None
    (observation,) = record.observations
    assert [a["attempt"] for a in observation.data["attempts"]] == [1, 2, 3]
    assert "gave up after 3 attempts" in (observation.error or "")


@pytest.mark.anyio
async def test_V2_each_retried_attempt_is_one_retry_entry_in_the_history(tmp_path: Path) -> None:
    flaky = Flaky(2)
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool:flaky": QUICK}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "flaky")))).wait()
        history = rt.store.history(result.execution_id)
    assert result.status == "completed"
    retries = [e for e in history if e.kind == "retry"]
    assert [(e.step_id, e.attempt, e.max_attempts, e.reason) for e in retries] == [
        ("a", 1, 3, "ConnectionError"),
        ("a", 2, 3, "ConnectionError"),
    ]
    assert all(e.delay is not None and 0 < e.delay <= 0.001 for e in retries)  # with jitter
    # Each before the step's end, in the order they happened (V2).
    (end,) = [e for e in history if e.kind == "step" and e.status == "succeeded"]
    assert all(e.seq < end.seq for e in retries)
