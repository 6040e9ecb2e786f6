"""The Runtime's surface: approvals, bad input with clear errors, stores and defaults, agent
context limits, and what a failing planner, tool or agent looks like to the caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions import ExecutionExists
from mainspring.storage import open_store
from mainspring.storage._backends.file.frames import encode_frame
from mainspring.storage._seam import store_kind

from ._kit import Ledger, agent, linear, plan_of, runtime, statuses, stored, tasks_of, tool

pytestmark = pytest.mark.anyio


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


async def test_recover_resumes_only_orphaned_running_executions(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        done = await (await rt.start("g", linear(1))).wait()
        assert await rt.recover() == []  # nothing orphaned: the finished run is left alone
        assert done.status == "completed"
    assert await _list(tmp_path) == ["completed"]


async def _list(tmp_path: Path) -> list[str]:
    async with runtime(tmp_path) as rt:
        return [e.status for e in await rt.executions()]


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
