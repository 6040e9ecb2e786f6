"""Finding and stopping the whole process tree of a program the runtime started.

A program is started in a session of its own (``start_new_session=True``), so its pid is
also its session id and process group id. Its tree is found on Linux by walking the parent
links in ``/proc/*/stat`` from the program's pid, plus every process whose session is the
program's: that backstop finds orphans that were re-parented to init (or to a subreaper)
when their parent exited. On other POSIX systems, without ``/proc``, the tree is the
program's process group, signalled with ``killpg``.

Stopping is SIGTERM to every member, leaves first (so a parent does not see its children die
and start new ones before it is itself told to stop), a grace, then SIGKILL to every member
still alive, found again (a member may have forked meanwhile), and to every process signalled
before that still lives, in the tree or not: one told to stop may leave the tree meanwhile
(``setsid`` and ignore SIGTERM, re-parented to init when its parent dies of it), and no scan
would find it again. A stop therefore keeps each process it signalled, by pid and start time,
until it is confirmed dead (B2). A process that is gone (``ESRCH``) or a zombie counts as
stopped; a member is signalled only while its start time is the one the scan saw, through a
pidfd where the system has them (B2). The blocking ``/proc`` reads run in a worker thread
(STYLE 10); the caller runs :func:`stop_tree` in a shielded scope with its own deadline
(STYLE 5).

A scan reads every process's ``stat``, and is most of what a stop costs: so the grace awaits
the program's own exit where the caller can (``exited``), watches the members it knows one
by one (pid and start time), polls from a millisecond doubling to :data:`_POLL`, and scans
again only once they are gone; the stops in flight on one event loop share their scans.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

__all__ = ["HAVE_PROC", "Member", "alive", "stop_tree", "tree_of"]

_PROC = Path("/proc")
#: Whether this system has a Linux-style ``/proc`` to walk.
HAVE_PROC = (_PROC / "self" / "stat").exists()
#: How often the grace polls whether the tree is gone.
_POLL = 0.01
#: How long SIGKILL rounds go on at most (each finds the tree again and kills what it finds).
_KILL_TIME = 2.0
#: Without /proc, how long to wait at most for a killed group to be gone.
_GROUP_SETTLE = 0.5

#: One process of a tree: its pid and its depth below the program (the program is 0; an
#: orphan found by its session alone counts as a leaf, depth -1 sorts it first).
Member = tuple[int, int]
#: What a scan says of each process: pid -> ``(state, ppid, session, start time)``.
_Table = dict[int, tuple[str, int, int, int]]


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, session, start time)`` of ``pid`` from ``/proc/<pid>/stat`` (fields
    3, 4, 6 and 22), or None if it is gone.

    The command name (field 2) is in parentheses and may hold spaces and parentheses itself,
    so the fields are read after its last ``)``. Read with bare ``os`` calls: a scan reads
    one such file per process of the system, and is most of what a stop costs.
    """
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:  # gone (ENOENT, ESRCH), not ours to read, or not a directory
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    rest = raw[raw.rfind(b")") + 2 :].split()
    try:
        return rest[0].decode("ascii", "replace"), int(rest[1]), int(rest[3]), int(rest[19])
    except (IndexError, ValueError):
        return None


def _scan() -> _Table:
    """Every process of the system: pid -> ``(state, ppid, session, start time)``."""
    found: _Table = {}
    try:
        names = os.listdir(_PROC)
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                found[int(name)] = stat
    return found


def tree_of(root: int, *, reaped: bool = False) -> list[Member]:
    """The live members of ``root``'s tree, leaves first (blocking: reads ``/proc``).

    Members are ``root`` itself if it is alive, its descendants by parent links, and every
    process whose session is ``root`` (orphans of the tree). Zombies are left out: they are
    already stopped and only wait for their parent to reap them.

    If ``root`` was ``reaped``, the tree is what is left of its session, walked down from
    the members whose parent is outside it: a dead program has no children of its own (they
    were re-parented when it exited), so a process naming its pid as parent belongs to
    someone else. Its pid is not reused while a member of its session lives (nor is the
    session id); a live process with that pid, after the reap or not leading its session,
    is a stranger, and the tree is empty (B2).
    """
    return _tree(root, reaped, _scan())


def _tree(root: int, reaped: bool, table: _Table) -> list[Member]:
    """:func:`tree_of` in ``table``, one scan of ``/proc``."""
    if root in table and (reaped or table[root][2] != root):
        # The pid was given to another process (a program leads its own session to its
        # end, a stranger does not; asyncio may reap before ``reaped`` says so): nothing
        # of the tree is left, since the pid is only reused once its session is empty.
        return []
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    depth: dict[int, int] = {}
    if reaped:
        left = {pid for pid, (_, _, sid, _) in table.items() if sid == root}
        frontier = [(pid, 0) for pid in left if table[pid][1] not in left]
    else:
        frontier = [(root, 0)]
    while frontier:
        pid, level = frontier.pop()
        if pid in depth:
            continue
        depth[pid] = level
        frontier.extend((child, level + 1) for child in children.get(pid, ()))
    for pid, (_, _, session, _) in table.items():
        if session == root and pid not in depth:
            depth[pid] = -1  # re-parented away from the tree: found by its session alone
    members = [
        (pid, level)
        for pid, level in depth.items()
        if pid in table and table[pid][0] not in ("Z", "X")
    ]
    # Leaves first: the deepest members, then up to the program; orphans before all.
    members.sort(key=lambda member: (member[1] != -1, -member[1]))
    return members


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie). Blocking on ``/proc``."""
    if HAVE_PROC:
        stat = _stat(pid)
        return stat is not None and stat[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: Whether the system signals a process through a descriptor of it (Linux 5.3+): a pid
#: then cannot be taken by another process between the check and the signal.
_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


def _pidfd(pid: int) -> int:
    """A pidfd of ``pid``, or -1 where the system gives none (then ``kill`` it is);
    ``ProcessLookupError`` if it is gone."""
    if not _PIDFD:
        return -1
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except OSError:  # not in this kernel (ENOSYS), out of descriptors: kill it is
        return -1


def _signal(pid: int, started: int, signum: int) -> None:
    """Send ``signum`` to ``pid`` if it is still the process that started at ``started``
    (B2: a pid another process took since is never signalled). Through a pidfd where the
    system has them: the descriptor, opened before the start time is checked, keeps
    meaning that process; elsewhere the window between check and signal is a few
    microseconds."""
    # Gone already (ESRCH), or reused by another user's process (EPERM): not ours.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        fd = _pidfd(pid)
        try:
            stat = _stat(pid)
            if stat is None or stat[3] != started:
                return
            if fd >= 0:
                signal.pidfd_send_signal(fd, signum)
            else:
                os.kill(pid, signum)
        finally:
            if fd >= 0:
                os.close(fd)


def _signal_group(root: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # an empty group: ESRCH
        os.killpg(root, signum)


def _group_exists(root: int) -> bool:
    try:
        os.killpg(root, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


#: A member as a stop watches it: its pid and start time (a pid that another process took
#: since is not the member: B2).
_Seen = tuple[int, int]


class _Round:
    """One scan of ``/proc``, shared by every stop that asked for it before it began."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.table: _Table | None = None


class _Scans:
    """The scans of one event loop's stops in flight: a stop that asks while a scan runs
    joins the next one (it begins after the ask, so it sees what the ask follows), which
    every stop that asked meanwhile shares. Eight stops at once then cost a few scans per
    round, not eight: a scan reads every process's ``stat`` and is most of a stop's cost."""

    def __init__(self) -> None:
        self.running: _Round | None = None
        self.next: _Round | None = None


_SCANS: RunVar[_Scans] = RunVar("mainspring_proctree_scans")


async def _shared_scan() -> _Table:
    """A scan of ``/proc`` that begins after this call (see :class:`_Scans`)."""
    try:
        scans = _SCANS.get()
    except LookupError:
        scans = _Scans()
        _SCANS.set(scans)
    joined = scans.next
    if joined is not None:
        await joined.done.wait()
        if joined.table is not None:
            return joined.table
        return await anyio.to_thread.run_sync(_scan)  # its runner failed: one of our own
    mine = scans.next = _Round()
    # Shielded: the stops that joined wait on this round, and a scan is short.
    with anyio.CancelScope(shield=True):
        try:
            while scans.running is not None:
                await scans.running.done.wait()
            scans.next, scans.running = None, mine
            table = mine.table = await anyio.to_thread.run_sync(_scan)
        finally:
            if scans.running is mine:
                scans.running = None
            if scans.next is mine:
                scans.next = None
            mine.done.set()
    return table


async def _signal_tree(
    root: int, signum: int, reaped: Callable[[], bool], signalled: dict[_Seen, None]
) -> list[_Seen]:
    """Send ``signum`` to ``root``'s tree, leaves first (``root`` itself only if it was not
    reaped yet), found by one scan of ``/proc``, and to each of ``signalled`` still alive
    outside it; the processes signalled, which join ``signalled``. This process's zombies
    of them are reaped (:func:`_reap_orphans`)."""
    members = await _look(root, reaped, signalled)
    await anyio.to_thread.run_sync(_signal_members, members, signum)
    signalled.update(dict.fromkeys(members))
    return members


async def _look(root: int, reaped: Callable[[], bool], signalled: dict[_Seen, None]) -> list[_Seen]:
    """The live members of ``root``'s tree, leaves first, by one scan of ``/proc``, after
    every process of ``signalled`` that the scan found alive (the same start time) outside
    the tree; this process's zombies of both reaped (:func:`_reap_orphans`).

    ``reaped()`` is asked after the scan: if the program was not reaped then, it was not
    when the scan read its pid either, so that pid was still the program's (B2)."""
    table = await _shared_scan()
    members = [(pid, table[pid][3]) for pid, _ in _tree(root, reaped(), table)]
    # B2: a process this stop signalled stays its to kill until it is dead, even once it
    # left the tree (its own session, re-parented away): the same pid with the same start
    # time is still that process (a reused pid has another start time).
    known = set(members)
    strays = [seen for seen in signalled if seen not in known and _lives(table, *seen)]
    _reap_orphans(root, table, signalled)
    return strays + members


def _lives(table: _Table, pid: int, started: int) -> bool:
    """Whether ``table`` has ``pid`` alive (not a zombie) with the start time ``started``."""
    entry = table.get(pid)
    return entry is not None and entry[3] == started and entry[0] not in ("Z", "X")


def _signal_members(members: list[_Seen], signum: int) -> None:
    for pid, started in members:
        _signal(pid, started, signum)


def _any_alive(members: list[_Seen]) -> bool:
    """Whether any of ``members`` is still alive: one small read each, no scan. A pid that
    is gone, a zombie, or another process now (its start time differs) is not."""
    for pid, started in members:
        stat = _stat(pid)
        if stat is not None and stat[0] not in ("Z", "X") and stat[3] == started:
            return True
    return False


def _reap_orphans(root: int, table: _Table, signalled: dict[_Seen, None]) -> None:
    """Reap the zombies of ``root``'s session, or that the stop signalled, that are
    children of this process: orphans re-parented here because this process is a
    subreaper or PID 1 (a container without an init), which nobody else waits for.
    ``root`` itself is its backend's to reap; the others are no backend's (it waits for
    the pids it started only)."""
    me = os.getpid()
    for pid, (state, ppid, session, started) in table.items():
        if state != "Z" or ppid != me or pid == root:
            continue
        if session == root or (pid, started) in signalled:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


async def _pause(delay: float, until: float) -> float:
    """Sleep ``delay`` (no later than ``until``); the next, longer delay. Polls start at a
    millisecond (a process told to stop is mostly gone at once) and double up to
    :data:`_POLL`, so a slow tree is not looked at more often than that."""
    await anyio.sleep(max(0.0, min(delay, until - anyio.current_time())))
    return min(delay * 2, _POLL)


async def stop_tree(
    root: int,
    *,
    grace: float,
    reaped: Callable[[], bool],
    exited: Callable[[], Awaitable[object]] | None = None,
) -> bool:
    """Stop every process of ``root``'s tree: SIGTERM leaves first, up to ``grace`` seconds
    for them to go, then SIGKILL rounds to every member still alive and to every process
    signalled before that still lives outside the tree; True once a scan of ``/proc`` found
    none of them alive (False without ``/proc``, or if one outlived the SIGKILL rounds).
    The zombies it leaves with this process are reaped (B2).

    ``reaped()`` says whether the program itself was already reaped: its pid may then
    belong to another process, which must not be signalled (its descendants, re-parented,
    are still found by their session). It is asked on the event loop only: a backend's
    process object may reap when asked, which is not for a worker thread to do.
    ``exited()``, for a program this process started, waits for it to exit and reaps it
    (``Process.wait``): the grace then waits on that rather than polling, and looks for the
    rest of the tree once. The caller shields this and bounds it (STYLE 5).
    """
    if os.name != "posix":  # pragma: no cover - Windows: no process groups to stop
        raise NotImplementedError("stopping a process tree needs POSIX process groups")
    if not HAVE_PROC:
        await _stop_group(root, grace=grace)
        return False
    # B2: every process signalled, by pid and start time: each is killed after the grace
    # if it still lives, in the tree or not, and the stop is confirmed only once none does.
    signalled: dict[_Seen, None] = {}
    termed = await _signal_tree(root, signal.SIGTERM, reaped, signalled)
    if not termed:
        return True
    if await _grace(root, termed, signalled, grace=grace, reaped=reaped, exited=exited):
        return True
    # SIGKILL until a look finds nobody alive: a member forking between a look and its
    # kill, or not yet scheduled to die of it, is caught by the next round.
    rounds_end = anyio.current_time() + _KILL_TIME
    while True:
        killed = await _signal_tree(root, signal.SIGKILL, reaped, signalled)
        if not killed:
            return True
        if anyio.current_time() >= rounds_end:
            return False
        if exited is not None and any(pid == root for pid, _ in killed):
            with anyio.move_on_after(rounds_end - anyio.current_time()):
                await exited()
        delay = 0.001  # let the kernel finish them before looking again
        while await anyio.to_thread.run_sync(_any_alive, killed):
            if anyio.current_time() >= rounds_end:
                break
            delay = await _pause(delay, rounds_end)


async def _grace(
    root: int,
    members: list[_Seen],
    signalled: dict[_Seen, None],
    *,
    grace: float,
    reaped: Callable[[], bool],
    exited: Callable[[], Awaitable[object]] | None,
) -> bool:
    """Up to ``grace`` seconds for the tree told to stop to be gone; True once a scan
    found it empty and none of ``signalled`` alive (B2). The members known are watched one
    by one (cheap); only once they are all gone is ``/proc`` scanned again, for members
    they left or started meanwhile."""
    deadline = anyio.current_time() + grace
    watch = True
    if exited is not None and any(pid == root for pid, _ in members):
        with anyio.move_on_after(grace) as waiting:
            await exited()
        # The program alone was known and it is gone: look for the rest at once.
        watch = waiting.cancelled_caught or len(members) > 1
    delay = 0.001
    while True:
        if not watch or not await anyio.to_thread.run_sync(_any_alive, members):
            members = await _look(root, reaped, signalled)
            if not members:
                return True
        watch = True
        if anyio.current_time() >= deadline:
            return False
        delay = await _pause(delay, deadline)


async def _stop_group(root: int, *, grace: float) -> None:
    """Without ``/proc``: SIGTERM to the program's process group, the grace (until its
    first member is gone), SIGKILL to the group, then a bounded wait until it is empty."""
    _signal_group(root, signal.SIGTERM)
    deadline = anyio.current_time() + grace
    while anyio.current_time() < deadline and alive(root):  # noqa: ASYNC110 - no event says a group's leader died
        await anyio.sleep(_POLL)
    _signal_group(root, signal.SIGKILL)
    # SIGKILL takes effect when each member next runs; wait (bounded) until the group is
    # empty. Zombies not yet reaped still count as members, hence the bound.
    settle = anyio.current_time() + _GROUP_SETTLE
    while anyio.current_time() < settle and _group_exists(root):  # noqa: ASYNC110 - no event says a group emptied
        await anyio.sleep(_POLL)
