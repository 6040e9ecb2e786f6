"""Review 12: exact replay (E10), redaction on the way to disk (E5), drift without blind spots
(R6, R8). Each test asserts what the README / issue #12 promise."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import zoneinfo
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.executions._run.results import agent_hash

from .._exact import same
from .._raw import stored_bytes
from ._kit import Gate, agent, plan_of, runtime, stored, tasks_of, tool

pytestmark = pytest.mark.anyio

ENC = ms.storage._seam.encode_value
DEC = ms.storage._seam.decode_value


def _through_json(value: Any) -> Any:
    import orjson

    return DEC(orjson.loads(orjson.dumps(ENC(value), option=orjson.OPT_SORT_KEYS)))


# -- the typed encoding ----------------------------------------------------------------------


def test_E10_a_set_of_two_nans_that_encodes_also_decodes() -> None:
    # Two distinct NaN objects are two members of a set (and two keys of a dict): the
    # encoding accepts them, so reading them back must not be "malformed".
    nans = {float("nan"), float("nan")}
    assert len(nans) == 2
    back = _through_json(nans)
    assert same(back, nans)
    keys = {float("nan"): 1, float("nan"): 2}
    assert same(_through_json(keys), keys)


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


async def test_E10_a_plan_input_that_is_not_storable_text_is_refused_by_start_as_InvalidPlan(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(ms.executions.InvalidPlan, match=r"x\[0\]"):
            await rt.start("g", plan_of(tool("t", "echo", x=["\ud800"])))


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


def test_E10_a_str_subclass_and_an_int_subclass_are_refused_with_their_path() -> None:
    class Name(str):
        pass

    with pytest.raises(ValueError, match=r"^rows\[0\]\.who: a value of type"):
        ENC({"rows": [{"who": Name("ada")}]})
    with pytest.raises(ValueError, match=r"^\[key True\]|\[0\]"):
        ENC([{True: 1, 2: (object(),)}])


# -- redaction -------------------------------------------------------------------------------


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


def test_R8_a_changed_default_argument_changes_the_agent_hash() -> None:
    # The code is the same, what the agent does is not: a default is part of its definition.
    assert agent_hash(_agent_with_default("small")) != agent_hash(_agent_with_default("large"))


async def _base(ctx: Any, input: Any, *, model: str) -> str:
    return model


def test_R8_a_partial_with_other_bound_arguments_is_another_agent() -> None:
    small = functools.partial(_base, model="small")
    large = functools.partial(_base, model="large")
    assert agent_hash(small) != agent_hash(large)


def _make(model: str) -> Any:
    async def agent(ctx: Any, input: Any) -> str:
        return model

    return agent


def test_R8_a_closure_over_another_value_is_another_agent() -> None:
    assert agent_hash(_make("small")) != agent_hash(_make("large"))


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


def test_E10_encode_value_refuses_text_it_cannot_store_with_a_ValueError_naming_the_path() -> None:
    # encode_value: "Raises ValueError naming the path ... for anything that could not come
    # back exactly". A lone surrogate is returned as plain JSON (it cannot be written), and
    # inside a set it escapes as orjson's TypeError from the sort.
    with pytest.raises(ValueError, match=r"^rows\[0\]"):
        ENC({"rows": ["\ud800"]})
    with pytest.raises(ValueError, match=r"^\{"):
        ENC({"\ud800", "a"})


def test_E10_a_refused_value_under_a_huge_int_key_names_its_path() -> None:
    # The path label is repr(key): past 4300 digits repr raises, and the refusal becomes
    # "Exceeds the limit (4300 digits) for integer string conversion", naming nothing.
    with pytest.raises(ValueError, match="cannot be stored exactly"):
        ENC({10**5000: object()})


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
