"""``mainspring events --follow --after SEQ``: a separate process tails the durable history
(V2) while a run commits, and prints exactly the entries after SEQ, each once."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import mainspring as ms

from ._cli_kit import inc
from ._postgres import postgres_url  # noqa: F401 - a fixture

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


def _plan(prefix: str, n: int, gate: bool = False) -> ms.Plan:
    """A chain of ``n`` inc steps, then (with ``gate``) one that waits and four more."""
    ids = [f"{prefix}{i}" for i in range(n)]
    if gate:
        ids += ["gate", *(f"after{i}" for i in range(4))]
    steps = tuple(
        ms.PlanStep(
            id=step_id,
            tool="gate" if step_id == "gate" else "inc",
            depends_on=(ids[i - 1],) if i else (),
        )
        for i, step_id in enumerate(ids)
    )
    return ms.Plan(id="p", goal="g", steps=steps)


def _entry(event: ms.storage.HistoryEvent) -> dict[str, Any]:
    return {k: v for k, v in attrs.asdict(event).items() if v is not None}


class _Follower:
    """``python -m mainspring events --follow --json --after SEQ`` in its own process."""

    def __init__(self, store: Path | str, after: int, interval: float = 0.02) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mainspring", "events", "--follow", "--json",
             "--after", str(after), "--interval", str(interval), "--store", str(store)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            text=True,
        )  # fmt: skip
        self.lines: list[dict[str, Any]] = []

    async def until(self, seq: int) -> None:
        """Read what it prints until the entry ``seq`` (the pipe is read off the loop)."""
        assert self.proc.stdout is not None
        with anyio.fail_after(60):
            while not self.lines or self.lines[-1]["seq"] < seq:
                line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
                assert line, "the follower exited"
                self.lines.append(json.loads(line))


@pytest.fixture
def followers() -> Iterator[list[_Follower]]:
    made: list[_Follower] = []
    yield made
    for follower in made:
        follower.proc.kill()
        follower.proc.wait(timeout=30)
        assert follower.proc.stdout is not None
        follower.proc.stdout.close()


@pytest.fixture(params=["sqlite", "files", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where the run writes; resolved before the test's event loop starts."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return tmp_path / ("s.sqlite3" if request.param == "sqlite" else "files")


async def test_events_follow_after_prints_every_later_entry_once(
    store: Path | str, followers: list[_Follower]
) -> None:
    # On PostgreSQL the follower polls only every 30 s: within the 60 s it is given, it can
    # keep up only through the store's notices (LISTEN/NOTIFY).
    interval = 30.0 if isinstance(store, str) else 0.02
    released = anyio.Event()

    async def gate() -> int:
        await released.wait()
        return 0

    async with ms.open_runtime(store=store, tools={"inc": inc, "gate": gate}) as rt:
        await (await rt.start("first", _plan("s", 3), execution_id="ex-1")).wait()
        before = await anyio.to_thread.run_sync(lambda: rt.store.history())
        after = before[len(before) // 2].seq  # mid-run of ex-1: its later entries follow
        follower = _Follower(store, after, interval)
        followers.append(follower)
        handle = await rt.start("second", _plan("t", 2, gate=True), execution_id="ex-2")
        # The follower is tailing: it printed ex-2's first steps, the gate holds the rest.
        async with contextlib.aclosing(rt.events(after=after)) as stream:
            async for event in stream:
                if event.step_id == "t1" and event.status == "succeeded":
                    break
        await follower.until(event.seq)
        released.set()  # more commits, made while it follows
        assert (await handle.wait()).status == "completed"
        full = await anyio.to_thread.run_sync(lambda: rt.store.history(after=after))
        await follower.until(full[-1].seq)
    assert follower.lines == [_entry(e) for e in full]  # each once, none missed
    finished = [e["step_id"] for e in follower.lines if e["kind"] == "step"
                and e.get("status") == "succeeded" and e["execution_id"] == "ex-2"]  # fmt: skip
    assert finished == ["t0", "t1", "gate", "after0", "after1", "after2", "after3"]
