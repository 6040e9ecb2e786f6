"""How the kernel and its overseers log a crash: the exception's traceback as text, passed
through the scrubber the durable layer installs, never through ``exc_info`` (which would let a
handler print the exception's text as it is: E5, O1).

The text rule of redaction (credential shapes, the secrets ``register_secret`` registered) is
``mainspring._redaction``, which imports nothing of mainspring: the kernel masks with it
whether or not the stores were ever imported (a program of actors alone loads no storage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

__all__ = ["MAX_LOGGED_TRACEBACK", "log_error", "scrub"]

#: The most characters of one traceback a log record carries (O2: bounded); the end is kept,
#: where the raising line is.
MAX_LOGGED_TRACEBACK = 8_192


def scrub(text: str) -> str:
    """``text`` with every credential shape and registered secret masked (E5)."""
    from .._redaction import masked  # on first use: ``import mainspring`` compiles no pattern

    return masked(text)


def log_error(
    logger: logging.Logger,
    message: str,
    *args: object,
    exc: BaseException | None = None,
    **extra: object,
) -> None:
    """Log ``message % args`` at ERROR, with ``exc``'s traceback appended as scrubbed text;
    ``extra`` becomes the record's fields. Nothing is formatted when ERROR is off."""
    import logging  # on first use: ``import mainspring`` need not load logging
    import traceback

    if not logger.isEnabledFor(logging.ERROR):
        return
    text = message % args if args else message
    if exc is not None:
        lines = "".join(traceback.format_exception(exc))
        if len(lines) > MAX_LOGGED_TRACEBACK:
            lines = "...\n" + lines[-MAX_LOGGED_TRACEBACK:]
        text = f"{text}\n{lines.rstrip()}"
    logger.error("%s", scrub(text), extra=extra or None)
