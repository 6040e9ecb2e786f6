"""The process's own stdout and stderr, made safe for any encoding.

A terminal or pipe that cannot encode a character (``PYTHONIOENCODING=ascii``, a Latin-1
console) gets a plain ASCII stand-in instead of a ``UnicodeEncodeError``: "..." for "…",
"-" for a dash, "e" for "é", and the character's escape (``\\u2603``) when nothing closer
exists. Invariant U1: nothing the command prints can crash it on an encoding.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import unicodedata
from typing import TextIO

#: The name of the codec error handler the command's streams use (U1).
ERRORS = "mainspring-ascii"

#: Characters the command itself prints, or that goals often hold, and their ASCII stand-ins.
_STAND_INS = {
    "\u2026": "...",  # horizontal ellipsis
    "\u2013": "-",  # en dash
    "\u2014": "-",  # em dash
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2192": "->",
    "\u2190": "<-",
    "\u2264": "<=",
    "\u2265": ">=",
    "\u00d7": "x",
    "\u2022": "*",
    "\u00a0": " ",
}


def ascii_stand_in(char: str) -> str:
    """``char`` in plain ASCII: a known stand-in, else its decomposition without accents
    ("é" -> "e"), else its escape."""
    known = _STAND_INS.get(char)
    if known is not None:
        return known
    plain = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode("ascii")
    if plain and plain.isprintable():
        return plain
    return ascii(char)[1:-1]


def _handler(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    return "".join(ascii_stand_in(c) for c in text), exc.end


def _register() -> None:
    try:
        codecs.lookup_error(ERRORS)
    except LookupError:
        codecs.register_error(ERRORS, _handler)


def make_safe(stream: TextIO) -> None:
    """Let ``stream`` (the process's stdout or stderr) write anything: what its encoding
    cannot hold is written as an ASCII stand-in (U1). An error policy the user chose
    (``PYTHONIOENCODING=ascii:replace``) is kept, and so is stderr's (Python's default,
    ``backslashreplace``, never fails: an id echoed in an error stays exact)."""
    _register()
    if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
        with contextlib.suppress(ValueError, OSError):  # closed, or not reconfigurable
            stream.reconfigure(errors=ERRORS)


def can_encode(stream: TextIO, text: str) -> bool:
    """Whether ``stream`` writes ``text`` as it is (an in-memory stream always does)."""
    encoding = getattr(stream, "encoding", None)
    if not encoding:
        return True
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True
