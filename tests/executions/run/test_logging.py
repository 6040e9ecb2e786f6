"""What a run says in the log (O1, O2): its lifecycle at INFO, its steps at DEBUG with their
durations, a failed attempt that will be retried at WARNING and a failure for good at ERROR,
once; a pause written to the record by another process logged by the runner with its reason;
a lost lease at WARNING; ids, states, counts and durations as record attributes, never a
secret; and nothing printed at all unless the application configures logging."""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs
import pytest

import mainspring as ms
from mainspring.cli import _logs as cli_logs
from mainspring.executions._facade.record_controls import pause_edit
from mainspring.executions._memory import memory
from mainspring.executions._run import log as run_log
from mainspring.storage import RetryPolicy, register_secret
from mainspring.storage import _persistence as persistence

from .._kit import FAST, Gate, agent, linear, plan_of, runtime, stored, tasks_of, tool

pytestmark = pytest.mark.anyio

#: A secret the application registered (E5): it must never reach a log record.
REGISTERED = "s3cr3t-registered-for-the-log-tests"
QUICK = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001)
REPO = Path(ms.__file__).resolve().parent.parent


def _records(caplog: pytest.LogCaptureFixture, name: str = "mainspring.executions") -> list[Any]:
    return [r for r in caplog.records if r.name == name]


def _field(records: list[Any], key: str) -> list[Any]:
    return [getattr(r, key, None) for r in records]


async def failing(**_: Any) -> None:
    raise RuntimeError(f"the service refused the key {REGISTERED}")


async def test_O1_the_lifecycle_is_logged_at_INFO_with_its_ids_and_states(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mainspring")
    async with runtime(tmp_path) as rt:
        result = await (await rt.start("g", linear(3), execution_id="life")).wait()
    assert result.status == "completed"
    infos = [r for r in _records(caplog) if r.levelno == logging.INFO]
    assert [r.getMessage() for r in infos] == [
        "execution life started (plan=v1, steps=3)",
        "execution life completed (steps=3, calls=0)",
    ]
    assert _field(infos, "execution_id") == ["life", "life"]
    assert _field(infos, "status") == ["running", "completed"]
    assert _field(infos, "steps") == [3, 3]
    # Steps are DEBUG: not at INFO.
    assert not [r for r in caplog.records if r.levelno < logging.INFO]


async def test_O1_steps_are_logged_at_DEBUG_with_their_duration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mainspring.executions")
    async with runtime(tmp_path) as rt:
        await (await rt.start("g", linear(2), execution_id="steps")).wait()
    debug = [r for r in _records(caplog) if r.levelno == logging.DEBUG]
    started = [r for r in debug if r.getMessage().endswith("started")]
    ended = [r for r in debug if getattr(r, "status", None) == "succeeded"]
    assert _field(started, "step_id") == ["s0", "s1"]
    assert started[0].getMessage() == "execution steps: step s0 (tool inc) started"
    assert _field(started, "kind") == ["tool", "tool"]
    assert _field(ended, "step_id") == ["s0", "s1"]
    assert _field(ended, "done") == [1, 2]
    assert _field(ended, "total") == [2, 2]
    for record in ended:
        assert isinstance(record.duration, float)
        assert record.duration >= 0
        assert record.getMessage().startswith(
            f"execution steps: step {record.step_id} succeeded in "
        )
        assert record.execution_id == "steps"


async def test_O2_a_failing_tool_logs_a_WARNING_per_retried_attempt_and_one_ERROR(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    register_secret(REGISTERED)
    caplog.set_level(logging.DEBUG, logger="mainspring")
    plan = plan_of(attrs.evolve(tool("f", "failing"), retry=QUICK))
    async with runtime(tmp_path, tools={"failing": failing}) as rt:
        result = await (await rt.start("g", plan, execution_id="flaky")).wait()
    assert result.status == "failed"
    records = _records(caplog)
    warnings = [r for r in records if r.levelno == logging.WARNING]
    errors = [r for r in records if r.levelno >= logging.ERROR]
    assert _field(warnings, "attempt") == [1, 2]
    assert _field(warnings, "status") == ["retrying", "retrying"]
    assert _field(warnings, "step_id") == ["f", "f"]
    assert "failed on attempt 1 of 3; it will be tried again" in warnings[0].getMessage()
    (error,) = errors  # O2: once, the step's; the run's end is its lifecycle line
    assert (error.step_id, error.attempt, error.status) == ("f", 3, "failed")
    assert error.execution_id == "flaky"
    assert "RuntimeError: the service refused the key [redacted" in error.getMessage()
    assert "in failing" in error.getMessage()  # its traceback, indented below
    (end,) = [r for r in records if r.levelno == logging.INFO and r.status == "failed"]
    assert end.getMessage() == "execution flaky failed (failed_steps=1)"
    # E5: the registered secret reaches no record, in its message or any field.
    assert REGISTERED not in caplog.text
    for record in caplog.records:
        assert REGISTERED not in str(record.__dict__)


async def test_O2_an_agent_that_fails_logs_one_ERROR_naming_its_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    register_secret(REGISTERED)

    async def scout(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("look", lambda: "notes")
        raise ValueError(f"no luck with {REGISTERED}")

    caplog.set_level(logging.DEBUG, logger="mainspring.executions")
    async with runtime(tmp_path, agents={"scout": scout}) as rt:
        await (await rt.start("g", plan_of(agent("a", "scout")), execution_id="ag")).wait()
    records = _records(caplog)
    (error,) = [r for r in records if r.levelno >= logging.ERROR]
    assert error.task_id == error.agent_task_id == "ag:t1"
    assert error.step_id == "a"
    started = [r for r in records if r.getMessage().startswith("execution ag: agent task")]
    assert _field(started, "task_id")[0] == "ag:t1"
    assert REGISTERED not in caplog.text


async def test_O2_an_agent_whose_actor_crashes_logs_one_ERROR_with_its_traceback_and_keeps_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent raising what is no Exception (asyncio's CancelledError, from its own code,
    nobody cancelling it) crashes its task's actor. One ERROR says so, under
    ``mainspring.executions``, with the traceback and the ids; the kernel does not log it a
    second time; the task's record keeps the error type and the redacted traceback, as a
    failed tool step's does."""
    import asyncio

    register_secret(REGISTERED)

    async def scout(ctx: ms.AgentContext, input: Any) -> str:
        raise asyncio.CancelledError(f"odd, with {REGISTERED}")

    caplog.set_level(logging.DEBUG, logger="mainspring")
    async with runtime(tmp_path, agents={"scout": scout}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "scout")), execution_id="cr")).wait()
        (task,) = tasks_of(stored(rt, "cr"))
    assert result.status == "failed"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    (error,) = errors  # O2: once, not once by the kernel and once by the run
    assert error.name == "mainspring.executions"
    assert (error.execution_id, error.step_id, error.task_id) == ("cr", "a", "cr:t1")
    assert error.exc_info is None
    text = error.getMessage()
    assert text.startswith("execution cr: step a (agent scout) crashed")
    assert "Traceback" in text
    assert "in scout" in text
    assert "CancelledError" in text
    assert task.state == "failed"
    assert task.failure is not None
    assert task.failure.code == "agent-failed"
    assert task.failure.error_type == "CancelledError"
    assert task.failure.traceback is not None
    assert "in scout" in task.failure.traceback
    assert REGISTERED not in task.failure.traceback
    assert REGISTERED not in caplog.text


class _DiskFailsOnce(ms.storage.SqliteStore):
    """The second durable flush fails with EIO."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.flushes = 0

    def commit_runs(self, commits: Any) -> Any:
        self.flushes += 1
        if self.flushes == 2:
            raise OSError(5, "I/O error")
        return super().commit_runs(commits)


async def test_O2_a_failed_write_logs_its_cause_once_and_the_runs_end_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The writer's failure is logged where it happened (``mainspring.storage``, once); the
    run that stops because of it says so under ``mainspring.executions``, once; the run's
    actor crashing on it is not logged again by the kernel."""
    import contextlib

    caplog.set_level(logging.INFO, logger="mainspring")
    store = _DiskFailsOnce(tmp_path / "s.sqlite3")
    with contextlib.suppress(ms.StorageError):  # the writer stopped: closing may say so
        async with runtime(store) as rt:
            plan = plan_of(tool("a", "inc"), tool("b", "inc", "a"))
            result = await (await rt.start("g", plan, execution_id="dk")).wait()
    assert result.error is not None
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.name for r in errors] == ["mainspring.storage", "mainspring.executions"]
    cause, end = errors
    assert "the writer stopped" in cause.getMessage()
    assert end.getMessage().startswith("execution dk stopped because its writes failed")
    assert "I/O error" in end.getMessage()
    assert (end.execution_id, end.status) == ("dk", "running")


async def test_O2_a_run_whose_actor_crashes_logs_its_end_once_with_the_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of the run's own actor (here: handling a step's end raises) is logged once,
    under ``mainspring.executions`` with its traceback, not by the kernel too."""
    from mainspring.executions._run.actor import ExecutionActor

    async def faulty(self: Any, done: Any) -> bool:
        raise RuntimeError("a fault in handling a step's end")

    monkeypatch.setattr(ExecutionActor, "_step_done", faulty)
    caplog.set_level(logging.INFO, logger="mainspring")
    async with runtime(tmp_path) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "inc")), execution_id="ft")).wait()
    assert result.error is not None
    (error,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert error.name == "mainspring.executions"
    assert error.execution_id == "ft"
    text = error.getMessage()
    assert text.startswith("execution ft: the run's actor crashed")
    assert "RuntimeError: a fault in handling a step's end" in text
    assert "in faulty" in text  # its traceback


async def test_O2_a_resume_after_a_graceful_shutdown_is_logged_at_INFO_never_as_a_takeover(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run a shutdown stopped was left for a resume by its owner, who released its lease:
    taking it up again is no takeover from a dead owner (no WARNING), and no record names an
    owner ``None``."""
    caplog.set_level(logging.INFO, logger="mainspring.executions")
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        await rt.start("g", plan_of(tool("g1", "gate")), execution_id="again")
        await gate.entered.wait()
    caplog.clear()
    gate.opened.set()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        result = await (await rt.resume("again")).wait()
    assert result.status == "completed"
    records = _records(caplog)
    assert [r for r in records if r.levelno >= logging.WARNING] == []
    (taken,) = [r for r in records if "after a shutdown" in r.getMessage()]
    assert taken.levelno == logging.INFO
    assert taken.getMessage() == (
        "execution again resumed after a shutdown: it was running, left for a resume"
    )
    assert (taken.execution_id, taken.status, taken.reason) == ("again", "running", "shutdown")
    assert "None" not in caplog.text


async def test_O1_a_pause_from_another_process_is_logged_by_the_runner_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mainspring.executions")
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")), execution_id="held")
        await gate.entered.wait()
        # As another process's `mainspring pause` writes it: on the record, not through us.
        edit = pause_edit("elsewhere:9:z", "coffee")
        assert await anyio.to_thread.run_sync(rt.store.edit, "held", edit) is not None
        with anyio.fail_after(30):
            result = await handle.wait()
    assert result.status == "paused"
    (paused,) = [r for r in _records(caplog) if getattr(r, "status", None) == "paused"]
    assert paused.levelno == logging.INFO
    assert paused.getMessage() == "execution held paused (reason=pause, requeued=0)"
    assert (paused.execution_id, paused.reason, paused.requeued) == ("held", "pause", 0)
    assert "coffee" not in caplog.text  # the reason's kind, never its free text


async def test_O1_a_pause_and_a_cancel_issued_here_are_logged_with_their_reasons(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mainspring.executions")
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        await rt.start("g", plan_of(tool("g1", "gate")), execution_id="p1")
        await gate.entered.wait()
        await rt.pause("p1", reason="lunch")
        await rt.cancel("p1", reason="for good")
    messages = [r.getMessage() for r in _records(caplog)]
    assert messages == [
        "execution p1 started (plan=v1, steps=1)",
        "execution p1: pause issued (live here)",
        "execution p1 paused (reason=pause, requeued=0)",
        "execution p1: cancel issued (through the store)",
        "execution p1 cancelled (reason=cancel, cancelled_tasks=0)",
    ]
    controls = [r for r in _records(caplog) if getattr(r, "control", None)]
    assert [(r.control, r.live) for r in controls] == [("pause", True), ("cancel", False)]


async def test_O1_a_lost_lease_is_logged_at_WARNING_naming_the_holder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mainspring.executions")
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}, **FAST) as rt:
        handle = await rt.start("g", plan_of(tool("g1", "gate")), execution_id="taken")
        await gate.entered.wait()
        store = rt.store
        assert store.release("taken", rt.owner)
        assert store.acquire("taken", "thief:1:x", ttl=60).acquired
        with anyio.fail_after(30):
            await handle.wait()
    (lost,) = [r for r in _records(caplog) if r.levelno == logging.WARNING]
    assert (lost.execution_id, lost.reason, lost.holder) == ("taken", "lease-lost", "thief:1:x")
    assert lost.refused == "foreign_lease"
    assert "lost its lease" in lost.getMessage()


async def test_O1_a_run_a_shutdown_stops_is_logged_as_left_for_a_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mainspring.executions")
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        await rt.start("g", plan_of(tool("g1", "gate")), execution_id="left")
        await gate.entered.wait()
    (left,) = [r for r in _records(caplog) if "left for a resume" in r.getMessage()]
    assert left.levelno == logging.INFO
    assert (left.execution_id, left.status, left.reason) == ("left", "running", "shutdown")


# -- silent unless configured (O1) -------------------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import logging, sys, tempfile
    from pathlib import Path
    import anyio
    import mainspring as ms

    if sys.argv[1] == "unguarded":  # the check that this test would see output at all
        logging.getLogger("mainspring").handlers.clear()

    async def boom(**_):
        raise RuntimeError("this tool always fails")

    async def main():
        with tempfile.TemporaryDirectory() as home:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="b", tool="boom"),))
            store = Path(home) / "s.sqlite3"
            async with ms.open_runtime(store=store, tools={"boom": boom}) as rt:
                result = await (await rt.start("g", plan, execution_id="r")).wait()
                assert result.status == "failed"
                await rt.pause("r")

    anyio.run(main, backend=sys.argv[2])
    """
)


@pytest.mark.parametrize("guarded", ["guarded", "unguarded"])
async def test_O1_nothing_is_printed_unless_the_application_configures_logging(
    anyio_backend: tuple[str, dict[str, Any]], guarded: str
) -> None:
    """In a process of its own, with nothing configured, stdlib's last-resort handler would
    print WARNING and above on stderr: the ``mainspring`` logger's NullHandler keeps it
    from doing so for us (and without it, the same run does print)."""
    argv = [sys.executable, "-c", _SCRIPT, guarded, anyio_backend[0]]
    done = await anyio.run_process(argv, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr.decode()
    if guarded == "guarded":
        assert done.stderr == b""
        assert done.stdout == b""
    else:
        assert b"step b (tool boom) failed" in done.stderr


def test_every_logger_hangs_under_the_one_with_the_null_handler() -> None:
    names = [
        run_log.EXECUTIONS.name,
        run_log.WORKERS.name,
        memory.logger.name,
        persistence.logger.name,
        cli_logs.logger.name,
    ]
    assert names == [
        "mainspring.executions",
        "mainspring.workers",
        "mainspring.memory",
        "mainspring.storage",
        "mainspring.cli",
    ]
    top = logging.getLogger("mainspring")
    assert any(isinstance(h, logging.NullHandler) for h in top.handlers)
    for name in names:
        assert logging.getLogger(name).parent is top
