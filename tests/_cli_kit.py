"""Shared by the command's tests: run it in-process, and a tool to build stores with."""

from __future__ import annotations

import io

from mainspring.cli import main


def run_cli(*argv: str) -> tuple[int, str]:
    """``mainspring ARGV``: its exit code and what it printed on stdout."""
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    return code, out.getvalue()


async def inc(x: int = 0) -> int:
    return x + 1
