"""Review of deadlines and retries (B1): what a user of the public API ran into.

Backoffs are a day where the test acts during one: nothing here depends on how long
anything takes.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.storage import RetryPolicy

from .._cli_kit import run_cli
from ._kit import plan_of, runtime, stored, tool
from .test_retries import A_DAY, Flaky, seen

pytestmark = pytest.mark.anyio


async def test_B1_V3_a_run_cancelled_while_a_step_waits_to_retry_no_longer_says_it_waits(
    tmp_path: Path,
) -> None:
    # The cancel ends the step for good: neither the record nor `show` may still say the
    # step is waiting for its next attempt; its failed attempt stays listed.
    flaky = Flaky(10)
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool": A_DAY}) as rt:
        async with seen(rt, lambda e: isinstance(e, ms.executions.StepRetrying)) as retrying:
            handle = await rt.start("g", plan_of(tool("a", "flaky")), execution_id="ex-c")
            with anyio.fail_after(60):  # a hang guard only
                await retrying.wait()
        await rt.cancel(handle.execution_id)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "cancelled"
    observations = [o for o in record.observations if o.step_id == "a"]
    assert observations
    assert all(o.data.get("retrying") is not True for o in observations)
    assert [a["attempt"] for a in observations[-1].data["attempts"]] == [1]
    code, out = run_cli("--store", str(tmp_path / "store.sqlite3"), "show", "ex-c")
    assert code == 0
    assert "step a: attempt 1 of 3 failed" in out
    assert "waiting to try again" not in out
    assert "step a: stopped before its next attempt" in out


async def test_B1_a_deadline_past_the_longest_allowed_says_the_longest(tmp_path: Path) -> None:
    # 30 days is positive and finite: the error must say what is wrong with it.
    async with runtime(tmp_path) as rt:
        with pytest.raises(ValueError, match="at most 1000000"):
            await rt.start("g", plan_of(tool("a", "inc", x=1)), deadline=30 * 86_400)
        assert rt.store.list().executions == ()


def test_B1_a_non_bool_retry_timeouts_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"^retry_timeouts must be True or False, not int$"):
        RetryPolicy(retry_timeouts=1)  # type: ignore[arg-type]


def test_B1_a_policy_without_a_base_delay_never_waits_however_many_attempts_failed() -> None:
    policy = RetryPolicy(base_delay=0.0, max_delay=1.0, multiplier=20.0, jitter=0.0)
    assert policy.delay(238) == 0.0


@pytest.mark.parametrize(
    ("option", "key", "value"),
    [
        ("timeouts", "tool:", 5),
        ("timeouts", "planner:", 5),
        ("retries", "skill:", RetryPolicy()),
    ],
)
async def test_B1_a_limit_key_with_an_empty_name_is_refused_not_silently_unused(
    tmp_path: Path, option: str, key: str, value: object
) -> None:
    # "tool:" was taken, stored under "tool:" and never matched any step: a limit the user
    # set that nothing applied.
    with pytest.raises(ValueError, match="kind:name"):
        async with runtime(tmp_path, **{option: {key: value}}):
            pass  # pragma: no cover


async def test_B1_attempts_made_under_a_default_policy_stay_listed_when_resumed_without_it(
    tmp_path: Path,
) -> None:
    # The policy was the first runtime's default; the runtime that resumes has none. The
    # failed attempt is durable (B1) and the step's last observation must still list it.
    flaky = Flaky(1)
    async with runtime(tmp_path, tools={"flaky": flaky}, retries={"tool": A_DAY}) as rt:
        async with seen(rt, lambda e: isinstance(e, ms.executions.StepRetrying)) as retrying:
            handle = await rt.start("g", plan_of(tool("a", "flaky")), execution_id="ex-r")
            with anyio.fail_after(60):  # a hang guard only
                await retrying.wait()
        await rt.pause(handle.execution_id)
    async with runtime(tmp_path, tools={"flaky": flaky}) as rt:
        result = await (await rt.resume("ex-r")).wait()
        record = stored(rt, "ex-r")
    assert result.status == "completed"
    observation = [o for o in record.observations if o.step_id == "a"][-1]
    assert observation.ok
    assert [a["attempt"] for a in observation.data["attempts"]] == [1]
    assert observation.data["attempt"] == 2


async def test_B1_R6_a_step_replanned_onto_another_tool_counts_its_own_attempts(
    tmp_path: Path,
) -> None:
    # Step a waited to retry tool "flaky" when the run was paused; the workspace drifted and
    # the new plan's step a runs tool "other". Its attempts are its own: the one "flaky"
    # made does not use up "other"'s policy.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    flaky, other = Flaky(10), Flaky(10)
    twice = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001)

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if context.previous_plan is None:
            return plan_of(attrs.evolve(tool("a", "flaky"), retry=A_DAY))
        return plan_of(attrs.evolve(tool("a", "other"), retry=twice))

    tools = {"flaky": flaky, "other": other}
    async with runtime(tmp_path, tools=tools, planner=planner, workspace=workspace) as rt:
        async with seen(rt, lambda e: isinstance(e, ms.executions.StepRetrying)) as retrying:
            handle = await rt.start("g")
            with anyio.fail_after(60):  # a hang guard only
                await retrying.wait()
        await rt.pause(handle.execution_id)
        (workspace / ".git").mkdir()  # drift (R6): the resume replans
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"
    assert flaky.calls == 1
    assert other.calls == 2
    observation = [o for o in record.observations if o.step_id == "a"][-1]
    assert [a["error"] for a in observation.data["attempts"]] == [
        "ConnectionError: boom 1",
        "ConnectionError: boom 2",
    ]


async def test_B1_an_error_inside_a_task_group_is_retried_by_its_own_name(tmp_path: Path) -> None:
    # A tool that works concurrently raises its ConnectionError wrapped in an exception
    # group (anyio's task groups always do): retry_on=("ConnectionError",) still means it.
    calls = 0

    async def fetch_all(**_: object) -> str:
        nonlocal calls
        calls += 1

        async def fetch() -> None:
            if calls == 1:
                raise ConnectionError("reset")

        async with anyio.create_task_group() as tg:
            tg.start_soon(fetch)
        return "ok"

    policy = RetryPolicy(base_delay=0.001, max_delay=0.001, retry_on=("ConnectionError",))
    plan = plan_of(attrs.evolve(tool("a", "fetch_all"), retry=policy))
    async with runtime(tmp_path, tools={"fetch_all": fetch_all}) as rt:
        result = await (await rt.start("g", plan)).wait()
    assert result.status == "completed"
    assert calls == 2


def test_B1_a_group_is_retried_only_when_every_error_in_it_is_named() -> None:
    from mainspring.executions._rules.deadlines import error_types

    policy = RetryPolicy(retry_on=("ConnectionError",))
    both = ExceptionGroup("g", [ConnectionError("a"), ValueError("b")])
    nested = ExceptionGroup("g", [ExceptionGroup("h", [ConnectionResetError("a")])])
    assert not policy.retries(error_types(both))
    assert policy.retries(error_types(nested))
    assert RetryPolicy(retry_on=("Exception",)).retries(error_types(both))
