"""The demos behind ``mainspring demo`` and ``mainspring demo-reasons``.

Private, and imported only when one of those commands runs: the other commands never pay for
them. ``python -m mainspring._demos --worker ...`` is the durable demo's worker process.
"""

from ._durable import run_demo as run_durable_demo
from ._reasons import REASONS as REASONS
from ._reasons import run_demo as run_reasons_demo

__all__ = ["REASONS", "run_durable_demo", "run_reasons_demo"]
