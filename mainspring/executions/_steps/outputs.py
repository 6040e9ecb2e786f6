"""What a step's output becomes on its way to disk: redacted (E5), storable exactly (E10),
bounded (X2); and the real values a runtime keeps in memory where disk holds a mask."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import attrs

from ...storage import StorageError
from ...storage._seam import Encoded, encode_value, redact_flagged
from .._rules.limits import MAX_OUTPUT_BYTES

__all__ = [
    "MAX_KEPT_RESULTS",
    "MAX_OUTPUT_BYTES",
    "Stored",
    "keep_result",
    "prepare_output",
    "prepare_output_off_loop",
]


MAX_KEPT_RESULTS = 1_000

#: Outputs stored as they are when their encoding is themselves (a finite float, an int in
#: range, a bool, None).
_NUMBERS = frozenset({int, float, bool, type(None)})


def keep_result(kept: dict[tuple[str, str], Any], key: tuple[str, str], value: Any) -> None:
    """Keep the real result of an inner step whose stored result is masked, so a resume in
    this process replays it exactly (E10) instead of running it again; the oldest go first."""
    kept.pop(key, None)
    kept[key] = value
    while len(kept) > MAX_KEPT_RESULTS:
        del kept[next(iter(kept))]


@attrs.frozen
class Stored:
    """An output as it will be stored: redacted (E5), whether redaction changed it, and its
    stored form, encoded once here and carried beside the observation to the store
    (``carry_encoded``), which writes those bytes instead of encoding it again."""

    value: Any
    redacted: bool
    encoded: Encoded | None = attrs.field(default=None, eq=False, repr=False)


def prepare_output(value: Any, what: str) -> Stored | str:
    """``value`` as it will be stored, or why it cannot be: redacted (E5), it must come back
    exactly from the typed encoding (E10: refused, never coerced), and stay within 1 MiB as
    stored — masks included — so that one output can never make its execution's record
    unwritable (X2). Done once, in the step's own actor, and handed on."""
    try:
        typed = encode_value(value)  # E10: what it is, not what redaction makes of it
        if typed is value and type(value) in _NUMBERS:
            # A number (or None) stored as itself: it holds no text to mask (E5) and its
            # JSON is a few bytes (X2): nothing more to do; the store encodes it (cheaply).
            return Stored(value, False)
        masked, redacted = redact_flagged(value)
        # Encoded once: a value redaction left alone is stored as it was encoded above, and
        # these bytes are what the store writes (the typed encoding holds no NaN: tagged).
        encoded = Encoded.made(masked, encode_value(masked) if redacted else typed)
    except (ValueError, TypeError, StorageError) as exc:
        return f"{what} is not storable: {exc}"
    size = encoded.size
    if size > MAX_OUTPUT_BYTES:
        return f"{what} is too large to store: {size:,} bytes, more than {MAX_OUTPUT_BYTES:,}"
    return Stored(masked, redacted, encoded)


#: An output whose strings and items add up to less than this is prepared on the event loop:
#: a thread hop would cost more than the work (most outputs, and every step of a long agent
#: loop, are small).
_INLINE_BUDGET = 16_384


def _small(value: Any) -> bool:
    """Whether ``value`` is cheap to prepare: a bounded walk that gives up (False) as soon as
    its strings, bytes and items pass ``_INLINE_BUDGET``, so it costs little either way."""
    budget = _INLINE_BUDGET
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is bytes:
            budget -= len(item) + 1
        elif kind is dict:
            budget -= len(item) + 1
            stack.extend(item.keys())
            stack.extend(item.values())
        elif kind in (list, tuple, set, frozenset):
            budget -= len(item) + 1
            stack.extend(item)
        elif item is None or kind in (int, float, bool):
            budget -= 1
        else:
            return False  # anything else may hide any amount of work: off the loop
        if budget < 0:
            return False
    return True


async def prepare_output_off_loop(value: Any, what: str) -> Stored | str:
    """:func:`prepare_output`, in a worker thread unless the output is small (STYLE 10):
    redacting an output of up to a megabyte (a program's, say) takes a good part of a
    second, too long to hold the event loop that renews every run's lease."""
    if _small(value):
        return prepare_output(value, what)
    return await anyio.to_thread.run_sync(prepare_output, value, what)
