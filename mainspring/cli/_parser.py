"""The command line: argparse, with errors raised instead of printed when they are to be JSON
(``--json``)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

#: ``demo-reasons --reason`` choices, sorted: the names of the reasons demo's table
#: (``mainspring._demos.REASONS``), kept here so that parsing never imports the demos.
#: A test checks the two agree.
DEMO_REASONS = ("cancel", "pause", "timeout")

#: ``--log-level`` choices (``_logs.logging_to_stderr``).
LOG_LEVELS = ("debug", "info", "warning", "error")


class UsageError(Exception):
    """A command line that does not parse: ``usage`` is the usage of the parser that said so.

    ``main`` prints it as argparse would (redacted), or as JSON with ``--json``."""

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.usage = usage


class _RaisingParser(argparse.ArgumentParser):
    """argparse whose errors are raised, so that ``main`` redacts them and prints them as
    text or as JSON, instead of printed here."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())


_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}


def duration(text: str) -> float:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` in seconds; anything else is a usage error."""
    match = re.fullmatch(r"([0-9]{1,9})([smhdw])", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give a whole number and a unit, like 30s, 15m, "
            "12h, 7d or 2w"
        )
    return float(int(match.group(1)) * _UNITS[match.group(2)])


def positive_duration(text: str) -> float:
    """A duration the runtime takes as a timeout (``--deadline``): more than 0 s and at most
    the runtime's bound (``check_timeout``); anything else is a usage error, before anything
    is opened (U4)."""
    from ..storage._seam import MAX_COUNTER

    seconds = duration(text)
    if not 0 < seconds <= MAX_COUNTER:
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: give more than 0s and at most {MAX_COUNTER:,}s "
            f"(about {MAX_COUNTER // 86_400} days)"
        )
    return seconds


def since(text: str) -> tuple[str, float]:
    """An ``ls --since``: a duration back from now (``("ago", seconds)``, more than 0 s) or
    an ISO 8601 time (``("at", epoch seconds)``; without a zone it is local time, as the
    command prints times). Anything else is a usage error (U4)."""
    if re.fullmatch(r"\s*[0-9]+[a-z]+\s*", text):
        seconds = duration(text)
        if seconds <= 0:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a time back from now: give more than 0s"
            )
        return "ago", seconds
    try:
        at = datetime.fromisoformat(text.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30s, 15m, 12h, 7d, 2w) nor an ISO time "
            "(2026-01-31 or 2026-01-31T12:00:00+00:00)"
        ) from None
    return "at", at


def _statuses(text: str) -> tuple[str, ...]:
    """An ``ls --status``: execution statuses, comma-separated (a usage error otherwise)."""
    from ..storage import ExecutionStatus

    known = tuple(status.value for status in ExecutionStatus)
    given = tuple(s.strip() for s in text.split(","))
    unknown = [s for s in given if s not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"not a status: {', '.join(repr(s) for s in unknown)} (one of {', '.join(known)})"
        )
    return given


def _count(text: str) -> int:
    """An ``ls --limit``: a whole number in 1..MAX_COUNTER (a usage error otherwise)."""
    from ..storage._seam import MAX_COUNTER

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_COUNTER:
        raise argparse.ArgumentTypeError(
            f"not a limit (a whole number in 1..{MAX_COUNTER:,}): {text}"
        )
    return value


def version() -> str:
    """This mainspring's version: from its installed metadata, else from the package."""
    from importlib import metadata

    try:
        return metadata.version("mainspring")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        from mainspring import __version__

        return __version__


def wants_json(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for ``--json``, as argparse reads it (``--js`` abbreviates it)."""
    return any(arg.startswith("--j") and "--json".startswith(arg) for arg in argv)


def _sequence_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a sequence number (a whole number >= 0): {text}")
    return value


def _budget(kind: str) -> Callable[[str], Any]:
    """A ``--max-calls`` / ``--max-tokens`` / ``--max-cost`` value, checked as the runtime
    checks it (a usage error otherwise, before anything is opened)."""

    def parse(text: str) -> Any:
        from ..storage._seam import MAX_COUNTER, check_cost, check_tokens

        text = text.strip()
        value: Any = None
        try:
            value = check_cost(Decimal(text)) if kind == "cost" else int(text)
            if kind == "tokens":
                value = check_tokens(value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind} budget: {exc}") from None
        if kind == "calls" and not 0 <= value <= MAX_COUNTER:
            raise argparse.ArgumentTypeError(f"the calls budget is 0..{MAX_COUNTER:,}, not {text}")
        return value

    return parse


def _fraction(text: str) -> float:
    """A ``--min-confidence``: a number in 0..1 (a usage error otherwise)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"not a confidence (a number in 0..1): {text}")
    return value


def _text(text: str) -> str:
    """Free text from the command line (an answer, a reason, a query): it must be text. A
    shell or terminal not in UTF-8 passes bytes Python keeps as lone surrogates, which no
    record can store; refused here as a usage error, not a traceback from the store (U1)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            "not UTF-8 text (the terminal or shell passed bytes in another encoding)"
        ) from None
    return text


#: The longest pause ``events --follow --interval`` takes between two looks (seconds).
_MAX_INTERVAL = 3600.0


def _interval(text: str) -> float:
    """An ``events --interval``: seconds between two looks, more than 0 and at most an hour
    (a usage error otherwise: NaN, a negative or a huge number would end in a traceback)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= _MAX_INTERVAL:  # NaN fails this too
        raise argparse.ArgumentTypeError(
            f"not an interval (seconds, more than 0 and at most {_MAX_INTERVAL:g}): {text}"
        )
    return value


def _polls(text: str) -> int:
    """An ``events --max-polls``: how many looks before ``--follow`` stops, 0 for no limit."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a number of polls (a whole number >= 0): {text}")
    return value


def _page_size(text: str) -> int:
    """A ``--limit``: a whole number in 1..MAX_SEARCH_LIMIT (a usage error otherwise)."""
    from ..storage._seam import MAX_SEARCH_LIMIT

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_SEARCH_LIMIT:
        raise argparse.ArgumentTypeError(
            f"not a limit (a whole number in 1..{MAX_SEARCH_LIMIT:,}): {text}"
        )
    return value


def _trail_length(text: str) -> int:
    """A ``--trail``: how many trail entries, 0..MAX_TRAIL (a usage error otherwise)."""
    from ..storage._seam import MAX_TRAIL

    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_TRAIL:
        raise argparse.ArgumentTypeError(
            f"not a trail length (a whole number in 0..{MAX_TRAIL:,}): {text}"
        )
    return value


def _name(what: str, longest: int) -> Callable[[str], str]:
    """An ``--organization`` or ``--domain``: an id (X1) of at most ``longest`` characters
    (a usage error otherwise)."""

    def parse(text: str) -> str:
        from .._ids import is_valid_id

        if not is_valid_id(text) or len(text) > longest:
            raise argparse.ArgumentTypeError(
                f"not a valid {what}: 1..{longest} of A-Z a-z 0-9 . _ : - (not . or ..)"
            )
        return text

    return parse


#: ``memory --scope`` choices, in the order ``mainspring.storage.Scope`` lists them (a test
#: checks the two agree; parsing never imports the storage layer).
MEMORY_SCOPES = ("user", "project", "repository", "organization")


def _add_memory(commands: Any, common: argparse.ArgumentParser) -> None:
    """``memory ls | search QUERY | forget ID``: the facts agents remember."""
    which = _RaisingParser(add_help=False)
    which.add_argument(
        "--organization",
        type=_name("organization", 256),
        help="the organization whose facts the organization scope holds",
    )
    filters = _RaisingParser(add_help=False)
    filters.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        choices=list(MEMORY_SCOPES),
        help="only this scope (repeatable; default: every scope, organization only with "
        "--organization)",
    )
    filters.add_argument("--domain", type=_name("domain", 128), help="only this domain")
    filters.add_argument(
        "--min-confidence",
        type=_fraction,
        default=0.0,
        metavar="X",
        help="only facts at least this confident (0..1)",
    )
    memory = commands.add_parser(
        "memory", parents=[common], help="facts agents remember: ls, search, forget"
    )
    actions = memory.add_subparsers(dest="memory_command", metavar="ACTION", required=True)
    ls = actions.add_parser(
        "ls", parents=[common, which, filters], help="facts, oldest first (visible ones)"
    )
    ls.add_argument("--limit", type=_page_size, default=100, help="at most this many (100)")
    ls.add_argument(
        "--all",
        dest="include_hidden",
        action="store_true",
        help="expired, superseded and low-confidence facts too",
    )
    ls.add_argument(
        "--after",
        metavar="FACT_ID",
        help="the next page: facts after this one (the last id of the previous page)",
    )
    search = actions.add_parser(
        "search", parents=[common, which, filters], help="facts matching a text query, best first"
    )
    search.add_argument("query", type=_text, metavar="QUERY")
    search.add_argument("--limit", type=_page_size, default=10, help="at most this many (10)")
    forget = actions.add_parser("forget", parents=[common, which], help="delete one fact")
    forget.add_argument("fact_id", metavar="FACT_ID")


def make_parser() -> argparse.ArgumentParser:
    """The ``mainspring`` parser; every error raises :class:`UsageError`."""
    common = _RaisingParser(add_help=False)
    common.add_argument(
        "--store",
        dest="store_path",
        default=argparse.SUPPRESS,
        help="the store: a *.sqlite3 file, a FileStore directory or a postgresql:// URL "
        "(default: $MAINSPRING_STORE, else $MAINSPRING_HOME/mainspring.sqlite3, else under "
        "the XDG state dir)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    common.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=argparse.SUPPRESS,
        help="print the library's log at this level and above on stderr (JSON with --json)",
    )
    parser = _RaisingParser(
        prog="mainspring",
        description="An embedded actor runtime for durable agent executions.",
        epilog="exit codes: 0 ok, 1 refused or problems found, 2 usage, 3 unknown id, "
        "4 busy (lease held elsewhere, or answered already), 5 no usable store, "
        "130 interrupted (Ctrl-C). NO_COLOR is honoured.",
        parents=[common],
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
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
        "--reason", choices=list(DEMO_REASONS), default="cancel", help="how the run is stopped"
    )
    demo.add_argument(
        "--steps", type=int, default=6, help="tool steps to finish before stopping (1-1000)"
    )
    ls = commands.add_parser("ls", parents=[common], help="list executions, newest first")
    ls.add_argument(
        "--status",
        dest="statuses",
        action="append",
        type=_statuses,
        metavar="S[,S]",
        help="only these statuses (comma-separated, repeatable)",
    )
    ls.add_argument("--limit", type=_count, metavar="N", help="at most N (the newest)")
    ls.add_argument(
        "--since",
        type=since,
        metavar="DURATION|ISO",
        help="only those updated since then: 30m, 12h, 7d, or 2026-01-31T12:00",
    )
    show = commands.add_parser("show", parents=[common], help="one execution in detail")
    show.add_argument("id")
    show.add_argument(
        "--traceback",
        action="store_true",
        help="print the traceback kept for each failure (redacted, bounded)",
    )
    show.add_argument(
        "--watch",
        action="store_true",
        help="then follow the run: each new history entry as it is committed, until it "
        "finishes (Ctrl-C stops)",
    )
    show.add_argument("--interval", type=_interval, default=0.5, help=argparse.SUPPRESS)
    show.add_argument("--max-polls", type=_polls, default=0, help=argparse.SUPPRESS)
    tasks = commands.add_parser("tasks", parents=[common], help="agent tasks (of one execution)")
    tasks.add_argument("id", nargs="?")
    for name, help_text in (
        ("pause", "pause a run (a live runner stops within one heartbeat)"),
        ("cancel", "cancel a run for good"),
    ):
        control = commands.add_parser(name, parents=[common], help=help_text)
        control.add_argument("id")
        control.add_argument("--reason", type=_text, default="", help="recorded in the audit")
    resume = commands.add_parser("resume", parents=[common], help="resume a run (needs --app)")
    resume.add_argument("id")
    resume.add_argument("--answer", type=_text, help="the answer to the pending question")
    resume.add_argument("--approve", action="store_true", help="approve what waits for approval")
    resume.add_argument("--app", required=True, help="module:attr giving open_runtime's options")
    resume.add_argument("--max-calls", type=_budget("calls"), help="the run's call budget")
    resume.add_argument("--max-tokens", type=_budget("tokens"), help="the run's token budget")
    resume.add_argument("--max-cost", type=_budget("cost"), help="the run's cost budget")
    resume.add_argument(
        "--deadline",
        type=positive_duration,
        help="a new deadline for the run, from now (30m, 12h, 7d)",
    )
    answer = commands.add_parser(
        "answer",
        parents=[common],
        help="answer a run's open question (no --app: the run, here or elsewhere, takes it)",
    )
    answer.add_argument("id")
    answer.add_argument("text", type=_text, help="the answer (stored redacted)")
    stop = commands.add_parser("stop-task", parents=[common], help="stop one agent task")
    stop.add_argument("id", metavar="TASK_ID")
    stop.add_argument(
        "--cascade",
        action="store_true",
        help="cancel its step and the steps depending on it (default: the step counts as "
        "done without a result and its dependents run)",
    )
    workers = commands.add_parser(
        "workers",
        parents=[common],
        help="external agent workers: generations, leases, last failures, the trail",
    )
    workers.add_argument(
        "id", nargs="?", metavar="EXECUTION_ID", help="this execution's workers in detail"
    )
    workers.add_argument(
        "--trail",
        type=_trail_length,
        default=20,
        metavar="N",
        help="with EXECUTION_ID: the last N entries of the diagnostic trail (20; 0 hides it)",
    )
    events = commands.add_parser(
        "events", parents=[common], help="the durable history: every committed change, in order"
    )
    events.add_argument("id", nargs="?", metavar="EXECUTION_ID", help="of this execution only")
    events.add_argument("--follow", action="store_true", help="keep watching")
    events.add_argument(
        "--after",
        type=_sequence_number,
        default=0,
        metavar="SEQ",
        help="only entries after this sequence number (the first column; default 0: all)",
    )
    events.add_argument("--interval", type=_interval, default=0.5, help=argparse.SUPPRESS)
    events.add_argument("--max-polls", type=_polls, default=0, help=argparse.SUPPRESS)
    commands.add_parser("doctor", parents=[common], help="check every record, read-only")
    commands.add_parser(
        "migrate",
        parents=[common],
        help="convert a store of an older layout (mainspring 0.1's, storage v2) to the "
        "current one (the old store is kept as PATH.v1-backup or PATH.v2-backup; a "
        "PostgreSQL schema is upgraded in place)",
    )
    prune = commands.add_parser(
        "prune", parents=[common], help="delete finished executions, with their history"
    )
    prune.add_argument(
        "--older-than",
        required=True,
        type=duration,
        metavar="DURATION",
        help="not updated for this long: 30s, 15m, 12h, 7d, 2w",
    )
    prune.add_argument(
        "--status",
        dest="statuses",
        action="append",
        choices=["completed", "failed", "cancelled"],
        help="only these statuses (repeatable; default: all three)",
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="say what would be deleted, delete nothing"
    )
    _add_memory(commands, common)
    _add_ui(commands, common)
    return parser


def _port(text: str) -> int:
    """A ``--port``: 0 (any free port) to 65535 (a usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"not a port (a whole number in 0..65535): {text}")
    return value


def _add_ui(commands: Any, common: argparse.ArgumentParser) -> None:
    """``ui``: the local web view of the runs (the ``ui`` extra)."""
    ui = commands.add_parser(
        "ui",
        parents=[common],
        help="a local web view of the runs: graph, timeline, live updates, controls",
    )
    ui.add_argument("--port", type=_port, default=0, help="the port (default 0: any free one)")
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1; another needs --allow-remote)",
    )
    ui.add_argument(
        "--allow-remote",
        action="store_true",
        help="listen on a --host other machines can reach (the runs and their controls, "
        "behind the token, over plain HTTP)",
    )
    ui.add_argument(
        "--app", help="module:attr giving open_runtime's options (the resume button needs it)"
    )
    ui.add_argument(
        "--backend", choices=["asyncio", "trio"], default="asyncio", help="event loop to serve on"
    )
