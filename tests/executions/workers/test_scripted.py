"""ScriptedHost: scripted worker processes with the subprocess host's semantics (reports,
idle, send, stop confirmed dead unless the script refuses, start failures, identities),
and the record of calls tests assert on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from mainspring.executions import WorkerAgent, WorkerHost, WorkerSpec
from mainspring.executions._seam import Report, WorkerStartFailed
from mainspring.storage._seam import ProcessIdentity
from mainspring.testing import ScriptedHost

from .._kit import FAST, agent, plan_of, runtime, stored, tasks_of

pytestmark = pytest.mark.anyio

FAILURE = {"type": "failure", "failure_class": "tests", "fingerprint": "a" * 64}


def spec(n: int = 1, **fields: Any) -> WorkerSpec:
    return WorkerSpec(
        command=("agent",),
        worker_id=f"w-{n}",
        generation=n,
        task_id="t-1",
        session=f"s-{n}",
        job="j-1",
        **fields,
    )


async def all_reports(process: Any) -> list[Report]:
    with anyio.fail_after(10):
        return [report async for report in process.reports]


async def test_a_worker_that_reports_a_result_and_exits() -> None:
    host = ScriptedHost([[{"type": "progress", "useful": True}, {"type": "result", "output": 42}]])
    assert isinstance(host, WorkerHost)
    process = await host.start(spec(3))
    assert process.identity.host == "scripted"
    reports = await all_reports(process)
    assert [(r.type, r.generation, r.session, r.job) for r in reports] == [
        ("progress", 3, "s-3", "j-1"),
        ("result", 3, "s-3", "j-1"),
    ]
    assert reports[1].data["output"] == 42
    assert await process.wait() == 0
    assert await host.inspect(process.identity) == await host.stop(process.identity, grace=1)
    assert (await host.inspect(process.identity)).state == "exited"
    assert host.starts == [spec(3)]


async def test_a_worker_that_exits_unexpectedly() -> None:
    host = ScriptedHost([[{"type": "progress"}, ScriptedHost.exit(3)]])
    process = await host.start(spec())
    # Played at once: exited before anyone reads, its reports still readable.
    seen = await host.inspect(process.identity)
    assert (seen.state, seen.exit_code, seen.dead) == ("exited", 3, True)
    assert [r.type for r in await all_reports(process)] == ["progress"]
    assert await process.wait() == 3


async def test_a_worker_that_fails_to_start_and_running_out_of_scripts() -> None:
    host = ScriptedHost([ScriptedHost.fail_start("no such agent")])
    with pytest.raises(WorkerStartFailed, match="no such agent"):
        await host.start(spec())
    with pytest.raises(LookupError, match="no script left"):
        await host.start(spec(2))
    assert [s.worker_id for s in host.starts] == ["w-1", "w-2"]
    assert host.processes == []
    host.add([ScriptedHost.exit(0)])
    assert await (await host.start(spec(3))).wait() == 0


async def test_the_same_failure_twice_then_running_until_stopped() -> None:
    host = ScriptedHost([[FAILURE, FAILURE, ScriptedHost.until_stopped()]])
    process = await host.start(spec())
    reports = process.reports
    with anyio.fail_after(10):
        first, second = await reports.receive(), await reports.receive()
    assert first == second
    assert first.type == "failure"
    assert (await host.inspect(process.identity)).state == "running"
    seen = await host.stop(process.identity, grace=0.5)
    assert (seen.state, seen.exit_code) == ("exited", -15)
    assert host.stops == [(process.identity, 0.5)]
    assert host.process(process.identity).stopped
    with anyio.fail_after(10):
        assert [r async for r in reports] == []
        assert await process.wait() == -15


async def test_a_worker_that_ignores_stop_is_not_confirmed_dead_until_released() -> None:
    release = anyio.Event()
    host = ScriptedHost(
        [
            [ScriptedHost.ignore_stop(until=release), ScriptedHost.until_stopped()],
            [ScriptedHost.ignore_stop(), ScriptedHost.until_stopped()],
        ]
    )
    process = await host.start(spec())
    for _ in range(2):
        seen = await host.stop(process.identity, grace=0)
        assert (seen.state, seen.dead) == ("running", False)
    release.set()
    assert (await host.stop(process.identity, grace=0)).dead
    forever = await host.start(spec(2))
    assert not (await host.stop(forever.identity, grace=0)).dead
    assert (await host.inspect(forever.identity)).state == "running"


async def test_usage_idle_send_and_waiting_for_an_event() -> None:
    go = anyio.Event()
    host = ScriptedHost(
        [
            [
                {"type": "usage", "input_tokens": 10, "output_tokens": 5, "cost": "0.02"},
                {"type": "idle"},
                ScriptedHost.receive(),
                {"type": "busy"},
                ScriptedHost.wait(go),
                "not json",
                {"type": "result", "output": "done"},
            ]
        ]
    )
    process = await host.start(spec())
    assert (await host.inspect(process.identity)).state == "idle"
    reports = process.reports
    got: list[Report] = []

    async def read() -> None:
        got.extend([r async for r in reports])

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await host.send(process.identity, {"type": "repair", "text": "try again"})
            assert (await host.inspect(process.identity)).state == "running"
            go.set()
    assert [r.type for r in got] == ["usage", "idle", "busy", "protocol", "result"]
    assert got[0].data["input_tokens"] == 10
    assert got[3].data == {"reason": "not-json"}
    assert host.process(process.identity).received == [{"type": "repair", "text": "try again"}]
    assert host.sends == [(process.identity, {"type": "repair", "text": "try again"})]
    assert await process.wait() == 0
    with pytest.raises(ProcessLookupError):
        await host.send(process.identity, {"type": "repair", "text": "late"})
    assert len(host.sends) == 1


async def test_a_reader_blocked_on_a_running_worker_ends_when_it_is_stopped() -> None:
    host = ScriptedHost([[ScriptedHost.until_stopped()]])
    process = await host.start(spec())
    codes: list[int] = []

    async def wait() -> None:
        codes.append(await process.wait())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert (await host.stop(process.identity, grace=1)).dead
    assert codes == [-15]


async def test_identities_other_hosts_and_resume() -> None:
    host = ScriptedHost([[ScriptedHost.until_stopped()], [ScriptedHost.until_stopped()]])
    process = await host.start(spec())
    elsewhere = attrs.evolve(process.identity, host="h/boot")
    reused = attrs.evolve(process.identity, started=process.identity.started + 1)
    assert (await host.inspect(elsewhere)).state == "unknown"
    assert (await host.stop(elsewhere, grace=0)).state == "unknown"
    assert (await host.inspect(reused)).state == "exited"
    assert (await host.stop(reused, grace=0)).state == "exited"
    never = ProcessIdentity(host="scripted", pid=1, group=1, started=1)
    assert (await host.inspect(never)).state == "exited"
    with pytest.raises(ProcessLookupError):
        await host.send(elsewhere, {"type": "repair"})
    assert (await host.inspect(process.identity)).state == "running"
    with pytest.raises(ValueError, match="resumes"):
        await host.resume(spec(2))
    resumed = await host.resume(spec(2, resumes="s-1"))
    assert resumed.identity != process.identity
    assert host.starts[-1].resumes == "s-1"
    await resumed.reports.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await resumed.reports.receive()


# ----------------------------------------------------------------------
# Worker-backed steps against the hosts branch's ScriptedHost (#17): the rules as the
# runtime meets them through a second, independent fake of the host interface.

RESULT = {"type": "result", "output": {"ok": True}}
FAILURE_workers_scripted = {"type": "failure", "class": "lint", "fingerprint": "e501"}


def coder(host: ScriptedHost) -> dict[str, WorkerAgent]:
    return {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}


async def test_scripted_result_then_crash_takeover_then_result(tmp_path: Path) -> None:
    host = ScriptedHost([[{"type": "busy"}, ScriptedHost.exit(3)], [RESULT]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            result = await handle.wait()
        seen = await rt.workers(handle.execution_id)
    assert result.outputs["a"] == {"ok": True}
    assert [spec.generation for spec in host.starts] == [1, 2]
    assert seen.workers[0].generation == 2


async def test_scripted_failure_twice_is_no_progress(tmp_path: Path) -> None:
    host = ScriptedHost(
        [[FAILURE_workers_scripted, FAILURE_workers_scripted, ScriptedHost.until_stopped()]]
    )
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "failed"
        (task,) = tasks_of(stored(rt, handle.execution_id))
    assert task.failure is not None
    assert task.failure.code == "no-progress:lint"
    assert len(host.stops) >= 1
    assert not host.processes[0].alive


async def test_scripted_failed_start_then_result(tmp_path: Path) -> None:
    host = ScriptedHost([ScriptedHost.fail_start(), [RESULT]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            assert (await handle.wait()).status == "completed"
        seen = await rt.workers(handle.execution_id)
    assert sorted(w.status for w in seen.workers) == ["blocked", "delivered"]


async def test_scripted_stubborn_worker_is_not_recorded_stopped(tmp_path: Path) -> None:
    released = anyio.Event()
    host = ScriptedHost([[ScriptedHost.ignore_stop(released), ScriptedHost.until_stopped()]])
    async with runtime(tmp_path, agents=coder(host), **FAST) as rt:
        handle = await rt.start("g", plan_of(agent("a", "coder")))
        with anyio.fail_after(30):
            while True:  # polls the store: a worker's start is not an event
                seen = await rt.workers(handle.execution_id)
                if seen.workers and seen.workers[0].status == "running":
                    break
                await anyio.sleep(0.01)
            await rt.cancel(handle.execution_id)
        seen = await rt.workers(handle.execution_id)
        released.set()
    assert seen.workers[0].status != "stopped"
    assert "stop-unconfirmed" in [e.event for e in seen.trail]
