"""Replayed values equal the live ones (E10): what a resumed run hands to user code is what
the live run handed it. Values JSON cannot hold are stored exactly or refused at their step;
a ctx.step result that redaction changed runs again on resume (or is replayed knowingly);
a top-level output that redaction changed stays completed, and the result says it is masked.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import enum
import uuid
import zoneinfo
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import mainspring as ms

from .._exact import same
from ._kit import Gate, Ledger, agent, plan_of, runtime, stored, tasks_of, tool

pytestmark = pytest.mark.anyio


def _value() -> dict[str, Any]:
    """A fresh copy each call: nothing a test compares is the object a step returned."""
    return {
        "when": dt.datetime(2024, 1, 2, 3, 4, 5),
        "paris": dt.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
        "raw": b"\x00\xff",
        "ids": {1, 2, 3},
        "frozen": frozenset({"a"}),
        "pair": (1, 2),
        "pairs": {(1, 2): "pair"},
        "nan": float("nan"),
        "inf": float("inf"),
        "big": 2**70,
        "price": decimal.Decimal("1.10"),
        "uuid": uuid.UUID(int=7),
        "took": dt.timedelta(seconds=1.5),
        "day": dt.date(2024, 1, 2),
        "$ms": "user data that looks like a tag",
    }


async def test_E10_a_tool_and_ctx_step_results_and_step_inputs_come_back_exactly(
    tmp_path: Path,
) -> None:
    gate = Gate()
    inner_runs: list[str] = []
    replayed: list[Any] = []

    async def make() -> Any:
        return _value()

    async def echo(**input: Any) -> Any:
        return input

    def produce() -> Any:
        inner_runs.append("v")
        return _value()

    async def keeper(ctx: ms.AgentContext, input: Any) -> Any:
        got = await ctx.step("v", produce)
        replayed.append(got)
        await ctx.step("park", gate)
        return got

    plan = plan_of(
        tool("make", "make"),
        agent("keep", "keeper", "make"),
        tool("echo", "echo", "keep", value=_value()),
    )
    options: dict[str, Any] = {"tools": {"make": make, "echo": echo}, "agents": {"keeper": keeper}}
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    gate.opened.set()
    async with runtime(tmp_path, **options) as rt:  # a fresh runtime reads what was stored
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert inner_runs == ["v"]  # replayed, not run again
    assert len(replayed) == 2
    assert same(replayed[1], _value())  # what the resumed agent was handed
    assert same(result.outputs["make"], _value())  # read back from disk
    assert same(result.outputs["keep"], _value())
    assert same(result.outputs["echo"], {"value": _value()})  # its input came from disk
    assert result.redacted == ()


async def test_E10_a_redacted_ctx_step_result_runs_again_on_resume_and_says_why(
    tmp_path: Path,
) -> None:
    gate = Gate()
    logins: list[str] = []
    seen: dict[str, list[Any]] = {"login": [], "known": []}

    def login(name: str) -> dict[str, str]:
        logins.append(name)
        return {"token": f"live-token-{len(logins)}", "user": "ada"}

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        seen["login"].append(await ctx.step("login", login, "login"))
        seen["known"].append(await ctx.step("known", login, "known", on_redacted="replay"))
        seen["plain"] = await ctx.step("plain", lambda: {"next_token": "page-2"})
        await ctx.step("park", gate)
        return "done"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (task,) = tasks_of(stored(rt, handle.execution_id))
    stored_obs = {obs.step_id: obs for obs in task.inner_observations}
    assert stored_obs["login"].output == {"token": "[redacted secret]", "user": "ada"}
    assert stored_obs["login"].redacted
    assert stored_obs["known"].redacted
    assert not stored_obs["plain"].redacted  # a pagination token is not a secret
    gate.opened.set()
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    (task,) = tasks_of(record)
    assert result.status == "completed"
    # The masked result was not handed over as if it were the original: login ran again.
    assert logins == ["login", "known", "login"]
    assert seen["login"] == [
        {"token": "live-token-1", "user": "ada"},
        {"token": "live-token-3", "user": "ada"},
    ]
    # Opted out: the masked value, knowingly; the step did not run again.
    assert seen["known"] == [
        {"token": "live-token-2", "user": "ada"},
        {"token": "[redacted secret]", "user": "ada"},
    ]
    assert seen["plain"] == {"next_token": "page-2"}
    assert task.diagnostics == (
        "inner step login ran again on resume: its stored result had been redacted",
    )
    assert task.inner_completed.count("login") == 1  # replaced, not recorded twice
    assert [o.step_id for o in task.inner_observations].count("login") == 1
    assert "live-token" not in repr(record)  # E5 still holds


async def test_E10_on_redacted_takes_rerun_or_replay_only(tmp_path: Path) -> None:
    errors: list[str] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        try:
            await ctx.step("x", lambda: 1, on_redacted="sometimes")  # type: ignore[arg-type]
        except ValueError as exc:
            errors.append(str(exc))
        return "ok"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "worker")))).wait()
    assert result.status == "completed"
    assert errors == ["on_redacted must be 'rerun' or 'replay', not 'sometimes'"]


async def test_E10_a_redacted_top_level_output_stays_done_and_the_result_says_it_is_masked(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    gate = Gate()

    async def creds() -> dict[str, str]:
        ledger.add("tool", "creds")
        return {"api_key": "k-live-123456", "user": "ada"}

    async def vault(ctx: ms.AgentContext, input: Any) -> dict[str, str]:
        return {"password": "pw-live-123456"}

    plan = plan_of(tool("creds", "creds"), agent("vault", "vault"), tool("g", "gate", "creds"))
    options: dict[str, Any] = {"tools": {"creds": creds, "gate": gate}, "agents": {"vault": vault}}
    async with runtime(tmp_path, ledger, **options) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        first = await handle.wait()
    # Live, in the process that ran them: the values themselves, nothing masked.
    assert first.outputs["creds"] == {"api_key": "k-live-123456", "user": "ada"}
    assert first.redacted == ()
    gate.opened.set()
    async with runtime(tmp_path, ledger, **options) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        again = await (await rt.resume(handle.execution_id)).wait()  # R4: terminal, from disk
    assert result.status == "completed"
    assert ledger.count("creds") == 1  # a completed step stays completed (E1, R7)
    for read in (result, again):
        assert read.outputs["creds"] == {"api_key": "[redacted secret]", "user": "ada"}
        assert read.outputs["vault"] == {"password": "[redacted secret]"}
        assert set(read.redacted) == {"creds", "vault"}
        observations = {obs.step_id: obs for obs in read.observations}
        assert observations["creds"].redacted
        assert observations["vault"].redacted
        assert not observations["g"].redacted


class Level(enum.IntEnum):
    LOW = 1


class Point(NamedTuple):
    x: int


async def test_E10_values_that_cannot_come_back_exactly_are_refused_at_their_step(
    tmp_path: Path,
) -> None:
    refused: list[str] = []

    async def level() -> Any:
        return {"rows": [{"level": Level.LOW}]}

    async def ordered() -> Any:
        return collections.OrderedDict(a=1)

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        try:
            await ctx.step("point", lambda: [Point(1)])
        except ValueError as exc:
            refused.append(str(exc))
        return "went on"

    options: dict[str, Any] = {"tools": {"level": level, "ordered": ordered},
                               "agents": {"worker": worker}}  # fmt: skip
    plan = plan_of(tool("l", "level"), tool("o", "ordered"), agent("a", "worker"))
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
        with pytest.raises(ms.executions.InvalidPlan, match=r"step t's input is not storable: "
                           r"x\[0\]: a value of type object"):  # fmt: skip
            await rt.start("g", plan_of(tool("t", "echo", x=[object()])))
    errors = {obs.step_id: obs.error for obs in record.observations}
    assert errors["l"] == (
        "the output of tool level is not storable: rows[0].level: a value of type Level (a "
        "subclass of int) cannot be stored exactly: it would come back as a plain int; "
        "convert it first"
    )
    assert "(top level): a value of type OrderedDict (a subclass of dict)" in (errors["o"] or "")
    assert refused == [
        "inner step point is not storable: [0]: a value of type Point (a subclass of tuple) "
        "cannot be stored exactly: it would come back as a plain tuple; convert it first"
    ]
    assert result.outputs["a"] == "went on"


async def test_E10_an_answer_that_had_to_be_masked_is_marked(tmp_path: Path) -> None:
    ms.storage.register_secret("answer-secret-9")

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("the passphrase?")

    async with runtime(tmp_path, agents={"asker": asker}) as rt:
        first = await (await rt.start("g", plan_of(agent("a", "asker")))).wait()
        assert first.status == "waiting_for_clarification"
        done = await (await rt.resume(first.execution_id, answer="it is answer-secret-9")).wait()
        (task,) = tasks_of(stored(rt, first.execution_id))
    assert done.status == "completed"
    (answer,) = task.inner_observations
    assert answer.output == "it is [redacted secret]"
    assert answer.redacted


async def test_E10_a_step_whose_input_was_masked_on_disk_is_not_run_masked_after_a_resume(
    tmp_path: Path,
) -> None:
    gate = Gate()
    received: list[dict[str, Any]] = []

    async def call_api(**input: Any) -> str:
        received.append(input)
        return "called"

    tools = {"gate": gate, "call_api": call_api}
    secret_input = {"url": "https://api.example", "api_key": "live-value-1234"}
    plan = plan_of(
        tool("first", "gate"),
        tool("api", "call_api", "first", **secret_input),
        tool("plain", "inc", "first", x=1),
    )
    async with runtime(tmp_path, tools=tools) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        assert stored(rt, handle.execution_id).masked_inputs == ("api",)
    gate.opened.set()
    async with runtime(tmp_path, tools=tools) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert received == []  # never handed "[redacted secret]" as if it were the key
    observations = {o.step_id: o for o in record.observations}
    assert observations["api"].error is not None
    assert "masked on disk" in observations["api"].error
    assert "pass secrets by reference" in observations["api"].error
    assert record.plan is not None
    assert {s.id: s.status for s in record.plan.steps} == {
        "first": "succeeded",
        "api": "failed",
        "plain": "succeeded",
    }
    assert result.status == "failed"


async def test_E10_a_live_run_hands_a_step_its_real_input_whatever_disk_holds(
    tmp_path: Path,
) -> None:
    received: list[dict[str, Any]] = []

    async def call_api(**input: Any) -> str:
        received.append(input)
        return "called"

    plan = plan_of(tool("api", "call_api", api_key="live-value-1234"))
    async with runtime(tmp_path, tools={"call_api": call_api}) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert received == [{"api_key": "live-value-1234"}]
    assert result.status == "completed"
    assert record.plan is not None
    assert record.plan.steps[0].input == {"api_key": "[redacted secret]"}  # E5 on disk


async def test_E10_a_masked_inner_result_is_replayed_exactly_by_the_runtime_that_saw_it(
    tmp_path: Path,
) -> None:
    """The runtime that handed the agent the real value replays that value on a resume here
    (it is the original, kept in memory only); another runtime has only the mask on disk and
    runs the step again."""
    calls: list[int] = []

    def fetch() -> dict[str, Any]:
        calls.append(1)
        return {"token": f"tok-{len(calls)}-{'x' * 20}"}

    got: list[Any] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        got.append(await ctx.step("fetch", fetch))
        return await ctx.ask("go on?")

    agents = {"w": worker}
    async with runtime(tmp_path, agents=agents) as rt:
        first = await (await rt.start("g", plan_of(agent("a", "w")))).wait()
        assert first.status == "waiting_for_clarification"
        done = await (await rt.resume(first.execution_id, answer="yes")).wait()
        assert done.status == "completed"
    assert len(calls) == 1  # replayed, not run again
    assert got[0] == got[1] == {"token": f"tok-1-{'x' * 20}"}
    async with runtime(tmp_path, agents=agents) as rt:
        first = await (await rt.start("g", plan_of(agent("a", "w")))).wait()
    async with runtime(tmp_path, agents=agents) as other:
        done = await (await other.resume(first.execution_id, answer="yes")).wait()
        assert done.status == "completed"
    assert len(calls) == 3  # the other runtime had only the mask: it ran the step again
    assert got[3] == {"token": f"tok-3-{'x' * 20}"}
