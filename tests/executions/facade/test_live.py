"""What a runtime is made of (issue #29): frozen options (``RunConfig``), its services
(``RunServices``) and the registry of its runs (``LiveRuns``, with what it keeps of their real
inputs, E10); a live run's worker board is reached only through its ExecutionActor's mailbox."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms
from mainspring.executions import WorkerAgent, WorkerNotLive
from mainspring.executions._facade import workers as _worker_api
from mainspring.executions._facade.handle import ExecutionHandle
from mainspring.executions._facade.live import LiveRun, LiveRuns
from mainspring.executions._run.kept import MAX_LIVE_PLANS, KeptInputs
from mainspring.executions._run.messages import RunConfig, RunServices
from mainspring.executions._workers.board import BoardState, BoardView, RepairWorker
from mainspring.testing import ScriptedHost

from .._kit import FAST, agent, plan_of, runtime


def _plan(n: int) -> ms.Plan:
    return plan_of(ms.PlanStep(id="s", tool="t", input={"n": n}), plan_id=f"p{n}")


# -- options and services --------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_options_are_frozen_values_and_the_services_a_frozen_holder(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path, **FAST) as rt:
        cfg, services = rt._cfg, rt._services
        assert isinstance(cfg, RunConfig)
        assert isinstance(services, RunServices)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            cfg.owner = "x"  # type: ignore[misc]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            services.committer = None  # type: ignore[misc]
        options = {f.name for f in attrs.fields(RunConfig)}
        # Services and what the runtime holds of its runs are not options.
        assert not options & {f.name for f in attrs.fields(RunServices)}
        assert not options & {"worker_boards", "live_plans", "secret_inputs", "kept_results"}
        assert rt.memory is services.memory


# -- what the runtime keeps of its runs' real inputs (E10) -----------------------------------


def test_kept_plans_are_bounded_and_the_oldest_go_first() -> None:
    kept = KeptInputs()
    for n in range(MAX_LIVE_PLANS):
        kept.keep_plan(f"ex-{n}", _plan(n))
    kept.keep_plan("ex-0", _plan(0))  # kept again: the newest now
    kept.keep_plan("ex-new", _plan(-1))
    assert kept.plan("ex-1") is None  # the oldest went
    assert kept.plan("ex-0") == _plan(0)
    assert kept.plan("ex-new") == _plan(-1)


def test_forgetting_a_run_drops_its_plan_digests_and_results_only() -> None:
    kept = KeptInputs()
    for execution_id in ("ex-1", "ex-10"):
        kept.keep_plan(execution_id, _plan(1))
        kept.keep_input(f"{execution_id}:t1", "d" * 64)
        kept.results[(f"{execution_id}:t1", "inner")] = {"secret": 1}
    kept.forget("ex-1")
    assert kept.plan("ex-1") is None
    assert kept.input_digest("ex-1:t1") is None
    assert ("ex-1:t1", "inner") not in kept.results
    # ex-10 starts with "ex-1" but is another run: left alone.
    assert kept.plan("ex-10") == _plan(1)
    assert kept.input_digest("ex-10:t1") == "d" * 64
    assert kept.results[("ex-10:t1", "inner")] == {"secret": 1}


def test_task_digests_are_bounded_too() -> None:
    kept = KeptInputs()
    for n in range(MAX_LIVE_PLANS * 10 + 1):
        kept.keep_input(f"ex:t{n}", str(n))
    assert kept.input_digest("ex:t0") is None
    assert kept.input_digest(f"ex:t{MAX_LIVE_PLANS * 10}") == str(MAX_LIVE_PLANS * 10)


# -- the registry of live runs ---------------------------------------------------------------


def test_a_run_that_ended_leaves_a_newer_run_of_its_id_alone() -> None:
    runs = LiveRuns()
    old, new = ExecutionHandle("ex-1"), ExecutionHandle("ex-1")
    runs.add("ex-1", LiveRun(None, new))  # type: ignore[arg-type]
    runs.kept.keep_plan("ex-1", _plan(1))
    runs.settling("ex-1", old)
    assert not runs["ex-1"].settling
    runs.ended("ex-1", old, terminal=False)
    assert list(runs) == ["ex-1"]
    runs.settling("ex-1", new)
    assert runs["ex-1"].settling
    runs.ended("ex-1", new, terminal=False)  # paused, say: its real plan is still kept
    assert len(runs) == 0
    assert runs.kept.plan("ex-1") == _plan(1)
    runs.ended("ex-1", new, terminal=True)
    assert runs.kept.plan("ex-1") is None


@pytest.mark.anyio
async def test_a_live_runs_board_is_asked_through_its_mailbox(tmp_path: Path) -> None:
    host = ScriptedHost([[{"type": "busy"}, ScriptedHost.until_stopped()]])
    agents = {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        execution_id = handle.execution_id
        ref = rt._live[execution_id].ref
        with anyio.fail_after(30):
            while True:
                state = await ref.ask(BoardView())
                assert isinstance(state, BoardState)
                if state.workers and state.workers[0].status == "running":
                    break
                await anyio.sleep(0.01)
            # No process of that worker is held here: nothing to send a repair line to.
            assert await ref.ask(RepairWorker("w-unknown", "fix", 1.0)) is None
            await rt.cancel(execution_id)
        assert execution_id not in rt._live


class _Deaf(ScriptedHost):
    """A host whose worker never reads its stdin: a send waits for ever."""

    def __init__(self, scripts: Any) -> None:
        super().__init__(scripts)
        self.sending = anyio.Event()

    async def send(
        self, process: ms.storage._seam.ProcessIdentity, line: Mapping[str, Any]
    ) -> None:
        self.sending.set()
        await anyio.sleep_forever()


@pytest.mark.anyio
async def test_a_repair_line_being_sent_does_not_hold_its_run_and_ends_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line is sent by a task of the run: the run still takes messages (a cancel) while
    it waits, and the repair is refused (not counted) once the run stops."""
    monkeypatch.setattr(_worker_api, "REPAIR_SEND_TIMEOUT", 3600.0)
    host = _Deaf([[{"type": "busy"}, ScriptedHost.until_stopped()]])
    agents = {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}
    async with runtime(tmp_path, agents=agents, **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        execution_id = handle.execution_id
        with anyio.fail_after(60):
            while True:
                seen = await rt.workers(execution_id)
                if seen.workers and seen.workers[0].status == "running":
                    break
                await anyio.sleep(0.01)
            answers: list[Any] = []

            async def repair() -> None:
                try:
                    answers.append(await rt.repair_worker(execution_id, seen.workers[0].id, "x"))
                except Exception as exc:
                    answers.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(repair)
                await host.sending.wait()
                assert (await rt.cancel(execution_id)).status == "cancelled"
        assert len(answers) == 1
        assert isinstance(answers[0], WorkerNotLive)
        (after,) = (await rt.workers(execution_id)).workers
        assert after.repairs == 0
