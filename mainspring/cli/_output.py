"""What the command prints: redacted lines, tables and JSON on stdout; notes and errors on
stderr (so ``--json`` output stays parseable)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from .._redaction import masked
from ._console import can_encode

#: How wide a goal is shown where the terminal's width is unknown (output to a pipe).
GOAL_WIDTH = 40
#: The narrowest a column cut to fit the terminal gets.
_NARROWEST = 8


def terminal_width() -> int | None:
    """The terminal's width in columns (``$COLUMNS`` first, as ``shutil`` reads it); None
    when there is no terminal to fit (output to a pipe or a file)."""
    columns = shutil.get_terminal_size(fallback=(0, 0)).columns
    return columns if columns > 0 else None


class Out:
    """Where a command writes its results: plain text or JSON, colored on a terminal.

    ``width`` is the terminal's (None: unknown); ``ellipsis`` what ends cut text: "…",
    or "..." where the stream cannot encode it (U1)."""

    def __init__(
        self, stream: TextIO, *, as_json: bool, color: bool, width: int | None = None
    ) -> None:
        self.stream = stream
        self.as_json = as_json
        self.color = color
        self.width = width
        self.ellipsis = "\u2026" if can_encode(stream, "\u2026") else "..."

    def line(self, text: str = "") -> None:
        print(masked(text), file=self.stream, flush=True)

    def data(self, value: Any) -> None:
        print(json.dumps(_redact(value), default=str), file=self.stream, flush=True)

    def warn(self, message: str) -> None:
        """A note on stderr (stdout stays parseable): JSON too with ``--json``."""
        say({"warning": message} if self.as_json else message)

    def paint(self, text: str, status: str) -> str:
        if not self.color:
            return text
        code = {
            "completed": "32",
            "succeeded": "32",
            "failed": "31",
            "cancelled": "33",
            "stopped": "33",
            "paused": "33",
            "running": "36",
        }.get(status, "35" if status.startswith("waiting") else "")
        return f"\x1b[{code}m{text}\x1b[0m" if code else text

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        status_col: int = -1,
        *,
        fit: int = -1,
    ) -> None:
        """Rows under upper-case headers, columns padded to line up. Column ``fit`` (a free
        text one, like a goal) is cut with the ellipsis so that lines fit the terminal; with
        no terminal it is cut at ``GOAL_WIDTH``."""
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        if fit >= 0:
            others = sum(w for i, w in enumerate(widths) if i != fit) + 2 * (len(widths) - 1)
            room = GOAL_WIDTH if self.width is None else self.width - others
            limit = max(room, _NARROWEST, len(headers[fit]))
            if widths[fit] > limit:
                widths[fit] = limit
                rows = [
                    [*row[:fit], clamp(row[fit], limit, self.ellipsis), *row[fit + 1 :]]
                    for row in rows
                ]
        header = "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))
        self.line(header.rstrip())
        for row in rows:
            cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
            if status_col >= 0:
                cells[status_col] = self.paint(cells[status_col], row[status_col])
            self.line("  ".join(cells).rstrip())


def clamp(text: str, width: int, ellipsis: str = "\u2026") -> str:
    """``text`` on one line of at most ``width`` characters, redacted, every character a
    terminal would act on (escape sequences, bells, backspaces, bidi overrides) shown as its
    escape instead: stored text is anyone's, and must not drive the reader's terminal. Cut
    text ends with ``ellipsis`` ("..." where the output cannot encode "…": U1)."""
    text = " ".join(masked(text).split())  # redacted before it is cut: a cut secret would leak
    text = "".join(c if c.isprintable() else _escaped(c) for c in text)
    return text if len(text) <= width else text[: width - len(ellipsis)] + ellipsis


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on shown as its escape (as
    :func:`clamp` does, without cutting it): for text read from a store (an owner id, a
    finding's detail) that is printed whole."""
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    return ascii(char)[1:-1]  # \x1b, \u202e: what the character is, in plain ASCII


def when(at: float) -> str:
    """A timestamp in local time; a strange but valid one as its number."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    except (OverflowError, ValueError, OSError):  # a strange but valid timestamp
        return repr(at)


def say(message: str | dict[str, Any]) -> None:
    """One line on stderr, redacted: ``mainspring: ...``, or a JSON object."""
    if isinstance(message, dict):
        print(json.dumps(_redact(message), default=str), file=sys.stderr, flush=True)
    else:
        print(f"mainspring: {masked(message)}", file=sys.stderr, flush=True)


def fail(message: str, code: int, *, as_json: bool = False) -> int:
    """Report an error on stderr (``{"error": ..., "code": N}`` with --json); return code.

    The message is masked as text: what :func:`say` would print, without loading the stores
    (a usage error never does)."""
    if as_json:
        error = {"error": masked(message), "code": code}  # neither key names a secret
        print(json.dumps(error, default=str), file=sys.stderr, flush=True)
    else:
        print(f"mainspring: {masked(message)}", file=sys.stderr, flush=True)
    return code


def _redact(value: Any) -> Any:
    """``value`` redacted as stored values are (records, dicts and their key names): loaded
    by the first command that prints one, never by ``--version``, ``--help`` or a usage
    error."""
    from ..storage import redact

    return redact(value)
