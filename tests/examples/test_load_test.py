"""examples/load_test.py: virtual users against a local server, stopped by one Timeout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples import load_test

pytestmark = pytest.mark.anyio


async def test_every_virtual_user_reports_the_timeout_that_stopped_it() -> None:
    stats = await load_test.run(users=300, seconds=0.3, connections=20)
    assert stats.errors == 0
    assert stats.latencies  # how many depends on the machine; that they flowed does not
    assert stats.stopped == {"parent-cancel <- timeout: the 0.3 s test window ended": 300}
    text = load_test.report(stats, 0.3, 300)
    assert "requests/s" in text
    assert "latency p50" in text
    assert text.endswith("300 users stopped: parent-cancel <- timeout: the 0.3 s test window ended")


@pytest.mark.slow
# Heavy on purpose: with 10,000 live actors a full garbage collection pass alone takes a good
# part of the default limit; the guard still fails a step that blocks for longer.
@pytest.mark.loop_guard(2.0)
async def test_ten_thousand_virtual_users() -> None:
    stats = await load_test.run(users=10_000, seconds=1.0, connections=200)
    assert sum(stats.stopped.values()) == 10_000
    assert stats.errors == 0
