"""Worker-backed steps on a PostgreSQL store (#17): the worker records go through the same
commit funnel on the server, the delivery is sealed in its evidence table, and a second
runtime (another owner, as another host would be) reads the delivered output back without
running the worker again (E10)."""

from __future__ import annotations

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent
from mainspring.testing import ScriptedHost

from .._postgres import postgres_url  # noqa: F401 - a fixture
from ._kit import FAST, agent, plan_of

pytestmark = pytest.mark.anyio

RESULT = {"type": "result", "output": {"answer": [1, True, "x"]}}


async def test_worker_steps_on_postgres_deliver_and_resume_elsewhere(
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    # The first process exits unexpectedly (a takeover, generation 2), the second delivers.
    host = ScriptedHost([[{"type": "busy"}, ScriptedHost.exit(3)], [RESULT]])
    agents = {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}
    plan = plan_of(agent("a", "coder"), ms.PlanStep(id="b", tool="echo", depends_on=("a",)))
    gate, reached = anyio.Event(), anyio.Event()

    async def echo() -> str:
        reached.set()  # b runs only once a succeeded (P2)
        await gate.wait()
        return "done"

    async with ms.open_runtime(
        store=postgres_url, agents=agents, tools={"echo": echo}, owner="host-a", **FAST
    ) as rt:
        handle = await rt.start("g", plan)
        with anyio.fail_after(60):
            await reached.wait()
        seen = await rt.workers(handle.execution_id)
        await rt.pause(handle.execution_id)
    (worker,) = seen.workers
    assert (worker.status, worker.generation) == ("delivered", 2)
    assert seen.tasks[0].state == "delivered"
    assert [entry.event for entry in seen.trail].count("exited") == 1
    gate.set()

    # Another owner resumes: the delivered step is not run again, its output comes back.
    later = ScriptedHost([])  # any start would raise: nothing is left to start
    agents = {"coder": WorkerAgent(["scripted"], host=later, grace=0.1)}
    async with ms.open_runtime(
        store=postgres_url, agents=agents, tools={"echo": echo}, owner="host-b", **FAST
    ) as rt:
        with anyio.fail_after(60):
            result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    assert result.outputs["a"] == {"answer": [1, True, "x"]}
    assert later.starts == []
