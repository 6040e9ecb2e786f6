"""The control commands: ``pause``, ``cancel``, ``stop-task`` and ``answer`` (out-of-band
edits a live runner meets at its next heartbeat, no user code needed) and ``resume`` (runs
user code, so it loads the runtime configuration named by ``--app module:attr``)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

import anyio
import anyio.to_thread
import attrs

from ..events import AgentTaskWaiting, StepFinished
from ..executions import (
    ExecutionBusy,
    InvalidPlan,
    NotWaiting,
    Runtime,
    UnknownExecution,
    open_runtime,
)
from ..storage import Store, TooLarge
from ..storage._seam import holder
from ._codes import EXIT_BUSY, EXIT_FAILED, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE, CliError
from ._maintenance import run_prune
from ._output import Out, clamp, printable, when
from ._workers import worker_line, worker_of


def load_app(spec: str) -> dict[str, Any]:
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
    except Exception as exc:  # whatever the user's factory raised
        raise CliError(f"--app {spec} failed: {type(exc).__name__}: {exc}", EXIT_USAGE) from exc
    if not isinstance(config, dict):
        raise CliError(f"--app {spec} must give a dict of open_runtime options", EXIT_USAGE)
    config.pop("store", None)
    return config


def run_control(store: Store, out: Out, args: argparse.Namespace) -> int:
    """Run one control command against ``store`` in an event loop of its own; the runtime's
    errors become the command's (3 unknown, 4 busy)."""
    try:
        return anyio.run(control, store, out, args)
    except UnknownExecution as exc:
        raise CliError(str(exc), EXIT_UNKNOWN) from None
    except NotWaiting as exc:  # an answer nobody waits for: refused, nothing stored
        raise CliError(str(exc), EXIT_FAILED) from None
    except InvalidPlan as exc:  # --app lacks a tool the run needs: nothing ran, nothing changed
        raise CliError(printable(str(exc)), EXIT_USAGE) from None
    except ExecutionBusy as exc:
        lease = exc.lease
        if lease is not None and lease.owner:
            until = f" until {when(lease.expires_at)}"
            message = f"{exc.execution_id} is busy: held by {lease.owner}{until} ({exc})"
        else:  # busy for another cause (an answer stored already): no holder to name
            message = str(exc)
        raise CliError(printable(message), EXIT_BUSY) from None  # an owner id is anyone's


async def control(store: Store, out: Out, args: argparse.Namespace) -> int:
    """Run one control command against ``store``; returns the exit code."""
    config = load_app(args.app) if getattr(args, "app", None) else {}
    # L8: a command acts on the run it names only. Recovering would take over every run
    # nobody runs (a server's, to be picked up by it) into this short-lived process, run
    # it with whatever tools the command has, and stop it again on exit.
    config["recover"] = False
    async with open_runtime(store=store, **config) as rt:
        if args.command == "prune":
            return await run_prune(rt, out, args)
        if args.command == "answer":
            return await _answer(rt, out, args.id, args.text)
        if args.command == "stop-task":
            result = await rt.stop_agent_task(args.id, cascade=args.cascade)
            # A worker-backed task says so, and where its worker is now (read after the stop).
            found = None
            if result.state != "unknown":
                found = worker_of(
                    await rt.get(result.execution_id or args.id.rsplit(":t", 1)[0]), args.id
                )
            if out.as_json:
                out.data(attrs.asdict(result) | ({"worker": found} if found else {}))
            else:
                out.line(
                    f"{result.task_id}: {result.state} ({result.reason}) [{result.operation_id}]"
                )
                if found:
                    out.line(worker_line(found))
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
            before = await rt.get(args.id)
            if before is None:
                raise UnknownExecution(args.id)
            refused = before.terminal  # R4: a finished run is left as it is; nothing to do
            handle = await rt.resume(
                args.id,
                answer=args.answer,
                approve=args.approve,
                max_calls=args.max_calls,
                max_tokens=args.max_tokens,
                max_cost=args.max_cost,
                deadline=args.deadline,
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(_progress, rt, out, args.id)
                outcome = await handle.wait()
                tg.cancel_scope.cancel()
    if out.as_json:
        out.data({"id": outcome.execution_id, "status": outcome.status, "summary": outcome.summary})
    else:
        out.line(f"{outcome.execution_id}: {outcome.summary}")
        if outcome.pending is not None:
            out.line(f"pending {outcome.pending.kind}: {clamp(outcome.pending.question, 300)}")
        if outcome.error:
            out.line(f"why: {clamp(outcome.error, 300)}")  # O2: anyone's text, escaped
    if refused:  # said on stderr with --json, so stdout stays one JSON document
        message = f"nothing to {args.command}: the execution is {outcome.status}"
        if out.as_json:
            out.warn(message)
        else:
            out.line(message)
    return EXIT_FAILED if refused or outcome.status == "failed" else EXIT_OK


async def _answer(rt: Runtime, out: Out, execution_id: str, text: str) -> int:
    """``mainspring answer ID TEXT``: stored for the run wherever it runs or next resumes
    (never printed back: only its digest is kept in the clear, E5)."""
    try:
        await rt.answer(execution_id, text)
    except TooLarge as exc:  # the run's record cannot take it: nothing was stored
        raise CliError(f"the answer cannot be stored: {exc}", EXIT_FAILED) from None
    record = await rt.get(execution_id)
    status = record.status if record is not None else "unknown"
    # Live: a lease that has not lapsed, on the store's clock (a crashed runner's lapsed
    # lease names an owner that takes nothing: the next resume or recovery gives it).
    now = await anyio.to_thread.run_sync(rt.store.now)
    live = record is not None and holder(record.lease, now) is not None
    if out.as_json:
        out.data({"id": execution_id, "status": status, "answered": True, "live": live})
    else:
        if live:
            where = "its runner takes it at its next heartbeat"
        elif status == "paused":  # recovery leaves a paused run alone: a resume is a decision
            where = "the run is paused: its resume gives it"
        else:
            # L8: a runtime open on the store (a server's) takes such a run up by itself.
            where = "a runtime open on this store takes the run up (else its next resume)"
        out.line(f"{execution_id}: answer stored; {where}")
    return EXIT_OK


async def _progress(rt: Runtime, out: Out, execution_id: str) -> None:
    async for event in rt.events():
        if out.as_json:
            continue
        if isinstance(event, StepFinished) and event.execution_id == execution_id:
            out.line(
                f"  {event.state:<9} {event.step_id:<20} {event.done}/{event.total} steps, "
                f"{event.calls_used} calls"
            )
        elif isinstance(event, AgentTaskWaiting) and event.execution_id == execution_id:
            out.line(f"  agent task {event.task_id} asks a question")
