"""``main``: parse the command line, open the store, run the command, turn every expected
failure into one line on stderr and an exit code.

The stores (and the execution layer, for a control) are imported once a command that needs
them runs: ``--version``, ``--help`` and a usage error load neither.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import select
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import anyio

from ._codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_STORE, EXIT_OK, EXIT_USAGE, CliError
from ._console import make_safe
from ._logs import logger, logging_to_stderr
from ._output import fail
from ._parser import UsageError, make_parser, version, wants_json

if TYPE_CHECKING:
    from ..storage import Store
    from ._output import Out


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Entry point of the ``mainspring`` console script; returns the exit code."""
    if stdout is None:  # the process's own streams: any encoding will do (U1)
        make_safe(sys.stdout)
        make_safe(sys.stderr)
    try:
        return _main(argv, stdout)
    except KeyboardInterrupt:
        # Invariant U2: Ctrl-C is how a user stops a command (``events --follow`` above
        # all): exit 130, no traceback. What the command opened was closed on the way out.
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        return _closed_pipe(exc, stdout)
    except BaseExceptionGroup as group:  # from a task group (resume's progress, memory forget)
        if group.split(KeyboardInterrupt)[0] is not None:  # Ctrl-C
            return EXIT_INTERRUPTED
        pipes, rest = group.split(BrokenPipeError)
        if pipes is not None and rest is None:
            return _closed_pipe(pipes, stdout)
        raise


def _closed_pipe(exc: BaseException, stdout: TextIO | None) -> int:
    """A pipe broke. If it is stdout's, the reader went away (``| head``), whatever was
    printing: stop quietly (U5). Any other pipe (a worker's, a program's) is a failure and
    says so: a closed pipe is never a silent success unless it is the one we print to."""
    stream = stdout if stdout is not None else sys.stdout
    if not _reader_present(stream):
        _quiet_closed_stdout(stream)
        return EXIT_OK
    return fail(f"a pipe closed under the command: {exc}", EXIT_FAILED)


def _reader_present(stream: TextIO | None) -> bool:
    """Whether ``stream`` is known to still have a reader: a pipe or socket whose other end
    is open. A stream without a descriptor (an embedding program's) cannot tell: the broken
    pipe is taken to be its own."""
    try:
        fd = stream.fileno() if stream is not None else -1
    except (OSError, ValueError, io.UnsupportedOperation):
        return False
    if fd < 0:
        return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):  # no poll (Windows): cannot tell
        return False
    return not any(mask & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, mask in events)


def _main(argv: Sequence[str] | None, stdout: TextIO | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(argv)
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _usage(exc, as_json)
    as_json = bool(getattr(args, "json", as_json))
    with logging_to_stderr(getattr(args, "log_level", None), as_json=as_json):
        began = time.perf_counter()
        # A process started with its descriptor 1 closed (``>&-``) has no sys.stdout.
        stream = stdout if stdout is not None else sys.stdout
        code = _command(parser, args, stream if stream is not None else _Nowhere(), as_json)
        if logger.isEnabledFor(logging.DEBUG):
            took = time.perf_counter() - began
            logger.debug(
                "command %s ended with exit code %d in %.3f s",
                args.command,
                code,
                took,
                extra={"command": args.command, "exit_code": code, "duration": took},
            )
        return code


def _usage(exc: UsageError, as_json: bool) -> int:
    if as_json:
        return fail(str(exc), EXIT_USAGE, as_json=True)
    # As argparse prints it, but redacted: a secret typed as an argument stays off screen.
    sys.stderr.write(exc.usage)
    return fail(f"error: {exc}", EXIT_USAGE)


def _command(
    parser: argparse.ArgumentParser, args: argparse.Namespace, stream: TextIO, as_json: bool
) -> int:
    try:
        if args.version:
            if as_json:
                print(json.dumps({"version": version()}), file=stream, flush=True)
            else:
                print(f"mainspring {version()}", file=stream, flush=True)
            return EXIT_OK
        if args.command in ("demo", "demo-reasons"):
            return _demo(parser, args)
    except UsageError as exc:
        return _usage(exc, as_json)
    if args.command is None:
        if as_json:
            return fail("a command is required (see mainspring --help)", EXIT_USAGE, as_json=True)
        parser.print_help(stream)
        return EXIT_USAGE
    # Imported here, not at the top: a command that needs no store never loads the stores.
    import sqlite3

    from ..storage import InvalidId, RecordError, StorageError, TooLarge
    from ._integrity import report_unusable
    from ._output import Out, terminal_width
    from ._store import store_path

    given = getattr(args, "store_path", None)
    args.store_given = given is not None
    args.store_path = store_path(given)
    color = stream.isatty() and "NO_COLOR" not in os.environ and not as_json
    out = Out(stream, as_json=as_json, color=color, width=terminal_width())
    try:
        return _dispatch(args, out)
    except CliError as exc:
        if args.command == "doctor" and exc.code == EXIT_NO_STORE:
            return report_unusable(args, out, str(exc))  # U3: a finding, not a failure
        return fail(str(exc), exc.code, as_json=as_json)
    except InvalidId as exc:
        return fail(str(exc), EXIT_USAGE, as_json=as_json)
    except (RecordError, TooLarge) as exc:
        # E7: a record that is stored but cannot be read is a problem found (as the reads
        # and doctor say), not an unusable store.
        return fail(f"a record cannot be read: {exc}", EXIT_FAILED, as_json=as_json)
    except (StorageError, sqlite3.Error) as exc:
        if args.command == "doctor":
            return report_unusable(args, out, f"the store failed: {exc}")
        return fail(f"the store failed: {exc}", EXIT_NO_STORE, as_json=as_json)


class _Nowhere(io.StringIO):
    """Where the output of a process without stdout goes: nowhere (nothing is kept)."""

    def write(self, text: str) -> int:
        return len(text)


def _quiet_closed_stdout(stream: TextIO | None) -> None:
    """Keep Python from complaining at exit about the process's own closed stdout.

    Only the process's own stdout is pointed at /dev/null: a stream handed to ``main`` by an
    embedding program (or a test) is that program's, and the descriptor behind ``sys.stdout``
    may be another one it owns (pytest's capture file). The descriptor opened here is closed.
    """
    if stream is not sys.__stdout__ or stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)


def _dispatch(args: argparse.Namespace, out: Out) -> int:
    from ..storage._seam import is_postgres_url
    from ._memory import check_memory_args
    from ._reads import READS, nothing_here_yet
    from ._store import check_execution_id, check_task_id, open_store

    if args.command == "migrate":  # the one command that opens an older store
        from ._maintenance import run_migrate

        store = args.store_path
        return run_migrate(store if is_postgres_url(store) else Path(store), out)
    if args.command == "memory":
        check_memory_args(args)
        write = False  # forget, too, reads first (cli/_memory.py)
    else:
        write = args.command not in READS
    if args.command == "stop-task":
        check_task_id(args.id)
    elif getattr(args, "id", None):
        check_execution_id(args.id)  # a malformed id is a usage error, store or no store
    if is_postgres_url(args.store_path):
        store, close = open_store(args.store_path, write=write)
        return _run(store, close, args, out, write=write)
    path = Path(args.store_path)
    try:
        exists = path.exists()
        home_is_no_dir = not args.store_given and path.parent.exists() and not path.parent.is_dir()
    except OSError as exc:  # unreadable, or a name the system refuses
        raise CliError(f"cannot use the store at {path}: {exc}", EXIT_NO_STORE) from None
    if home_is_no_dir:
        raise CliError(
            f"the mainspring home {path.parent} is not a directory: no store can live there",
            EXIT_NO_STORE,
        )
    if not args.store_given and not exists:
        return nothing_here_yet(path, out, args)
    store, close = open_store(path, write=write)
    return _run(store, close, args, out, write=write)


def _run(
    store: Store, close: Callable[[], None], args: argparse.Namespace, out: Out, *, write: bool
) -> int:
    from ._memory import run_memory
    from ._reads import READS

    try:
        if args.command == "memory":
            return run_memory(store, out, args)
        if args.command == "ui":
            from ._ui import run_ui

            return run_ui(store, out, args)
        if not write:
            return READS[args.command](store, out, args)
        # Imported here: reads never load the execution layer (or pay for its import).
        from ._controls import run_control

        return run_control(store, out, args)
    finally:
        close()


def _demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            parser.error("the trio backend needs the 'trio' extra: pip install 'mainspring[trio]'")
    # Imported here, not at the top: every other command would pay for the demos.
    from .._demos import run_durable_demo, run_reasons_demo

    if args.command == "demo":
        if args.store_dir is not None:
            # A file there, a directory it may not create: one line and exit 5, as for any
            # store it cannot use, not a traceback from mkdir.
            try:
                Path(args.store_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                why = exc.strerror or type(exc).__name__
                if Path(args.store_dir).exists() and not Path(args.store_dir).is_dir():
                    why = "a file is there, not a directory"
                return fail(
                    f"cannot use --store-dir {args.store_dir}: {why}",
                    EXIT_NO_STORE,
                    as_json=bool(getattr(args, "json", False)),
                )
        return run_durable_demo(sys.stdout, backend=args.backend, store_dir=args.store_dir)
    if not 1 <= args.steps <= 1000:
        parser.error("--steps must be between 1 and 1000")

    async def demo() -> None:
        await run_reasons_demo(sys.stdout, reason_name=args.reason, steps=args.steps)

    anyio.run(demo, backend=args.backend)
    return EXIT_OK
