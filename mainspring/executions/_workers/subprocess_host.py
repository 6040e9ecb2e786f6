"""The built-in worker host: any command, run as a subprocess in a session of its own.

A worker process gets its environment (this process's, the host's ``env``, the spec's
``env``, then ``MAINSPRING_WORKER_*``: its id, generation, task, session, job, the step's
input as JSON, and the session it resumes), its workspace as working directory, a pipe on
stdin (repair instructions and other :meth:`SubprocessHost.send` lines) and one on stdout
(its reports, one JSON object a line; read as the runtime consumes them). Its stderr goes to
``/dev/null``: worker text is never stored (V1, E5), and a pipe nobody drains could fill
and stall the process.

A process is known by its :class:`ProcessIdentity`: this host's id (hostname and boot id),
its pid (also its process group and session: ``start_new_session``) and its start time
(clock ticks after boot, field 22 of ``/proc/<pid>/stat``), so a later process that reused
the pid is not taken for it. ``inspect`` and ``stop`` work from the identity alone, for a
process another runtime of this host started (an orphan of a crashed runtime): its tree is
found by its session (``_proctree``).

POSIX only: constructing the host elsewhere raises ``NotImplementedError``.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import attrs
import orjson

from ...storage._seam import ProcessIdentity
from .._programs.proctree import HAVE_PROC, alive, stop_tree, tree_of
from .hosts import (
    MAX_REPORT_LINE,
    Report,
    ReportType,
    Seen,
    WorkerSpec,
    WorkerStartFailed,
    protocol_report,
    report_of,
)

__all__ = ["SubprocessHost", "host_id", "process_stat"]

_PROC = Path("/proc")
_BOOT_ID = _PROC / "sys" / "kernel" / "random" / "boot_id"
#: The longest grace a stop may be given (seconds): stopping stays bounded.
_MAX_GRACE = 600.0
#: Seconds a stop may take beyond its grace (finding, SIGKILL rounds, reaping) before it is
#: given up (STYLE 5: cleanup has its own deadline).
_CLEANUP_MARGIN = 5.0
#: How long to wait for the backend to reap a child that is already dead (a zombie).
_REAP_WAIT = 2.0
#: How many exit statuses of reaped processes are remembered for ``inspect``.
_KEPT_EXITS = 4096
_CHUNK = 65536
_ENV_PREFIX = "MAINSPRING_WORKER_"


def host_id() -> str:
    """This machine's host id for process identities: the hostname and, where the system
    says, the boot id (a pid from before a reboot is another process), at most 256
    characters."""
    name = socket.gethostname() or "localhost"
    try:
        with _BOOT_ID.open("rb") as file:
            boot = file.read(64).decode("ascii", "replace").strip()
    except OSError:
        boot = ""
    return f"{name[:180]}/{boot}" if boot else name[:256]


def process_stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, session, start time)`` of ``pid`` from ``/proc/<pid>/stat`` (fields 3, 6
    and 22), or None if it is gone or the system has no ``/proc``. Blocking (a small read).

    The command name (field 2) is in parentheses and may hold spaces and parentheses, so
    the fields are counted after its last ``)``."""
    try:
        raw = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()
    try:
        return rest[0].decode("ascii", "replace"), int(rest[3]), int(rest[19])
    except (IndexError, ValueError):
        return None


def _is(identity: ProcessIdentity) -> bool:
    """Whether ``identity``'s pid is still that process (alive or a zombie): its start time
    matches where ``/proc`` says it; elsewhere, its process group does. Blocking.

    Where ``/proc`` exists, a start time of 0 says the process was gone before its start
    time could be read (see :meth:`SubprocessHost.start`): whatever has that pid now is
    another process, never signalled as this one."""
    if HAVE_PROC:
        stat = process_stat(identity.pid)
        return stat is not None and identity.started != 0 and identity.started == stat[2]
    try:
        return os.getpgid(identity.pid) == identity.group
    except (ProcessLookupError, PermissionError):
        return False


def _tree_alive(identity: ProcessIdentity, reaped: bool) -> bool:
    """Whether anything of ``identity``'s tree is alive: the process itself (if it is still
    that process) or a member of its session. Blocking (reads ``/proc``)."""
    if not HAVE_PROC:
        if not reaped and _is(identity) and alive(identity.pid):
            return True
        try:
            os.killpg(identity.group, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    if not reaped and not _is(identity):
        # Another process has the pid (its start time differs): the identity's session is
        # empty, since a pid is reused only once nothing refers to it (B2).
        stat = process_stat(identity.pid)
        if stat is not None:
            return False
        reaped = True
    return bool(tree_of(identity.pid, reaped=reaped))


def _grace(grace: float) -> float:
    if not isinstance(grace, int | float) or not 0 <= grace <= _MAX_GRACE or math.isnan(grace):
        raise ValueError(f"grace must be 0..{_MAX_GRACE:g} seconds")
    return float(grace)


@attrs.define(eq=False)
class _Held:
    """A process this host started and has not seen reaped."""

    process: anyio.abc.Process
    identity: ProcessIdentity
    last: ReportType | None = None
    sending: anyio.Lock = attrs.field(factory=anyio.Lock)


class _Reports(anyio.abc.ObjectReceiveStream[Report]):
    """A process's reports, read from its stdout as they are received: one line at a time,
    at most :data:`MAX_REPORT_LINE` bytes (a longer line is skipped to its end and is one
    ``protocol`` report); blank lines are skipped."""

    def __init__(self, stdout: anyio.abc.ByteReceiveStream, spec: WorkerSpec, held: _Held):
        self._stdout = stdout
        self._spec = spec
        self._held = held
        self._buffer = bytearray()
        self._scanned = 0  # no newline in _buffer[:_scanned]
        self._skipping = False  # inside a line that was too long
        self._eof = False
        self._lock = anyio.Lock()

    def _line(self) -> bytes | None:
        """The next whole line in the buffer (``b"\\xff"`` stands for one too long), or None."""
        end = self._buffer.find(b"\n", self._scanned)
        if end < 0:
            self._scanned = len(self._buffer)
            if self._scanned > MAX_REPORT_LINE:
                self._skipping = True
                self._buffer.clear()
                self._scanned = 0
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        self._scanned = 0
        if self._skipping or len(line) > MAX_REPORT_LINE:
            self._skipping = False
            return b"\xff"
        return line

    def _final(self) -> bytes | None:
        """At the end of stdout: what is left of a last line without a newline."""
        if self._skipping:
            self._skipping = False
            return b"\xff"
        if not self._buffer:
            return None
        line = bytes(self._buffer)
        self._buffer.clear()
        return b"\xff" if len(line) > MAX_REPORT_LINE else line

    async def receive(self) -> Report:
        async with self._lock:
            while True:
                line = self._final() if self._eof else self._line()
                if line is None and self._eof:
                    await self._stdout.aclose()
                    raise anyio.EndOfStream
                if line is None:
                    try:
                        self._buffer += await self._stdout.receive(_CHUNK)
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        self._eof = True
                    continue
                if not line.strip():
                    continue
                report = (
                    protocol_report(self._spec, "too-long")
                    if line == b"\xff"
                    else report_of(line, self._spec)
                )
                self._held.last = report.type
                return report

    async def aclose(self) -> None:
        await self._stdout.aclose()


@attrs.define(eq=False)
class _Worker:
    """A process :class:`SubprocessHost` started (a ``WorkerProcess``)."""

    _held: _Held
    _reports: _Reports
    _host: SubprocessHost

    @property
    def identity(self) -> ProcessIdentity:
        return self._held.identity

    @property
    def reports(self) -> anyio.abc.ObjectReceiveStream[Report]:
        return self._reports

    async def wait(self) -> int:
        """Its exit status, once it exited (this reaps it)."""
        code = await self._held.process.wait()
        await self._host._reaped(self._held, code)
        return code


class SubprocessHost:
    """Runs any command as a worker process (see the module docstring).

    ``grace`` is how long a stop waits after SIGTERM before SIGKILL unless ``stop`` is told
    otherwise; ``env`` is extra environment for every process (a spec's ``env`` wins over
    it, ``MAINSPRING_WORKER_*`` over both)."""

    def __init__(self, *, grace: float = 5.0, env: Mapping[str, str] | None = None) -> None:
        if os.name != "posix":  # Windows: no sessions to find and stop a tree by
            raise NotImplementedError(
                "SubprocessHost runs worker processes on POSIX systems only: stopping a "
                "worker's whole process tree needs process groups and sessions"
            )
        self._grace = _grace(grace)
        self._env = dict(env or {})
        #: This host's id, as its process identities carry it.
        self.host = host_id()
        self._held: dict[int, _Held] = {}
        self._exits: collections.OrderedDict[tuple[int, int], int] = collections.OrderedDict()

    async def start(self, spec: WorkerSpec) -> _Worker:
        """Start ``spec``'s command; :class:`WorkerStartFailed` if it cannot be (a missing
        or not executable program, a workspace that is not a directory), and then no
        process is left behind. A checkpoint before the process is spawned; from then on
        shielded, so the caller always gets the process it started (and must stop it)."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        await self._sweep()
        env = self._environment(spec)
        with anyio.CancelScope(shield=True):
            try:
                process = await anyio.open_process(
                    list(spec.command),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    cwd=spec.workspace,
                    env=env,
                    start_new_session=True,  # its own session and group: its tree is found
                )
            except (OSError, ValueError) as exc:
                where = f" in {str(spec.workspace)!r}" if spec.workspace is not None else ""
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise WorkerStartFailed(
                    f"cannot start worker {spec.worker_id}'s {spec.command[0]!r}{where}: {why}"
                ) from exc
            pid = process.pid
            stat = await anyio.to_thread.run_sync(process_stat, pid)
        # Popen returns once the program is exec'd, after setsid: a stat whose session is
        # not the pid is another process's (the child died and was reaped at once).
        started = stat[2] if stat is not None and stat[1] == pid else 0
        held = _Held(process, ProcessIdentity(host=self.host, pid=pid, group=pid, started=started))
        self._held[pid] = held
        assert process.stdout is not None
        return _Worker(held, _Reports(process.stdout, spec, held), self)

    async def resume(self, spec: WorkerSpec) -> _Worker:
        """:meth:`start` for a spec that continues ``spec.resumes`` (passed to the process
        as ``MAINSPRING_WORKER_RESUMES``)."""
        if spec.resumes is None:
            raise ValueError("resume needs the session the worker resumes (spec.resumes)")
        return await self.start(spec)

    def _environment(self, spec: WorkerSpec) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIX)}
        env.update(self._env)
        env.update(spec.env)
        try:
            given = orjson.dumps(dict(spec.input)).decode()
        except TypeError as exc:
            raise WorkerStartFailed(f"worker {spec.worker_id}'s input is not JSON") from exc
        ours = {
            "ID": spec.worker_id,
            "GENERATION": str(spec.generation),
            "TASK_ID": spec.task_id,
            "SESSION": spec.session,
            "JOB": spec.job,
            "INPUT": given,
        }
        if spec.resumes is not None:
            ours["RESUMES"] = spec.resumes
        env.update({_ENV_PREFIX + name: value for name, value in ours.items()})
        return env

    def _holding(self, identity: ProcessIdentity) -> _Held | None:
        held = self._held.get(identity.pid)
        return held if held is not None and held.identity == identity else None

    async def _reaped(self, held: _Held, code: int) -> None:
        """``held`` was reaped with ``code``: remembered for ``inspect``, let go, stdin
        closed."""
        identity = held.identity
        self._exits[(identity.pid, identity.started)] = code
        while len(self._exits) > _KEPT_EXITS:
            self._exits.popitem(last=False)
        if self._held.get(identity.pid) is held:
            del self._held[identity.pid]
        if held.process.stdin is not None:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await held.process.stdin.aclose()

    async def _sweep(self) -> None:
        """Let go of the held processes that exited (on trio, asking reaps them: no zombie
        of a process this host started is left, B2)."""
        for held in list(self._held.values()):
            code = held.process.returncode
            if code is not None:
                await self._reaped(held, code)

    async def inspect(self, process: ProcessIdentity) -> Seen:
        """``unknown`` for another host's process; ``exited`` once neither the process
        (still that process: its start time matches) nor any member of its session is
        alive, with the exit status when this host reaped it; else ``running``, or
        ``idle`` if the last report of a process this host started was ``idle``."""
        if process.host != self.host:
            return Seen(state="unknown")
        await self._sweep()
        held = self._holding(process)
        code = self._exits.get((process.pid, process.started))
        if held is not None and await anyio.to_thread.run_sync(_is_dead, process):
            # Dead but not reaped yet (asyncio's watcher reaps soon after): reap it here.
            with anyio.move_on_after(_REAP_WAIT):
                code = await held.process.wait()
                await self._reaped(held, code)
                held = None
        reaped = code is not None
        if await anyio.to_thread.run_sync(_tree_alive, process, reaped):
            idle = held is not None and held.last == "idle"
            return Seen(state="idle" if idle else "running")
        return Seen(state="exited", exit_code=code)

    async def stop(self, process: ProcessIdentity, *, grace: float | None = None) -> Seen:
        """Stop the process and its whole tree (SIGTERM leaves first, ``grace`` seconds
        (the host's by default), SIGKILL rounds): ``exited`` only when confirmed dead (a
        scan of ``/proc`` after the process was reaped or seen gone found nothing of its
        tree alive; else it is inspected again), ``unknown`` for another host's process (not
        signalled). Works for a process another runtime started. Shielded, within its own
        deadline (STYLE 5): if cancelled, it stopped the tree first."""
        grace = self._grace if grace is None else _grace(grace)
        if process.host != self.host:
            return Seen(state="unknown")
        await self._sweep()
        held = self._holding(process)

        def reaped() -> bool:
            # Asked on the event loop (stop_tree's contract); a one-line /proc read.
            if held is not None:
                return held.process.returncode is not None
            return not _is(process)

        # No inspect first: stop_tree's first scan finds the tree, and an empty one (a
        # process already dead) is neither signalled nor waited for.
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + grace + _CLEANUP_MARGIN
            confirmed = await stop_tree(
                process.pid,
                grace=grace,
                reaped=reaped,
                exited=held.process.wait if held is not None else None,
            )
            if held is not None:
                with anyio.move_on_after(_REAP_WAIT):  # B2: no zombie of ours is left
                    await self._reaped(held, await held.process.wait())
        if confirmed and self._holding(process) is None:
            # stop_tree's last scan, after the process was reaped (or seen gone), found
            # nothing of its tree alive: confirmed dead, by a look.
            code = self._exits.get((process.pid, process.started))
            return Seen(state="exited", exit_code=code)
        # Looked at again, not assumed: a member that outlived the KILL rounds (or a stop
        # cut short by its deadline) keeps it from being confirmed dead.
        return await self.inspect(process)

    async def send(self, process: ProcessIdentity, line: Mapping[str, Any]) -> None:
        """Write ``line`` as one JSON line to the stdin of a live process this host
        started. ``ProcessLookupError`` if it is not one (or its stdin closed); blocks
        while the process does not read and its pipe is full (bound it with a deadline)."""
        if not isinstance(line, Mapping):
            raise TypeError("a line sent to a worker is a JSON object")
        data = orjson.dumps(dict(line)) + b"\n"
        await self._sweep()
        held = self._holding(process) if process.host == self.host else None
        if held is None or held.process.stdin is None or held.process.returncode is not None:
            raise ProcessLookupError(
                f"process {process.pid} on {process.host} is not a live worker this host started"
            )
        async with held.sending:
            try:
                await held.process.stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise ProcessLookupError(
                    f"worker process {process.pid} no longer reads its stdin"
                ) from exc


def _is_dead(identity: ProcessIdentity) -> bool:
    """Whether the process itself is gone or a zombie (its tree aside). Blocking."""
    if HAVE_PROC:
        stat = process_stat(identity.pid)
        return stat is None or stat[0] in ("Z", "X")
    return not alive(identity.pid)
