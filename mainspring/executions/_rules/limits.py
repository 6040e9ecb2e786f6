"""Bounds every layer of a run shares (X2): how large a stored output may be.

Kept here, below steps and programs alike, so that a program's captured output and a step's
stored output are cut against the same figure.
"""

from __future__ import annotations

__all__ = ["MAX_OUTPUT_BYTES"]

#: The largest encoded output (a step's, an agent's, a program's captured result) a run
#: stores: 1 MiB. Larger outputs fail their step with a clear error instead of bloating the
#: journal (X2).
MAX_OUTPUT_BYTES = 1 << 20
