"""A worker host that plays scripts instead of running processes: deterministic, instant,
for tests of what the runtime does with workers.

Each start (or resume) takes the next script. A script is a sequence of steps, played as far
as it can go at once and again whenever something it waits for happens:

- a ``dict``: the process says it (a report, read as the subprocess host reads a line);
- a ``str`` or ``bytes``: the process writes that raw line (``"not json"``: a ``protocol``
  report);
- :meth:`ScriptedHost.wait` (an ``anyio.Event``): it waits until the event is set;
- :meth:`ScriptedHost.receive`: it waits for the next line sent to it;
- :meth:`ScriptedHost.ignore_stop`: from here it survives stops (until its event is set);
- :meth:`ScriptedHost.until_stopped`: it runs until stopped;
- :meth:`ScriptedHost.exit`: it exits with that status.

A script that runs out exits with status 0. :meth:`ScriptedHost.fail_start` in place of a
script makes that start raise :class:`WorkerStartFailed`. Examples::

    result = [{"type": "progress", "useful": True}, {"type": "result", "output": 42}]
    crash = [{"type": "progress"}, ScriptedHost.exit(3)]
    failing = ScriptedHost.fail_start()
    same_twice = [failure, failure, ScriptedHost.until_stopped()]
    stubborn = [ScriptedHost.ignore_stop(), ScriptedHost.until_stopped()]
    spends = [{"type": "usage", "input_tokens": 10}, ScriptedHost.until_stopped()]
    host = ScriptedHost([result, crash, failing, same_twice, stubborn, spends])

Stop and inspect follow the subprocess host: a stopped process exits with ``-15``
(SIGTERM) and inspects as ``exited`` (confirmed dead) unless it ignores stops; ``idle``
while its last report is ``idle``. The host records every start, stop and send
(:attr:`~ScriptedHost.starts`, :attr:`~ScriptedHost.stops`, :attr:`~ScriptedHost.sends`)
and keeps each :class:`ScriptedProcess` it made (:attr:`~ScriptedHost.processes`).
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from ..executions._seam import (
    Report,
    ReportType,
    Seen,
    WorkerSpec,
    WorkerStartFailed,
    report_of,
)
from ..storage._seam import ProcessIdentity

__all__ = ["ScriptedHost", "ScriptedProcess"]

#: The exit status of a stopped scripted process: killed by SIGTERM.
_STOPPED = -int(signal.SIGTERM) if hasattr(signal, "SIGTERM") else -15


@attrs.frozen
class _Step:
    kind: str
    value: Any = None


@attrs.frozen
class _FailStart:
    message: str


Step = Mapping[str, Any] | str | bytes | _Step
Script = Sequence[Step] | _FailStart


@attrs.define(eq=False)
class ScriptedProcess:
    """A process a :class:`ScriptedHost` plays (a ``WorkerProcess``). ``received`` holds
    the lines its :meth:`ScriptedHost.receive` steps took, ``stopped`` whether a stop ended
    it, ``exit_code`` its status once it exited."""

    identity: ProcessIdentity
    spec: WorkerSpec
    _steps: collections.deque[Step]
    received: list[Mapping[str, Any]] = attrs.field(init=False, factory=list)
    stopped: bool = attrs.field(init=False, default=False)
    exit_code: int | None = attrs.field(init=False, default=None)
    _said: collections.deque[Report] = attrs.field(init=False, factory=collections.deque)
    _inbox: collections.deque[Mapping[str, Any]] = attrs.field(
        init=False, factory=collections.deque
    )
    _last: ReportType | None = attrs.field(init=False, default=None)
    _stubborn: bool = attrs.field(init=False, default=False)
    _release: anyio.Event | None = attrs.field(init=False, default=None)
    _changed: anyio.Event = attrs.field(init=False, factory=anyio.Event)
    _closed: bool = attrs.field(init=False, default=False)

    @property
    def reports(self) -> anyio.abc.ObjectReceiveStream[Report]:
        return _ScriptedReports(self)

    @property
    def alive(self) -> bool:
        self._play()
        return self.exit_code is None

    @property
    def idle(self) -> bool:
        """Whether its last report was ``idle``."""
        return self._last == "idle"

    async def wait(self) -> int:
        while True:
            self._play()
            if self.exit_code is not None:
                await anyio.lowlevel.checkpoint()
                return self.exit_code
            await self._blocked()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _end(self, code: int) -> None:
        self.exit_code = code
        self._steps.clear()
        self._notify()

    def _play(self) -> None:
        """Play the script as far as it goes now."""
        while self.exit_code is None and self._steps:
            step = self._steps[0]
            if not isinstance(step, _Step):
                said = step.encode() if isinstance(step, str) else step
                report = report_of(said, self.spec)
                self._said.append(report)
                self._last = report.type
            elif step.kind == "exit":
                self._end(step.value)
                return
            elif step.kind == "wait" and not step.value.is_set():
                return
            elif step.kind == "receive":
                if not self._inbox:
                    return
                self.received.append(self._inbox.popleft())
            elif step.kind == "until-stopped":
                return
            elif step.kind == "ignore-stop":
                self._stubborn, self._release = True, step.value
            self._steps.popleft()
            self._notify()
        if self.exit_code is None and not self._steps:
            self._end(0)

    async def _blocked(self) -> None:
        """Until something changes, or the event the script waits for is set."""
        changed = self._changed
        step = self._steps[0] if self._steps else None
        awaited = step.value if isinstance(step, _Step) and step.kind == "wait" else None
        if awaited is None:
            await changed.wait()
            return
        async with anyio.create_task_group() as tg:

            async def first(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(first, changed)
            tg.start_soon(first, awaited)

    def _stop(self) -> None:
        self._play()
        if self.exit_code is not None:
            return
        if self._stubborn and (self._release is None or not self._release.is_set()):
            return  # survives: not confirmed dead
        self.stopped = True
        self._end(_STOPPED)

    def _seen(self) -> Seen:
        self._play()
        if self.exit_code is not None:
            return Seen(state="exited", exit_code=self.exit_code)
        return Seen(state="idle" if self.idle else "running")


class _ScriptedReports(anyio.abc.ObjectReceiveStream[Report]):
    def __init__(self, process: ScriptedProcess) -> None:
        self._process = process

    async def receive(self) -> Report:
        process = self._process
        while True:
            if process._closed:
                raise anyio.ClosedResourceError
            process._play()
            if process._said:
                await anyio.lowlevel.checkpoint()
                return process._said.popleft()
            if process.exit_code is not None:
                await anyio.lowlevel.checkpoint()
                raise anyio.EndOfStream
            await process._blocked()

    async def aclose(self) -> None:
        self._process._closed = True
        self._process._notify()
        await anyio.lowlevel.checkpoint()


class ScriptedHost:
    """A fake :class:`~mainspring.executions.WorkerHost` that plays ``scripts`` (see the
    module docstring), one per start or resume, in order; :meth:`add` gives more. Its
    identities carry the host ``"scripted"``; a start with no script left raises
    ``LookupError`` (a test that started more workers than it scripted)."""

    #: The host its identities carry.
    host = "scripted"

    def __init__(self, scripts: Iterable[Script] = ()) -> None:
        self._scripts: collections.deque[Script] = collections.deque(scripts)
        #: Every spec started or resumed, in order (a resume's has ``resumes``).
        self.starts: list[WorkerSpec] = []
        #: Every stop asked: the identity and the grace.
        self.stops: list[tuple[ProcessIdentity, float | None]] = []
        #: Every line sent to a live process.
        self.sends: list[tuple[ProcessIdentity, Mapping[str, Any]]] = []
        #: Every process started, in order.
        self.processes: list[ScriptedProcess] = []
        self._by_pid: dict[int, ScriptedProcess] = {}

    # Steps of a script.
    @staticmethod
    def exit(code: int = 0) -> _Step:
        """Exit with status ``code``."""
        return _Step("exit", int(code))

    @staticmethod
    def wait(event: anyio.Event) -> _Step:
        """Wait until ``event`` is set."""
        return _Step("wait", event)

    @staticmethod
    def receive() -> _Step:
        """Wait for the next line sent (kept in :attr:`ScriptedProcess.received`)."""
        return _Step("receive")

    @staticmethod
    def until_stopped() -> _Step:
        """Run until stopped."""
        return _Step("until-stopped")

    @staticmethod
    def ignore_stop(until: anyio.Event | None = None) -> _Step:
        """From here, survive stops (inspected as alive: not confirmed dead) until ``until``
        is set (never, without one)."""
        return _Step("ignore-stop", until)

    @staticmethod
    def fail_start(message: str = "the scripted worker failed to start") -> _FailStart:
        """A script whose start raises :class:`WorkerStartFailed`."""
        return _FailStart(message)

    def add(self, *scripts: Script) -> None:
        """More scripts, played after those given."""
        self._scripts.extend(scripts)

    def process(self, identity: ProcessIdentity) -> ScriptedProcess:
        """The process ``identity`` names (``LookupError`` if this host did not start it)."""
        found = self._by_pid.get(identity.pid) if identity.host == self.host else None
        if found is None or found.identity != identity:
            raise LookupError(f"no scripted process {identity.pid}")
        return found

    async def start(self, spec: WorkerSpec) -> ScriptedProcess:
        """Start a process playing the next script (recorded in :attr:`starts`); raises
        :class:`WorkerStartFailed` for a :meth:`fail_start` in its place."""
        await anyio.lowlevel.checkpoint()
        self.starts.append(spec)
        if not self._scripts:
            raise LookupError(f"ScriptedHost has no script left for worker {spec.worker_id}")
        script = self._scripts.popleft()
        if isinstance(script, _FailStart):
            raise WorkerStartFailed(script.message)
        pid = 1000 + len(self.processes)
        identity = ProcessIdentity(host=self.host, pid=pid, group=pid, started=pid)
        process = ScriptedProcess(identity, spec, collections.deque(script))
        self.processes.append(process)
        self._by_pid[pid] = process
        process._play()
        return process

    async def resume(self, spec: WorkerSpec) -> ScriptedProcess:
        """Like :meth:`start`, for a spec that resumes a session (``spec.resumes``)."""
        if spec.resumes is None:
            raise ValueError("resume needs the session the worker resumes (spec.resumes)")
        return await self.start(spec)

    async def inspect(self, process: ProcessIdentity) -> Seen:
        """What the process is now: running, idle (its last report), exited, or unknown
        (not one of this host's)."""
        await anyio.lowlevel.checkpoint()
        if process.host != self.host:
            return Seen(state="unknown")
        try:
            return self.process(process)._seen()
        except LookupError:
            return Seen(state="exited")  # not a process of this host: gone

    async def stop(self, process: ProcessIdentity, *, grace: float | None = None) -> Seen:
        """Stop the process (recorded in :attr:`stops`): it exits with ``-15`` unless its
        script ignores stops; returns what inspecting it then finds."""
        self.stops.append((process, grace))
        await anyio.lowlevel.checkpoint()
        if process.host != self.host:
            return Seen(state="unknown")
        try:
            found = self.process(process)
        except LookupError:
            return Seen(state="exited")
        found._stop()
        return found._seen()

    async def send(self, process: ProcessIdentity, line: Mapping[str, Any]) -> None:
        """Send ``line`` (a JSON object) to the process (recorded in :attr:`sends`), for a
        script waiting in :meth:`receive`."""
        await anyio.lowlevel.checkpoint()
        if not isinstance(line, Mapping):
            raise TypeError("a line sent to a worker is a JSON object")
        try:
            found = self.process(process)
        except LookupError:
            found = None
        if found is None or not found.alive:
            raise ProcessLookupError(
                f"process {process.pid} on {process.host} is not a live worker this host started"
            )
        self.sends.append((process, dict(line)))
        found._inbox.append(dict(line))
        found._notify()
