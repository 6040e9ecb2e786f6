"""Why a step, a planner call or an agent failed: described once, where the exception is
caught, then kept on the record and logged (O2).

Invariant O2: every failed step attempt, planner call and agent task keeps its exception's
class name and a bounded (the last ``MAX_FRAMES`` frames of each exception in the chain,
``MAX_TRACEBACK_BYTES`` of UTF-8), redacted (E5) traceback on the durable record, and is
logged once under ``mainspring.executions`` with the run's and the step's ids. Nothing is
printed unless the application configures logging: the ``mainspring`` logger carries a
``NullHandler`` (O1), so stdlib's last-resort handler never writes to stderr on our behalf.

Formatting a traceback reads source files (the lines it shows): :func:`describe_off_loop`
does it in a worker thread, never on the event loop.
"""

from __future__ import annotations

import logging
import traceback as tb
from collections.abc import Mapping

import anyio.to_thread
import attrs

from ...storage import redact

__all__ = [
    "LOGGER_NAME",
    "MAX_FRAMES",
    "MAX_MESSAGE",
    "MAX_TRACEBACK_BYTES",
    "MAX_TYPE_NAME",
    "Caught",
    "clamp_message",
    "describe",
    "describe_off_loop",
    "log_dropped",
    "log_failure",
    "logger",
]

#: The logger failures of runs are reported on (docs/how-to/logging.md).
LOGGER_NAME = "mainspring.executions"
logger = logging.getLogger(LOGGER_NAME)

#: How much of a traceback is kept: the innermost frames of each exception, then the text's
#: last bytes (the exception's own line is at the end: the part that says most).
MAX_FRAMES = 50
MAX_TRACEBACK_BYTES = 8 * 1024
#: How much of an exception's class name is kept (its qualified name can be long).
MAX_TYPE_NAME = 200
#: How much of an exception's ``Type: text`` line is kept (its start: the part that says most),
#: on the record and in a log line; a message can be megabytes (a dumped response body).
MAX_MESSAGE = 4096
_CUT = "[traceback cut: its first {n} bytes are left out]\n"
_MESSAGE_CUT = " [cut: {n} more characters]"


def _storable(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (undecodable bytes that ``os`` or a
    ``surrogateescape`` decode let through) becomes its ``\\udcff`` escape. Without this the
    record could not be encoded, and the failure would be stored as "its result could not be
    stored" with its type and traceback lost."""
    return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def clamp_message(text: str) -> str:
    """``text`` cut to its first ``MAX_MESSAGE`` characters, saying how many were left out.
    Cut only after redaction: a cut through a secret could leave a part no pattern knows."""
    if len(text) <= MAX_MESSAGE:
        return text
    return text[:MAX_MESSAGE] + _MESSAGE_CUT.format(n=len(text) - MAX_MESSAGE)


@attrs.frozen(kw_only=True)
class Caught:
    """An exception as a failure record keeps it: ``error_type`` its class name, ``message``
    the ``Type: text`` line (not yet redacted: the caller redacts it where it is stored, as
    every error text), ``traceback`` already redacted and bounded."""

    error_type: str
    message: str
    traceback: str


def clamp_traceback(text: str) -> str:
    """``text`` cut to its last ``MAX_TRACEBACK_BYTES`` bytes of UTF-8, saying so."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= MAX_TRACEBACK_BYTES:
        return text
    room = MAX_TRACEBACK_BYTES - len(_CUT.format(n=len(data)).encode())
    tail = data[len(data) - room :].decode("utf-8", errors="ignore")
    cut = len(data) - len(tail.encode("utf-8"))
    return _CUT.format(n=cut) + tail


def describe(exc: BaseException) -> Caught:
    """``exc`` as a failure keeps it (O2): the message and the traceback are redacted (E5)
    before they are cut, so a cut never leaves part of a secret unmasked, and made valid
    UTF-8. Reads source files: see :func:`describe_off_loop`."""
    name = _storable(type(exc).__name__[:MAX_TYPE_NAME])
    try:
        lines = tb.TracebackException.from_exception(exc, limit=-MAX_FRAMES).format()
        text = "".join(lines)
    except Exception as problem:  # a broken __str__ or __repr__ of the user's exception
        text = f"(its traceback could not be formatted: {type(problem).__name__})\n"
    message = _line(exc, name)
    if isinstance(exc, BaseExceptionGroup):
        # "ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)" says nothing
        # of why: the errors inside are named too (a tool that runs a task group fails so).
        leaves = _leaves(exc)
        named = leaves[:_GROUP_LEAVES]
        inner = "; ".join(_line(leaf, type(leaf).__name__[:MAX_TYPE_NAME]) for leaf in named)
        more = len(leaves) - len(named)
        message += f": {inner}" + (f"; and {more} more" if more > 0 else "")
    return Caught(
        error_type=name,
        message=clamp_message(redact(_storable(message))),
        traceback=clamp_traceback(redact(_storable(text))),
    )


def _line(exc: BaseException, name: str) -> str:
    try:
        return f"{name}: {exc}"
    except Exception:  # a broken __str__ of the user's exception
        return f"{name}: (its message could not be read)"


#: How many of an exception group's errors its message names, and how many it counts.
_GROUP_LEAVES = 5
_GROUP_COUNT = 10_000


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The group's errors that are not groups, depth first, at most ``_GROUP_COUNT`` (a
    group may nest deeply or hold many)."""
    found: list[BaseException] = []
    pending: list[BaseException] = [group]
    seen: set[int] = set()
    while pending and len(found) < _GROUP_COUNT:
        exc = pending.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(reversed(exc.exceptions))
        else:
            found.append(exc)
    return found


async def describe_off_loop(exc: BaseException) -> Caught:
    """:func:`describe` in a worker thread: formatting reads the source lines it shows."""
    return await anyio.to_thread.run_sync(describe, exc)


def log_failure(
    what: str,
    *,
    execution_id: str,
    error: str | None,
    step_id: str | None = None,
    agent_task_id: str | None = None,
    traceback: str | None = None,
    attempt: object = None,
    level: int = logging.ERROR,
) -> None:
    """Log one failure (O2): ``execution <id>: <what>: <error>`` on one line, then its
    traceback indented, characters a terminal would act on shown as escapes.
    ``what`` names the failed thing (``step s1 (tool fetch) failed on attempt 2``);
    ``level`` is ERROR for a failure for good, WARNING for an attempt that will be retried.
    The ids are also on the record (``execution_id``, ``step_id``, ``task_id`` and its
    older name ``agent_task_id``, ``attempt`` when counted, ``status``) for handlers that
    format them. Everything is redacted again here (E5): a log line is disk too."""
    if not logger.isEnabledFor(level):
        return
    extra: Mapping[str, object] = {
        "execution_id": execution_id,
        "step_id": step_id,
        "task_id": agent_task_id,
        "agent_task_id": agent_task_id,
        "attempt": attempt if type(attempt) is int else None,
        "status": "failed" if level >= logging.ERROR else "retrying",
    }
    text = f"execution {execution_id}: {what}"
    if error:  # on the first line: its line breaks too are shown as escapes
        text += f": {_inert(clamp_message(redact(_storable(error))), keep='')}"
    if traceback:
        # Indented: no line of it (an error's text spans lines too) can pass for a record.
        kept = _inert(clamp_traceback(redact(_storable(traceback))).rstrip("\n"))
        text += "".join(f"\n  {line}" for line in kept.split("\n"))
    logger.log(level, "%s", text, extra=extra)


def log_dropped(
    what: str, exc: BaseException, *, execution_id: str, level: int = logging.DEBUG
) -> None:
    """Log an error that was handled by carrying on without it (a best-effort release, a
    record read for a better answer), so that none passes silently. Its type and message
    only, redacted (E5): formatting a traceback reads source files, which the event loop
    must not; a message too long to redact on the loop is left out, never cut unredacted."""
    if not logger.isEnabledFor(level):
        return
    name = type(exc).__name__[:MAX_TYPE_NAME]
    error = _line(exc, name)
    if len(error) > MAX_MESSAGE:
        error = f"{name}: (its message, {len(error):,} characters, is left out here)"
    log_failure(what, execution_id=execution_id, error=error, level=level)


def _inert(text: str, keep: str = "\n\t") -> str:
    """``text`` with every character a terminal acts on (escape sequences, carriage
    returns, bells, bidi overrides) shown as its escape: an error's text is anyone's (a
    server's response), and a log is often read on a terminal. Characters in ``keep`` stay:
    a traceback's lines stay lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else ascii(c)[1:-1] for c in text)
