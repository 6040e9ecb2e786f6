"""The tools, agents and plans of the 0.1 stores the migration tests use: run by the 0.1
code in a process of its own (``_v1_writer.py``, which loads this file by path) and by the
current code when it resumes what that process left. The same definitions in both, so a
resume sees no drift (R6, R8): hashes name the qualified name and code, not the module.
"""

from __future__ import annotations

from typing import Any

import mainspring as ms

#: The writer parks ``hold`` on ``(entered, opened)`` events here; elsewhere it returns.
GATES: dict[str, Any] = {}


async def fetch(url: str = "") -> dict[str, Any]:
    return {"url": url, "bytes": 42, "tags": ["a", "b"]}


async def hold(**input: Any) -> str:
    gate = GATES.get("hold")
    if gate is not None:
        entered, opened = gate
        entered.set()
        await opened.wait()
    return "held"


async def researcher(ctx: ms.AgentContext, input: Any) -> dict[str, Any]:
    notes = await ctx.step("read", lambda: "notes about " + input["topic"])
    size = await ctx.step("measure", lambda: len(notes))
    ctx.report_finding(
        f"the notes are {size} characters long",
        evidence=[{"kind": "note", "detail": notes, "step_id": "read"}],
        confidence=0.5,
    )
    return {"size": size}


async def curious(ctx: ms.AgentContext, input: Any) -> str:
    await ctx.step("look", lambda: "looked around")
    return await ctx.ask("which city?")


TOOLS = {"fetch": fetch, "hold": hold}
AGENTS = {"researcher": researcher, "curious": curious}


def _plan(last: ms.PlanStep) -> ms.Plan:
    return ms.Plan(
        id="p",
        goal="migrate me",
        steps=(
            ms.PlanStep(id="t", tool="fetch", input={"url": "https://example.org"}),
            ms.PlanStep(id="a", agent="researcher", input={"topic": "storage"}, depends_on=("t",)),
            last,
        ),
    )


def paused_plan() -> ms.Plan:
    """A tool step, an agent step, and a step the writer pauses the run in."""
    return _plan(ms.PlanStep(id="h", tool="hold", depends_on=("a",)))


def waiting_plan() -> ms.Plan:
    """A tool step, an agent step, and an agent that asks a question."""
    return _plan(ms.PlanStep(id="q", agent="curious", depends_on=("a",)))


def done_plan() -> ms.Plan:
    """A tool step and an agent step: the run completes."""
    return ms.Plan(id="p", goal="migrate me", steps=paused_plan().steps[:2])
