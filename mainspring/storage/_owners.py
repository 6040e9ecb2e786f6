"""Lease owner ids that say which process holds a lease, and whether that process is gone.

An owner id is ``host:pid:random:started.boot.ns``: the sanitised hostname, the process id, a
random token (unique per runtime), and the process's start time (clock ticks after boot,
``/proc/<pid>/stat`` field 22; 0 where the system does not say), this machine's boot id (its
first 12 hex digits) and its pid namespace (containers sharing a kernel and a hostname are
told apart). A suffix after another ``:`` (``:ops``) names a helper of the same process.

Invariant L7: a lease whose owner is a process of *this* host (same hostname, boot id and pid
namespace) that is gone -- no such pid, a zombie, or a pid reused by a process that started
at another time -- is free at once. A lease of another host, of an owner id this module
cannot read (older records, ids given by hand), or of a process alive with the same start
time is never judged gone: only its expiry frees it (L1). Taking a gone owner's lease is
still one compare-and-set on the owner and epoch seen (``acquire(..., gone=lease)``), so
two recovering runtimes cannot both win.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import socket
from pathlib import Path

import attrs

__all__ = ["OwnerProcess", "new_owner_id", "owner_gone", "owner_here", "owner_process"]

_PROC = Path("/proc")
_HOST_CHARS = re.compile(r"[^A-Za-z0-9.-]")
_OWNER = re.compile(
    r"(?P<host>[A-Za-z0-9.-]{1,64}):(?P<pid>[0-9]{1,10}):[0-9a-f]{8}"
    r":(?P<started>[0-9]{1,20})\.(?P<boot>[0-9a-f]{0,12})\.(?P<ns>[0-9]{0,20})(?::.*)?"
)


@attrs.frozen(kw_only=True)
class OwnerProcess:
    """The process an owner id names: host (hostname, boot id, pid namespace), pid and
    start time (0: unknown)."""

    host: str
    boot: str
    ns: str
    pid: int
    started: int


def _hostname() -> str:
    return _HOST_CHARS.sub("-", socket.gethostname())[:64] or "host"


def _read(path: Path, limit: int) -> str:
    try:
        with path.open("rb") as file:
            return file.read(limit).decode("ascii", "replace").strip()
    except OSError:
        return ""


class _Unknown(Exception):
    """``/proc`` could not say (out of file descriptors, denied, an odd read)."""


def _start_ticks(pid: int) -> tuple[str, int] | None:
    """``(state, start time)`` of ``pid`` from ``/proc/<pid>/stat``, or None if there is no
    such process. Raises :class:`_Unknown` when that cannot be told (L7: in doubt, an owner
    is alive). The command name may hold spaces and parentheses: fields are counted after
    its last ``)``. Blocking (one small read)."""
    try:
        with (_PROC / str(pid) / "stat").open("rb") as file:
            raw = file.read(4096).decode("ascii", "replace").strip()
    except (FileNotFoundError, ProcessLookupError):
        if _no_such_pid(pid):
            return None
        raise _Unknown("the process is there but /proc does not show it") from None
    except OSError as exc:
        raise _Unknown(str(exc)) from None
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return rest[0], int(rest[19])
    except (IndexError, ValueError):
        raise _Unknown("unreadable stat") from None


def _no_such_pid(pid: int) -> bool:
    """Whether the kernel has no process ``pid`` in our pid namespace: ``/proc`` can hide
    processes of other users (``hidepid``) that ``kill(pid, 0)`` still finds."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OverflowError:
        return True  # past any pid the kernel hands out
    except OSError:
        return False  # EPERM: it exists, another user's
    return False


@functools.cache
def _this_host() -> tuple[str, str, str]:
    boot = _read(_PROC / "sys" / "kernel" / "random" / "boot_id", 64).replace("-", "")[:12]
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    digits = "".join(c for c in ns if c.isdigit())[:20]
    return _hostname(), boot.lower() if re.fullmatch(r"[0-9a-fA-F]*", boot) else "", digits


def new_owner_id() -> str:
    """``host:pid:random:started.boot.ns``: unique per runtime, readable in listings, and
    enough for another runtime on this host to tell whether the process is gone (L7)."""
    host, boot, ns = _this_host()
    pid = os.getpid()
    try:
        stat = _start_ticks(pid)
    except _Unknown:
        stat = None
    started = stat[1] if stat is not None else 0
    return f"{host}:{pid}:{secrets.token_hex(4)}:{started}.{boot}.{ns}"


def owner_process(owner: str) -> OwnerProcess | None:
    """The process ``owner`` names, or None for an id of another form (older records, ids
    given by hand): such an owner is never judged gone."""
    if not isinstance(owner, str) or len(owner) > 512:
        return None
    match = _OWNER.fullmatch(owner)
    if match is None:
        return None
    return OwnerProcess(
        host=match["host"],
        boot=match["boot"],
        ns=match["ns"],
        pid=int(match["pid"]),
        started=int(match["started"]),
    )


def owner_here(owner: str) -> bool:
    """Whether ``owner`` names a process of this host (same hostname, boot id and pid
    namespace): only such an owner can be found gone. Reads nothing but a cache."""
    process = owner_process(owner)
    host, boot, ns = _this_host()
    return (
        process is not None
        and bool(boot and ns)
        and (process.host, process.boot, process.ns) == (host, boot, ns)
    )


def owner_gone(owner: str) -> bool:
    """Whether ``owner`` is a process of this host that is gone (L7). Blocking: reads
    ``/proc`` (call it from a worker thread).

    False whenever in doubt: another host (hostname, boot id or pid namespace differ), a
    system without ``/proc`` (no boot id or namespace to compare), an owner id of another
    form, a pid alive with the same start time, a live pid when the owner's start time
    was not known, or a process ``/proc`` cannot tell about (no file descriptor left, access
    denied, hidden by ``hidepid``: the kernel is asked with ``kill(pid, 0)``)."""
    process = owner_process(owner)
    if process is None or process.pid <= 0 or not owner_here(owner):
        return False
    try:
        stat = _start_ticks(process.pid)
    except _Unknown:
        return False  # /proc could not say (no descriptor left, denied): in doubt, alive
    if stat is not None:
        state, started = stat
        if state in ("Z", "X"):
            return True  # it exited; only its exit status is left
        # A pid reused by a later process is another process: the owner is gone.
        return process.started != 0 and started != process.started
    # /proc works here (the boot id was read from it) and the kernel has no such pid.
    return True
