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


@pytest.fixture(params=["asyncio", "trio"])
def plain_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.slow
def test_ten_thousand_virtual_users(plain_backend: str) -> None:
    # Plain event loops: at this size a garbage collection pass alone can exceed the
    # blocking detector's limit under asyncio's debug mode.
    import anyio

    anyio.run(_ten_thousand, backend=plain_backend)


async def _ten_thousand() -> None:
    stats = await load_test.run(users=10_000, seconds=1.0, connections=200)
    assert sum(stats.stopped.values()) == 10_000
    assert stats.errors == 0
