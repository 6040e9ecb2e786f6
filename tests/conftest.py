"""Shared fixtures: every async test runs once on asyncio and once on trio, and fails if it
blocked the event loop (STYLE.md, habit 10)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

#: A single event-loop step longer than this means blocking work ran on the loop.
BLOCKING_LIMIT = 0.25


class _StepTimer(trio.abc.Instrument):
    """Records trio task steps that ran longer than BLOCKING_LIMIT."""

    def __init__(self) -> None:
        self.started = 0.0
        self.slow: list[str] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        took = time.perf_counter() - self.started
        if took > BLOCKING_LIMIT:
            self.slow.append(f"{task.name} ran {took:.3f} s without yielding")


_trio_steps = _StepTimer()


def _watched_asyncio_loop() -> asyncio.AbstractEventLoop:
    # Debug mode makes asyncio log every callback slower than slow_callback_duration.
    loop = asyncio.new_event_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = BLOCKING_LIMIT
    return loop


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"loop_factory": _watched_asyncio_loop}), id="asyncio"),
        pytest.param(("trio", {"instruments": [_trio_steps]}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend: tuple[str, dict[str, Any]] = request.param
    return backend


@pytest.fixture(autouse=True)
def _fail_if_the_event_loop_was_blocked(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> Iterator[None]:
    if "anyio_backend" not in request.fixturenames:
        yield
        return
    caplog.set_level(logging.WARNING, logger="asyncio")
    _trio_steps.slow.clear()
    yield
    slow = list(_trio_steps.slow)
    slow += [
        record.getMessage()
        for record in caplog.get_records("call")
        if record.name == "asyncio" and "took" in record.getMessage()
    ]
    if slow:
        pytest.fail("the event loop was blocked: " + "; ".join(slow[:3]))
