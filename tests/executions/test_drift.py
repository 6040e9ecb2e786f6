"""Drift without blind spots: what appears after a checkpoint is drift (R6); an agent's
definition is part of its task's identity, and the files a task's inner steps declared are
part of its own checkpoint (R8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mainspring as ms

from ._kit import Gate, plan_of, runtime, tool

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
