"""Review #17: an identity recorded without a start time (the process was gone before
``/proc`` could be read, ``started=0``) is never taken for whatever process has that pid
now: stopping it must not signal an unrelated session leader that reused the pid."""

from __future__ import annotations

import subprocess

import pytest

from mainspring.executions import SubprocessHost
from mainspring.executions._programs.proctree import HAVE_PROC
from mainspring.storage._seam import ProcessIdentity

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not HAVE_PROC, reason="start times come from /proc"),
]


async def test_an_identity_without_a_start_time_is_not_a_live_process() -> None:
    host = SubprocessHost(grace=0.2)
    # An unrelated session leader: what a reused pid would belong to.
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # noqa: ASYNC220
    try:
        identity = ProcessIdentity(host=host.host, pid=other.pid, group=other.pid, started=0)
        assert (await host.inspect(identity)).state == "exited"
        assert (await host.stop(identity)).state == "exited"
        assert other.poll() is None  # never signalled
    finally:
        other.kill()
        other.wait()
