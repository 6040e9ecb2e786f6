"""What a step's output becomes on its way to disk: redacted (E5), storable exactly (E10),
bounded (X2); and the real values a runtime keeps in memory where disk holds a mask."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import attrs

from ..storage import StorageError, encode, encode_value, redact_flagged

__all__ = [
    "MAX_KEPT_RESULTS",
    "MAX_OUTPUT_BYTES",
    "Stored",
    "keep_result",
    "prepare_output",
    "prepare_output_off_loop",
]

MAX_OUTPUT_BYTES = 1 << 20


MAX_KEPT_RESULTS = 1_000


def keep_result(kept: dict[tuple[str, str], Any], key: tuple[str, str], value: Any) -> None:
    """Keep the real result of an inner step whose stored result is masked, so a resume in
    this process replays it exactly (E10) instead of running it again; the oldest go first."""
    kept.pop(key, None)
    kept[key] = value
    while len(kept) > MAX_KEPT_RESULTS:
        del kept[next(iter(kept))]


@attrs.frozen
class Stored:
    """An output as it will be stored: redacted (E5), and whether redaction changed it."""

    value: Any
    redacted: bool


def prepare_output(value: Any, what: str) -> Stored | str:
    """``value`` as it will be stored, or why it cannot be: redacted (E5), it must come back
    exactly from the typed encoding (E10: refused, never coerced), and stay within 1 MiB as
    stored — masks included — so that one output can never make its execution's record
    unwritable (X2). Done once, in the step's own actor, and handed on."""
    try:
        encode_value(value)  # E10: what it is, not what redaction makes of it (a subclass)
        masked, redacted = redact_flagged(value)
        size = len(encode(encode_value(masked)))
    except (ValueError, TypeError, StorageError) as exc:
        return f"{what} is not storable: {exc}"
    if size > MAX_OUTPUT_BYTES:
        return f"{what} is too large to store: {size:,} bytes, more than {MAX_OUTPUT_BYTES:,}"
    return Stored(masked, redacted)


async def prepare_output_off_loop(value: Any, what: str) -> Stored | str:
    """:func:`prepare_output` in a worker thread (STYLE 10): redacting an output of up to a
    megabyte (a program's, say) takes a good part of a second, too long to hold the event
    loop that renews every run's lease."""
    return await anyio.to_thread.run_sync(prepare_output, value, what)
