"""A program run by a step dies with its step: for each reason a step stops (pause, cancel,
its own timeout, lease lost, shutdown), the program's whole process tree — children,
grandchildren, some ignoring SIGTERM, an orphan re-parented away — is gone afterwards, and
the reason is visible to the tool (``cancel_reason()``) or in the step's error. A program
that exits non-zero fails its step, naming the status and the end of stderr.

Invariant B2: a cancelled step leaves no process of its tree alive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import ProgramResult, run_program

from ._kit import FAST, agent, plan_of, runtime, stored, tasks_of, tool
from ._proc_tree import TREE_SIZE, Tree, survivors

pytestmark = pytest.mark.anyio


class Program:
    """``run_program`` as a tool, recording why it was cancelled if it was."""

    def __init__(self) -> None:
        self.reasons: list[ms.CancelReason | None] = []
        self.notes: list[str] = []
        self.calls = 0

    async def __call__(self, **input: Any) -> dict[str, Any]:
        self.calls += 1
        try:
            return await run_program(**input)
        except BaseException as exc:
            self.reasons.append(ms.cancel_reason())
            self.notes.extend(getattr(exc, "__notes__", ()))
            raise


def _tree_step(tree: Tree, **more: Any) -> ms.PlanStep:
    return tool("t", "sh", argv=tree.argv, grace=0.2, **more)


async def test_B2_a_pause_stops_the_tree_and_the_tool_sees_Pause(tmp_path: Path) -> None:
    tree, program = Tree(tmp_path), Program()
    async with runtime(tmp_path, tools={"sh": program}) as rt:
        handle = await rt.start("g", plan_of(_tree_step(tree)))
        pids = await tree.started()
        assert len(survivors(pids)) == TREE_SIZE
        result = await rt.pause(handle.execution_id, reason="lunch")
        assert result.status == "paused"
        assert survivors(pids) == []
        (reason,) = program.reasons
        assert isinstance(reason, ms.Pause)
        (note,) = program.notes  # the cancellation names the program and why it stopped
        assert f"(pid {pids[0]}) and its process tree were stopped because it was paused" in note
        assert stored(rt, handle.execution_id).plan.steps[0].status == "pending"  # type: ignore[union-attr]


async def test_B2_a_cancel_stops_the_tree(tmp_path: Path) -> None:
    tree, program = Tree(tmp_path), Program()
    async with runtime(tmp_path, tools={"sh": program}) as rt:
        handle = await rt.start("g", plan_of(_tree_step(tree)))
        pids = await tree.started()
        result = await rt.cancel(handle.execution_id, reason="not needed")
        assert result.status == "cancelled"
        assert survivors(pids) == []
        (reason,) = program.reasons
        assert reason is not None
        assert isinstance(reason.root, ms.Cancel)


async def test_B2_a_lost_lease_stops_the_tree(tmp_path: Path) -> None:
    tree, program = Tree(tmp_path), Program()
    async with runtime(tmp_path, tools={"sh": program}, **FAST) as rt:
        handle = await rt.start("g", plan_of(_tree_step(tree)))
        pids = await tree.started()
        store = rt.store
        assert store.release(handle.execution_id, rt.owner)
        assert store.acquire(handle.execution_id, "thief:1:x", ttl=60).acquired
        with anyio.fail_after(60):
            result = await handle.wait()
        assert isinstance(result.stopped_by, ms.LeaseLost)
        assert survivors(pids) == []
        (reason,) = program.reasons
        assert reason is not None
        assert isinstance(reason.root, ms.LeaseLost)


async def test_B2_leaving_the_runtime_stops_the_tree_with_Shutdown(tmp_path: Path) -> None:
    tree, program = Tree(tmp_path), Program()
    async with runtime(tmp_path, tools={"sh": program}) as rt:
        await rt.start("g", plan_of(_tree_step(tree)))
        pids = await tree.started()
    assert survivors(pids) == []
    (reason,) = program.reasons
    assert reason is not None
    assert isinstance(reason.root, ms.Shutdown)


async def test_B2_the_programs_own_timeout_stops_the_tree_and_fails_the_step_naming_it(
    tmp_path: Path,
) -> None:
    tree = Tree(tmp_path)
    pids: list[int] = []

    async def watch() -> None:
        pids.extend(await tree.started())

    async with runtime(tmp_path, tools={"sh": run_program}) as rt, anyio.create_task_group() as tg:
        tg.start_soon(watch)
        handle = await rt.start("g", plan_of(_tree_step(tree, timeout=3)))
        with anyio.fail_after(60):
            result = await handle.wait()
        (observation,) = stored(rt, handle.execution_id).observations
    assert len(pids) == TREE_SIZE
    assert survivors(pids) == []
    assert result.status == "failed"
    assert observation.error is not None
    assert observation.error.startswith("ProgramFailed: the program")
    assert "stopped: it ran longer than its timeout of 3 s" in observation.error


async def test_run_program_as_a_tool_returns_a_stored_result_and_fails_on_a_bad_exit(
    tmp_path: Path,
) -> None:
    plan = plan_of(
        tool("ok", "sh", argv=["sh", "-c", "echo hi; echo there >&2"]),
        tool("bad", "sh", "ok", argv=["sh", "-c", "echo boom >&2; exit 4"]),
    )
    async with runtime(tmp_path, tools={"sh": run_program}) as rt:
        handle = await rt.start("g", plan)
        result = await handle.wait()
        observations = {o.step_id: o for o in stored(rt, handle.execution_id).observations}
    assert result.status == "failed"
    ok = ProgramResult.from_dict(observations["ok"].output)
    assert (ok.stdout, ok.stderr, ok.returncode) == ("hi\n", "there\n", 0)
    assert ok.argv == ("sh", "-c", "echo hi; echo there >&2")
    error = observations["bad"].error
    assert error == (
        "ProgramFailed: the program 'sh -c echo boom >&2; exit 4' exited with status 4; "
        "its stderr ends with: boom"
    )


async def test_B2_an_agents_ctx_run_dies_with_its_task_on_pause_and_runs_again_on_resume(
    tmp_path: Path,
) -> None:
    tree = Tree(tmp_path)
    reasons: list[ms.CancelReason | None] = []
    runs: list[ProgramResult] = []

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        if tree.pids_file.exists():  # the resume: a short program this time
            runs.append(await ctx.run(["sh", "-c", "echo again"]))
            return "done"
        try:
            await ctx.run(tree.argv, grace=0.2)
        except BaseException:
            reasons.append(ctx.cancel_reason())
            raise
        return "unreachable"

    async with runtime(tmp_path, agents={"worker": worker}) as rt:
        handle = await rt.start("g", plan_of(agent("a", "worker")))
        pids = await tree.started()
        await rt.pause(handle.execution_id)
        assert survivors(pids) == []
        (reason,) = reasons
        assert isinstance(reason, ms.Pause)
        (task,) = tasks_of(stored(rt, handle.execution_id))
        assert task.interruption is not None
        assert task.interruption.kind == "pause"
        done = await (await rt.resume(handle.execution_id)).wait()
    assert done.status == "completed"
    (again,) = runs
    assert (again.stdout, again.ok) == ("again\n", True)
