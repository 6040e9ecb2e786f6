"""Review of #17: a repair instruction whose line takes time to reach the worker (a full
stdin pipe) never overwrites what the driver recorded meanwhile (V2: stale writes), and a
repair to a process that just ended is ``WorkerNotLive``, not a raw OS error."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent, WorkerNotLive
from mainspring.testing import ScriptedHost

from ._kit import FAST, agent, plan_of, runtime

pytestmark = pytest.mark.anyio

FAIL = {"type": "failure", "class": "tests-fail", "fingerprint": "x"}


class SlowSend(ScriptedHost):
    """A host whose sends wait for ``gate`` (like a worker that does not read its stdin)."""

    def __init__(self, scripts: Any) -> None:
        super().__init__(scripts)
        self.gate = anyio.Event()
        self.sending = anyio.Event()

    async def send(
        self, process: ms.storage._seam.ProcessIdentity, line: Mapping[str, Any]
    ) -> None:
        self.sending.set()
        await self.gate.wait()
        await super().send(process, line)


async def _worker(rt: ms.Runtime, execution_id: str, status: str) -> ms.storage.WorkerRecord:
    for _ in range(3000):
        seen = await rt.workers(execution_id)
        if seen.workers and seen.workers[0].status == status:
            return seen.workers[0]
        await anyio.sleep(0.01)
    raise AssertionError(f"the worker never became {status}")


async def test_a_slow_repair_does_not_overwrite_a_failure_recorded_meanwhile(
    tmp_path: Path,
) -> None:
    go = anyio.Event()
    host = SlowSend([[{"type": "busy"}, ScriptedHost.wait(go), FAIL, ScriptedHost.until_stopped()]])
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            worker = await _worker(rt, handle.execution_id, "running")
            answers: list[Any] = []

            async def repair() -> None:
                try:
                    answers.append(await rt.repair_worker(handle.execution_id, worker.id, "fix"))
                except Exception as exc:
                    answers.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(repair)
                await host.sending.wait()
                go.set()  # the failure is reported while the repair line is on its way
                for _ in range(3000):
                    if (await rt.workers(handle.execution_id)).workers[0].failure is not None:
                        break
                    await anyio.sleep(0.01)
                host.gate.set()
            after = (await rt.workers(handle.execution_id)).workers[0]
            assert after.failure is not None  # not overwritten by the repair
            assert after.repeats == 1
            assert after.repairs == 1
            assert len(answers) == 1
            assert isinstance(answers[0], str)
        await rt.cancel(handle.execution_id)


async def test_a_repair_to_a_process_that_just_ended_is_worker_not_live(tmp_path: Path) -> None:
    go = anyio.Event()
    result = {"type": "result", "output": 1}
    host = SlowSend([[{"type": "busy"}, ScriptedHost.wait(go), result]])
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            worker = await _worker(rt, handle.execution_id, "running")
            answers: list[Any] = []

            async def repair() -> None:
                try:
                    answers.append(await rt.repair_worker(handle.execution_id, worker.id, "fix"))
                except Exception as exc:
                    answers.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(repair)
                await host.sending.wait()
                go.set()  # it delivers (and is stopped) while the repair is on its way
                assert (await handle.wait()).status == "completed"
                host.gate.set()
            assert isinstance(answers[0], WorkerNotLive), answers
            (after,) = (await rt.workers(handle.execution_id)).workers
            assert after.status == "delivered"


async def test_a_repair_while_the_result_is_sealed_is_kept_by_the_handoff(tmp_path: Path) -> None:
    go, gate, sealing = anyio.Event(), anyio.Event(), anyio.Event()
    result = {"type": "result", "output": {"big": "x" * 1000}}
    host = ScriptedHost(
        [[{"type": "busy"}, ScriptedHost.wait(go), result, ScriptedHost.until_stopped()]]
    )
    agents = {"coder": WorkerAgent(["fake"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        shelf = rt._services.evidence
        seal = shelf.seal

        async def slow_seal(value: Any) -> str:
            sealing.set()
            await gate.wait()
            return await seal(value)

        shelf.seal = slow_seal  # type: ignore[method-assign]
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            worker = await _worker(rt, handle.execution_id, "running")
            go.set()
            await sealing.wait()  # the handoff read the worker and seals its result
            await rt.repair_worker(handle.execution_id, worker.id, "fix")
            gate.set()
            assert (await handle.wait()).status == "completed"
        (after,) = (await rt.workers(handle.execution_id)).workers
    assert after.status == "delivered"
    assert after.repairs == 1  # the repair recorded meanwhile was not overwritten
