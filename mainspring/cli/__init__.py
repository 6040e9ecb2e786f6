"""The ``mainspring`` command: see and steer durable executions from outside the process
that runs them.

Reads go straight to the store and never write (E7). ``pause``, ``cancel`` and
``stop-task`` need no user code: they are out-of-band edits that a live runner meets at its
next heartbeat. ``resume`` runs user code, so it needs ``--app module:attr`` naming the
runtime configuration, the way ASGI servers name an app. ``memory ls | search`` read the
facts agents remember (read-only too); ``memory forget`` deletes one through a runtime.
``workers [ID]`` shows external agent workers, their tasks and diagnostic trail (a read).
``ui`` serves a local web view of the runs (the ``ui`` extra), with the same controls.
Everything printed is redacted.

Exit codes: 0 all well; 1 the operation was refused or ``doctor`` found problems; 2 usage;
3 unknown id; 4 busy (another owner holds the lease); 5 no usable store; 130 stopped by
Ctrl-C (no traceback). Output survives any stdout encoding (ASCII stand-ins).
"""

from ._codes import EXIT_BUSY as EXIT_BUSY
from ._codes import EXIT_FAILED as EXIT_FAILED
from ._codes import EXIT_NO_STORE as EXIT_NO_STORE
from ._codes import EXIT_OK as EXIT_OK
from ._codes import EXIT_UNKNOWN as EXIT_UNKNOWN
from ._codes import EXIT_USAGE as EXIT_USAGE
from ._codes import CliError as CliError
from ._main import main as main

__all__ = [
    "EXIT_BUSY",
    "EXIT_FAILED",
    "EXIT_NO_STORE",
    "EXIT_OK",
    "EXIT_UNKNOWN",
    "EXIT_USAGE",
    "CliError",
    "main",
]
