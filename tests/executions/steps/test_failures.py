"""A failure says why, everywhere (O2): a failed step, attempt, planner call or agent keeps its
exception's type and a bounded, redacted traceback on the record, the step says when it ran,
the result lists the failures, and each failure is logged under ``mainspring.executions``
(silent unless the application configures logging, O1)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions._run.results import result_from
from mainspring.executions._steps.failures import (
    LOGGER_NAME,
    MAX_MESSAGE,
    MAX_TRACEBACK_BYTES,
    clamp_traceback,
    describe,
    log_dropped,
)
from mainspring.storage import RetryPolicy

from .._kit import agent, plan_of, runtime, statuses, stored, tasks_of, tool

pytestmark = pytest.mark.anyio

SECRET = "ghp_" + "s" * 36
QUICK = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001)


async def bad_input(**_: Any) -> int:
    raise ValueError("bad input 1")


def _deep(n: int) -> None:
    if n == 0:
        raise RuntimeError("x" * 20_000 + f" and deep down the token is {SECRET}")
    _deep(n - 1)


async def deep_failure(**_: Any) -> None:
    _deep(200)


def _obs(execution: ms.storage.Execution, step_id: str) -> ms.storage.Observation:
    return next(o for o in execution.observations if o.step_id == step_id)


def _store_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


# -- the pieces ------------------------------------------------------------------------------


def test_O2_a_described_exception_is_redacted_then_cut_to_its_last_bytes() -> None:
    try:
        _deep(200)
    except RuntimeError as exc:
        caught = describe(exc)
    assert caught.error_type == "RuntimeError"
    # the message is redacted, then cut to its start (the secret was at its end)
    assert SECRET not in caught.message
    assert caught.message.endswith("more characters]")
    assert SECRET not in caught.traceback
    assert len(caught.traceback.encode()) <= MAX_TRACEBACK_BYTES
    assert caught.traceback.startswith("[traceback cut: ")
    # the end, the exception's own line, is kept: masked before it was cut
    assert caught.traceback.rstrip().endswith("the token is [redacted github-token]")


def test_O2_an_error_carried_on_from_is_logged_redacted_and_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unreadable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    log_dropped("releasing its lease failed", OSError(f"token {SECRET}"), execution_id="ex-1")
    log_dropped("x", OSError("y" * (MAX_MESSAGE + 1)), execution_id="ex-2")
    log_dropped("z", Unreadable(), execution_id="ex-3", level=logging.WARNING)
    first, huge, unreadable = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert first.levelno == logging.DEBUG
    assert first.getMessage().startswith("execution ex-1: releasing its lease failed: OSError:")
    assert SECRET not in caplog.text  # E5: a log line is disk too
    assert "y" * 100 not in huge.getMessage()  # too long to redact on the loop: left out
    assert "characters, is left out here" in huge.getMessage()
    assert unreadable.levelno == logging.WARNING
    assert "Unreadable: (its message could not be read)" in unreadable.getMessage()


def test_O2_a_short_traceback_is_kept_whole_and_a_long_one_says_it_was_cut() -> None:
    assert clamp_traceback("short\n") == "short\n"
    cut = clamp_traceback("é" * 10_000)  # two bytes each: cut between characters, never inside
    assert len(cut.encode()) <= MAX_TRACEBACK_BYTES
    assert cut.startswith("[traceback cut: its first ")


def test_O2_only_the_innermost_frames_are_kept() -> None:
    def recurse(n: int) -> None:
        if n == 0:
            raise KeyError("k")
        recurse(n - 1)

    try:
        recurse(120)
    except KeyError as exc:
        caught = describe(exc)
    # 50 frames: 49 calls (three shown, the rest summed up by Python) and the one that raised
    assert caught.traceback.count("in recurse") == 4
    assert "[Previous line repeated 46 more times]" in caught.traceback
    assert "in test_O2_only_the_innermost_frames_are_kept" not in caught.traceback


# -- a run -----------------------------------------------------------------------------------


async def test_O2_a_failing_tool_is_in_result_failures_and_the_error_says_why(
    tmp_path: Path,
) -> None:
    plan = plan_of(tool("ok", "inc"), tool("boom", "boom", "ok"))
    async with runtime(tmp_path, tools={"boom": bad_input}) as rt:
        result = await (await rt.start("g", plan, execution_id="run1")).wait()
    assert result.status == "failed"
    (failure,) = result.failures
    assert (failure.step_id, failure.kind, failure.error_type, failure.attempt) == (
        "boom",
        "tool",
        "ValueError",
        1,
    )
    assert failure.message == "ValueError: bad input 1"
    assert failure.agent_task_id is None
    assert failure.traceback is not None
    assert "bad_input" in failure.traceback
    assert result.error == "step boom failed: ValueError: bad input 1"


async def test_O2_a_traceback_is_bounded_and_redacted_on_disk_in_show_and_in_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ..._cli_kit import run_cli

    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    async with runtime(tmp_path / "s", tools={"deep": deep_failure}) as rt:
        result = await (await rt.start("g", plan_of(tool("d", "deep")), execution_id="r")).wait()
        record = stored(rt, "r")
    observation = _obs(record, "d")
    assert observation.error_type == "RuntimeError"
    assert observation.traceback is not None
    assert len(observation.traceback.encode()) <= MAX_TRACEBACK_BYTES
    assert observation.traceback.rstrip().endswith("[redacted github-token]")
    assert result.failures[0].traceback == observation.traceback
    assert SECRET.encode() not in _store_bytes(tmp_path / "s")
    code, out = run_cli(
        "--store", str(tmp_path / "s" / "store.sqlite3"), "show", "--traceback", "r"
    )
    assert code == 0
    assert "[traceback cut: its first" in out
    assert "[redacted github-token]" in out
    assert SECRET not in out
    logged = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert logged
    assert SECRET not in caplog.text
    assert {getattr(r, "execution_id", None) for r in logged} == {"r"}


async def test_O2_steps_record_when_they_started_and_ended(tmp_path: Path) -> None:
    plan = plan_of(tool("a", "inc"), tool("b", "boom", "a"))
    async with runtime(tmp_path, tools={"boom": bad_input}) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    for step_id in ("a", "b"):
        observation = _obs(record, step_id)
        assert observation.started_at is not None
        assert observation.ended_at is not None
        assert observation.started_at <= observation.ended_at


async def test_O2_each_failed_attempt_keeps_its_traceback_and_start(tmp_path: Path) -> None:
    plan = plan_of(attrs.evolve(tool("a", "boom"), retry=QUICK))
    async with runtime(tmp_path, tools={"boom": bad_input}) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    attempts = _obs(record, "a").data["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    for attempt in attempts:
        assert attempt["error_type"] == "ValueError"
        assert "bad_input" in attempt["traceback"]
        assert attempt["started_at"] <= attempt["at"]
    (failure,) = result.failures
    assert failure.attempt == 3


async def test_O2_a_planner_failure_is_logged_and_kept_with_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return [][1]  # type: ignore[no-any-return]

    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    async with runtime(tmp_path, planner=planner) as rt:
        result = await (await rt.start("g", execution_id="planless")).wait()
        record = stored(rt, "planless")
    assert result.status == "failed"
    assert result.error is not None
    assert "IndexError" in result.error
    (failure,) = result.failures
    assert (failure.step_id, failure.kind, failure.error_type) == ("plan", "planner", "IndexError")
    assert failure.traceback is not None
    assert "in planner" in failure.traceback
    assert _obs(record, "plan").traceback == failure.traceback
    (line,) = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert line.levelno == logging.ERROR
    assert getattr(line, "execution_id", None) == "planless"
    assert "IndexError" in line.getMessage()
    assert "in planner" in line.getMessage()


async def test_O2_an_agent_failure_keeps_its_traceback_on_the_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scout(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("read", lambda: "notes")
        raise RuntimeError(f"no luck with {SECRET}")

    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    async with runtime(tmp_path, agents={"scout": scout}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "scout")))).wait()
        record = stored(rt, result.execution_id)
    (task,) = tasks_of(record)
    assert task.failure is not None
    assert task.failure.error_type == "RuntimeError"
    assert task.failure.traceback is not None
    assert "in scout" in task.failure.traceback
    assert SECRET not in task.failure.traceback
    (failure,) = result.failures
    assert (failure.kind, failure.agent_task_id, failure.error_type) == (
        "agent",
        task.id,
        "RuntimeError",
    )
    assert failure.traceback == task.failure.traceback
    observation = _obs(record, "a")
    assert observation.traceback is None  # E5: kept once, on the task
    assert observation.started_at is not None
    assert observation.ended_at is not None
    steps = [r for r in caplog.records if getattr(r, "agent_task_id", None) == task.id]
    assert steps
    assert "in scout" in steps[0].getMessage()
    assert SECRET not in caplog.text


async def test_O1_failures_print_nothing_unless_the_application_configures_logging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    printed: list[logging.LogRecord] = []

    class Last(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            printed.append(record)

    monkeypatch.setattr(logging, "lastResort", Last(logging.WARNING))
    # As an application that configured nothing: no handler between ours and the root.
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(logging.getLogger(LOGGER_NAME), "propagate", True)
    async with runtime(tmp_path, tools={"boom": bad_input}) as rt:
        result = await (await rt.start("g", plan_of(tool("b", "boom")))).wait()
    assert result.status == "failed"
    assert printed == []
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("mainspring").handlers)


# -- hostile exceptions ----------------------------------------------------------------------


async def surrogate_failure(**_: Any) -> None:
    raise ValueError("undecodable \udcff byte")


async def huge_failure(**_: Any) -> None:
    raise ValueError(f"token {SECRET} " + "x" * 2_000_000)


async def test_O2_an_error_with_undecodable_text_is_kept_with_its_type_and_traceback(
    tmp_path: Path,
) -> None:
    plan = plan_of(tool("u", "bad"))
    async with runtime(tmp_path, tools={"bad": surrogate_failure}) as rt:
        result = await (await rt.start("g", plan, execution_id="u")).wait()
        record = stored(rt, "u")
    (failure,) = result.failures
    assert failure.error_type == "ValueError"
    assert failure.message == "ValueError: undecodable \\udcff byte"
    assert failure.traceback is not None
    assert "surrogate_failure" in failure.traceback
    assert _obs(record, "u").error_type == "ValueError"


async def test_O2_a_huge_error_is_bounded_on_disk_in_the_result_and_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    plan = plan_of(tool("h", "huge"))
    async with runtime(tmp_path / "s", tools={"huge": huge_failure}) as rt:
        result = await (await rt.start("g", plan, execution_id="h")).wait()
        record = stored(rt, "h")
    observation = _obs(record, "h")
    assert observation.error is not None
    assert len(observation.error) <= MAX_MESSAGE + 100
    assert observation.error.startswith("ValueError: token [redacted github-token] xxx")
    assert observation.error.endswith("more characters]")
    (failure,) = result.failures
    assert failure.message == observation.error
    assert len(_store_bytes(tmp_path / "s")) < 1_000_000
    logged = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert logged
    for line in logged:
        assert len(line.getMessage()) <= MAX_MESSAGE + MAX_TRACEBACK_BYTES + 1_000
    assert SECRET not in caplog.text


async def test_O2_a_planner_failure_says_why_in_the_result_without_its_secrets(
    tmp_path: Path,
) -> None:
    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        raise IndexError(f"no plan for token {SECRET}")

    async with runtime(tmp_path, planner=planner) as rt:
        result = await (await rt.start("g", execution_id="p")).wait()
    assert result.status == "failed"
    assert (
        result.error == "the planner failed: IndexError: no plan for token [redacted github-token]"
    )
    assert result.failures[0].message == result.error


async def test_O2_a_step_called_plan_fails_as_a_step_never_as_the_planner(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path, tools={"boom": bad_input}) as rt:
        result = await (await rt.start("g", plan_of(tool("plan", "boom")), execution_id="r")).wait()
        record = stored(rt, "r")
    assert result.error == "step plan failed: ValueError: bad input 1"
    (failure,) = result.failures
    assert (failure.step_id, failure.kind) == ("plan", "tool")
    assert result_from(record).failures == result.failures
    assert result_from(record).error == result.error


async def task_group_failure(**_: Any) -> None:
    async def child() -> None:
        raise ValueError("the child's own reason")

    async with anyio.create_task_group() as group:
        group.start_soon(child)


async def test_O2_a_task_groups_failure_names_the_errors_inside_it(tmp_path: Path) -> None:
    async with runtime(tmp_path, tools={"tg": task_group_failure}) as rt:
        result = await (await rt.start("g", plan_of(tool("t", "tg")), execution_id="r")).wait()
    (failure,) = result.failures
    assert failure.error_type == "ExceptionGroup"
    assert failure.message.endswith("(1 sub-exception): ValueError: the child's own reason")
    assert result.error is not None
    assert "ValueError: the child's own reason" in result.error


def test_O2_a_large_exception_group_names_its_first_errors_and_counts_the_rest() -> None:
    group = ExceptionGroup("many", [ValueError(i) for i in range(20)])
    message = describe(ExceptionGroup("outer", [group, KeyError("k")])).message
    assert message.startswith("ExceptionGroup: outer (2 sub-exceptions): ValueError: 0; ")
    assert message.endswith("ValueError: 4; and 16 more")


@pytest.mark.parametrize(
    ("returned", "says"),
    [
        ({"not": "a plan"}, "the planner failed: it returned dict, not a Plan"),
        (plan_of(tool("a", "nope")), "plan p v1: step a names unknown tool nope"),
    ],
    ids=["not-a-plan", "not-runnable"],
)
async def test_O2_a_run_its_planner_failed_without_raising_lists_that_failure(
    tmp_path: Path, returned: object, says: str
) -> None:
    def planner(goal: str, context: ms.PlannerContext) -> object:
        return returned

    async with runtime(tmp_path, planner=planner) as rt:
        result = await (await rt.start("g", execution_id="r")).wait()
    assert result.status == "failed"
    (failure,) = result.failures
    assert (failure.step_id, failure.kind, failure.error_type) == ("plan", "planner", None)
    assert failure.message == says == result.error


async def escaping_failure(**_: Any) -> None:
    raise ValueError("evil \x1b[31mred\x07\r\nWARNING:mainspring.executions:forged line")


async def test_O2_a_logged_failure_cannot_drive_a_terminal_or_forge_a_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    async with runtime(tmp_path, tools={"esc": escaping_failure}) as rt:
        await (await rt.start("g", plan_of(tool("e", "esc")), execution_id="r")).wait()
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]
    assert logged
    for message in logged:
        assert "\x1b" not in message
        assert "\x07" not in message
        assert "\r" not in message
        assert not any(line.startswith("WARNING:") for line in message.splitlines())
    first = logged[0].splitlines()[0]
    assert first.endswith("evil \\x1b[31mred\\x07\\r\\nWARNING:mainspring.executions:forged line")


# ----------------------------------------------------------------------
# A tool (or an agent) that raises SystemExit or KeyboardInterrupt ends the program: it comes
# out of ``open_runtime`` unwrapped, and the run is left resumable (its lease released).


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("where", ["tool", "agent"])
async def test_it_leaves_open_runtime_and_the_run_resumes(
    tmp_path: Path, error: type[BaseException], where: str
) -> None:
    calls: list[int] = []

    async def bad(**_: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise error(3) if error is SystemExit else error()
        return "fine"

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        return str(await ctx.step("call", bad))

    step = tool("b", "bad") if where == "tool" else agent("b", "worker")
    plan = plan_of(step, tool("after", "inc", "b", x=1))
    ids: list[str] = []
    with pytest.raises(error) as caught:  # noqa: PT012
        async with runtime(tmp_path, tools={"bad": bad}, agents={"worker": worker}) as rt:
            handle = await rt.start("g", plan)
            ids.append(handle.execution_id)
            with anyio.fail_after(30):
                await handle.wait()
    assert type(caught.value) is error
    async with runtime(tmp_path, tools={"bad": bad}, agents={"worker": worker}) as rt:
        record = rt.store.get(ids[0])
        assert record is not None
        assert record.status == "running"
        assert record.lease is None or record.lease.owner == ""
        with anyio.fail_after(30):
            result = await (await rt.resume(ids[0])).wait()
        assert rt.store.get(ids[0]) is not None
        final = rt.store.get(ids[0])
    assert result.status == "completed", result
    assert final is not None
    assert statuses(final) == {"b": "succeeded", "after": "succeeded"}
