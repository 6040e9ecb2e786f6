"""The Runtime's surface: approvals, bad input with clear errors, stores and defaults, agent
context limits, and what a failing planner, tool or agent looks like to the caller."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import math
import pkgutil
import subprocess
import sys
import time
import typing
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring
import mainspring as ms
import mainspring.executions
from mainspring.actors import Actor
from mainspring.executions import ExecutionExists
from mainspring.storage import open_store
from mainspring.storage._seam import encode_frame, store_kind, unstructure

from .._kit import (
    Gate,
    Ledger,
    RecordingSqliteStore,
    agent,
    linear,
    plan_of,
    runtime,
    statuses,
    stored,
    tasks_of,
    tool,
)


@pytest.mark.anyio
async def test_a_plan_that_requires_approval_waits_until_approved(tmp_path: Path) -> None:
    ledger = Ledger()
    async with runtime(tmp_path, ledger, require_plan_approval=True) as rt:
        first = await (await rt.start("g", linear(2))).wait()
        assert first.status == "waiting_for_approval"
        assert first.pending is not None
        assert first.pending.asked_at is not None  # a pending question has its time
        assert first.pending == ms.storage.Pending(
            kind="approval", question="approve plan v1", asked_at=first.pending.asked_at
        )
        assert ledger.entries == []
        same = await (await rt.resume(first.execution_id)).wait()
        assert same.status == "waiting_for_approval"  # not approved: still waiting
        done = await (await rt.resume(first.execution_id, approve=True)).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    assert ledger.names() == ["inc:0", "inc:1"]
    assert [c.action for c in record.controls if c.action == "approve"] == ["approve"]


@pytest.mark.anyio
async def test_a_step_that_requires_approval_waits_while_others_run(tmp_path: Path) -> None:
    ledger = Ledger()
    risky = ms.PlanStep(id="risky", tool="inc", input={"x": 9}, requires_approval=True)
    plan = plan_of(tool("safe", "inc", x=1), risky, tool("after", "inc", "risky", x=2))
    async with runtime(tmp_path, ledger) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.status == "waiting_for_approval"
        assert first.pending is not None
        assert first.pending.question == "approve step risky"
        assert ledger.names() == ["inc:1"]
        done = await (await rt.resume(first.execution_id, approve=True)).wait()
    assert done.status == "completed"
    assert ledger.names() == ["inc:1", "inc:9", "inc:2"]


@pytest.mark.anyio
async def test_unknown_ids_and_bad_arguments_raise_clear_errors(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        for call in (rt.resume, rt.pause, rt.cancel, rt.agent_tasks):
            with pytest.raises(ms.UnknownExecution, match="no execution 'nope'"):
                await call("nope")
        with pytest.raises(ms.storage.InvalidId):
            await rt.get("../etc/passwd")
        with pytest.raises(ms.storage.InvalidId):
            await rt.start("g", linear(1), execution_id="a/b")
        with pytest.raises(ValueError, match="at most 200"):
            await rt.start("g", linear(1), execution_id="x" * 201)
        with pytest.raises(ms.storage.InvalidId):  # "" is refused, not replaced by ex-<random>
            await rt.start("g", linear(1), execution_id="")
        with pytest.raises(ValueError, match="max_calls"):
            await rt.start("g", linear(1), max_calls=-1)
        with pytest.raises(TypeError, match="goal must be a string"):
            await rt.start(42, linear(1))  # type: ignore[arg-type]
        await (await rt.start("g", linear(1), execution_id="dup")).wait()
        with pytest.raises(ExecutionExists, match="already exists") as exists:
            await rt.start("g", linear(1), execution_id="dup")
        assert exists.value.execution_id == "dup"
        assert [e.id for e in await rt.executions()] == ["dup"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error", "second_base"),
    [
        (ExecutionExists, ValueError),
        (ms.InvalidPlan, ValueError),
        (ms.ClarificationNeeded, None),
        (ms.UnknownExecution, LookupError),
        (ms.ExecutionBusy, None),
    ],
)
def test_what_the_runtime_raises_on_purpose_is_a_mainspring_error(
    error: type[Exception], second_base: type[Exception] | None
) -> None:
    assert issubclass(error, ms.MainspringError)
    if second_base is not None:  # what callers caught before, still caught
        assert issubclass(error, second_base)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_parallel_steps": 0}, "max_parallel_steps"),
        ({"max_calls": -1}, "max_calls"),
        ({"lease_ttl": 0}, "lease_ttl"),
        ({"lease_ttl": 0.5}, "lease_ttl must be 1 to 600 seconds"),
        ({"lease_ttl": 601}, "lease_ttl must be 1 to 600 seconds"),
        ({"lease_ttl": float("nan")}, "lease_ttl must be 1 to 600 seconds"),
        ({"lease_ttl": True}, "lease_ttl must be 1 to 600 seconds"),
        ({"lease_ttl": "15"}, "lease_ttl must be 1 to 600 seconds"),
        ({"lease_ttl": 1, "heartbeat_interval": 2}, "heartbeat_interval"),
        ({"tools": {"bad name": lambda: 1}}, "bad name"),
        ({"tools": {"x": 42}}, "not callable"),
    ],
)
async def test_open_runtime_refuses_bad_configuration(
    tmp_path: Path, options: dict[str, Any], problem: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=problem):
        async with ms.open_runtime(store=tmp_path / "s.sqlite3", **options):
            pass  # pragma: no cover


@pytest.mark.anyio
def test_stores_from_paths_and_the_default_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite, close = open_store(tmp_path / "a.sqlite3")
    assert isinstance(sqlite, ms.storage.SqliteStore)
    close()
    files, close = open_store(str(tmp_path / "dir"))
    assert isinstance(files, ms.storage.FileStore)
    close()
    given = ms.storage.FileStore(tmp_path / "given")
    assert open_store(given)[0] is given
    monkeypatch.setenv("MAINSPRING_HOME", str(tmp_path / "home"))
    assert ms.storage._seam.default_home() == tmp_path / "home"
    default, close = open_store(None)
    assert isinstance(default, ms.storage.SqliteStore)
    assert default.path == tmp_path / "home" / "mainspring.sqlite3"
    close()
    monkeypatch.delenv("MAINSPRING_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert ms.storage._seam.default_home() == tmp_path / "xdg" / "mainspring"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert ms.storage._seam.default_home() == tmp_path / "user" / ".local" / "state" / "mainspring"


@pytest.mark.anyio
def test_one_rule_names_the_backend_of_a_path_what_is_there_first(tmp_path: Path) -> None:
    """store_kind, shared by open_runtime and the command: an existing directory is a
    FileStore and an existing file SQLite, whatever the name; a new path goes by suffix."""
    assert store_kind(tmp_path / "new.sqlite3") == "sqlite"
    assert store_kind(tmp_path / "new.db") == "sqlite"
    assert store_kind(tmp_path / "new") == "files"
    assert store_kind(tmp_path / "no" / "such" / "x.sqlite") == "sqlite"
    assert store_kind("bad\0name") == "files"  # a name the system refuses: by its suffix
    # Where the suffix rule and "is it a directory" disagreed, what is there wins: the
    # runtime used to fail on both (IsADirectoryError, FileExistsError).
    directory = tmp_path / "runs.sqlite3"
    ms.storage.FileStore(directory)
    assert store_kind(directory) == "files"
    files, close = open_store(directory)
    assert isinstance(files, ms.storage.FileStore)
    close()
    database = tmp_path / "runs"
    ms.storage.SqliteStore(tmp_path / "made.sqlite3").close()
    (tmp_path / "made.sqlite3").rename(database)
    assert store_kind(database) == "sqlite"
    sqlite, close = open_store(database)
    assert isinstance(sqlite, ms.storage.SqliteStore)
    close()


@pytest.mark.anyio
async def test_a_failing_or_odd_planner_fails_the_execution_with_a_reason(tmp_path: Path) -> None:
    def broken(goal: str, context: ms.PlannerContext) -> ms.Plan:
        raise RuntimeError("model unavailable")

    def odd(goal: str, context: ms.PlannerContext) -> Any:
        return {"steps": []}

    async with runtime(tmp_path, planner=broken) as rt:
        result = await (await rt.start("g")).wait()
        assert result.status == "failed"
        assert result.error == "the planner failed: RuntimeError: model unavailable"
    async with runtime(tmp_path, planner=odd) as rt:
        result = await (await rt.start("g")).wait()
        assert result.status == "failed"
        assert "not a Plan" in (result.error or "")
    async with runtime(tmp_path) as rt:
        result = await (await rt.start("no plan, no planner")).wait()
        assert result.status == "failed"
        assert "no planner" in (result.error or "")


@pytest.mark.anyio
async def test_outputs_that_cannot_be_stored_fail_their_step_not_the_run(tmp_path: Path) -> None:
    async def weird(**_: Any) -> object:
        return object()

    async def cplx(**_: Any) -> complex:
        return complex(1, 2)  # E10: NaN is stored exactly now; a complex number still is not

    async def shy(ctx: ms.AgentContext, input: Any) -> object:
        return {"when": object()}

    plan = plan_of(tool("w", "weird"), tool("n", "cplx"), agent("a", "shy"), tool("ok", "inc"))
    async with runtime(tmp_path, tools={"weird": weird, "cplx": cplx}, agents={"shy": shy}) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "failed"
    assert statuses(record) == {"w": "failed", "n": "failed", "a": "failed", "ok": "succeeded"}
    errors = {o.step_id: o.error or "" for o in record.observations}
    assert "is not storable: (top level): a value of type object" in errors["w"]
    assert "is not storable: (top level): a value of type complex" in errors["n"]
    assert "is not storable: when: a value of type object" in errors["a"]


@pytest.mark.anyio
async def test_agent_context_guards_its_inner_steps_findings_and_tool_calls(
    tmp_path: Path,
) -> None:
    seen: dict[str, str] = {}

    async def careful(ctx: ms.AgentContext, input: Any) -> str:
        for name, call in {
            "bad-name": lambda: ctx.step("no spaces allowed", lambda: 1),
            "reserved": lambda: ctx.step("ask.0", lambda: 1),
        }.items():
            try:
                await call()
            except (ValueError, ms.storage.InvalidId) as exc:
                seen[name] = type(exc).__name__
        await ctx.step("once", lambda: 1)
        try:
            await ctx.step("once", lambda: 2)
        except ValueError as exc:
            seen["twice"] = str(exc)
        for i in range(200):
            ctx.report_finding(f"claim {i}")
        try:
            ctx.report_finding("one too many")
        except ValueError as exc:
            seen["findings"] = str(exc)
        assert ctx.cancel_reason() is None
        assert ctx.execution_id in ctx.task_id
        await ctx.call_tool("inc", x=1)
        await ctx.call_tool("inc", x=2)  # over this runtime's limit of 1
        return "unreachable"

    async with runtime(tmp_path, agents={"careful": careful}, max_tool_calls=1) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "careful")))).wait()
        (task,) = tasks_of(stored(rt, result.execution_id))
    assert seen["bad-name"] == "InvalidId"
    assert seen["reserved"] == "ValueError"
    assert "ran twice" in seen["twice"]
    assert "at most 200 findings" in seen["findings"]
    assert task.state == "failed"
    assert task.failure is not None
    assert task.failure.code == "agent-tool-budget"
    assert len(task.findings) == 200
    assert task.tool_calls_used == 1


@pytest.mark.anyio
async def test_an_agent_that_raises_fails_its_task_with_the_error(tmp_path: Path) -> None:
    async def clumsy(ctx: ms.AgentContext, input: Any) -> None:
        raise KeyError("missing field")

    async with runtime(tmp_path, agents={"clumsy": clumsy}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "clumsy")))).wait()
        (task,) = tasks_of(stored(rt, result.execution_id))
    assert result.status == "failed"
    assert task.failure is not None
    assert task.failure.code == "agent-failed"
    assert task.failure.message == "KeyError: 'missing field'"
    assert task.failure.error_type == "KeyError"  # O2: and where it was raised
    assert "in clumsy" in (task.failure.traceback or "")


@pytest.mark.anyio
async def test_recover_resumes_only_orphaned_running_executions(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        done = await (await rt.start("g", linear(1))).wait()
        assert await rt.recover() == []  # nothing orphaned: the finished run is left alone
        assert done.status == "completed"
    assert await _list(tmp_path) == ["completed"]


async def _list(tmp_path: Path) -> list[str]:
    async with runtime(tmp_path) as rt:
        return [e.status for e in await rt.executions()]


@pytest.mark.anyio
@pytest.mark.parametrize("exit_with", [SystemExit(3), KeyboardInterrupt()])
async def test_a_base_exception_in_the_open_runtime_block_propagates_unwrapped(
    tmp_path: Path, exit_with: BaseException
) -> None:
    async def body() -> None:
        async with runtime(tmp_path) as rt:
            await (await rt.start("g", linear(1))).wait()
            raise exit_with

    with pytest.raises(type(exit_with)) as raised:  # not a BaseExceptionGroup around it
        await body()
    assert raised.value is exit_with


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["files", "sqlite", "postgres"])
async def test_E7_start_refuses_an_id_whose_record_cannot_be_read(
    tmp_path: Path, kind: str
) -> None:
    """A record stored but unreadable (a journal cut short before its first whole entry, a
    header row that does not parse) is not absent: start raises ``RecordError`` and writes
    nothing over it."""
    schema = ""
    if kind == "postgres":
        from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

        schema = fresh_schema()
        target: Any = with_schema(require_server(), schema)
    elif kind == "files":
        target = ms.storage.FileStore(tmp_path / "files")
    else:
        target = tmp_path / "s.sqlite3"
    try:
        async with runtime(target) as rt:
            await (await rt.start("g", linear(1), execution_id="seed")).wait()
            # The test's own store calls block: off the loop, which its guard watches.
            before = await anyio.to_thread.run_sync(_plant_unreadable, rt.store, "cut")
            with pytest.raises(ms.storage.RecordError):
                await rt.start("g", linear(1), execution_id="cut")
            with pytest.raises(ms.storage.RecordError):
                await rt.get("cut")
            planted = await anyio.to_thread.run_sync(_planted, rt.store, "cut")
            assert planted == before  # nothing written over it
            listing = await anyio.to_thread.run_sync(rt.store.list)
            assert [p.id for p in listing.problems] == ["cut"]
            names = {"files": "FileStore", "sqlite": "SqliteStore", "postgres": "PostgresStore"}
            assert type(rt.store).__name__ == names[kind]
    finally:
        if schema:
            drop_schema(schema)


def _plant_unreadable(store: Any, execution_id: str) -> Any:
    if isinstance(store, ms.storage.FileStore):
        frame = encode_frame(b'{"seq":1,"changes":[]}')
        (store.path / f"{execution_id}.journal").write_bytes(frame[:-3])
    elif isinstance(store, ms.storage.SqliteStore):
        import sqlite3

        with sqlite3.connect(store.path) as db:
            db.execute(
                "INSERT INTO executions (id, seq, status, updated_at, head, checkpoints) "
                "VALUES (?, 1, 'planned', 0, ?, '[]')",
                (execution_id, b'{"v": 1, "id": '),
            )
    else:
        import psycopg

        from tests._postgres import server_url

        with psycopg.connect(server_url(), autocommit=True) as conn:
            conn.execute(
                f'INSERT INTO "{store.schema}".executions (id, seq, stamp, status, updated_at, '
                "head, checkpoints) VALUES (%s, 1, 1, 'planned', 0, %s, '[]')",
                (execution_id, b'{"v": 1, "id": '),
            )
    return _planted(store, execution_id)


def _planted(store: Any, execution_id: str) -> Any:
    if isinstance(store, ms.storage.FileStore):
        return (store.path / f"{execution_id}.journal").read_bytes()
    if isinstance(store, ms.storage.SqliteStore):
        import sqlite3

        with sqlite3.connect(store.path) as db:
            return db.execute(
                "SELECT seq, head FROM executions WHERE id = ?", (execution_id,)
            ).fetchall()
    import psycopg

    from tests._postgres import server_url

    with psycopg.connect(server_url(), autocommit=True) as conn:
        return conn.execute(
            f'SELECT seq, head FROM "{store.schema}".executions WHERE id = %s', (execution_id,)
        ).fetchall()


@pytest.mark.anyio
async def test_E10_a_live_result_reads_as_plain_data_as_the_one_read_back(tmp_path: Path) -> None:
    # A live result's observations carry ``Observation.encoded`` (the output's stored bytes,
    # an internal object in a public attrs field): attrs.asdict of them holds it and
    # json.dumps fails, while the same observations handed back by a resume of the finished
    # run (R4) are plain data. What user code receives must not depend on which it got.
    import json

    import attrs

    async with runtime(tmp_path) as rt:
        live = await (await rt.start("g", plan_of(tool("s0", "echo", text="hello")))).wait()
        again = await (await rt.resume(live.execution_id)).wait()
    assert live.observations == again.observations
    read_back = [attrs.asdict(o) for o in again.observations]
    assert json.loads(json.dumps(read_back))[0]["output"] == {"text": "hello"}
    as_live = [attrs.asdict(o) for o in live.observations]
    assert as_live == read_back
    json.dumps(as_live)


def _views_in(value: Any) -> list[str]:
    """Where ``value`` holds a Vector or an AppendOnly view (in records, tuples, lists, dicts)."""
    from mainspring.storage._seam import AppendOnly, Vector

    if isinstance(value, Vector | AppendOnly):
        return [type(value).__name__]
    if isinstance(value, tuple | list):
        return [w for item in value for w in _views_in(item)]
    if isinstance(value, dict):
        return [w for item in value.values() for w in _views_in(item)]
    if attrs.has(type(value)):
        return [
            f"{f.name}.{w}" if w else f.name
            for f in attrs.fields(type(value))
            for w in _views_in(getattr(value, f.name))
        ]
    return []


@pytest.mark.anyio
async def test_E10_a_live_replans_previous_plan_and_a_live_result_are_plain_data(
    tmp_path: Path,
) -> None:
    # A run keeps its plan's steps and its observations as Vectors (a step costs what it
    # changed); attrs.asdict and json do not take a Vector for a sequence. What the runtime
    # hands to user code is plain data, as the record read back from the store is: the
    # planner's previous_plan on a live replan, and the result.
    import json

    seen: list[tuple[Any, Any]] = []

    async def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if context.previous_plan is None:
            return plan_of(tool("a", "echo", text="one"), tool("b", "fail", "a"), plan_id="p1")
        rt_store = context_store[0]
        now = await anyio.to_thread.run_sync(rt_store.get, context.execution_id)
        seen.append((context.previous_plan, now.plan))
        return plan_of(tool("c", "echo", text="two"), plan_id="p2")

    context_store: list[Any] = []
    async with runtime(tmp_path, planner=planner, max_replans=1) as rt:
        context_store.append(rt.store)
        live = await (await rt.start("g")).wait()
        again = await (await rt.resume(live.execution_id)).wait()
    assert live.status == "completed"
    ((previous, read_back),) = seen
    assert previous == read_back
    assert _views_in(previous) == []
    assert attrs.asdict(previous) == attrs.asdict(read_back)
    assert json.loads(json.dumps(attrs.asdict(previous)))["steps"][0]["id"] == "a"
    assert _views_in(live) == []
    assert attrs.asdict(live)["observations"] == attrs.asdict(again)["observations"]


# ----------------------------------------------------------------------
# Resuming: crash reconciliation (R3), drift and replanning (R6, R7), matching agent tasks
# (R8), the pending slot (R9), answers (R10), terminal tasks (R11), completion with its task
# (R12), and what reading must never do (E7, E8).


def _crashed(record: ms.storage.Execution) -> ms.storage.Execution:
    """The record as a crashed owner leaves it: its lease lapsed, its work marked running."""
    assert record.lease is not None
    lapsed = attrs.evolve(record.lease, owner="dead:1:x", expires_at=time.time() - 1)
    return attrs.evolve(record, status="running", lease=lapsed)


@pytest.mark.anyio
async def test_R3_a_crashed_run_requeues_its_tasks_with_interruption_crash(
    tmp_path: Path,
) -> None:
    gate = Gate()
    ran: list[str] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: ran.append("first") or 1)
        await ctx.step("park", gate)
        return "ok"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        await gate.entered.wait()
        snapshot = stored(rt, handle.execution_id)  # what a kill -9 now would leave
        await rt.pause(handle.execution_id)
    (task,) = tasks_of(snapshot)
    assert task.state == "running"
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    store.edit(snapshot.id, lambda _, now: _crashed(snapshot))
    store.close()
    gate.opened.set()
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handles = await rt.recover()
        assert [h.execution_id for h in handles] == [snapshot.id]
        result = await handles[0].wait()
        record = stored(rt, snapshot.id)
    assert result.status == "completed"
    (task,) = tasks_of(record)
    assert task.state == "completed"
    assert task.interruption is not None
    assert task.interruption.kind == "crash"  # an explanation, not a state
    assert ran == ["first"]  # the durable inner step was not run again


@pytest.mark.anyio
async def test_R6_drift_replans_with_a_fenced_brief_of_active_findings(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("v1")
    gate = Gate()
    contexts: list[ms.PlannerContext] = []

    async def scout(ctx: ms.AgentContext, input: Any) -> str:
        ctx.report_finding("notes say v1", confidence=0.8)
        return "scouted"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(agent("scout", "scout", path="notes.txt"),
                           tool("wait", "gate", "scout", path="notes.txt"))  # fmt: skip
        return plan_of(tool("fresh", "inc", x=1))

    options: dict[str, Any] = {
        "tools": {"gate": gate}, "agents": {"scout": scout}, "planner": planner,
        "workspace": workspace,
    }  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("read the notes")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (workspace / "notes.txt").write_text("v2")
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert len(contexts) == 2
    replan = contexts[1]
    assert replan.drift == ("file notes.txt changed",)
    assert replan.findings is not None
    assert replan.findings.startswith("<<<findings\n")
    assert "notes say v1" in replan.findings
    assert replan.previous_plan is not None
    assert record.plan is not None
    assert record.plan.version == 2
    assert record.completed_steps == ("fresh",)


@pytest.mark.anyio
async def test_R6_a_vanished_tool_is_drift(tmp_path: Path) -> None:
    gate = Gate()
    contexts: list[ms.PlannerContext] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(tool("w", "gate"))
        return plan_of(tool("n", "inc"))

    async with runtime(tmp_path, tools={"gate": gate}, planner=planner) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    async with runtime(tmp_path, planner=planner) as rt:  # no "gate" tool any more
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert contexts[1].drift == ("tool gate vanished",)


@pytest.mark.anyio
async def test_R7_without_drift_resume_skips_completed_steps(tmp_path: Path) -> None:
    ledger = Ledger()
    gate = Gate()
    plan = plan_of(*linear(3).steps, tool("g", "gate", "s2"), tool("z", "inc", "g", x=99))
    async with runtime(tmp_path, ledger, tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert ledger.names() == ["inc:0", "inc:1", "inc:2", "inc:99"]
    assert gate.calls == 2


@pytest.mark.anyio
async def test_R8_tasks_match_by_agent_and_input_hash_never_by_step_id(tmp_path: Path) -> None:
    runs: list[str] = []
    gate = Gate()

    async def analyst(ctx: ms.AgentContext, input: Any) -> str:
        runs.append(ctx.step_id)
        return f"analysed {input['topic']}"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if context.previous_plan is None:
            return plan_of(
                agent("first-name", "analyst", topic="x"), tool("w", "gate", "first-name")
            )
        # Replanned with new step ids: the same agent and input match the finished task.
        return plan_of(agent("renamed", "analyst", topic="x"), agent("other", "analyst", topic="y"))

    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"analyst": analyst},
                               "planner": planner, "config": {"round": 1}}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    options["config"] = {"round": 2}  # configuration changed: drift, so a replan
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert runs == ["first-name", "other"]  # "renamed" reused the completed task
    assert result.outputs["renamed"] == "analysed x"
    matched = {t.step_id: t for t in tasks_of(record)}
    assert set(matched) == {"renamed", "other"}


@pytest.mark.anyio
async def test_R8_a_task_whose_own_checkpoint_drifted_restarts_its_inner_work(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "data.txt").write_text("one")
    gates = [Gate()]
    inner_runs: list[str] = []

    async def reader(ctx: ms.AgentContext, input: Any) -> str:
        text = await ctx.step("read", lambda: inner_runs.append("read") or "content")
        await ctx.step("wait", gates[-1])
        return str(text)

    plan = plan_of(agent("r", "reader", path="data.txt"))

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return plan  # the same plan again: the task is matched by agent and input (R8)

    options: dict[str, Any] = {"agents": {"reader": reader}, "workspace": workspace,
                               "planner": planner}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan)
        await gates[-1].entered.wait()
        await rt.pause(handle.execution_id)
        gates[-1].opened.set()
        done = await (await rt.resume(handle.execution_id)).wait()
        assert done.status == "completed"
        assert inner_runs == ["read"]  # unchanged: replayed from the record

        gates.append(Gate())
        handle = await rt.start("g", plan)
        await gates[-1].entered.wait()
        await rt.pause(handle.execution_id)
        assert inner_runs == ["read", "read"]
        (workspace / "data.txt").write_text("two")  # the task's own input changed
        gates[-1].opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "completed"
    assert inner_runs == ["read", "read", "read"]
    assert task.attempt == 2


@pytest.mark.anyio
async def test_R9_one_pending_slot_first_wins_and_answers_go_to_the_task_that_asked(
    tmp_path: Path,
) -> None:
    answers: dict[str, str] = {}

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        answer = await ctx.ask(f"question {input['n']}")
        answers[ctx.step_id] = answer
        return answer

    plan = plan_of(agent("q1", "curious", n=1), agent("q2", "curious", n=2))
    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        first = await (await rt.start("the goal", plan)).wait()
        assert first.status == "waiting_for_clarification"
        assert first.pending is not None
        assert first.pending.question == "question 1"
        second = await (await rt.resume(first.execution_id, answer="one")).wait()
        assert second.status == "waiting_for_clarification"
        assert second.pending is not None
        assert second.pending.question == "question 2"  # found again from the records
        done = await (await rt.resume(first.execution_id, answer="two")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    assert answers == {"q1": "one", "q2": "two"}
    assert record.goal == "the goal"  # R10: an agent's answer never joins the goal


@pytest.mark.anyio
async def test_R10_an_outer_clarification_answer_is_appended_to_the_goal(tmp_path: Path) -> None:
    goals: list[str] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        goals.append(goal)
        if "Clarification" not in goal:
            raise ms.ClarificationNeeded("which city?")
        return plan_of(tool("t", "inc"))

    async with runtime(tmp_path, planner=planner) as rt:
        first = await (await rt.start("book a hotel")).wait()
        assert first.status == "waiting_for_clarification"
        assert first.pending is not None
        assert first.pending.asked_at is not None
        assert first.pending == ms.storage.Pending(
            kind="clarification", question="which city?", asked_at=first.pending.asked_at
        )
        done = await (await rt.resume(first.execution_id, answer="Lisbon")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    assert record.goal == "book a hotel\n\nClarification: Lisbon"
    assert goals[-1] == record.goal


@pytest.mark.anyio
async def test_R11_a_late_write_from_a_stopped_task_never_reopens_it(tmp_path: Path) -> None:
    gate = Gate()
    late: list[BaseException] = []

    async def stubborn(ctx: ms.AgentContext, input: Any) -> None:
        try:
            await ctx.step("park", gate)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await ctx.step("late", lambda: "sneaky")
                except BaseException as exc:  # the refusal
                    late.append(exc)

    async with runtime(tmp_path, agents={"stubborn": stubborn}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "stubborn")))
        await gate.entered.wait()
        (task,) = await rt.agent_tasks(handle.execution_id)
        await rt.stop_agent_task(task.id)
        result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"  # its only step was stopped: nothing was produced
    assert result.stopped_steps == ("a",)
    (task,) = tasks_of(record)
    assert task.state == "cancelled"
    assert "late" not in task.inner_completed
    assert late, "the late save was refused"


@pytest.mark.anyio
async def test_R12_a_completed_task_and_its_step_are_committed_together(tmp_path: Path) -> None:
    store = RecordingSqliteStore(tmp_path / "rec.sqlite3")

    async def worker(ctx: ms.AgentContext, input: Any) -> int:
        for i in range(3):
            await ctx.step(f"i{i}", lambda i=i: i)
        return 3

    plan = plan_of(agent("a", "worker"), agent("b", "worker", "a", n=2), tool("t", "inc", "b"))
    async with runtime(store, agents={"worker": worker}) as rt:
        result = await (await rt.start("g", plan)).wait()
    assert result.status == "completed"
    assert len(store.versions) > 5
    for version in store.versions:
        for task in tasks_of(version):
            assert (task.state == "completed") == (task.step_id in version.completed_steps)
    store.close()


@pytest.mark.anyio
async def test_E7_E8_unreadable_task_records_are_dropped_from_the_view_never_from_disk(
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        handle = await rt.start("g", plan_of(tool("w", "gate"), tool("t", "inc", "w")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        good = ms.storage.AgentTaskRecord(
            id=f"{handle.execution_id}:t1", agent_id="x", step_id="w", created_at=1.0,
            updated_at=1.0, execution_id=handle.execution_id, state="completed",
        )  # fmt: skip
        raw_good = unstructure(good)
        bad = [
            {**raw_good, "id": "bad1", "surprise": 1},  # unknown key
            {**raw_good, "id": "bad2", "v": 2},  # another version
            {**raw_good, "id": "bad3", "calls_used": 1_000_001},  # counter out of range
            {
                **raw_good,
                "id": "bad4",
                "findings": [{"id": f"f{i}", "claim": "c"} for i in range(201)],
            },
            {**raw_good, "id": "bad5", "calls_used": "5"},  # never coerced
        ]

        def plant(record: ms.storage.Execution, now: float) -> ms.storage.Execution:
            return attrs.evolve(record, agent_tasks=(raw_good, *bad))

        rt.store.edit(handle.execution_id, plant)
        before = stored(rt, handle.execution_id)
        tasks = await rt.agent_tasks(handle.execution_id)
        assert [t.id for t in tasks] == [good.id]
        assert ms.storage._seam.parse_agent_tasks(before)[1] == 5
        await rt.executions()
        assert stored(rt, handle.execution_id) == before  # E7: reading never writes
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        after = stored(rt, handle.execution_id)
    assert result.status == "completed"
    assert len(after.agent_tasks) == 6  # the run kept what it could not read
    kept = after.unreadable_tasks
    assert [u.key for u in kept] == [b["id"] for b in bad]
    assert [u.raw for u in kept] == bad  # as they were stored (E7)


@pytest.mark.anyio
async def test_a_failed_step_replans_with_the_failure_evidence_and_the_previous_plan(
    tmp_path: Path,
) -> None:
    contexts: list[ms.PlannerContext] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(tool("ok", "inc", x=1), tool("bad", "fail", "ok"))
        return plan_of(tool("ok", "inc", x=1), tool("instead", "inc", "ok", x=2))

    ledger = Ledger()
    async with runtime(tmp_path, ledger, planner=planner, max_replans=1) as rt:
        result = await (await rt.start("g")).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed"
    assert len(contexts) == 2
    assert contexts[1].failure is not None
    assert "step bad failed: RuntimeError: this tool always fails" in contexts[1].failure
    assert contexts[1].previous_plan is not None
    assert [s.id for s in contexts[1].previous_plan.steps] == ["ok", "bad"]
    assert record.plan is not None
    assert record.plan.version == 2
    # The step the new plan kept unchanged was not run again.
    assert ledger.names() == ["inc:1", "fail", "inc:2"]
    assert record.completed_steps == ("ok", "instead")


@pytest.mark.anyio
async def test_without_replans_left_a_failed_step_fails_the_execution(tmp_path: Path) -> None:
    calls: list[int] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        calls.append(1)
        return plan_of(tool("bad", "fail"))

    async with runtime(tmp_path, planner=planner, max_replans=1) as rt:
        result = await (await rt.start("g")).wait()
    assert result.status == "failed"
    assert len(calls) == 2  # the first plan and one replan, then it gives up


@pytest.mark.anyio
async def test_R3_R5_a_run_that_crashed_after_its_question_was_saved_still_recovers(
    tmp_path: Path,
) -> None:
    gate = Gate()

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("ok?")

    plan = plan_of(agent("a", "curious"), tool("slow", "gate"))
    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"curious": curious}}
    async with runtime(tmp_path, **options) as rt:
        async with contextlib.aclosing(rt.events()) as events:  # type: ignore[type-var]
            handle = await rt.start("g", plan)
            with anyio.fail_after(30):
                async for event in events:
                    if isinstance(event, ms.events.AgentTaskWaiting):
                        break  # the question is durable
        await gate.entered.wait()
        snapshot = stored(rt, handle.execution_id)
        await rt.pause(handle.execution_id)
    assert snapshot.status == "running"
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    store.edit(snapshot.id, lambda _, now: _crashed(snapshot))
    store.close()
    gate.opened.set()
    async with runtime(tmp_path, **options) as rt:
        (recovered,) = await rt.recover()
        result = await recovered.wait()
        record = stored(rt, snapshot.id)
    # The step in flight at the crash ran again; the run now waits for its answer.
    assert result.status == "waiting_for_clarification"
    assert statuses(record)["slow"] == "succeeded"
    assert gate.calls == 2


@pytest.mark.anyio
async def test_max_replans_counts_across_resumes(tmp_path: Path) -> None:
    calls: list[int] = []
    gate = Gate()

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        calls.append(1)
        if len(calls) == 1:
            return plan_of(tool("w", "gate"), tool("bad", "fail", "w"))
        return plan_of(tool("bad2", "fail"))

    options: dict[str, Any] = {"tools": {"gate": gate}, "planner": planner, "max_replans": 1}
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        record = stored(rt, handle.execution_id)
    assert result.status == "failed"
    assert record.replans == 1
    assert len(calls) == 2  # the one replan allowed; the counter is on the record


async def _asks(ctx: ms.AgentContext, input: Any) -> str:
    return await ctx.ask("which city?")


@pytest.mark.anyio
async def test_R8_a_resume_whose_answer_cannot_be_stored_gives_the_lease_back(
    tmp_path: Path,
) -> None:
    """An answer that makes the record too large (or one with no UTF-8 form) is refused,
    and the lease the resume took is given back at once: another host's resume with a
    good answer is not told ``ExecutionBusy`` until the lease lapses."""
    path = tmp_path / "s.sqlite3"
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asks"),))
    agents = {"asks": _asks}
    # A store bound of 1 MiB instead of the default 16: an answer past it is refused the same
    # way, and masking secrets in 17 MB of answer took longer than the rest of the test.
    small = ms.storage.SqliteStore(path, max_bytes=1 << 20)
    try:
        async with ms.open_runtime(store=small, agents=agents, lease_ttl=60) as rt:
            result = await (await rt.start("g", plan, execution_id="ex-big")).wait()
            assert result.status == "waiting_for_clarification"
            before = await rt.get("ex-big")
            with pytest.raises(ValueError, match="UTF-8"):
                await rt.resume("ex-big", answer="caf\udce9")  # undecodable bytes, as argv has them
            assert await rt.get("ex-big") == before  # refused before anything was taken
            with pytest.raises(ms.storage.TooLarge, match="over the 1,048,576-byte limit"):
                await rt.resume("ex-big", answer="x" * ((1 << 20) + 1))
            after = await rt.get("ex-big")
    finally:
        small.close()
    assert after is not None
    assert after.status == "waiting_for_clarification"
    assert after.lease is not None
    assert not after.lease.owner
    async with ms.open_runtime(store=path, agents=agents, lease_ttl=60) as elsewhere:
        with anyio.fail_after(30):
            done = await (await elsewhere.resume("ex-big", answer="Lisbon")).wait()
    assert (done.status, done.outputs) == ("completed", {"a": "Lisbon"})


@pytest.mark.anyio
async def test_R8_a_resumes_answer_to_a_question_answered_already_is_refused_not_dropped(
    tmp_path: Path,
) -> None:
    """``Runtime.answer`` stored "A"; ``resume(answer="B")`` then neither drops "B" in
    silence (the task got "A") nor, for the run's own question, leaves "A" stored to
    answer the planner's next question by itself: it is refused, as a second
    ``Runtime.answer`` is, and nothing changes."""
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", agent="asks"),))
    goals: list[str] = []

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        goals.append(goal)
        if goal.count("Clarification") < 2:
            raise ms.ClarificationNeeded(f"question {goal.count('Clarification')}?")
        return plan

    path = tmp_path / "s.sqlite3"
    async with ms.open_runtime(store=path, agents={"asks": _asks}, planner=planner) as rt:
        inner = await (await rt.start("g", plan, execution_id="ex-inner")).wait()
        outer = await (await rt.start("book", execution_id="ex-outer")).wait()
        assert inner.status == outer.status == "waiting_for_clarification"
        for execution_id in ("ex-inner", "ex-outer"):
            await rt.answer(execution_id, "A")
            before = await rt.get(execution_id)
            with pytest.raises(ms.ExecutionBusy, match="has an answer already"):
                await rt.resume(execution_id, answer="B")
            after = await rt.get(execution_id)
            assert after is not None
            assert before is not None
            assert (after.answer_requests, after.goal, after.status, after.lease) == (
                before.answer_requests,
                before.goal,
                before.status,
                before.lease,
            )
        with anyio.fail_after(30):
            done = await (await rt.resume("ex-inner")).wait()
            asked_again = await (await rt.resume("ex-outer")).wait()
        record = await rt.get("ex-outer")
    assert (done.status, done.outputs) == ("completed", {"a": "A"})
    # The planner's second question waits for its own answer: "A" answered the first only.
    assert asked_again.status == "waiting_for_clarification"
    assert record is not None
    assert record.answer_requests == ()
    assert record.goal == "book\n\nClarification: A"


# ----------------------------------------------------------------------
# Layout: no class is assembled from mixins spread over modules; a large class holds its
# collaborators (DESIGN.md, Layout). Read from the imported classes, not from a list.

#: The folders of executions/ done by job. (The run core's flat modules and ``_workers/``
#: join once their rewrite lands.)
FOLDERS = ("_facade", "_memory", "_programs", "_rules", "_run", "_steps", "_workers")


def _modules() -> list[str]:
    names = []
    for folder in FOLDERS:
        package = importlib.import_module(f"mainspring.executions.{folder}")
        names += [m.name for m in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")]
    # The scripted worker host moved to mainspring.testing: held to the same rule there.
    names.append("mainspring.testing._scripted")
    return sorted(names)


def test_the_runtime_inherits_nothing_and_defines_every_public_method_itself() -> None:
    assert mainspring.Runtime.__bases__ == (object,)
    public = [name for name in dir(mainspring.Runtime) if not name.startswith("_")]
    assert {"events", "close_streams", "workers", "repair_worker", "finalize"} <= set(public)
    for name in public:
        assert name in vars(mainspring.Runtime), f"Runtime.{name} is inherited"


@pytest.mark.parametrize("module", _modules())
def test_no_class_is_stitched_from_classes_of_other_modules(module: str) -> None:
    """A base from another mainspring module is allowed only for the kernel's ``Actor`` (its
    subclassing contract) and for errors (one exception tree, STYLE 7)."""
    loaded = importlib.import_module(module)
    for cls in vars(loaded).values():
        if not inspect.isclass(cls) or cls.__module__ != module:
            continue
        for base in cls.__bases__:
            if not base.__module__.startswith("mainspring.") or base.__module__ == module:
                continue
            if base is Actor or issubclass(base, BaseException):
                continue
            pytest.fail(f"{module}.{cls.__qualname__} inherits {base.__module__}.{base.__name__}")


# ----------------------------------------------------------------------
# Smaller contracts of the runtime — empty ids, base exceptions out of
# open_system / open_runtime, lease bounds, findings' structure, question and answer times,
# Crash's type as a field.

_ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.anyio
async def test_X1_start_refuses_an_empty_execution_id_and_stores_nothing(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(ms.storage.InvalidId):
            await rt.start("g", plan_of(tool("a", "inc")), execution_id="")
        assert await rt.executions() == []


@pytest.mark.anyio
@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
async def test_A1_a_base_exception_leaves_open_runtime_unwrapped_and_the_run_resumable(
    tmp_path: Path, error: type[BaseException]
) -> None:
    gate = Gate()
    ids: list[str] = []
    with pytest.raises(error) as caught:  # noqa: PT012
        async with runtime(tmp_path, tools={"gate": gate}) as rt:
            handle = await rt.start("g", plan_of(tool("g1", "gate")))
            ids.append(handle.execution_id)
            await gate.entered.wait()
            raise error(3) if error is SystemExit else error()
    assert type(caught.value) is error
    (seen,) = gate.reasons
    assert isinstance(seen, ms.ParentCancel | ms.Shutdown)
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    record = store.get(ids[0])
    assert record is not None
    assert record.status == "running"
    assert record.lease is None or record.lease.owner == ""  # released: recoverable at once


@pytest.mark.anyio
@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
async def test_A1_a_base_exception_leaves_open_system_unwrapped_with_nothing_running(
    error: type[BaseException],
) -> None:
    stopped: list[ms.CancelReason] = []

    class Sleeper(ms.Actor):
        async def receive(self, message: Any) -> None:
            await anyio.sleep_forever()

        async def on_stop(self, reason: ms.CancelReason) -> None:
            stopped.append(reason)

    with pytest.raises(error) as caught:  # noqa: PT012
        async with ms.open_system(shutdown_timeout=0.2) as system:
            ref = await system.spawn(Sleeper, name="s")
            await ref.tell("go")
            await anyio.lowlevel.checkpoint()
            raise error(3) if error is SystemExit else error()
    assert type(caught.value) is error
    assert not ref.is_alive
    assert len(stopped) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("ttl", [True, "5", math.nan, math.inf, 0.999, 600.001, -1, 0, None, [5]])
async def test_L2_lease_ttl_out_of_bounds_or_not_a_number_is_refused_clearly(
    tmp_path: Path, ttl: Any
) -> None:
    with pytest.raises((ValueError, TypeError), match="lease_ttl"):
        async with runtime(tmp_path, lease_ttl=ttl):
            pass  # pragma: no cover


@pytest.mark.anyio
@pytest.mark.parametrize("ttl", [1, 1.0, 600, 600.0])
async def test_L2_lease_ttl_at_its_bounds_is_accepted(tmp_path: Path, ttl: Any) -> None:
    async with runtime(tmp_path, lease_ttl=ttl) as rt:
        result = await (await rt.start("g", plan_of(tool("a", "inc")))).wait()
    assert result.status == "completed"


@pytest.mark.anyio
async def test_L2_heartbeat_interval_nan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="heartbeat_interval"):
        async with runtime(tmp_path, heartbeat_interval=math.nan):
            pass  # pragma: no cover


@pytest.mark.anyio
async def test_E12_findings_carry_structure_ids_provenance_and_status(tmp_path: Path) -> None:
    async def finder(ctx: ms.AgentContext, input: Any) -> str:
        ctx.report_finding(
            "the wind is strong",
            evidence=[{"kind": "file", "ref": "notes.md", "detail": "line 3", "step_id": "read"}],
            confidence=0.8,
        )
        ctx.report_finding("old claim", status="superseded", superseded_by=f"{ctx.task_id}.f1")
        for bad in (
            {"evidence": ["a plain string"]},
            {"evidence": [{"ref": "no kind"}]},
            {"evidence": [{"kind": "file", "extra": 1}]},
            {"status": "bogus"},
            {"provenance": {"execution_id": "x", "plan_version": 1}},
            {"task_id": "someone-else"},
        ):
            try:
                ctx.report_finding("bad", **bad)
            except (TypeError, ValueError):
                continue
            raise AssertionError(f"accepted {bad}")
        return "found"

    async with runtime(tmp_path, agents={"finder": finder}) as rt:
        result = await (await rt.start("g", plan_of(agent("f", "finder")))).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    (task,) = tasks_of(record)
    first, second = task.findings
    assert first.evidence == (
        ms.storage.Evidence(kind="file", ref="notes.md", detail="line 3", step_id="read"),
    )
    assert (first.agent_id, first.task_id) == ("finder", task.id)
    assert first.provenance == ms.storage._seam.Provenance(
        execution_id=result.execution_id, plan_version=1
    )
    assert first.status == "active"
    assert (second.status, second.superseded_by) == ("superseded", first.id)
    assert [f.id for f in result.findings] == [first.id, second.id]


@pytest.mark.anyio
async def test_E13_question_and_answer_times_and_the_answer_digest(tmp_path: Path) -> None:
    answer = "yes, with token ghp_" + "Z" * 36

    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("go on?")

    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        first = await (await rt.start("g", plan_of(agent("q", "curious")))).wait()
        assert first.pending is not None
        asked = first.pending.asked_at
        assert asked is not None
        assert asked > 0
        (waiting,) = tasks_of(stored(rt, first.execution_id))
        assert waiting.pending_question_at == asked
        with anyio.fail_after(30):
            done = await (await rt.resume(first.execution_id, answer=answer)).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    (task,) = tasks_of(record)
    digest = hashlib.sha256(answer.encode()).hexdigest()
    assert task.answer_sha256 == digest
    assert task.answered_at is not None
    assert task.answered_at >= asked
    (line,) = [c for c in record.controls if c.action == "answer"]
    assert line.answer_sha256 == digest
    assert "Z" * 36 not in str(record)


@pytest.mark.anyio
async def test_E13_an_outer_question_has_its_time_and_its_answer_its_digest(tmp_path: Path) -> None:
    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if "Clarification" not in goal:
            raise ms.ClarificationNeeded("which city?")
        return plan_of(tool("a", "inc"))

    async with runtime(tmp_path, planner=planner) as rt:
        first = await (await rt.start("g")).wait()
        assert first.pending is not None
        assert first.pending.asked_at is not None
        assert first.pending.asked_at > 0
        done = await (await rt.resume(first.execution_id, answer="Paris")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    (line,) = [c for c in record.controls if c.action == "answer"]
    assert line.answer_sha256 == hashlib.sha256(b"Paris").hexdigest()


@pytest.mark.anyio
async def test_A2_Crash_keeps_the_error_type_as_fields() -> None:
    class Outer:
        class Broken(Exception):
            pass

    class Crasher(ms.Actor):
        async def receive(self, message: Any) -> None:
            raise Outer.Broken("boom")

    async with ms.open_system() as system:
        ref = await system.spawn(Crasher)
        with pytest.raises(ms.ActorFailed):
            await ref.ask("go")
        reason = await ref.wait_stopped()
    assert isinstance(reason, ms.Crash)
    assert reason.error_type == Outer.Broken.__qualname__
    assert reason.module == __name__
    assert "boom" in reason.error
    import pickle

    assert pickle.loads(pickle.dumps(reason)) == reason


@pytest.mark.anyio
async def test_A2_Crash_of_a_step_is_matchable_from_the_failed_steps_reason(tmp_path: Path) -> None:
    """A Crash built directly (as users do in tests) has its error_type from the text."""
    crash = ms.Crash.from_exception(KeyError("k"))
    assert (crash.error_type, crash.module) == ("KeyError", "builtins")


_RAISES_IN_AN_ACTOR = """
import sys, anyio, mainspring as ms
kind = SystemExit if sys.argv[1] == "SystemExit" else KeyboardInterrupt
class Boom(ms.Actor):
    async def receive(self, message):
        raise kind(3) if kind is SystemExit else kind()
async def main():
    async with ms.open_system(shutdown_timeout=0.5, stop_timeout=0.5) as system:
        ref = await system.spawn(Boom)
        await ref.tell("go")
        await anyio.sleep_forever()
anyio.run(main, backend=sys.argv[2])
"""

_RAISES_IN_A_TOOL = """
import sys, anyio, mainspring as ms
kind = SystemExit if sys.argv[1] == "SystemExit" else KeyboardInterrupt
async def bad(**_):
    raise kind(3) if kind is SystemExit else kind()
async def main():
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="b", tool="bad"),))
    async with ms.open_runtime(store=sys.argv[3], tools={"bad": bad}) as rt:
        await (await rt.start("g", plan)).wait()
anyio.run(main, backend=sys.argv[2])
"""


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["actor", "tool"])
@pytest.mark.parametrize("error", ["SystemExit", "KeyboardInterrupt"])
async def test_A1_a_base_exception_raised_inside_an_actor_ends_the_program_instead_of_hanging(
    tmp_path: Path, anyio_backend: Any, error: str, where: str
) -> None:
    """Ctrl-C on asyncio raises KeyboardInterrupt in whatever code runs, often an actor's
    (a tool's) code; sys.exit() in a tool is the same. The system must shut down and let it
    out — never wait forever for the actor whose task it killed."""
    import subprocess
    import sys

    backend = anyio_backend[0] if isinstance(anyio_backend, tuple) else anyio_backend
    script = _RAISES_IN_AN_ACTOR if where == "actor" else _RAISES_IN_A_TOOL
    argv = [sys.executable, "-c", script, error, backend, str(tmp_path / "s.sqlite3")]
    root = str(_ROOT)
    proc = await anyio.open_process(
        argv, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with anyio.move_on_after(10):
            await proc.wait()
    finally:
        hung = proc.returncode is None
        if hung:
            proc.kill()
            await proc.wait()
    assert not hung, "the program hung after the exception"
    assert proc.returncode != 0


@pytest.mark.anyio
async def test_E12_a_findings_provenance_names_the_plan_version_it_ran_under(
    tmp_path: Path,
) -> None:
    async def finder(ctx: ms.AgentContext, input: Any) -> str:
        ctx.report_finding("seen", evidence=[{"kind": "note", "detail": "v"}])
        return "ok"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        return plan_of(agent("f", "finder", n=2))

    plan = plan_of(agent("f", "finder", n=1), tool("broken", "fail"))
    options: dict[str, Any] = {"agents": {"finder": finder}, "planner": planner, "max_replans": 1}
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.start("g", plan)).wait()
        record = stored(rt, result.execution_id)
    assert result.status == "completed", result
    versions = sorted(
        (f.provenance.plan_version, t.plan_version)
        for t in tasks_of(record)
        for f in t.findings
        if f.provenance is not None
    )
    assert versions == [(1, 1), (2, 2)]


@pytest.mark.anyio
async def test_R9_the_next_waiting_question_keeps_its_own_time(tmp_path: Path) -> None:
    async def curious(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask(f"question {input['n']}?")

    plan = plan_of(agent("q1", "curious", n=1), agent("q2", "curious", n=2))
    async with runtime(tmp_path, agents={"curious": curious}) as rt:
        first = await (await rt.start("g", plan)).wait()
        assert first.pending is not None
        tasks = {t.step_id: t for t in tasks_of(stored(rt, first.execution_id))}
        holder = next(t for t in tasks.values() if t.id == first.pending.agent_task_id)
        other = next(t for t in tasks.values() if t.id != holder.id)
        assert first.pending.asked_at == holder.pending_question_at
        second = await (await rt.resume(first.execution_id, answer="a")).wait()
    if second.status == "waiting_for_clarification":
        assert second.pending is not None
        assert second.pending.agent_task_id == other.id
        assert second.pending.asked_at == other.pending_question_at


# ----------------------------------------------------------------------
# ``Runtime.events()`` is typed: what it yields, by its arguments, as a type checker sees it.

ROOT = Path(__file__).resolve().parents[3]

SNIPPET = """
from collections.abc import AsyncGenerator
from typing import assert_type

import mainspring as ms
from mainspring.events import RunEvent, StepFinished
from mainspring.storage import HistoryEvent

Live = AsyncGenerator[RunEvent | ms.EventsDropped, None]
History = AsyncGenerator[HistoryEvent, None]


async def check(rt: ms.Runtime, seq: int | None) -> None:
    assert_type(rt.events(), Live)
    assert_type(rt.events("ex-1", buffer=10), Live)
    assert_type(rt.events(after=0), History)
    assert_type(rt.events("ex-1", after=5, poll=0.1), History)
    assert_type(rt.events(after=seq), Live | History)
    async for event in rt.events():
        if isinstance(event, StepFinished):
            assert_type(event.step_id, str)
    async for entry in rt.events(after=0):
        assert_type(entry.seq, int)
"""


def test_events_has_one_overload_per_kind_of_stream_and_no_any() -> None:
    overloads = typing.get_overloads(ms.Runtime.events)
    returns = [o.__annotations__["return"] for o in overloads]
    assert returns == [
        "AsyncGenerator[RunEvent | EventsDropped, None]",
        "AsyncGenerator[HistoryEvent, None]",
        "AsyncGenerator[RunEvent | EventsDropped, None] | AsyncGenerator[HistoryEvent, None]",
    ]
    assert "Any" not in ms.Runtime.events.__annotations__["return"]


@pytest.mark.timeout(600)  # a cold type-check cache reads the whole package first
def test_a_type_checker_sees_what_events_yields(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    snippet = tmp_path / "uses_events.py"
    snippet.write_text(SNIPPET)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(snippet)],
        cwd=ROOT,  # the project's cache: warm after the lint step
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.anyio
async def test_V2_closing_the_runtime_mid_run_writes_one_shutdown_entry_naming_its_owner(
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with runtime(tmp_path, tools={"gate": gate}) as rt:
        first = rt.owner
        handle = await rt.start("g", plan_of(tool("g1", "gate")))
        await gate.entered.wait()
    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    try:
        history = store.history(handle.execution_id)
        (down,) = [e for e in history if e.kind == "shutdown"]
        assert (down.owner, down.status) == (first, "running")
        assert [e.kind for e in history if e.kind in ("crash", "lapse", "takeover")] == []
        assert (history[0].kind, history[0].owner) == ("created", first)
    finally:
        store.close()
    # The next runtime takes it over after the shutdown, and says so once.
    gate.opened.set()
    async with runtime(tmp_path, tools={"gate": gate}, recover=False) as rt:
        assert (await (await rt.resume(handle.execution_id)).wait()).status == "completed"
        history = rt.store.history(handle.execution_id)
    timeline = [(e.kind, e.owner, e.previous_owner, e.reason) for e in history]
    assert [t for t in timeline if t[0] in ("takeover", "crash", "lapse", "shutdown")] == [
        ("shutdown", first, None, None),
        ("takeover", rt.owner, None, "after-shutdown"),
    ]
