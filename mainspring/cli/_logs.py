"""``--log-level``: the command is an application, so it may configure logging, and does
only when asked: the library's records (every ``mainspring.*`` logger) go to stderr for as
long as the command runs, one line each, or one JSON object each with ``--json`` (the
message and the record's fields: ``execution_id``, ``step_id``, ``status``...).

Without ``--log-level`` nothing is configured, and nothing is printed (O1).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator

from .._redaction import masked

__all__ = ["logger", "logging_to_stderr"]

#: The command's own logger: each command's start and end at DEBUG.
logger = logging.getLogger("mainspring.cli")

#: The attributes every LogRecord has: the rest came in ``extra``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class _Lines(logging.Formatter):
    """``LEVEL logger: message``, redacted like everything the command prints."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname} {record.name}: {masked(record.getMessage())}"


class _Json(logging.Formatter):
    """One JSON object per record: ``log`` (its level), ``logger``, ``message``, ``at``
    (epoch seconds) and the fields the record carries."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            key: value
            for key, value in record.__dict__.items()
            if key not in _STANDARD and not key.startswith("_")
        }
        line = {
            "log": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "at": record.created,
            **fields,
        }
        from ..storage import redact  # the fields may be any values: walked as stored ones

        return json.dumps(redact(line), default=str)


@contextlib.contextmanager
def logging_to_stderr(level: str | None, *, as_json: bool) -> Iterator[None]:
    """While the command runs, the ``mainspring`` logger's records at ``level`` and above
    go to stderr (nothing when ``level`` is None); as it was again afterwards."""
    if level is None:
        yield
        return
    root = logging.getLogger("mainspring")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json() if as_json else _Lines())
    before = root.level
    root.addHandler(handler)
    root.setLevel(level.upper())
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
