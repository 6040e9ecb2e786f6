"""The ``mainspring`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from ._demo import REASONS, run_demo

EXIT_OK = 0
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mainspring",
        description="An embedded actor runtime for durable agent executions.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="watch a small actor tree get cancelled, each actor saying why"
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
    if args.command != "demo":
        parser.print_help()
        return EXIT_USAGE
    if not 1 <= args.steps <= 1000:
        parser.error("--steps must be between 1 and 1000")
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            parser.error("the trio backend needs the 'trio' extra: pip install 'mainspring[trio]'")

    async def demo() -> None:
        await run_demo(sys.stdout, reason_name=args.reason, steps=args.steps)

    anyio.run(demo, backend=args.backend)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
