"""Test doubles for programs built on mainspring: fast, deterministic, documented.

- :class:`MemoryStore`: a store that keeps everything in memory and makes the same
  decisions as the real ones (``open_runtime(store=MemoryStore())``).
- :class:`ManualClock`: a clock the test moves by hand, for leases, restart windows and
  backoff (``clock.advance(30)``).
- :class:`ScriptedHost`: a worker host that plays scripts instead of running processes, for
  tests of worker-backed agents (``WorkerAgent(host=ScriptedHost([...]), ...)``).

Importing it loads the durable layer (``mainspring.executions``, ``mainspring.storage``).
"""

from .._public import publish
from ._clock import ManualClock as ManualClock
from ._scripted import ScriptedHost as ScriptedHost
from ._store import MemoryStore as MemoryStore

__all__ = ["ManualClock", "MemoryStore", "ScriptedHost"]

publish(__name__, globals(), __all__)
