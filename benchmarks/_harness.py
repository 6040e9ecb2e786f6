"""Shared plumbing for the benchmark scripts: run on a backend, measure in a fresh process,
and the stores and plans the execution benchmarks share."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def run_on(backend: str, fn: Callable[[], Any]) -> Any:
    """``anyio.run(fn)`` on ``asyncio``, ``asyncio+uvloop`` or ``trio``."""
    import anyio

    if backend == "asyncio+uvloop":
        return anyio.run(fn, backend="asyncio", backend_options={"use_uvloop": True})
    return anyio.run(fn, backend=backend)


def in_subprocess(
    script: str,
    measure: str,
    backend: str,
    n: int,
    *,
    extra: Sequence[str] = (),
    timeout: float = 900,
    python: str | None = None,
) -> Any:
    """Run ``script --one measure backend n *extra`` and return the JSON it prints last.

    ``python`` is the interpreter (default this one; the peers' own for DBOS and LangGraph).
    ``subprocess.TimeoutExpired`` past ``timeout`` seconds (the child is killed first);
    ``RuntimeError`` with the end of its stderr if it fails.
    """
    done = subprocess.run(
        [python or sys.executable, script, "--one", measure, backend, str(n), *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{measure} on {backend} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def peers_python(given: str | None, module: str = "dbos") -> str | None:
    """The interpreter that runs the peers: ``given``, else ``.venv-peers/bin/python`` at the
    repository's root, else this one; the first that can import ``module``, or None.

    The peers live in a virtual environment of their own so that they never enter the
    project's: ``python -m venv .venv-peers && .venv-peers/bin/pip install dbos langgraph
    langgraph-checkpoint-sqlite 'psycopg[binary]'``.
    """
    root = Path(__file__).resolve().parent.parent
    candidates = (
        [given] if given else [str(root / ".venv-peers" / "bin" / "python"), sys.executable]
    )
    for python in candidates:
        if not Path(python).exists():
            continue
        found = subprocess.run([python, "-c", f"import {module}"], capture_output=True, check=False)
        if found.returncode == 0:
            return python
    return None


def store_path(kind: str, where: Path) -> Path:
    """A ``.sqlite3`` path gives SqliteStore, a directory FileStore."""
    return where / ("store.sqlite3" if kind == "sqlite" else "store")


def trivial(step: Any) -> Any:
    """The benchmarks' tool: returns its input, so a step costs only the runtime's work."""
    return step


def linear_plan(tool: str, steps: int) -> Any:
    """A plan of ``steps`` calls of ``tool``, each depending on the one before."""
    import mainspring as ms

    return ms.Plan(
        id="linear",
        goal="benchmark",
        steps=tuple(
            ms.PlanStep(
                id=f"s{i}",
                tool=tool,
                input={"step": f"s{i}"},
                depends_on=(f"s{i - 1}",) if i > 1 else (),
            )
            for i in range(1, steps + 1)
        ),
    )
