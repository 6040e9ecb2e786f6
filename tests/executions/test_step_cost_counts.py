"""What one tool step costs the runtime, counted rather than timed, so the step path cannot
silently grow back: actor messages (mailbox and control lane), asks (a round trip: a wait on
a receipt), thread hops, ``attrs.evolve`` calls, encodes of the step's output, redaction
walks (each ``redact`` or ``redact_flagged`` of a value, whatever it holds), events
published with nobody subscribed, and durable commits. A linear plan of 2N steps minus
one of N steps leaves what N steps in the middle of a run cost (the start and the end of a
run are the same in both). The bounds are what the step path does now (issue #29: the lean
step path): lower them as it gets leaner, never raise them without saying why.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.to_thread
import attrs
import orjson
import pytest

from mainspring.actors._events import EventBus
from mainspring.actors._mailbox import Mailbox
from mainspring.actors._messaging import Messaging
from mainspring.executions._steps import outputs as _outputs
from mainspring.storage import _redact, _values
from mainspring.storage._backends.contract import store_blocks

from ._kit import MemoryStore, linear, recorded_events, runtime

#: Per tool step, at most (one step at a time; see the module docstring). Where they go:
#: - messages: the step's end with its report (``TaskEnded``, the control lane) and the
#:   commit told to the persistence actor with its caller's ticket; that writer flushes at
#:   once when nothing else waits in its mailbox (it queues a flush message only behind
#:   commits that do wait, to share the flush with them: group commit);
#: - asks: none: the commit's caller waits on its ticket alone, woken once when durable;
#: - thread hops: none here: this test's store never blocks and says so (``blocking``), so
#:   the writer calls it on the loop; a store that blocks (every real one) adds one, its
#:   flush (``BLOCKING_BOUNDS``, on SqliteStore);
#: - evolves: the step path's three (the plan's step status, the plan, the snapshot), and
#:   one that grows with the plan's length rather than with the steps run (each step's
#:   redacted copy for disk); a step given pending is not rebuilt at ``start``, an
#:   observation that holds its live output already is not rebuilt for the result, and the
#:   store's lease decision puts the disk's lease on the runner's record without one (a copy
#:   that checks no field again, ``storage._backends.compare_and_set``);
#: - encodes: the step's output, once (E5, E10, X2);
#: - redactions: two that grow with the plan's length (each step's input and description
#:   redacted for disk; the input's walk also says whether it was masked, E5, E10); a number
#:   output, as here, is stored as itself with none (it holds no text);
#: - events: none: nobody subscribed, so the step's events are not even built (V1: a
#:   subscriber gets every one, ``test_S_step_events_reach_a_subscriber``);
#: - commits: one durable commit per step (E1).
#: Before the writer flushed at once when nothing waited: 3 messages (a flush queued behind
#: every commit). Before the lean step path (issue #29): 5 messages, 8 evolves, the output
#: encoded twice; before the told commit: 1 ask and, for this store too, 1 thread hop;
#: before a number output was stored as itself: 4 redactions; before events were built only
#: when heard and ``start`` walked each input once: 7 evolves, 3 redactions, 2 events
#: published unheard.
BOUNDS = {
    "messages": 2,
    "asks": 0,
    "thread hops": 0,
    "evolves": 4,
    "encodes": 1,
    "redactions": 2,
    "events": 0,
    "commits": 1,
}

N = 20

pytestmark = pytest.mark.anyio


class _CountingStore(MemoryStore):
    def __init__(self, counts: collections.Counter[str]) -> None:
        super().__init__()
        self._counts = counts

    def commit_runs(self, commits: Any) -> Any:
        self._counts["commits"] += len(commits)
        return super().commit_runs(commits)


@contextmanager
def _counting(monkeypatch: pytest.MonkeyPatch, counts: collections.Counter[str]) -> Iterator[None]:
    def counted(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    with monkeypatch.context() as patch:
        patch.setattr(attrs, "evolve", counted("evolves", attrs.evolve))
        patch.setattr(anyio.to_thread, "run_sync", counted("thread hops", anyio.to_thread.run_sync))
        patch.setattr(Mailbox, "put_nowait", counted("messages", Mailbox.put_nowait))
        patch.setattr(Messaging, "deliver_control", counted("messages", Messaging.deliver_control))
        patch.setattr(Messaging, "ask", counted("asks", Messaging.ask))
        patch.setattr(_outputs, "encode_value", counted("encodes", _outputs.encode_value))
        # One walk's state per redact_flagged call, however the caller imported it.
        patch.setattr(_redact, "_Changed", counted("redactions", _redact._Changed))
        # What the run publishes (and so built) while nobody is subscribed.
        patch.setattr(EventBus, "publish", counted("events", EventBus.publish))
        yield


async def _run(steps: int, monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    store = _CountingStore(counts)
    assert not store_blocks(store)  # the thread hops' bound is for a store that never blocks
    # No heartbeat or renewal falls inside the run, nor the runtime's recovery sweep (its
    # store reads, in threads, race the counting's start on a loaded machine): what is
    # counted is the steps' own cost.
    async with runtime(store, lease_ttl=600.0, heartbeat_interval=300.0, recover=False) as rt:
        with _counting(monkeypatch, counts):
            handle = await rt.start("count", linear(steps))
            result = await handle.wait()
    assert result.status == "completed"
    return counts


async def test_E2_one_tool_step_costs_what_the_lean_step_path_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = await _run(N, monkeypatch)
    long = await _run(2 * N, monkeypatch)
    per_step = {name: (long[name] - short[name]) / N for name in BOUNDS}
    over = {name: cost for name, cost in per_step.items() if cost > BOUNDS[name]}
    assert not over, f"one tool step costs more than the lean step path: {over}"


async def test_S_step_events_reach_a_subscriber() -> None:
    """V1: the events a run builds only when someone listens reach a subscriber, every one
    in order: its start, each step's start and end (with the counts done so far), its end."""
    from mainspring import executions as ex

    async with runtime(MemoryStore(), recover=False) as rt, recorded_events(rt) as events:
        handle = await rt.start("count", linear(3), execution_id="ex-heard")
        result = await handle.wait()
    assert result.status == "completed"
    seen = [
        (type(e).__name__, getattr(e, "step_id", None), getattr(e, "done", None))
        for e in events
        if isinstance(e, ex._seam.ExecutionEvent) and e.execution_id == "ex-heard"
    ]
    steps = [
        item
        for i in range(3)
        for item in (("StepStarted", f"s{i}", None), ("StepFinished", f"s{i}", i + 1))
    ]
    assert seen == [("ExecutionStarted", None, None), *steps, ("ExecutionCompleted", None, None)]
    finished = [e for e in events if isinstance(e, ex.StepFinished)]
    assert [(e.state, e.total, e.calls_used) for e in finished] == [("succeeded", 3, 0)] * 3
    started = [e for e in events if isinstance(e, ex.StepStarted)]
    assert [e.kind for e in started] == ["tool"] * 3


#: Per tool step on SqliteStore, at most: the step's output encoded once, in the typed
#: encoding (E10) and to JSON, where the step ended; the store writes those bytes as they
#: are. Before issue #29's second part the store encoded it again: the typed encoding once
#: more (the observation's converter hook) and the JSON once more (its row).
OUTPUT_ENCODES = {"typed": 1, "json": 1}


def _is_output(value: Any) -> bool:
    return type(value) is dict and "out" in value


def _holds_output(value: Any) -> bool:
    # A row that holds the output encoded again: not the bytes carried from the step's end.
    return _is_output(value) or (type(value) is dict and _is_output(value.get("output")))


async def _run_on_sqlite(
    steps: int, tmp: Any, monkeypatch: pytest.MonkeyPatch
) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()

    async def out(x: int = 0) -> dict[str, Any]:
        return {"out": [x]}  # a fresh object, told apart from every other value encoded

    is_plain, dumps = _values._is_plain, orjson.dumps

    def typed(value: Any) -> bool:
        if _is_output(value):
            counts["typed"] += 1
        return is_plain(value)

    def json(value: Any, *args: Any, **kwargs: Any) -> bytes:
        if _holds_output(value):
            counts["json"] += 1
        return dumps(value, *args, **kwargs)

    def hop(name: str, fn: Any) -> Any:
        async def counted(self_or_fn: Any, *args: Any, **kwargs: Any) -> Any:
            counts["thread hops"] += 1
            return await fn(self_or_fn, *args, **kwargs)

        return counted

    async with runtime(
        tmp / f"store-{steps}.sqlite3",
        tools={"out": out},
        lease_ttl=600.0,
        heartbeat_interval=300.0,
        recover=False,
    ) as rt:
        with monkeypatch.context() as patch:
            patch.setattr(_values, "_is_plain", typed)  # every encode_value begins there
            patch.setattr(orjson, "dumps", json)
            patch.setattr(anyio.to_thread, "run_sync", hop("hops", anyio.to_thread.run_sync))
            handle = await rt.start("count", linear(steps, tool="out"))
            result = await handle.wait()
    assert result.status == "completed"
    return counts


async def test_E10_a_steps_output_is_encoded_once_and_the_sqlite_store_writes_those_bytes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    short = await _run_on_sqlite(N, tmp_path, monkeypatch)
    long = await _run_on_sqlite(2 * N, tmp_path, monkeypatch)
    per_step = {name: (long[name] - short[name]) / N for name in OUTPUT_ENCODES}
    assert per_step == OUTPUT_ENCODES, f"a step's output is encoded more than once: {per_step}"


#: Per tool step on SqliteStore (a store that blocks), at most: one thread hop, the writer's
#: flush (E1: durable before the next step starts), in a worker thread. A run adds
#: four of its own, whatever its length (its create, the first renewal, its first and its
#: last commit): 24 hops for 20 steps, the "1.2 a step" of a 20-step run.
BLOCKING_BOUNDS = {"thread hops": 1}


async def test_E1_a_step_on_a_blocking_store_costs_one_thread_hop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    short = await _run_on_sqlite(N, tmp_path, monkeypatch)
    long = await _run_on_sqlite(2 * N, tmp_path, monkeypatch)
    per_step = {name: (long[name] - short[name]) / N for name in BLOCKING_BOUNDS}
    over = {name: cost for name, cost in per_step.items() if cost > BLOCKING_BOUNDS[name]}
    assert not over, f"one step on a blocking store costs more: {over}"
    assert per_step["thread hops"] > 0  # counted at all: the store is called off the loop


async def test_fifty_runs_in_flight_share_flushes_on_a_blocking_store(tmp_path: Any) -> None:
    """The writer flushes at once only when nothing else waits: with 50 runs in flight on
    SqliteStore, commits that arrive while a flush is on disk queue up and share the next
    one (group commit), several commits a flush."""
    async with runtime(
        tmp_path / "store.sqlite3", lease_ttl=600.0, heartbeat_interval=300.0, recover=False
    ) as rt:
        committer = rt._committer
        before = await committer.stats()
        results: list[Any] = []

        async def one(i: int) -> None:
            handle = await rt.start("count", linear(5), execution_id=f"ex-{i}")
            results.append(await handle.wait())

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i)
        after = await committer.stats()
    assert [r.status for r in results] == ["completed"] * 50
    commits, flushes = after.commits - before.commits, after.flushes - before.flushes
    assert commits >= 50 * 5
    assert commits >= 3 * flushes, f"{commits} commits in {flushes} flushes: not batched"
