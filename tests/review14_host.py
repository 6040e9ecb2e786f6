"""A "host" process for the review14 tests: a runtime of its own on the store named, with the
tools and agents of ``tests.executions._shared`` (so declarations hash alike everywhere).

``python -c "from tests import review14_host as h; h.run()" STORE ID PLAN OPTIONS SKEW``:
``SKEW`` seconds are added to this host's wall clock (``time.time``) before mainspring is
imported — a host whose clock is off, as NTP-less machines are.
"""

from __future__ import annotations

import sys
import time


def run() -> None:
    store, execution_id, plan, options, skew = sys.argv[1:6]
    if float(skew):
        real = time.time
        offset = float(skew)
        time.time = lambda: real() + offset  # type: ignore[assignment]
    import anyio

    from tests.executions import _shared

    anyio.run(_shared.main, store, execution_id, options, plan)


import os  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_RUN = "from tests import review14_host as h; h.run()"


class Host:
    """A host process running ``_shared.main``; its stdout read line by line."""

    def __init__(
        self,
        store: str,
        execution_id: str,
        *,
        plan: str = "cross",
        options: str = "slow-heartbeat",
        skew: float = 0.0,
        block: bool = True,
    ) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if block:
            env["MAINSPRING_TEST_BLOCK"] = "1"
        else:
            env.pop("MAINSPRING_TEST_BLOCK", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUN, store, execution_id, plan, options, str(skew)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            text=True,
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    async def next_line(self, timeout: float = 60) -> str:
        import anyio
        import anyio.to_thread

        with anyio.fail_after(timeout):
            return await anyio.to_thread.run_sync(self.line)

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
