"""Shared pieces for runtime tests: plans, tools that record what ran, gates a test opens
when it is ready, a store that remembers every version it committed, and one in memory."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

import mainspring as ms
import mainspring.testing

#: Fast heartbeats: controls from "another process" land within a tick. The lease itself is long
#: enough that a loaded machine delaying a heartbeat never lets it lapse.
FAST: dict[str, Any] = {"lease_ttl": 5.0, "heartbeat_interval": 0.05}


def linear(n: int, *, tool: str = "inc", plan_id: str = "p") -> ms.Plan:
    """``s0 -> s1 -> ... -> s{n-1}``, each a tool step."""
    return ms.Plan(
        id=plan_id,
        goal="count",
        steps=tuple(
            ms.PlanStep(
                id=f"s{i}", tool=tool, input={"x": i}, depends_on=(f"s{i - 1}",) if i else ()
            )
            for i in range(n)
        ),
    )


def plan_of(*steps: ms.PlanStep, plan_id: str = "p") -> ms.Plan:
    return ms.Plan(id=plan_id, goal="test", steps=steps)


def tool(step_id: str, name: str = "inc", *deps: str, **input: Any) -> ms.PlanStep:
    return ms.PlanStep(id=step_id, tool=name, input=input, depends_on=deps)


def skill(step_id: str, name: str = "model", *deps: str, **input: Any) -> ms.PlanStep:
    return ms.PlanStep(id=step_id, skill=name, input=input, depends_on=deps)


def agent(step_id: str, name: str, *deps: str, **input: Any) -> ms.PlanStep:
    return ms.PlanStep(id=step_id, agent=name, input=input, depends_on=deps)


class Ledger:
    """What ran, in order: ``(kind, name)`` pairs."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []

    def add(self, kind: str, name: str) -> None:
        self.entries.append((kind, name))

    def count(self, name: str) -> int:
        return sum(1 for _, n in self.entries if n == name)

    def names(self, kind: str | None = None) -> list[str]:
        return [n for k, n in self.entries if kind is None or k == kind]


class Gate:
    """A tool that parks until the test opens it, recording why it was cancelled if it was."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()
        self.reasons: list[ms.CancelReason | None] = []
        self.calls = 0

    async def __call__(self, **input: Any) -> str:
        self.calls += 1
        self.entered.set()
        try:
            await self.opened.wait()
        except BaseException:
            self.reasons.append(ms.cancel_reason())
            raise
        return "opened"


def counting_tools(ledger: Ledger) -> dict[str, Any]:
    async def inc(x: int = 0) -> int:
        ledger.add("tool", f"inc:{x}")
        return x + 1

    async def fail(**_: Any) -> None:
        ledger.add("tool", "fail")
        raise RuntimeError("this tool always fails")

    async def echo(**input: Any) -> Any:
        ledger.add("tool", "echo")
        return input

    return {"inc": inc, "fail": fail, "echo": echo}


def counting_skills(ledger: Ledger) -> dict[str, Any]:
    async def model(prompt: str = "", **_: Any) -> str:
        ledger.add("skill", f"model:{prompt}")
        return f"model says {prompt}"

    return {"model": model}


class RecordingSqliteStore(ms.storage.SqliteStore):
    """A SqliteStore that keeps every version a run committed, to check what was on disk
    at each moment (R12, E1)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.versions: list[ms.storage.Execution] = []

    def commit_runs(
        self, commits: Sequence[tuple[ms.storage.Execution, str]]
    ) -> tuple[ms.storage._seam.CommitOutcome | Exception, ...]:
        results = super().commit_runs(commits)
        for (execution, _), result in zip(commits, results, strict=True):
            if result is ms.storage._seam.CommitOutcome.OK:
                self.versions.append(execution)
        return results


#: The in-memory store of ``mainspring.testing`` (it was promoted from here).
MemoryStore = mainspring.testing.MemoryStore


@asynccontextmanager
async def runtime(
    path: Path | ms.storage.Store,
    ledger: Ledger | None = None,
    *,
    tools: dict[str, Any] | None = None,
    skills: dict[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[ms.Runtime]:
    """A runtime with the counting tools and skills, plus any given."""
    ledger = ledger if ledger is not None else Ledger()
    all_tools = {**counting_tools(ledger), **(tools or {})}
    all_skills = {**counting_skills(ledger), **(skills or {})}
    # A bare directory (a test's tmp_path) gets a SQLite store inside it.
    store = path / "store.sqlite3" if isinstance(path, Path) and not path.suffix else path
    async with ms.open_runtime(store=store, tools=all_tools, skills=all_skills, **options) as rt:
        yield rt


@asynccontextmanager
async def recorded_events(rt: ms.Runtime) -> AsyncIterator[list[object]]:
    """Every runtime event published while the block runs, in order."""
    events: list[object] = []

    async def collect() -> None:
        async with contextlib.aclosing(rt.events()) as stream:  # type: ignore[type-var]
            async for event in stream:
                events.append(event)

    async with anyio.create_task_group() as tg:
        before = rt._bus.subscribers
        tg.start_soon(collect)
        while rt._bus.subscribers == before:  # subscribed: nothing published is missed
            await anyio.lowlevel.checkpoint()
        yield events
        await anyio.lowlevel.checkpoint()  # the collector drains what was published
        tg.cancel_scope.cancel()


def stored(rt: ms.Runtime, execution_id: str) -> ms.storage.Execution:
    """The execution as stored now (a plain synchronous read: reading never writes)."""
    execution = rt.store.get(execution_id)
    assert execution is not None
    return execution


def tasks_of(execution: ms.storage.Execution) -> list[ms.storage.AgentTaskRecord]:
    records, _ = ms.storage._seam.parse_agent_tasks(execution)
    return records


def statuses(execution: ms.storage.Execution) -> dict[str, str]:
    assert execution.plan is not None
    return {step.id: step.status for step in execution.plan.steps}
