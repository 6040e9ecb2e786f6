"""Shared plumbing for the benchmark scripts: run on a backend, measure in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any


def run_on(backend: str, fn: Callable[[], Any]) -> Any:
    """``anyio.run(fn)`` on ``asyncio``, ``asyncio+uvloop`` or ``trio``."""
    import anyio

    if backend == "asyncio+uvloop":
        return anyio.run(fn, backend="asyncio", backend_options={"use_uvloop": True})
    return anyio.run(fn, backend=backend)


def in_subprocess(script: str, measure: str, backend: str, n: int) -> Any:
    """Run ``script --one measure backend n`` and return the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, script, "--one", measure, backend, str(n)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{measure} on {backend} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
