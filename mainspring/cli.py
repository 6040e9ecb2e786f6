"""The ``mainspring`` command: see and steer durable executions from outside the process
that runs them.

Reads go straight to the store and never write (E7). ``pause``, ``cancel`` and
``stop-task`` need no user code: they are out-of-band edits that a live runner meets at its
next heartbeat. ``resume`` runs user code, so it needs ``--app module:attr`` naming the
runtime configuration, the way ASGI servers name an app. Everything printed is redacted.

Exit codes: 0 all well; 1 the operation was refused or ``doctor`` found problems; 2 usage;
3 unknown id; 4 busy (another owner holds the lease); 5 no usable store.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import anyio
import attrs

from ._demo import REASONS, run_demo
from ._durable_demo import run_demo as run_durable_demo
from .executions import ExecutionBusy, UnknownExecution, default_home, open_runtime
from .executions._transitions import task_records
from .storage import (
    AgentTaskRecord,
    Execution,
    FileStore,
    InvalidId,
    SqliteStore,
    StorageError,
    Store,
    parse_agent_tasks,
    redact,
)
from .storage._backend import holder
from .storage._codec import unstructure
from .storage._ids import check_id

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_BUSY = 4
EXIT_NO_STORE = 5

GOAL_WIDTH = 40


class CliError(Exception):
    """A clear, expected failure: printed as one line, with its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- output ----------------------------------------------------------------------------------


class _Out:
    def __init__(self, stream: TextIO, *, as_json: bool, color: bool) -> None:
        self.stream = stream
        self.as_json = as_json
        self.color = color

    def line(self, text: str = "") -> None:
        print(redact(text), file=self.stream, flush=True)

    def data(self, value: Any) -> None:
        print(json.dumps(redact(value), default=str), file=self.stream, flush=True)

    def warn(self, message: str) -> None:
        """A note on stderr (stdout stays parseable): JSON too with ``--json``."""
        _say({"warning": message} if self.as_json else message)

    def paint(self, text: str, status: str) -> str:
        if not self.color:
            return text
        code = {
            "completed": "32",
            "succeeded": "32",
            "failed": "31",
            "cancelled": "33",
            "paused": "33",
            "running": "36",
        }.get(status, "35" if status.startswith("waiting") else "")
        return f"\x1b[{code}m{text}\x1b[0m" if code else text

    def table(
        self, headers: Sequence[str], rows: Sequence[Sequence[str]], status_col: int = -1
    ) -> None:
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        header = "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))
        self.line(header.rstrip())
        for row in rows:
            cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
            if status_col >= 0:
                cells[status_col] = self.paint(cells[status_col], row[status_col])
            self.line("  ".join(cells).rstrip())


def _clamp(text: str, width: int) -> str:
    text = " ".join(redact(text).split())  # redacted before it is cut: a cut secret would leak
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(at: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    except (OverflowError, ValueError, OSError):  # a strange but valid timestamp
        return repr(at)


# -- the store -------------------------------------------------------------------------------


def _store_path(given: str | None) -> Path:
    if given:
        return Path(given)
    return default_home() / "mainspring.sqlite3"


def _open(path: Path, *, write: bool) -> tuple[Store, Callable[[], None]]:
    """The store at ``path``, which must already be one: a command never creates, converts
    or chmods anything by accident, and a read opens it read-only."""
    if not path.exists():
        raise CliError(
            f"no store at {path} (give --store PATH, or set MAINSPRING_HOME)", EXIT_NO_STORE
        )
    try:
        if path.is_dir():
            files = FileStore(path, read_only=True)  # proves it is a store, changing nothing
            return (FileStore(path) if write else files), lambda: None
        probe = SqliteStore(path, read_only=True)
        if write:
            probe.close()
            probe = SqliteStore(path)
    except (StorageError, OSError, sqlite3.Error) as exc:
        raise CliError(f"cannot use the store at {path}: {exc}", EXIT_NO_STORE) from None
    return probe, probe.close


def _get(store: Store, execution_id: str) -> Execution:
    try:
        check_id(execution_id)
        execution = store.get(execution_id)
    except InvalidId:
        raise CliError(f"{execution_id!r} is not a valid execution id", EXIT_USAGE) from None
    except (StorageError, OSError, sqlite3.Error) as exc:
        raise CliError(f"execution {execution_id} cannot be read: {exc}", EXIT_FAILED) from None
    if execution is None:
        raise CliError(f"no execution {execution_id} in this store", EXIT_UNKNOWN)
    return execution


def _steps(execution: Execution) -> tuple[int, int]:
    plan = execution.plan
    if plan is None:
        return 0, 0
    done = sum(1 for s in plan.steps if s.status in ("succeeded", "failed", "skipped", "cancelled"))
    return done, len(plan.steps)


def _owner(execution: Execution, now: float) -> str:
    return holder(execution.lease, now) or "-"


# -- read commands ---------------------------------------------------------------------------


def _ls(store: Store, out: _Out, _: argparse.Namespace) -> int:
    listing = store.list()
    now = time.time()
    executions = sorted(listing.executions, key=lambda e: e.updated_at, reverse=True)
    if out.as_json:
        out.data(
            [
                {
                    "id": e.id,
                    "status": e.status,
                    "goal": e.goal,
                    "steps_done": _steps(e)[0],
                    "steps_total": _steps(e)[1],
                    "calls_used": e.calls_used,
                    "lease_owner": holder(e.lease, now),
                    "updated_at": e.updated_at,
                }
                for e in executions
            ]
        )
    else:
        rows = [
            [
                e.id,
                e.status,
                _clamp(e.goal, GOAL_WIDTH),
                "{}/{}".format(*_steps(e)),
                str(e.calls_used),
                _owner(e, now),
                _when(e.updated_at),
            ]
            for e in executions
        ]
        out.table(["id", "status", "goal", "steps", "calls", "lease", "updated"], rows, 1)
    _report_unreadable(out, 0, listing.problems)
    return EXIT_OK


def _task_rows(tasks: Sequence[AgentTaskRecord]) -> list[list[str]]:
    rows = []
    for t in tasks:
        why = f"{t.interruption.kind} at {_when(t.interruption.at)}" if t.interruption else "-"
        rows.append(
            [
                t.id,
                t.state,
                t.agent_id,
                t.step_id,
                f"{t.inner_steps_done}",
                f"{t.calls_used}/{t.calls_reserved}",
                why,
            ]
        )
    return rows


def _show(store: Store, out: _Out, args: argparse.Namespace) -> int:
    execution = _get(store, args.id)
    tasks, dropped = parse_agent_tasks(execution)
    if out.as_json:
        out.data(unstructure(execution))
        return EXIT_OK
    now = time.time()
    done, total = _steps(execution)
    out.line(f"{execution.id}  {out.paint(execution.status, execution.status)}")
    out.line(f"goal:    {_clamp(execution.goal, 200)}")
    out.line(
        f"steps:   {done}/{total} done, {execution.calls_used} calls used"
        + (f" of {execution.max_calls}" if execution.max_calls is not None else "")
    )
    lease = execution.lease
    if lease is not None and holder(lease, now):
        out.line(f"lease:   {lease.owner} until {_when(lease.expires_at)} (epoch {lease.epoch})")
    else:
        out.line("lease:   free")
    if execution.pending is not None:
        pending = execution.pending
        asked = f" (agent task {pending.agent_task_id})" if pending.agent_task_id else ""
        out.line(f"pending: {pending.kind}{asked}: {_clamp(pending.question, 200)}")
    plan = execution.plan
    if plan is not None:
        out.line("")
        out.line(f"plan {plan.id} v{plan.version}")
        out.table(
            ["step", "kind", "target", "status", "after"],
            [
                [s.id, s.kind, s.target, s.status, ", ".join(s.depends_on) or "-"]
                for s in plan.steps
            ],
            3,
        )
    if tasks or dropped:
        out.line("")
        out.line("agent tasks" + (f" ({dropped} unreadable, not shown)" if dropped else ""))
        out.table(
            ["task", "state", "agent", "step", "inner", "calls", "interrupted"],
            _task_rows(tasks),
            1,
        )
    if execution.checkpoints:
        out.line("")
        out.line("checkpoints")
        for c in execution.checkpoints:
            out.line(
                f"  {_when(c.at)}  plan v{c.plan_version}  {len(c.completed_steps)} steps done"
            )
    if execution.controls:
        out.line("")
        out.line("controls")
        for control in execution.controls:
            reason = f": {control.reason}" if control.reason else ""
            out.line(f"  {_when(control.at)}  {control.action} by {control.by}{reason}")
    return EXIT_OK


def _tasks(store: Store, out: _Out, args: argparse.Namespace) -> int:
    if args.id:
        executions, problems = [_get(store, args.id)], []
    else:
        listing = store.list()
        executions, problems = list(listing.executions), list(listing.problems)
    tasks: list[AgentTaskRecord] = []
    dropped = 0
    for execution in executions:
        parsed, bad = parse_agent_tasks(execution)
        tasks += parsed
        dropped += bad
    if out.as_json:
        out.data([unstructure(t) for t in tasks])
    else:
        out.table(
            ["task", "state", "agent", "step", "inner", "calls", "interrupted"],
            _task_rows(tasks),
            1,
        )
    _report_unreadable(out, dropped, problems)
    return EXIT_OK


def _report_unreadable(out: _Out, dropped: int, problems: Sequence[Any]) -> None:
    """What could not be read is said (on stderr, so --json output stays parseable), never
    silently left out (E7)."""
    if dropped:
        out.warn(f"{dropped} unreadable agent task records not shown (mainspring doctor)")
    for problem in problems:
        out.warn(f"unreadable execution {problem.id}: {problem.error}")


def _snapshot(store: Store) -> dict[str, tuple[str, dict[str, str], dict[str, str]]]:
    view: dict[str, tuple[str, dict[str, str], dict[str, str]]] = {}
    for e in store.list().executions:
        steps: dict[str, str] = {s.id: s.status for s in e.plan.steps} if e.plan else {}
        tasks: dict[str, str] = {t.id: t.state for t in task_records(e)}
        view[e.id] = (e.status, steps, tasks)
    return view


def _changes(before: dict[str, Any], after: dict[str, Any]) -> Iterator[dict[str, str]]:
    for execution_id, (status, steps, tasks) in after.items():
        old = before.get(execution_id)
        old_status, old_steps, old_tasks = old if old is not None else ("", {}, {})
        if status != old_status:
            yield {"execution_id": execution_id, "kind": "execution", "state": status}
        for step_id, state in steps.items():
            if old_steps.get(step_id) != state:
                yield {"execution_id": execution_id, "kind": "step", "id": step_id, "state": state}
        for task_id, state in tasks.items():
            if old_tasks.get(task_id) != state:
                yield {"execution_id": execution_id, "kind": "task", "id": task_id, "state": state}


def _events(store: Store, out: _Out, args: argparse.Namespace) -> int:
    """State changes seen in the store (V1: ids and states): the current state first, then,
    with --follow, every change as it is committed (polled)."""
    before: dict[str, Any] = {}
    polls = 0
    while True:
        after = _snapshot(store)
        for change in _changes(before, after):
            if out.as_json:
                out.data(change)
            else:
                what = change.get("id", "")
                out.line(
                    f"{change['execution_id']}  {change['kind']:<9} {what:<20} {change['state']}"
                )
        before = after
        polls += 1
        if not args.follow or (args.max_polls and polls >= args.max_polls):
            return EXIT_OK
        time.sleep(args.interval)


def _doctor(store: Store, out: _Out, args: argparse.Namespace) -> int:
    """Validate every record, read-only; the exit code says whether all is well."""
    findings: list[dict[str, str]] = []
    listing = store.list()
    for problem in listing.problems:
        findings.append({"id": problem.id, "problem": "unreadable", "detail": problem.error})
    now = time.time()
    for e in listing.executions:
        _, dropped = parse_agent_tasks(e)
        if dropped:
            findings.append(
                {
                    "id": e.id,
                    "problem": "agent-tasks-dropped",
                    "detail": f"{dropped} agent task records do not parse",
                }
            )
        if e.status in ("running", "planned") and holder(e.lease, now) is None:
            findings.append(
                {
                    "id": e.id,
                    "problem": "orphaned",
                    "detail": "running with no live lease: its owner is gone; "
                    "resume it (mainspring resume, or Runtime.recover)",
                }
            )
        elif e.lease is not None and e.lease.owner and e.lease.expires_at <= now and e.terminal:
            findings.append(
                {
                    "id": e.id,
                    "problem": "expired-lease",
                    "detail": f"held by {e.lease.owner}, lapsed",
                }
            )
    path = Path(args.store_path)
    if path.is_dir():
        for stray in sorted(path.glob(".tmp-*")):
            findings.append(
                {
                    "id": stray.name,
                    "problem": "stray-temp-file",
                    "detail": "left by an interrupted write; safe to delete",
                }
            )
    if out.as_json:
        out.data({"ok": not findings, "executions": len(listing.executions), "findings": findings})
    else:
        out.line(f"{len(listing.executions)} executions read, {len(findings)} findings")
        for finding in findings:
            out.line(f"  {finding['problem']:<20} {finding['id']}: {finding['detail']}")
        if not findings:
            out.line("all well")
    return EXIT_OK if not findings else EXIT_FAILED


# -- control commands ------------------------------------------------------------------------


def _load_app(spec: str) -> dict[str, Any]:
    """``module:attr`` -> the runtime configuration (a dict, or a callable returning one)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"--app must look like module:attr, not {spec!r}", EXIT_USAGE)
    sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:  # whatever importing the user's module raised
        raise CliError(
            f"cannot load --app {spec}: {type(exc).__name__}: {exc}", EXIT_USAGE
        ) from exc
    finally:
        sys.path.remove(os.getcwd())
    try:
        config = target() if callable(target) else target
    except Exception as exc:
        raise CliError(f"--app {spec} failed: {type(exc).__name__}: {exc}", EXIT_USAGE) from exc
    if not isinstance(config, dict):
        raise CliError(f"--app {spec} must give a dict of open_runtime options", EXIT_USAGE)
    config.pop("store", None)
    return config


async def _control(store: Store, out: _Out, args: argparse.Namespace) -> int:
    config = _load_app(args.app) if getattr(args, "app", None) else {}
    async with open_runtime(store=store, **config) as rt:
        if args.command == "stop-task":
            result = await rt.stop_agent_task(args.id)
            if out.as_json:
                out.data(attrs.asdict(result))
            else:
                out.line(
                    f"{result.task_id}: {result.state} ({result.reason}) [{result.operation_id}]"
                )
            if result.state == "unknown":
                return EXIT_UNKNOWN
            return EXIT_OK if result.ok else EXIT_FAILED
        refused = False
        if args.command in ("pause", "cancel"):
            before = await rt.get(args.id)
            if before is None:
                raise UnknownExecution(args.id)
            # Nothing to do is a refusal (exit 1): a finished run cannot be paused or cancelled.
            refused = before.terminal or (args.command == "pause" and before.status == "paused")
            call = rt.pause if args.command == "pause" else rt.cancel
            outcome = await call(args.id, reason=args.reason or "")
        else:
            handle = await rt.resume(args.id, answer=args.answer, approve=args.approve)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_progress, rt, out, args.id)
                outcome = await handle.wait()
                tg.cancel_scope.cancel()
    if out.as_json:
        out.data({"id": outcome.execution_id, "status": outcome.status, "summary": outcome.summary})
    else:
        out.line(f"{outcome.execution_id}: {outcome.summary}")
        if outcome.pending is not None:
            out.line(f"pending {outcome.pending.kind}: {outcome.pending.question}")
        if outcome.error:
            out.line(f"why: {outcome.error}")
        if refused:
            out.line(f"nothing to {args.command}: the execution is {outcome.status}")
    return EXIT_FAILED if refused or outcome.status == "failed" else EXIT_OK


async def _progress(rt: Any, out: _Out, execution_id: str) -> None:
    async for event in rt.events():
        if getattr(event, "execution_id", None) != execution_id or out.as_json:
            continue
        name = type(event).__name__
        if name == "StepFinished":
            out.line(
                f"  {event.state:<9} {event.step_id:<20} {event.done}/{event.total} steps, "
                f"{event.calls_used} calls"
            )
        elif name == "AgentTaskWaiting":
            out.line(f"  agent task {event.task_id} asks a question")


# -- the parser ------------------------------------------------------------------------------


class _UsageError(Exception):
    """A command line that does not parse, when errors are to be JSON (``--json``)."""


class _JsonErrorsParser(argparse.ArgumentParser):
    """argparse whose errors are raised, to be printed as JSON, instead of printed."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        dest="store_path",
        default=argparse.SUPPRESS,
        help="the store: a *.sqlite3 file or a FileStore directory "
        "(default: $MAINSPRING_HOME/mainspring.sqlite3, else under the "
        "XDG state dir)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    parser = (_JsonErrorsParser if json_errors else argparse.ArgumentParser)(
        prog="mainspring",
        description="An embedded actor runtime for durable agent executions.",
        epilog="exit codes: 0 ok, 1 refused or problems found, 2 usage, 3 unknown id, "
        "4 busy (lease held elsewhere), 5 no usable store. NO_COLOR is honoured.",
        parents=[common],
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
    commands.add_parser("ls", parents=[common], help="list executions")
    show = commands.add_parser("show", parents=[common], help="one execution in detail")
    show.add_argument("id")
    tasks = commands.add_parser("tasks", parents=[common], help="agent tasks (of one execution)")
    tasks.add_argument("id", nargs="?")
    for name, help_text in (
        ("pause", "pause a run (a live runner stops within one heartbeat)"),
        ("cancel", "cancel a run for good"),
    ):
        control = commands.add_parser(name, parents=[common], help=help_text)
        control.add_argument("id")
        control.add_argument("--reason", default="", help="recorded in the audit")
    resume = commands.add_parser("resume", parents=[common], help="resume a run (needs --app)")
    resume.add_argument("id")
    resume.add_argument("--answer", help="the answer to the pending question")
    resume.add_argument("--approve", action="store_true", help="approve what waits for approval")
    resume.add_argument("--app", required=True, help="module:attr giving open_runtime's options")
    stop = commands.add_parser("stop-task", parents=[common], help="stop one agent task")
    stop.add_argument("id", metavar="TASK_ID")
    events = commands.add_parser("events", parents=[common], help="state changes in the store")
    events.add_argument("--follow", action="store_true", help="keep watching")
    events.add_argument("--interval", type=float, default=0.5, help=argparse.SUPPRESS)
    events.add_argument("--max-polls", type=int, default=0, help=argparse.SUPPRESS)
    commands.add_parser("doctor", parents=[common], help="check every record, read-only")
    return parser


_READS: dict[str, Callable[[Store, _Out, argparse.Namespace], int]] = {
    "ls": _ls,
    "show": _show,
    "tasks": _tasks,
    "events": _events,
    "doctor": _doctor,
}


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Entry point of the ``mainspring`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    parser = _parser(json_errors=as_json)
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        return _fail(str(exc), EXIT_USAGE, as_json=True)
    stream = stdout or sys.stdout
    if args.command is None:
        parser.print_help(stream)
        return EXIT_USAGE
    if args.command in ("demo", "demo-reasons"):
        return _demo(parser, args)
    given = getattr(args, "store_path", None)
    args.store_given = given is not None
    args.store_path = str(_store_path(given))
    color = stream.isatty() and "NO_COLOR" not in os.environ and not as_json
    out = _Out(stream, as_json=as_json, color=color)
    try:
        return _dispatch(args, out)
    except CliError as exc:
        return _fail(str(exc), exc.code, as_json=as_json)
    except UnknownExecution as exc:
        return _fail(str(exc), EXIT_UNKNOWN, as_json=as_json)
    except ExecutionBusy as exc:
        lease = exc.lease
        until = f" until {_when(lease.expires_at)}" if lease is not None and lease.owner else ""
        owner = f" by {lease.owner}" if lease is not None and lease.owner else ""
        message = f"{exc.execution_id} is busy: held{owner}{until} ({exc})"
        return _fail(message, EXIT_BUSY, as_json=as_json)
    except InvalidId as exc:
        return _fail(str(exc), EXIT_USAGE, as_json=as_json)
    except (StorageError, sqlite3.Error) as exc:
        return _fail(f"the store failed: {exc}", EXIT_NO_STORE, as_json=as_json)
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep Python from complaining
        # about the closed pipe at exit.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _say(message: str | dict[str, Any]) -> None:
    """One line on stderr, redacted: ``mainspring: ...``, or a JSON object."""
    if isinstance(message, dict):
        print(json.dumps(redact(message), default=str), file=sys.stderr, flush=True)
    else:
        print(f"mainspring: {redact(message)}", file=sys.stderr, flush=True)


def _fail(message: str, code: int, *, as_json: bool = False) -> int:
    """Report an error on stderr (``{"error": ..., "code": N}`` with --json); return code."""
    _say({"error": message, "code": code} if as_json else message)
    return code


def _dispatch(args: argparse.Namespace, out: _Out) -> int:
    write = args.command not in _READS
    if args.command == "stop-task":
        try:
            check_id(args.id)
        except InvalidId:
            raise CliError(f"{args.id!r} is not a valid task id", EXIT_USAGE) from None
    path = Path(args.store_path)
    if not args.store_given and not path.exists():
        return _nothing_here_yet(path, out, args)
    store, close = _open(path, write=write)
    try:
        if not write:
            return _READS[args.command](store, out, args)
        return anyio.run(_control, store, out, args)
    finally:
        close()


def _nothing_here_yet(path: Path, out: _Out, args: argparse.Namespace) -> int:
    """The default store does not exist: nothing has run here yet. That is a state, not an
    error: listings are empty, ids are unknown. (A ``--store`` that does not exist is an
    error: it was named on purpose.) Nothing is created."""
    why = f"no store at {path}: nothing has run here"
    command = args.command
    if command == "events" and args.follow:
        return _follow_when_created(path, out, args)
    if command in ("ls", "events") or (command == "tasks" and not args.id):
        what = "agent tasks" if command == "tasks" else "executions"
        if out.as_json:
            if command != "events":  # events prints one object per change: none
                out.data([])
        else:
            out.line(f"no {what} yet ({why})")
        return EXIT_OK
    if command == "doctor":
        if out.as_json:
            out.data({"ok": True, "executions": 0, "findings": [], "store": None})
        else:
            out.line(f"nothing to check yet ({why})")
        return EXIT_OK
    target = "agent task" if command == "stop-task" else "execution"
    raise CliError(f"no {target} {args.id} ({why})", EXIT_UNKNOWN)


def _follow_when_created(path: Path, out: _Out, args: argparse.Namespace) -> int:
    """``events --follow`` on an empty home waits for the first run to create the store,
    then follows it. The file appears a moment before its tables do: what is not a store
    yet gets a few seconds to become one before it is reported."""
    if not out.as_json:
        out.line(f"no executions yet; waiting for the first run to create {path}")
    first_seen: float | None = None
    while True:
        if path.exists():
            try:
                store, close = _open(path, write=False)
                break
            except CliError:
                first_seen = first_seen or time.monotonic()
                if time.monotonic() - first_seen > _STORE_BIRTH:
                    raise
        time.sleep(args.interval)
    try:
        return _events(store, out, args)
    finally:
        close()


#: How long a new file at the default store's path may take to become a store (seconds).
_STORE_BIRTH = 10.0


def _demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
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
