"""Drift without blind spots: what appears after a checkpoint is drift (R6); an agent's
definition is part of its task's identity, and the files a task's inner steps declared are
part of its own checkpoint (R8)."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions._run.results import agent_hash
from mainspring.storage import _validators  # its id check is patched where it is looked up
from mainspring.storage._seam import AppendOnly

from .._kit import Gate, MemoryStore, agent, plan_of, runtime, stored, tasks_of, tool
from .._shared import blocker

pytestmark = pytest.mark.anyio


def _replanner(contexts: list[ms.PlannerContext]) -> Any:
    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(tool("w", "gate"))
        return plan_of(tool("n", "inc"))

    return planner


@pytest.mark.parametrize(
    ("appear", "reason"),
    [
        (lambda ws: (ws / ".git").mkdir(), "a git repository appeared"),
        (
            lambda ws: (ws / ".git").mkdir() or (ws / ".git" / "HEAD").write_text("e" * 40),
            "a git repository appeared",
        ),
    ],
)
async def test_R6_a_git_repository_that_appears_before_resume_is_drift(
    tmp_path: Path, appear: Any, reason: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    gate = Gate()
    contexts: list[ms.PlannerContext] = []
    options: dict[str, Any] = {"tools": {"gate": gate}, "planner": _replanner(contexts),
                               "workspace": workspace}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        gate.opened.set()  # without drift the run would go on through the gate
        appear(workspace)
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert [c.drift for c in contexts] == [(), (reason,)]


async def test_R6_a_git_head_that_appears_before_resume_is_drift(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".git" / "refs" / "heads").mkdir(parents=True)
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # `git init`
    gate = Gate()
    contexts: list[ms.PlannerContext] = []
    options: dict[str, Any] = {"tools": {"gate": gate}, "planner": _replanner(contexts),
                               "workspace": workspace}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        gate.opened.set()  # without drift the run would go on through the gate
        (workspace / ".git" / "refs" / "heads" / "main").write_text("f" * 40 + "\n")
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert [c.drift for c in contexts] == [(), ("git HEAD appeared",)]


@pytest.mark.parametrize("with_workspace", [True, False])
async def test_R6_a_configuration_that_appears_before_resume_is_drift(
    tmp_path: Path, with_workspace: bool
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    gate = Gate()
    contexts: list[ms.PlannerContext] = []
    options: dict[str, Any] = {"tools": {"gate": gate}, "planner": _replanner(contexts)}
    if with_workspace:
        options["workspace"] = workspace
    async with runtime(tmp_path, **options) as rt:  # no config
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        gate.opened.set()  # without drift the run would go on through the gate
    async with runtime(tmp_path, **options, config={"model": "new"}) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert [c.drift for c in contexts] == [(), ("a configuration appeared",)]


# -- agent definitions (R8) ------------------------------------------------------------------


def _defined(body: str, **attributes: Any) -> Any:
    """An agent named ``agent`` with the given body: same qualified name, different code."""
    namespace: dict[str, Any] = {}
    exec(f"async def agent(ctx, input):\n    {body}\n", namespace)
    fn = namespace["agent"]
    for name, value in attributes.items():
        setattr(fn, name, value)
    return fn


def test_R8_an_agent_hash_follows_its_code_not_its_place_or_process() -> None:
    one, same, other = _defined("return 1"), _defined("return 1"), _defined("return 2")
    assert agent_hash(one) == agent_hash(same)
    assert agent_hash(one) != agent_hash(other)
    nested_a = _defined("return [x for x in {'a', 'b'}]")
    nested_b = _defined("return [x * 2 for x in {'a', 'b'}]")  # only the nested code differs
    assert agent_hash(nested_a) != agent_hash(nested_b)
    # A declared version decides instead of the code.
    assert agent_hash(_defined("return 1", version="2")) == agent_hash(
        _defined("return 3", version="2")
    )
    assert agent_hash(_defined("return 1", version="2")) != agent_hash(
        _defined("return 1", version="3")
    )
    # Another process, with another string-hash seed, computes the same hash.
    code = (
        "from tests.executions._shared import blocker;"
        "from mainspring.executions._run.results import agent_hash;"
        "print(agent_hash(blocker))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == agent_hash(blocker)


@pytest.mark.parametrize("changed", [True, False])
async def test_R8_a_changed_agent_has_its_completed_task_run_again(
    tmp_path: Path, changed: bool
) -> None:
    runs: list[str] = []
    gate = Gate()

    async def analyst(ctx: ms.AgentContext, input: Any) -> str:
        runs.append("v1")
        return "v1"

    async def analyst_v2(ctx: ms.AgentContext, input: Any) -> str:
        runs.append("v2")
        return "v2"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if context.previous_plan is None:
            return plan_of(agent("a", "analyst", topic="x"), tool("w", "gate", "a"))
        return plan_of(agent("again", "analyst", topic="x"))  # matched by agent and input

    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"analyst": analyst},
                               "planner": planner, "config": {"round": 1}}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    options["config"] = {"round": 2}  # drift: a replan, whose agent step claims the task
    options["agents"] = {"analyst": analyst_v2 if changed else analyst}
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        tasks = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "completed"
    if changed:
        assert runs == ["v1", "v2"]
        assert result.outputs["again"] == "v2"
        first, second = tasks
        assert first.state == "completed"  # left as it was: terminal is sticky (R11)
        assert second.step_id == "again"
        assert second.definition_hash == agent_hash(analyst_v2) != first.definition_hash
        assert second.diagnostics == (
            f"agent analyst changed since task {first.id} completed: not reused (R8)",
        )
    else:
        assert runs == ["v1"]  # reused: nothing re-ran
        (task,) = tasks
        assert task.definition_hash == agent_hash(analyst)
        assert task.envelope_hash != ""
        assert result.outputs["again"] == "v1"


@pytest.mark.parametrize("changed", [True, False])
async def test_R8_a_changed_agent_restarts_the_inner_work_of_its_unfinished_task(
    tmp_path: Path, changed: bool
) -> None:
    gate = Gate()
    inner: list[str] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: inner.append("first") or 1)
        await ctx.step("park", gate)
        return "v1"

    async def worker_v2(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: inner.append("first") or 1)
        await ctx.step("park", gate)
        return "v2"

    plan = plan_of(agent("a", "worker"))
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
    gate.opened.set()
    async with runtime(tmp_path, agents={"worker": worker_v2 if changed else worker}) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "completed"
    if changed:
        assert inner == ["first", "first"]  # the stored inner step was not replayed
        assert task.attempt == 2
        assert task.diagnostics == (
            "attempt 2: the inner work restarts: agent worker's definition changed (R8)",
        )
        assert task.definition_hash == agent_hash(worker_v2)
    else:
        assert inner == ["first"]
        assert task.attempt == 1
        assert task.diagnostics == ()


async def test_R8_a_task_stored_without_a_definition_hash_is_taken_as_unchanged(
    tmp_path: Path,
) -> None:
    gate = Gate()
    inner: list[str] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: inner.append("first") or 1)
        await ctx.step("park", gate)
        return "done"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)

    def forget(execution: ms.storage.Execution, now: float) -> ms.storage.Execution:
        # As a record written before definitions were hashed: no such keys at all.
        raws = []
        for task in execution.agent_tasks:
            raw = ms.storage._seam.unstructure(task)
            del raw["definition_hash"], raw["envelope_hash"]
            raws.append(raw)
        return attrs.evolve(execution, agent_tasks=tuple(raws))

    store = ms.storage.SqliteStore(tmp_path / "store.sqlite3")
    store.edit(handle.execution_id, forget)
    store.close()
    gate.opened.set()
    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "completed"
    assert inner == ["first"]  # unknown is not a change: replayed
    assert task.definition_hash == agent_hash(worker)  # known from now on


# -- files the inner steps declared (R8) -----------------------------------------------------


@pytest.mark.parametrize("change", ["edit", "remove", "none"])
async def test_R8_a_file_an_inner_step_declared_is_part_of_its_tasks_checkpoint(
    tmp_path: Path, change: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one")
    gate = Gate()
    inner: list[str] = []

    def write_report() -> str:
        inner.append("write")
        (workspace / "out").mkdir(exist_ok=True)
        (workspace / "out" / "report.txt").write_text("report")  # the step's own write
        return "written"

    async def writer(ctx: ms.AgentContext, input: Any) -> str:
        # Neither file is named in the step's input: only the declarations cover them.
        await ctx.step("read", lambda: inner.append("read") or "one", paths=["notes.txt"])
        await ctx.step("write", write_report, paths=["./out/report.txt"])
        await ctx.step("park", gate)
        return "done"

    options: dict[str, Any] = {"agents": {"writer": writer}, "workspace": workspace}
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "writer")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (task,) = tasks_of(stored(rt, handle.execution_id))
        assert task.touched_paths == ("notes.txt", "out/report.txt")
        assert task.inner_checkpoint is not None
        assert sorted(task.inner_checkpoint.file_hashes or {}) == ["notes.txt", "out/report.txt"]
        if change == "edit":
            (workspace / "out" / "report.txt").write_text("edited by hand")
        elif change == "remove":
            (workspace / "notes.txt").unlink()
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "completed"
    if change == "none":
        assert inner == ["read", "write"]  # replayed from the record
        assert task.attempt == 1
    else:
        assert inner == ["read", "write", "read", "write"]  # the inner work restarted
        assert task.attempt == 2
        why = "out/report.txt changed" if change == "edit" else "notes.txt was removed"
        (diagnostic,) = task.diagnostics
        assert f"its checkpoint drifted (file {why})" in diagnostic


async def test_R8_a_declared_file_that_appears_before_resume_restarts_the_inner_work(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    gate = Gate()
    inner: list[str] = []

    async def looker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("look", lambda: inner.append("look") or "absent", paths=["later.txt"])
        await ctx.step("park", gate)
        return "done"

    async with runtime(tmp_path, agents={"looker": looker}, workspace=workspace) as rt:
        handle = await rt.start("g", plan_of(agent("a", "looker")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (workspace / "later.txt").write_text("here now")
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert inner == ["look", "look"]


@pytest.mark.parametrize("bad", [["../outside.txt"], ["/etc/passwd"], "notes.txt"])
async def test_X1_an_inner_step_declares_only_paths_inside_the_workspace(
    tmp_path: Path, bad: Any
) -> None:
    errors: list[str] = []
    ran: list[str] = []

    async def sloppy(ctx: ms.AgentContext, input: Any) -> str:
        try:
            await ctx.step("s", lambda: ran.append("s") or 1, paths=bad)
        except (ValueError, TypeError) as exc:
            errors.append(type(exc).__name__)
        await ctx.step("s", lambda: ran.append("again") or 2)  # the name was not used up
        return "ok"

    async with runtime(tmp_path, agents={"sloppy": sloppy}, workspace=tmp_path) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "sloppy")))).wait()
        (task,) = tasks_of(stored(rt, result.execution_id))
    assert result.status == "completed"
    assert errors == ["TypeError" if isinstance(bad, str) else "ValueError"]
    assert ran == ["again"]  # refused before the step ran
    assert task.touched_paths == ()


async def test_X1_symlinks_out_of_the_workspace_are_refused_when_declared(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (workspace / "dirlink").symlink_to(tmp_path / "elsewhere")  # a directory leading out
    (workspace / "dangling").symlink_to(tmp_path / "not-there-yet")  # out, once created
    (workspace / "loop").symlink_to(workspace / "loop")
    (workspace / "inner").symlink_to(workspace / "sub")
    refused: list[str] = []
    ran: list[str] = []

    async def linker(ctx: ms.AgentContext, input: Any) -> str:
        for i, path in enumerate(["dirlink/x.txt", "dangling", "loop", "ok.txt", "inner/y"]):
            try:
                await ctx.step(f"s{i}", lambda path=path: ran.append(path) or 1, paths=[path])
            except ValueError as exc:
                refused.append(str(exc))
        return "ok"

    async with runtime(tmp_path, agents={"linker": linker}, workspace=workspace) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "linker")))).wait()
        (task,) = tasks_of(stored(rt, result.execution_id))
    assert result.status == "completed"
    assert ran == ["ok.txt", "inner/y"]  # the refused steps never ran
    assert [text.split(" ")[0] for text in refused] == ["'dirlink/x.txt'", "'dangling'", "'loop'"]
    assert task.touched_paths == ("ok.txt", "inner/y")


async def test_R8_a_task_of_a_runtime_with_a_config_is_replayed_when_nothing_changed(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    gate = Gate()
    inner: list[str] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("first", lambda: inner.append("first") or 1)
        await ctx.step("park", gate)
        return "done"

    options: dict[str, Any] = {"agents": {"worker": worker}, "workspace": workspace,
                               "config": {"model": "m1"}}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        gate.opened.set()
        result = await (await rt.resume(handle.execution_id)).wait()
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert result.status == "completed"
    assert inner == ["first"]  # the task's checkpoint compares the config it was taken with
    assert task.attempt == 1


@pytest.mark.parametrize("changed", [True, False])
async def test_R7_a_completed_step_kept_under_a_changed_agent_definition_says_so(
    tmp_path: Path, changed: bool
) -> None:
    """R7 holds (a completed agent step is not run again without drift) even when its
    agent's code changed; what was kept under which definition is on the task record
    (both hashes, durable), in its diagnostics (``mainspring show``) and in the result."""
    from tests._cli_kit import run_cli

    runs: list[str] = []
    gate = Gate()

    async def analyst(ctx: ms.AgentContext, input: Any) -> str:
        runs.append("v1")
        return "v1"

    async def analyst_v2(ctx: ms.AgentContext, input: Any) -> str:
        runs.append("v2")
        return "v2"

    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"analyst": analyst}}
    plan = plan_of(agent("a", "analyst", topic="x"), tool("w", "gate", "a"))
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g", plan)
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        assert (await handle.wait()).status == "paused"
    gate.opened.set()
    options["agents"] = {"analyst": analyst_v2 if changed else analyst}
    async with runtime(tmp_path, **options) as rt:
        result = await (await rt.resume(handle.execution_id)).wait()
        (task,) = tasks_of(stored(rt, handle.execution_id))
        again = await (await rt.resume(handle.execution_id)).wait()  # R4: terminal
    assert result.status == "completed"
    assert runs == ["v1"]  # R7: kept, not run again
    assert result.outputs["a"] == "v1"
    assert task.definition_hash == agent_hash(analyst)
    store = str(tmp_path / "store.sqlite3")
    code, shown = await anyio.to_thread.run_sync(
        run_cli, "show", handle.execution_id, "--store", store
    )
    assert code == 0
    if not changed:
        assert (result.stale_steps, again.stale_steps) == ((), ())
        assert task.kept_under_definition == ""
        assert task.diagnostics == ()
        assert "kept (R7)" not in shown
        return
    assert result.stale_steps == again.stale_steps == ("a",)
    assert task.kept_under_definition == agent_hash(analyst_v2)
    note = (
        f"step a kept (R7), not run again, though agent analyst changed since: ran under "
        f"definition {agent_hash(analyst)[:12]}, kept under {agent_hash(analyst_v2)[:12]}"
    )
    assert task.diagnostics == (note,)
    assert f"task {task.id}: {note}" in " ".join(shown.split())


# ----------------------------------------------------------------------
# What one inner step of an agent costs does not grow with how many came before it (issue
# #29: inner steps appended, never copied), counted rather than timed: the Python calls the
# event loop's thread makes per inner step (``sys.setprofile``: a walk over the earlier steps
# in Python shows as calls), the ids the record validators check per inner step, and the
# copies of the inner-step sequences (none: every save's record, and the stored form a store
# makes of it, are versions of one shared list, ``AppendOnly``). An agent of 10N inner
# steps is compared with one of N.

N = 40
#: How much more an inner step of the long agent may cost than one of the short (the runs'
#: start and end are shared; what is left is noise of a few calls, never a walk).
SLACK = 1.15


@contextmanager
def _counting(monkeypatch: pytest.MonkeyPatch, counts: collections.Counter[str]) -> Iterator[None]:
    checked = _validators._id
    extended = AppendOnly.extended

    def id_checked(*args: Any) -> None:
        counts["ids checked"] += 1
        checked(*args)

    def grown(self: AppendOnly[Any], new: Any) -> AppendOnly[Any]:
        if len(self._items) != len(self):  # an older version grew: its items are copied
            counts["copies"] += 1
        return extended(self, new)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            counts["calls"] += 1

    with monkeypatch.context() as patch:
        patch.setattr(_validators, "_id", id_checked)
        patch.setattr(AppendOnly, "extended", grown)
        sys.setprofile(profile)
        try:
            yield
        finally:
            sys.setprofile(None)


class _Kept(MemoryStore):
    """Keeps the last record it was given to store: the run's own, not a read's copy."""

    given: ms.storage.Execution | None = None

    def _store(self, base: Any, execution: ms.storage.Execution) -> None:
        super()._store(base, execution)
        self.given = execution


async def _run(steps: int, monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    async def work(ctx: ms.AgentContext, input: Any) -> int:
        total = 0
        for i in range(steps):
            total += await ctx.step(f"i{i}", lambda i=i: i)
        return total

    counts: collections.Counter[str] = collections.Counter()
    # No heartbeat or renewal falls inside the run: what is counted is the steps' own cost.
    store = _Kept()
    async with runtime(
        store, agents={"work": work}, lease_ttl=600.0, heartbeat_interval=300.0
    ) as rt:
        with _counting(monkeypatch, counts):
            handle = await rt.start("count", plan_of(agent("a", "work")))
            result = await handle.wait()
        assert stored(rt, result.execution_id) == store.given
        record = store.given
    assert result.status == "completed"
    assert result.outputs["a"] == sum(range(steps))
    # The record the run gave the store: its inner steps are one shared list's view (a
    # store makes their stored form from it, as views of one list too:
    # test_stored_form.py; what a read returns is a copy of plain tuples).
    assert record is not None
    [task] = tasks_of(record)
    assert type(task.inner_completed) is AppendOnly
    assert type(task.inner_observations) is AppendOnly
    assert task.inner_completed == tuple(f"i{i}" for i in range(steps))
    return counts


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
async def test_an_inner_step_costs_the_same_at_step_n_and_step_10n(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = await _run(N, monkeypatch)
    long = await _run(10 * N, monkeypatch)
    assert short["copies"] == long["copies"] == 0, "an inner-step sequence was copied"
    per_step = {name: (long[name] / (10 * N), short[name] / N) for name in ("calls", "ids checked")}
    grew = {name: costs for name, costs in per_step.items() if costs[0] > costs[1] * SLACK}
    assert not grew, f"an inner step costs more the more came before it: {grew}"
