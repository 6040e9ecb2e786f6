"""A "host" process for the review14 tests: a runtime of its own on the store named, with the
tools and agents of ``tests.executions._shared`` (so declarations hash alike everywhere).

``python -c "from tests.executions import _answer_host as h; h.run()" STORE ID PLAN OPTIONS
SKEW``:
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
_RUN = "from tests.executions import _answer_host as h; h.run()"


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
        # This checkout's mainspring (not whichever is installed), and the test helpers.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT.parent), str(ROOT)))}
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

    async def next_line(self, within: float = 60) -> str:
        import anyio
        import anyio.to_thread

        with anyio.fail_after(within):
            return await anyio.to_thread.run_sync(self.line)

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def answer() -> None:
    """Host B: ``STORE ID ANSWER SKEW``: answer the run (live elsewhere) and print what the
    call returned: ``handle <status>`` or ``busy <reason>``."""
    store, execution_id, text, skew = sys.argv[1:5]
    if float(skew):
        real = time.time
        offset = float(skew)
        time.time = lambda: real() + offset  # type: ignore[assignment]
    import anyio

    import mainspring as ms
    from tests.executions import _shared

    async def main() -> None:
        async with ms.open_runtime(
            store=store, tools=_shared.TOOLS, agents=_shared.AGENTS, **_shared.SLOW_HEARTBEAT
        ) as rt:
            try:
                handle = await rt.resume(execution_id, answer=text)
            except ms.ExecutionBusy as exc:
                print("busy", exc, flush=True)
                return
            print("handle", (await handle.wait()).status, flush=True)

    anyio.run(main)


def answerer(store: str, execution_id: str, text: str, *, skew: float) -> subprocess.Popen[str]:
    """Host B as a process running :func:`answer`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tests.executions import _answer_host as h; h.answer()",
            store,
            execution_id,
            text,
            str(skew),
        ],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT.parent), str(ROOT)))},
        text=True,
    )
