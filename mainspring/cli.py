"""The ``mainspring`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from ._demo import REASONS, run_demo
from ._durable_demo import run_demo as run_durable_demo

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mainspring",
        description="An embedded actor runtime for durable agent executions.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    durable = commands.add_parser(
        "demo", help="a durable multi-agent run: killed with SIGKILL midway, resumed, finished"
    )
    durable.add_argument(
        "--backend", choices=["asyncio", "trio"], default="asyncio", help="event loop to run on"
    )
    durable.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="where to keep the store (default: a new temp dir)",
    )
    demo = commands.add_parser(
        "demo-reasons", help="watch a small actor tree get cancelled, each actor saying why"
    )
    demo.add_argument(
        "--backend", choices=["asyncio", "trio"], default="asyncio", help="event loop to run on"
    )
    demo.add_argument(
        "--reason", choices=sorted(REASONS), default="cancel", help="how the run is stopped"
    )
    demo.add_argument(
        "--steps", type=int, default=6, help="tool steps to finish before stopping (1-1000)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mainspring`` console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command not in ("demo", "demo-reasons"):
        parser.print_help()
        return EXIT_USAGE
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            parser.error("the trio backend needs the 'trio' extra: pip install 'mainspring[trio]'")
    if args.command == "demo":
        return run_durable_demo(sys.stdout, backend=args.backend, store_dir=args.store_dir)
    if not 1 <= args.steps <= 1000:
        parser.error("--steps must be between 1 and 1000")

    async def demo() -> None:
        await run_demo(sys.stdout, reason_name=args.reason, steps=args.steps)

    anyio.run(demo, backend=args.backend)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
