"""``Runtime.events()`` is typed: what it yields, by its arguments, as a type checker sees it."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

import mainspring as ms

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """
from collections.abc import AsyncGenerator
from typing import assert_type

import mainspring as ms
from mainspring.executions import RunEvent, StepFinished
from mainspring.storage import HistoryEvent

Live = AsyncGenerator[RunEvent | ms.EventsDropped, None]
History = AsyncGenerator[HistoryEvent, None]


async def check(rt: ms.Runtime, seq: int | None) -> None:
    assert_type(rt.events(), Live)
    assert_type(rt.events("ex-1", buffer=10), Live)
    assert_type(rt.events(after=0), History)
    assert_type(rt.events("ex-1", after=5, poll=0.1), History)
    assert_type(rt.events(after=seq), Live | History)
    async for event in rt.events():
        if isinstance(event, StepFinished):
            assert_type(event.step_id, str)
    async for entry in rt.events(after=0):
        assert_type(entry.seq, int)
"""


def test_events_has_one_overload_per_kind_of_stream_and_no_any() -> None:
    overloads = typing.get_overloads(ms.Runtime.events)
    returns = [o.__annotations__["return"] for o in overloads]
    assert returns == [
        "AsyncGenerator[RunEvent | EventsDropped, None]",
        "AsyncGenerator[HistoryEvent, None]",
        "AsyncGenerator[RunEvent | EventsDropped, None] | AsyncGenerator[HistoryEvent, None]",
    ]
    assert "Any" not in ms.Runtime.events.__annotations__["return"]


@pytest.mark.timeout(600)  # a cold type-check cache reads the whole package first
def test_a_type_checker_sees_what_events_yields(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    snippet = tmp_path / "uses_events.py"
    snippet.write_text(SNIPPET)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(snippet)],
        cwd=ROOT,  # the project's cache: warm after the lint step
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
