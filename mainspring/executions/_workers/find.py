"""Finding the process of a worker start that was never recorded (#17, R3).

A runtime that dies between ``starting`` (committed) and recording the new process's
identity leaves a worker whose process may or may not exist. The built-in subprocess host
gives every process its session in ``MAINSPRING_WORKER_SESSION``, which its children
inherit: on the same machine, the processes of that start are found by reading
``/proc/<pid>/environ``. None found means none of that start is alive here, so a takeover
may go on; a host that cannot search (another kind, no ``/proc``), or a start recorded on
another machine, cannot confirm anything and the takeover is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio.to_thread

from ...storage._seam import ProcessIdentity
from .._programs.proctree import HAVE_PROC
from .subprocess_host import SubprocessHost, process_stat

__all__ = ["find_start", "host_of"]

_PROC = Path("/proc")
_MAX_ENVIRON = 1 << 20  # bytes read of one process's environment


def host_of(host: Any) -> str | None:
    """The machine id a host's processes carry, if it can search for them (else None)."""
    if isinstance(host, SubprocessHost) and HAVE_PROC:
        return host.host
    return None


def _scan(session: str) -> list[ProcessIdentity]:
    needle = f"MAINSPRING_WORKER_SESSION={session}".encode()
    found: list[ProcessIdentity] = []
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            with open(_PROC / entry.name / "environ", "rb") as handle:
                environ = handle.read(_MAX_ENVIRON)
        except OSError:  # gone, or not ours to read
            continue
        if needle not in environ.split(b"\0"):
            continue
        pid = int(entry.name)
        stat = process_stat(pid)
        if stat is not None:
            found.append(ProcessIdentity(host="", pid=pid, group=stat[1], started=stat[2]))
    return found


async def find_start(host: Any, session: str) -> list[ProcessIdentity] | None:
    """The live processes of the start with ``session`` on this machine (children too), or
    None when ``host`` cannot search."""
    name = host_of(host)
    if name is None:
        return None
    found = await anyio.to_thread.run_sync(_scan, session)
    return [ProcessIdentity(host=name, pid=p.pid, group=p.group, started=p.started) for p in found]
