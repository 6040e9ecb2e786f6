"""What the Runtime says in the log (O1): each control issued through it at INFO (never the
answer's text), and a run taken over with no live owner (a recovery, R3) at WARNING, naming
the owner it was taken from."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import mainspring as ms

from .._kit import Gate, agent, linear, plan_of, runtime

pytestmark = pytest.mark.anyio

#: An owner id of the form this library writes, of a process that is gone.
GONE = "elsewhere-host:4242:0123abcd:1.abc.1"


def _executions(caplog: pytest.LogCaptureFixture) -> list[Any]:
    return [r for r in caplog.records if r.name == "mainspring.executions"]


def _orphan(store: ms.storage.Store, execution_id: str) -> None:
    """Store a run as a process that died mid-run leaves it: running, its lease lapsed."""
    now = time.time()
    record = ms.storage.Execution(
        id=execution_id,
        goal="g",
        status="running",
        plan=linear(1),
        plan_version=1,
        lease=ms.storage.Lease(owner=GONE, expires_at=0.0, epoch=1),
        created_at=now,
        updated_at=now,
    )
    assert store.create(record)  # its lease as given: it lapsed long ago


@pytest.mark.parametrize("how", ["recover", "resume"])
async def test_R3_a_run_taken_over_with_no_live_owner_is_logged_at_WARNING(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    caplog.set_level(logging.INFO, logger="mainspring.executions")
    async with runtime(tmp_path, recover=False) as rt:
        await anyio.to_thread.run_sync(_orphan, rt.store, "orphan")
        with anyio.fail_after(30):
            if how == "recover":
                (handle,) = await rt.recover()
            else:
                handle = await rt.resume("orphan")
            result = await handle.wait()
    assert result.status == "completed"
    records = _executions(caplog)
    (taken,) = [r for r in records if r.levelno == logging.WARNING]
    assert taken.execution_id == "orphan"
    assert (taken.status, taken.previous_owner) == ("running", GONE)
    assert taken.recovery is (how == "recover")
    by = "recovery" if how == "recover" else "a resume"
    assert taken.getMessage() == (
        f"execution orphan taken over by {by}: it was running and its owner {GONE} was gone"
    )
    # and then the run says it resumed and how it ended
    messages = [r.getMessage() for r in records]
    assert "execution orphan resumed (done=0)" in messages
    assert messages[-1] == "execution orphan completed (steps=1, calls=0)"


async def test_a_resume_of_a_paused_run_is_no_takeover(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mainspring.executions")
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        await rt.start("g", plan_of(ms.PlanStep(id="g1", tool="gate")), execution_id="p")
        await gate.entered.wait()
        await rt.pause("p")
        gate.opened.set()
        await (await rt.resume("p")).wait()
    assert not [r for r in _executions(caplog) if r.levelno >= logging.WARNING]
    assert "execution p resumed (done=0)" in [r.getMessage() for r in _executions(caplog)]


async def test_an_answer_and_a_task_stop_are_logged_as_controls_without_their_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return str(await ctx.ask("which city?"))

    caplog.set_level(logging.INFO, logger="mainspring.executions")
    async with runtime(tmp_path, agents={"asker": asker}) as rt:
        first = await (await rt.start("g", plan_of(agent("a", "asker")), execution_id="q")).wait()
        assert first.status == "waiting_for_clarification"
        await rt.answer("q", "Lisbon, the secret city")
        stopped = await rt.stop_agent_task("q:t1")
    assert stopped.task_id == "q:t1"
    records = _executions(caplog)
    controls = [(r.control, r.execution_id, r.task_id) for r in records if hasattr(r, "control")]
    assert controls == [("answer", "q", None), ("stop-task", "q", "q:t1")]
    waiting = [r for r in records if getattr(r, "status", None) == "waiting_for_clarification"]
    assert [r.getMessage() for r in waiting] == [
        "execution q: agent task q:t1 waits for an answer",
        "execution q is waiting_for_clarification",
    ]
    assert "Lisbon" not in caplog.text
    assert "which city" not in caplog.text
