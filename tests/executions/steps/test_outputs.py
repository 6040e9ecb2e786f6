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
import functools
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import uuid
import zoneinfo
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.executions._run.results import agent_hash
from tests._raw import read_raw, stored_bytes, write_raw

from ..._exact import same
from ...strategies import exact_values
from .._kit import FAST, Gate, Ledger, agent, plan_of, runtime, stored, tasks_of, tool


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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


@pytest.mark.anyio
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


# ----------------------------------------------------------------------
# E10 across a kill -9: any value a step may return equals itself after a crash and a
# resume in a fresh process (slow: two subprocesses per example).
#
# Hypothesis draws a batch of values from everything the typed encoding supports, nested. A
# worker process stores them as a tool's output, as an agent's ``ctx.step`` results (one step
# each) and as a later step's input, and is killed with SIGKILL once they are durable; a fresh
# process resumes the run. ``ctx.step`` must replay each value (running one again fails the
# worker), and every output of the run must equal the originals: same types, ``==``, NaN for
# NaN, the same time zones and folds.

WORKER = Path(__file__).parents[1] / "_replay_worker.py"
REPO = Path(ms.__file__).parent.parent
EXECUTION = "replay-ex"
#: The values the issue found coerced, as a first example.
ISSUE = [dt.datetime(2024, 1, 2, 3, 4, 5), b"\x00\xff", {1, 2, 3}, {(1, 2): "pair"}, (1, 2)]


def _spawn(mode: str, store: Path, where: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, WORKER, mode, store, where / "values.pickle", where / "out.pickle",
         EXECUTION],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def _crash_and_resume(kind: str, values: list[Any], where: Path) -> dict[str, Any]:
    store = where / ("store.sqlite3" if kind == "sqlite" else "store")
    (where / "values.pickle").write_bytes(pickle.dumps(values))
    child = _spawn("start", store, where)
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 60.0)
    line = child.stdout.readline().strip() if readable else b"timed out"
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=30)
    assert line == b"ready", (line, err.decode()[-3000:])
    if kind == "sqlite":
        reader = ms.storage.SqliteStore(store)
        at_kill = reader.get(EXECUTION)
        reader.close()
    else:
        at_kill = ms.storage.FileStore(store).get(EXECUTION)
    assert at_kill is not None
    assert at_kill.status == "running"  # killed mid-run, with produce and keep's steps durable
    assert at_kill.completed_steps == ("produce",)
    child = _spawn("resume", store, where)
    out, err = child.communicate(timeout=90)
    assert child.returncode == 0, (out.decode(), err.decode()[-3000:])
    result: dict[str, Any] = pickle.loads((where / "out.pickle").read_bytes())
    return result


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "file"])
@given(values=st.lists(exact_values, min_size=1, max_size=25))
@example(values=ISSUE)
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_E10_values_replay_exactly_after_a_kill_and_a_resume_in_a_fresh_process(
    kind: str, values: list[Any]
) -> None:
    with tempfile.TemporaryDirectory() as where:
        result = _crash_and_resume(kind, values, Path(where))
    assert result["status"] == "completed"
    assert result["redacted"] == ()
    for index, (original, replayed) in enumerate(zip(values, result["replayed"], strict=True)):
        assert same(replayed, original), (index, original, replayed)
    outputs = result["outputs"]
    assert same(outputs["produce"], values)  # a tool's output, read back from disk
    assert same(outputs["keep"], values)
    assert same(outputs["echo"], {"values": values})  # a step input, read back from disk


# ----------------------------------------------------------------------
# A run resumed twice in a row, in fresh runtimes, hands user code what the live
# run handed it (E10): typed values in outputs, ctx.step results and step inputs.

ROOT = Path(__file__).resolve().parents[3]

VALUES: dict[Any, Any] = {
    "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "day": dt.date(2024, 2, 29),
    "raw": b"\x00\xff",
    "set": {1, 2, 3},
    "fs": frozenset({"a"}),
    (1, 2): "pair",
    "tuple": (1, (2, 3)),
    "dec": decimal.Decimal("1.10"),
    "id": uuid.UUID(int=7),
    "big": 2**70,
    "nan": float("nan"),
    "tag-like": {"$ms": "set", "v": [1]},
}


@pytest.mark.anyio
async def test_E10_two_resumes_in_a_row_hand_back_the_live_values(tmp_path: Path) -> None:
    gate = Gate()
    handed: dict[str, list[Any]] = {"produce": [], "inner": [], "echo": []}

    async def produce(**_: Any) -> dict[Any, Any]:
        return VALUES

    async def echo(values: Any) -> Any:
        handed["echo"].append(values)
        return values

    async def keep(ctx: ms.AgentContext, input: Any) -> Any:
        got = await ctx.step("v", lambda: VALUES)
        handed["inner"].append(got)
        await ctx.step("park", gate)
        return got

    tools = {"produce": produce, "echo": echo, "gate": gate}
    agents = {"keep": keep}
    plan = plan_of(
        ms.PlanStep(id="produce", tool="produce"),
        ms.PlanStep(id="keep", agent="keep", depends_on=("produce",)),
        ms.PlanStep(id="echo", tool="echo", input={"values": VALUES}, depends_on=("keep",)),
    )
    async with runtime(tmp_path, tools=tools, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        with anyio.fail_after(30):
            await handle.wait()
    for last in (False, True):
        gate.entered = anyio.Event()
        async with runtime(tmp_path, tools=tools, agents=agents, **FAST) as rt:
            handle = await rt.resume(handle.execution_id)
            await gate.entered.wait()
            if last:
                gate.opened.set()
            else:
                await rt.pause(handle.execution_id)
            with anyio.fail_after(30):
                result = await handle.wait()
            record = stored(rt, handle.execution_id)
    assert result.status == "completed", result
    assert len(handed["inner"]) == 3
    for got in handed["inner"]:
        assert same(got, VALUES), got
    (echoed,) = handed["echo"]
    assert same(echoed, VALUES), echoed
    for step_id in ("produce", "keep", "echo"):
        assert same(result.outputs[step_id], VALUES), (step_id, result.outputs[step_id])
    assert record.plan is not None
    assert same(record.plan.steps[2].input, {"values": VALUES})


def _worker(mode: str, store: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.executions._twice_worker", mode, str(store), "ex-twice"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def _until_ready(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.strip() == "ready":
            break
    return lines


@pytest.mark.anyio
def test_E10_killed_twice_and_resumed_in_fresh_processes_hands_back_the_live_values(
    tmp_path: Path,
) -> None:
    """Real processes: start, SIGKILL once the agent's inner work is durable, resume in a
    fresh process, SIGKILL again, resume in a third. Every process hands the agent, its
    input and the tool the values the live run had; no durable inner step runs again."""
    store = tmp_path / "store.sqlite3"
    seen: list[str] = []
    for mode in ("start", "resume"):
        proc = _worker(mode, store)
        try:
            lines = _until_ready(proc)
        finally:
            proc.kill()
            proc.wait(timeout=30)
            assert proc.stdout is not None
            proc.stdout.close()
        assert lines[-1:] == ["ready"], (mode, lines)
        seen += [f"{mode}: {line}" for line in lines]
    proc = _worker("finish", store)
    out, _ = proc.communicate(timeout=60)
    seen += [f"finish: {line}" for line in out.splitlines()]
    assert proc.returncode == 0, seen
    assert "finish: status completed" in seen, seen
    assert not [line for line in seen if "ran again" in line or line.endswith("False")], seen
    assert sum(1 for line in seen if line.endswith("same inner True")) == 3, seen
    assert "finish: same echo True" in seen, seen


@pytest.mark.anyio
async def test_E10_an_old_record_s_masked_inner_result_is_not_replayed_as_the_original(
    tmp_path: Path,
) -> None:
    """The issue's own reproduction, on a record the previous version wrote: a ctx.step's
    result `{"token": ...}` was stored as `{"token": "[redacted secret]"}`, with no `redacted`
    flag (the field did not exist). Resumed after upgrading, the agent must not be handed the
    masked value as if it were the original: the step runs again (E10)."""

    token = "tok-" + "y" * 28
    got: list[Any] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        got.append(await ctx.step("fetch", lambda: {"token": token}))
        await ctx.ask("go on?")
        return "done"

    async with runtime(tmp_path, agents={"w": worker}) as rt:
        first = await (await rt.start("g", plan_of(ms.PlanStep(id="a", agent="w")))).wait()
    assert first.status == "waiting_for_clarification"
    body = read_raw(tmp_path / "store.sqlite3", first.execution_id)
    for task in body["agent_tasks"]:
        for obs in task["inner_observations"]:
            assert obs.pop("redacted") is (obs["step_id"] == "fetch")
    write_raw(tmp_path / "store.sqlite3", first.execution_id, body)
    async with runtime(tmp_path, agents={"w": worker}) as rt:
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, answer="yes")).wait()
    assert done.status == "completed", done
    assert got == [{"token": token}, {"token": token}], got


@pytest.mark.anyio
async def test_E10_a_masked_output_read_back_after_a_resume_is_named_in_result_redacted(
    tmp_path: Path,
) -> None:
    """README: "a result read back from disk has the masked value in outputs, names the step
    in ExecutionResult.redacted, and its observation says redacted=True" — for a run resumed
    after that step completed, in another runtime, with more steps run after it."""
    token = "tok-" + "z" * 28
    gate = Gate()

    async def leaky(**_: Any) -> dict[str, str]:
        return {"token": token, "page": "1"}

    tools = {"leaky": leaky, "gate": gate}
    plan = plan_of(
        ms.PlanStep(id="t", tool="leaky"),
        ms.PlanStep(id="g", tool="gate", depends_on=("t",)),
    )
    async with runtime(tmp_path, tools=tools, **FAST) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        with anyio.fail_after(30):
            await handle.wait()
    gate.opened.set()
    async with runtime(tmp_path, tools=tools, **FAST) as rt:
        with anyio.fail_after(30):
            done = await (await rt.resume(handle.execution_id)).wait()
    assert done.status == "completed", done
    assert done.outputs["t"] == {"token": "[redacted secret]", "page": "1"}
    assert done.redacted == ("t",)
    (obs,) = [o for o in done.observations if o.step_id == "t"]
    assert obs.redacted is True


# ----------------------------------------------------------------------
# Exact replay (E10), redaction on the way to disk (E5), drift without blind spots
# (R6, R8). Each test asserts what the README promises.

ENC = ms.storage._seam.encode_value
DEC = ms.storage._seam.decode_value


def _through_json(value: Any) -> Any:
    import orjson

    return DEC(orjson.loads(orjson.dumps(ENC(value), option=orjson.OPT_SORT_KEYS)))


# -- the typed encoding ----------------------------------------------------------------------


@pytest.mark.anyio
def test_E10_a_set_of_two_nans_that_encodes_also_decodes() -> None:
    # Two distinct NaN objects are two members of a set (and two keys of a dict): the
    # encoding accepts them, so reading them back must not be "malformed".
    nans = {float("nan"), float("nan")}
    assert len(nans) == 2
    back = _through_json(nans)
    assert same(back, nans)
    keys = {float("nan"): 1, float("nan"): 2}
    assert same(_through_json(keys), keys)


@pytest.mark.anyio
async def test_E10_a_tool_returning_a_set_of_two_nans_leaves_a_readable_execution(
    tmp_path: Path,
) -> None:
    async def nans() -> Any:
        return {"ids": {float("nan"), float("nan")}}

    async with runtime(tmp_path, tools={"nans": nans}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "nans")))).wait()
    assert result.status == "completed"
    # A fresh runtime reads the record: the completed run must stay readable (not a
    # RecordError for the whole execution).
    async with runtime(tmp_path, tools={"nans": nans}) as rt:
        again = await (await rt.resume(result.execution_id)).wait()
    assert again.status == "completed"
    assert same(again.outputs["a"], {"ids": {float("nan"), float("nan")}})


@pytest.mark.anyio
async def test_E10_an_output_that_is_not_storable_text_is_refused_naming_its_path(
    tmp_path: Path,
) -> None:
    async def lone() -> Any:
        return {"rows": ["fine", "\ud800"]}  # a lone surrogate: not UTF-8, cannot be stored

    async with runtime(tmp_path, tools={"lone": lone}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "lone")))).wait()
    (obs,) = result.observations
    assert not obs.ok
    assert "rows[1]" in (obs.error or ""), obs.error  # README: "an error naming the path"


@pytest.mark.anyio
async def test_E10_a_plan_input_that_is_not_storable_text_is_refused_by_start_as_InvalidPlan(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(ms.executions.InvalidPlan, match=r"x\[0\]"):
            await rt.start("g", plan_of(tool("t", "echo", x=["\ud800"])))


@pytest.mark.anyio
def test_E10_tricky_values_that_do_round_trip() -> None:
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    values = [
        {1: "int", "1": "str", 2.5: "float", None: "none", (1, "1"): "tuple"},
        {True: "bool-key"},
        {frozenset({(1, 2), (3, (4, 5))}): {(), frozenset()}},
        {"$ms": "tuple", "v": [1, 2]},  # user data shaped like a tag
        [{"$ms": {"$ms": "set", "v": []}}],
        -0.0,
        {-0.0: "negative zero key"},
        decimal.Decimal("NaN"),
        decimal.Decimal("-0"),
        decimal.Decimal("-1.2300E+5"),
        2**64,
        -(2**63) - 1,
        10**2000,
        dt.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=paris),
        dt.time(1, 2, 3, 4, tzinfo=dt.timezone(dt.timedelta(hours=-5), "EST")),
        dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(seconds=1, microseconds=7))),
        dt.timedelta.min,
        [(), set(), frozenset(), {}, [], b"", ""],
        b"\x00\xff" * 10,
        "\x00 nul and \u2028 separators",
        [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]],
    ]
    for value in values:
        assert same(_through_json(value), value), value


@pytest.mark.anyio
def test_E10_a_str_subclass_and_an_int_subclass_are_refused_with_their_path() -> None:
    class Name(str):
        pass

    with pytest.raises(ValueError, match=r"^rows\[0\]\.who: a value of type"):
        ENC({"rows": [{"who": Name("ada")}]})
    with pytest.raises(ValueError, match=r"^\[key True\]|\[0\]"):
        ENC([{True: 1, 2: (object(),)}])


# -- redaction -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_E10_a_tool_step_resumed_from_disk_is_not_handed_a_masked_input_as_the_original(
    tmp_path: Path,
) -> None:
    # E10: "a stored value that had to be redacted is not replayed as if it were the
    # original". A plan step's input is stored redacted and unflagged: a resumed tool gets
    # "[redacted secret]" where the live run would have passed the key.
    gate = Gate()
    received: list[dict[str, Any]] = []

    async def call_api(**input: Any) -> str:
        received.append(input)
        return "called"

    plan = plan_of(tool("g", "gate"), tool("use", "call_api", "g", api_key="k-live-abcdef"))
    options: dict[str, Any] = {"tools": {"gate": gate, "call_api": call_api}}
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    gate.opened.set()
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
    assert "k-live-abcdef" not in (tmp_path / "store.sqlite3").read_bytes().decode("latin-1")
    # Either the original reaches the tool, or it is not run on a mangled input silently.
    assert all(r == {"api_key": "k-live-abcdef"} for r in received), (result.status, received)


@pytest.mark.anyio
async def test_E10_a_reused_completed_agent_task_with_a_masked_output_is_still_flagged(
    tmp_path: Path,
) -> None:
    # A task reused after a replan (R8) hands over its stored, masked output: the new
    # step's observation must say redacted=True and ExecutionResult.redacted name it.
    gate = Gate()

    async def vault(ctx: ms.AgentContext, input: Any) -> dict[str, str]:
        return {"password": "pw-live-123456"}

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if context.previous_plan is None:
            return plan_of(agent("a", "vault", topic="x"), tool("w", "gate", "a"))
        return plan_of(agent("again", "vault", topic="x"))  # matched by agent and input

    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"vault": vault},
                               "planner": planner, "config": {"round": 1}}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    options["config"] = {"round": 2}  # drift: a replan whose agent step reuses the task
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert result.outputs["again"] == {"password": "[redacted secret]"}
    observations = {obs.step_id: obs for obs in result.observations}
    assert observations["again"].redacted
    assert "again" in result.redacted


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["sqlite", "file"])
async def test_E5_secrets_in_sets_bytes_and_tuple_keys_never_reach_the_store_files(
    tmp_path: Path, kind: str
) -> None:
    ms.storage.register_secret("reg-secret-77")
    gh = "ghp_" + "a" * 36

    async def leaky() -> Any:
        return {
            "set": {gh, "plain"},
            "bytes": b"x reg-secret-77 y",
            "tuple-key": {(gh, 1): "v", 7: "reg-secret-77"},
            "frozen": frozenset({("reg-secret-77",)}),
            "next_token": "page-2",
            "token": "tok-abcdef",
        }

    where: Any = tmp_path if kind == "sqlite" else ms.storage.FileStore(tmp_path / "files")
    async with runtime(where, tools={"leaky": leaky}) as rt:
        live = await (await rt.start("g", plan_of(tool("a", "leaky")))).wait()
    assert live.outputs["a"]["token"] == "tok-abcdef"  # live: the value itself
    raw = stored_bytes(tmp_path / "store.sqlite3" if kind == "sqlite" else tmp_path / "files")
    assert raw
    import base64

    for secret in (gh, "reg-secret-77", "tok-abcdef"):
        assert secret.encode() not in raw
        assert base64.b64encode(f"x {secret} y".encode()) not in raw
    if kind == "file":
        where = ms.storage.FileStore(tmp_path / "files")
    async with runtime(where, tools={"leaky": leaky}) as rt:
        back = await (await rt.resume(live.execution_id)).wait()
    out = back.outputs["a"]
    assert out["next_token"] == "page-2"
    assert out["token"] == "[redacted secret]"
    assert back.redacted == ("a",)


@pytest.mark.anyio
async def test_E10_a_redacted_inner_step_reruns_on_every_resume_and_says_so_once(
    tmp_path: Path,
) -> None:
    gates = [Gate(), Gate()]
    runs: list[int] = []

    def login() -> dict[str, str]:
        runs.append(len(runs))
        return {"api_key": f"key-{len(runs)}-abcdef"}

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        got = await ctx.step("login", login)
        assert got["api_key"].startswith("key-")  # never the mask
        await ctx.step(f"park{len(runs)}", gates[min(len(runs), 2) - 1])
        return "done"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        await gates[0].entered.wait()
        await rt.pause(handle.execution_id)
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        await rt.resume(handle.execution_id)
        await gates[1].entered.wait()
        await rt.pause(handle.execution_id)
    gates[1].opened.set()
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "completed"
    assert runs == [0, 1, 2]
    assert (
        task.diagnostics.count(
            "inner step login ran again on resume: its stored result had been redacted"
        )
        == 1
    )


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
@pytest.mark.anyio
@pytest.mark.loop_guard(10)
async def test_X2_an_output_whose_masked_form_exceeds_1_MiB_is_not_stored_over_the_bound(
    tmp_path: Path,
) -> None:
    # check_output bounds an output "as stored" to 1 MiB, but measures it before
    # redaction: masks are longer than what they replace, so the stored form can be ~3x.
    async def many() -> Any:
        return [{"pwd": 1} for _ in range(100_000)]  # ~1 MiB live, ~2.7 MiB masked

    async with runtime(tmp_path, tools={"many": many}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "many")))).wait()
        record = stored(rt, result.execution_id)
    import orjson

    for obs in record.observations:
        if obs.ok:
            assert len(orjson.dumps(ENC(obs.output))) <= 1 << 20


# -- drift: agent definitions (R8) -------------------------------------------------------------


def _agent_with_default(model: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(f"async def agent(ctx, input, model={model!r}):\n    return model\n", namespace)
    return namespace["agent"]


@pytest.mark.anyio
def test_R8_a_changed_default_argument_changes_the_agent_hash() -> None:
    # The code is the same, what the agent does is not: a default is part of its definition.
    assert agent_hash(_agent_with_default("small")) != agent_hash(_agent_with_default("large"))


async def _base(ctx: Any, input: Any, *, model: str) -> str:
    return model


@pytest.mark.anyio
def test_R8_a_partial_with_other_bound_arguments_is_another_agent() -> None:
    small = functools.partial(_base, model="small")
    large = functools.partial(_base, model="large")
    assert agent_hash(small) != agent_hash(large)


def _make(model: str) -> Any:
    async def agent(ctx: Any, input: Any) -> str:
        return model

    return agent


@pytest.mark.anyio
def test_R8_a_closure_over_another_value_is_another_agent() -> None:
    assert agent_hash(_make("small")) != agent_hash(_make("large"))


@pytest.mark.anyio
def test_R8_a_callable_class_whose_helper_method_changed_is_another_agent() -> None:
    namespace: dict[str, Any] = {}
    source = (
        "class Base:\n"
        "    async def __call__(self, ctx, input):\n"
        "        return self.run(input)\n"
        "class Agent(Base):\n"
        "    def run(self, input):\n"
        "        return {body}\n"
    )
    exec(source.format(body="1"), namespace)
    one = namespace["Agent"]()
    exec(source.format(body="2"), namespace)
    two = namespace["Agent"]()
    assert agent_hash(one) != agent_hash(two)


@pytest.mark.anyio
def test_R8_tricky_definitions_that_hash_as_they_should() -> None:
    namespace: dict[str, Any] = {}
    exec("f = lambda ctx, input: 1\ng = lambda ctx, input: 2", namespace)
    assert agent_hash(namespace["f"]) != agent_hash(namespace["g"])

    class Own:
        async def __call__(self, ctx: Any, input: Any) -> int:
            return 1

    class Other:
        async def __call__(self, ctx: Any, input: Any) -> int:
            return 2

    assert agent_hash(Own()) != agent_hash(Other())
    versioned = functools.partial(_base, model="x")
    versioned.version = "7"  # type: ignore[attr-defined]
    assert agent_hash(versioned) != agent_hash(functools.partial(_base, model="x"))


@pytest.mark.anyio
async def test_R8_an_unfinished_task_of_a_closure_agent_over_a_new_value_restarts(
    tmp_path: Path,
) -> None:
    gate = Gate()
    inner: list[str] = []

    def make(model: str) -> Any:
        async def analyst(ctx: ms.AgentContext, input: Any) -> str:
            got = await ctx.step("ask", lambda: inner.append(model) or model)
            await ctx.step("park", gate)
            return got

        return analyst

    async with runtime(tmp_path, agents={"analyst": make("small")}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "analyst")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    gate.opened.set()
    async with runtime(tmp_path, agents={"analyst": make("large")}) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
    # The agent is now built over "large": its inner work restarts, not replayed as "small".
    assert result.outputs["a"] == "large", inner


# -- drift: files (R6, R8) ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_R6_a_file_named_in_a_set_in_a_step_input_is_checkpointed(tmp_path: Path) -> None:
    # Sets are storable inputs now (E10): a file they name is named by the plan all the same.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "data.csv").write_text("1,2")
    gate = Gate()
    contexts: list[ms.PlannerContext] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(tool("w", "gate", files={"data.csv"}))
        return plan_of(tool("n", "inc"))

    options: dict[str, Any] = {"tools": {"gate": gate}, "planner": planner,
                               "workspace": workspace}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        record = stored(rt, handle.execution_id)
        gate.opened.set()
        (workspace / "data.csv").write_text("changed")
        result = await (await rt.resume(handle.execution_id)).wait()
    assert "data.csv" in (record.checkpoints[-1].file_hashes or {})
    assert result.status == "completed"
    assert [c.drift for c in contexts] == [(), ("file data.csv changed",)]


@pytest.mark.anyio
async def test_X1_an_inner_step_declaring_a_symlink_out_of_the_workspace_is_refused(
    tmp_path: Path,
) -> None:
    # ctx.step: "ValueError for a path that is not inside the workspace". A symlink leading
    # out is such a path; today it is accepted and silently never hashed (a blind spot).
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "outside.txt").write_text("secret config")
    (workspace / "link.txt").symlink_to(tmp_path / "outside.txt")
    errors: list[str] = []

    async def linker(ctx: ms.AgentContext, input: Any) -> str:
        try:
            await ctx.step("s", lambda: 1, paths=["link.txt"])
        except ValueError as exc:
            errors.append(str(exc))
        return "ok"

    async with runtime(tmp_path, agents={"linker": linker}, workspace=workspace) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "linker")))).wait()
    assert result.status == "completed"
    assert len(errors) == 1


@pytest.mark.anyio
async def test_R8_declared_paths_tricky_cases_that_hold(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "a.txt").write_text("a")
    (workspace / "inner-link.txt").symlink_to(workspace / "sub" / "a.txt")
    gate = Gate()
    inner: list[str] = []
    errors: list[str] = []

    async def many(ctx: ms.AgentContext, input: Any) -> str:
        declared = ["sub/./a.txt", "sub//a.txt", "missing.txt", "inner-link.txt"]
        await ctx.step("read", lambda: inner.append("read") or 1, paths=declared)
        try:
            await ctx.step("lots", lambda: 2, paths=[f"f{i}" for i in range(201)])
        except ValueError as exc:
            errors.append(str(exc))
        await ctx.step("park", gate)
        return "done"

    options: dict[str, Any] = {"agents": {"many": many}, "workspace": workspace}
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "many")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (task,) = tasks_of(stored(rt, handle.execution_id))
        assert task.touched_paths == ("sub/a.txt", "missing.txt", "inner-link.txt")
        (workspace / "sub" / "a.txt").write_text("edited")  # through the link too
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert errors == ["an agent task declares at most 200 paths"] * 2  # once per attempt
    assert inner == ["read", "read"]  # the edit restarted the inner work


@pytest.mark.anyio
def test_R6_a_commit_in_a_git_worktree_is_drift(tmp_path: Path) -> None:
    # In a `git worktree` (or a submodule) .git is a file, "gitdir: <where>": the checkpoint
    # records "no git repository", so a HEAD that moves there is never drift (a blind spot).
    gitdir = tmp_path / "main" / ".git" / "worktrees" / "ws"
    gitdir.mkdir(parents=True)
    (gitdir / "HEAD").write_text("a" * 40 + "\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").write_text(f"gitdir: {gitdir}\n")
    plan = plan_of(tool("t", "inc"))
    checkpoint = ms.storage._seam.capture_checkpoint(workspace, plan)
    (gitdir / "HEAD").write_text("b" * 40 + "\n")  # a commit in the worktree
    assert ms.storage._seam.reconcile(checkpoint, workspace, plan).drifted


@pytest.mark.anyio
async def test_R8_an_agent_step_whose_secret_input_changed_does_not_reuse_the_old_task(
    tmp_path: Path,
) -> None:
    # R8 matches a task by (agent, hash of the step's input); the hash is taken over the
    # *redacted* input, so inputs that differ only in a secret match: the completed task
    # computed with the old key is reused for the new one.
    gate = Gate()
    used: list[str] = []

    async def caller(ctx: ms.AgentContext, input: Any) -> str:
        used.append(input["api_key"])
        return f"called with key #{len(used)}"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if context.previous_plan is None:
            return plan_of(agent("a", "caller", api_key="key-one-abcdef"), tool("w", "gate", "a"))
        return plan_of(agent("b", "caller", api_key="key-two-abcdef"))

    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"caller": caller},
                               "planner": planner, "config": {"round": 1}}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    options["config"] = {"round": 2}  # drift: a replan with another key
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert used[-1] == "key-two-abcdef", used  # the new input ran, not the old task reused


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.anyio
async def test_E10_an_output_the_encoding_accepts_never_crashes_the_execution(
    tmp_path: Path,
) -> None:
    # check_output accepts 201 nested lists (the encoding's bound), but redaction refuses
    # anything deeper than 200 levels: redact_flagged raises inside the ExecutionActor, which
    # crashes; the run is left "running" and every resume crashes the same way.
    deep = _nested(201)

    async def dig() -> Any:
        return deep

    async with runtime(tmp_path, tools={"dig": dig}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "dig"), tool("b", "inc")))).wait()
    assert result.status in ("completed", "failed"), (result.status, result.error)
    if result.status == "completed":
        assert result.outputs["a"] == deep


@pytest.mark.anyio
async def test_E10_a_ctx_step_result_the_encoding_accepts_never_crashes_its_task(
    tmp_path: Path,
) -> None:
    deep = _nested(201)
    errors: list[str] = []

    async def digger(ctx: ms.AgentContext, input: Any) -> str:
        try:
            await ctx.step("deep", lambda: deep)
        except ValueError as exc:
            errors.append(str(exc))
        return "went on"

    async with runtime(tmp_path, agents={"digger": digger}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "digger")))).wait()
    assert result.status == "completed", (result.status, result.error)
    assert result.outputs["a"] == "went on"


@pytest.mark.anyio
@pytest.mark.loop_guard(10)
async def test_X2_refusing_an_output_names_its_path_without_copying_the_value_into_the_record(
    tmp_path: Path,
) -> None:
    # The refusal's path labels are reprs of whole set members and dict keys: a 3 MB member
    # next to an unstorable one puts a 3 MB error on the record, per step. "One output can
    # never make its execution's record unwritable" (check_output) fails by the back door.
    big = "x" * 3_000_000

    async def member() -> Any:
        return {frozenset({big, object()})}

    async def key() -> Any:
        return {(big, 1): object()}

    async with runtime(tmp_path, tools={"member": member, "key": key}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "member"), tool("b", "key")))).wait()
        record = stored(rt, result.execution_id)
    for obs in record.observations:
        assert not obs.ok
        assert len(obs.error or "") < 10_000, (obs.step_id, len(obs.error or ""))


@pytest.mark.anyio
async def test_E5_a_secret_in_a_time_zone_name_never_reaches_disk(tmp_path: Path) -> None:
    ms.storage.register_secret("tz-secret-4711")

    async def when() -> Any:
        return dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(0), "tz-secret-4711"))

    async with runtime(tmp_path, tools={"when": when}) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "when")))).wait()
    assert result.status == "completed"
    assert b"tz-secret-4711" not in (tmp_path / "store.sqlite3").read_bytes()
    wal = tmp_path / "store.sqlite3-wal"
    assert not wal.exists() or b"tz-secret-4711" not in wal.read_bytes()


@pytest.mark.anyio
def test_E10_encode_value_refuses_text_it_cannot_store_with_a_ValueError_naming_the_path() -> None:
    # encode_value: "Raises ValueError naming the path ... for anything that could not come
    # back exactly". A lone surrogate is returned as plain JSON (it cannot be written), and
    # inside a set it escapes as orjson's TypeError from the sort.
    with pytest.raises(ValueError, match=r"^rows\[0\]"):
        ENC({"rows": ["\ud800"]})
    with pytest.raises(ValueError, match=r"^\{"):
        ENC({"\ud800", "a"})


@pytest.mark.anyio
def test_E10_a_refused_value_under_a_huge_int_key_names_its_path() -> None:
    # The path label is repr(key): past 4300 digits repr raises, and the refusal becomes
    # "Exceeds the limit (4300 digits) for integer string conversion", naming nothing.
    with pytest.raises(ValueError, match="cannot be stored exactly"):
        ENC({10**5000: object()})


@pytest.mark.anyio
async def test_E10_a_ctx_step_returning_two_nans_in_a_set_is_replayed_not_run_again(
    tmp_path: Path,
) -> None:
    # The task record holding {nan, nan} does not decode: parse_agent_tasks drops it, the
    # resume starts a new task and the committed inner step runs again (exactly-once broken);
    # the new task's record is unreadable too.
    gate = Gate()
    runs: list[str] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> int:
        got = await ctx.step("nans", lambda: runs.append("nans") or {float("nan"), float("nan")})
        await ctx.step("park", gate)
        return len(got)

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    gate.opened.set()
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        tasks, unreadable = ms.storage._seam.parse_agent_tasks(stored(rt, handle.execution_id))
    assert result.status == "completed"
    assert runs == ["nans"]  # committed once: never run again
    assert (len(tasks), unreadable) == (1, 0)
