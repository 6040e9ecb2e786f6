"""Worker transitions in the durable history and the live events (#17, V1, V2): a run whose
first worker fails, takes a repair and crashes (a takeover, generation 2) and whose second
worker delivers leaves every worker move in the history, in order, on SQLite, files and
PostgreSQL; the live events carry the same moves as ``WorkerChanged``; no text a worker
wrote (a diagnostic, a repair, a result) reaches either; a follower restarted from any
sequence number misses nothing."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import attrs
import orjson
import pytest

import mainspring as ms
from mainspring.events import WorkerChanged
from mainspring.executions import WorkerAgent
from mainspring.storage import HistoryEvent
from mainspring.testing import ScriptedHost

from ..._postgres import postgres_url  # noqa: F401 - a fixture
from .._kit import FAST, agent, plan_of, recorded_events, runtime

pytestmark = pytest.mark.anyio

DIAGNOSTIC = "planted-diagnostic-5c1e0b7a"
REPAIR = "planted-repair-text-93d4f2e6"
RESULT = "planted-result-value-0a7b61cd"
PLANTED = (DIAGNOSTIC, REPAIR, RESULT)


def _host() -> ScriptedHost:
    failure = {"type": "failure", "class": "lint", "fingerprint": "e501", "diagnostic": DIAGNOSTIC}
    return ScriptedHost(
        [
            [failure, ScriptedHost.receive(), {"type": "busy"}, ScriptedHost.exit(3)],
            [{"type": "result", "output": {"note": RESULT}}],
        ]
    )


async def _follow(rt: ms.Runtime, execution_id: str, after: int, last: int) -> list[HistoryEvent]:
    """The history a follower started with ``after`` yields, up to entry ``last``."""
    seen: list[HistoryEvent] = []
    if after >= last:
        return seen
    with anyio.fail_after(30):
        stream = rt.events(execution_id, after=after, poll=0.05)
        async with contextlib.aclosing(stream):  # type: ignore[type-var]
            async for entry in stream:
                seen.append(entry)
                if entry.seq >= last:
                    break
    return seen


async def _scenario(store: Any) -> None:
    host = _host()
    agents = {"coder": WorkerAgent(["scripted"], host=host, grace=0.1)}
    async with runtime(store, agents=agents, **FAST) as rt:
        async with recorded_events(rt) as live:
            handle = await rt.start("g", plan_of(agent("a", "coder")))
            eid = handle.execution_id
            with anyio.fail_after(60):
                while True:  # polls the store: the failure is on the trail once committed
                    seen = await rt.workers(eid)
                    if "failure" in [entry.event for entry in seen.trail]:
                        break
                    await anyio.sleep(0.01)
                await rt.repair_worker(eid, seen.workers[0].id, REPAIR)
                result = await handle.wait()
        assert result.status == "completed"
        assert result.outputs["a"] == {"note": RESULT}  # the planted result went through
        assert any(REPAIR in line for line in map(str, host.processes[0].received))

        history = rt.store.history(eid, after=0, limit=10_000)
        workers = [entry for entry in history if entry.kind == "worker"]
        moves = [(entry.generation, entry.status) for entry in workers]
        # What was committed: an assignment or takeover rides with its ``starting``, the
        # fence with the delivery (the trail has every step).
        assert moves == [
            (1, "starting"),
            (1, "running"),
            (1, "stopped"),  # its process exited: taken over
            (2, "starting"),
            (2, "running"),
            (2, "handing_off"),
            (2, "delivered"),
        ]
        assert len({entry.worker_id for entry in workers}) == 1
        assert {entry.step_id for entry in workers} == {"a"}
        assert all(entry.task_id for entry in workers)
        trail = [(e.generation, e.event) for e in (await rt.workers(eid)).trail]
        assert (2, "takeover") in trail
        seqs = [entry.seq for entry in history]
        assert seqs == sorted(set(seqs))

        # Live: the same moves, announced once durable.
        changed = [event for event in live if isinstance(event, WorkerChanged)]
        assert [(e.generation, e.status) for e in changed] == moves
        assert all(e.execution_id == eid and e.step_id == "a" for e in changed)

        # V1: nothing a worker wrote, anywhere.
        dumped = [orjson.dumps(attrs.asdict(entry)) for entry in history]
        dumped += [repr(event).encode() for event in live]
        for text in PLANTED:
            assert not any(text.encode() in blob for blob in dumped), text

        # V2: a follower restarted after any entry yields exactly the rest.
        last = history[-1].seq
        full = await _follow(rt, eid, 0, last)
        assert full == list(history)
        for entry in workers:
            assert await _follow(rt, eid, entry.seq, last) == [
                e for e in history if e.seq > entry.seq
            ]


async def test_worker_moves_in_history_and_events_on_sqlite(tmp_path: Path) -> None:
    await _scenario(tmp_path)


async def test_worker_moves_in_history_and_events_on_files(tmp_path: Path) -> None:
    await _scenario(str(tmp_path / "files"))  # a new path without a suffix: a FileStore


async def test_worker_moves_in_history_and_events_on_postgres(
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    await _scenario(postgres_url)
