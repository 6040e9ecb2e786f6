"""The worker host interface: how the runtime starts, inspects, stops, resumes and talks to
an external agent process, whatever runs it.

A :class:`WorkerHost` is what a worker-backed agent is served by. The built-in one runs any
command as a subprocess (``SubprocessHost``); ``mainspring.testing.ScriptedHost`` plays
scripted processes for tests. A host knows nothing about executions or records: the runtime
records what it is told (the process identity, what it reported) through the commit funnel.

What a worker process says (its *reports*) arrives as :class:`Report` values, one per line
the process wrote to its stdout as a JSON object (``{"type": ...}``):

- ``progress``: it works (``"useful": true`` if it made progress worth keeping);
- ``idle``/``busy``: it waits for input / works again;
- ``failure``: a structured failure (class, check, pin, fingerprint, diagnostic and
  progress text whose digests only are kept, phase, round, useful progress);
- ``usage``: tokens and cost spent (counted for its own generation, session and job);
- ``result``: its delivery (``output``: any JSON value; ``source_commit``: optional) — the
  runtime then hands it off: stop, confirm dead, fence, seal, deliver.

A line that is not such an object is a ``protocol`` report (the raw line is not kept: its
``data`` says only why, see :func:`protocol_report`); so is a line longer than
:data:`MAX_REPORT_LINE`, skipped to its end. Blank lines are skipped. A
repair instruction reaches the process on its stdin as one JSON line
``{"type": "repair", "text": ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import anyio.abc
import attrs
import orjson

from ...actors import MainspringError
from ...storage._seam import ProcessIdentity
from .fleet import Observed

__all__ = [
    "MAX_REPORT_LINE",
    "REPORTED",
    "Report",
    "Seen",
    "WorkerHost",
    "WorkerProcess",
    "WorkerSpec",
    "WorkerStartFailed",
    "protocol_report",
    "report_of",
]

#: The longest report line a host reads (bytes); a longer one is a ``protocol`` report.
MAX_REPORT_LINE = 1 << 20

ReportType = Literal["progress", "idle", "busy", "failure", "usage", "result", "protocol"]
#: The report types a worker may say; ``protocol`` is the host's own (a line it could not read).
REPORTED: frozenset[str] = frozenset({"progress", "idle", "busy", "failure", "usage", "result"})


class WorkerStartFailed(MainspringError):
    """A host could not start a worker's process (the command is missing, not executable,
    the host refused). The worker is blocked with failure class ``native-start``."""


@attrs.frozen(kw_only=True)
class WorkerSpec:
    """What a host is handed (:meth:`WorkerHost.start`, :meth:`WorkerHost.resume`): a
    command (argv), for one generation of one worker, in a session, for a job; the
    workspace it may write, the step's input (given to the process as JSON in
    ``MAINSPRING_WORKER_INPUT``), extra environment, and the session it resumes (a host
    whose agent can continue a conversation passes it on; others ignore it).

    The runtime makes one for each process it asks a host for; a test makes one to drive a
    host (``SubprocessHost``, ``mainspring.testing.ScriptedHost``) without a runtime. (A
    host of your own is not supported yet: see :class:`WorkerHost`.)"""

    command: tuple[str, ...]
    worker_id: str
    generation: int
    task_id: str
    session: str
    job: str
    workspace: Path | None = None
    input: Mapping[str, Any] = attrs.field(factory=dict)
    env: Mapping[str, str] = attrs.field(factory=dict)
    resumes: str | None = None


@attrs.frozen(kw_only=True)
class Report:
    """One thing a worker process said (see the module docstring). ``data`` is the parsed
    object; ``generation``, ``session`` and ``job`` are those of the process that said it,
    so a late report from an older process is recognised as stale."""

    type: ReportType
    data: Mapping[str, Any] = attrs.field(factory=dict)
    generation: int
    session: str
    job: str


@attrs.frozen(kw_only=True)
class Seen:
    """What inspecting a process found: ``running`` / ``idle`` (alive), ``exited`` (gone:
    confirmed dead, with its exit status when this host reaped it), or ``unknown`` (this
    host cannot tell: another host's process, or no way to look)."""

    state: Observed
    exit_code: int | None = None

    @property
    def dead(self) -> bool:
        return self.state == "exited"


class WorkerProcess(Protocol):
    """A process this host started, while this runtime holds it."""

    @property
    def identity(self) -> ProcessIdentity: ...

    @property
    def reports(self) -> anyio.abc.ObjectReceiveStream[Report]:
        """What the process says, in order; ends when its stdout closes."""
        ...

    async def wait(self) -> int:
        """Its exit status, once it exited."""
        ...


@runtime_checkable
class WorkerHost(Protocol):
    """The protocol a worker host implements: it starts, inspects, stops, resumes and talks
    to worker processes. ``SubprocessHost`` is the built-in one (any command, as a local
    subprocess) and ``mainspring.testing.ScriptedHost`` plays scripts for tests; either is
    passed as a ``WorkerAgent``'s ``host``. The protocol is public so that parameter can be
    named; a host of your own (a container, another machine) is not supported yet: what a
    host hands back (the process, what it saw, its reports) is internal and may change.

    ``inspect`` and ``stop`` take only a :class:`ProcessIdentity`, so a runtime that resumes
    a run after a crash can inspect and stop a process another runtime started. ``stop``
    returns only once the process (and its tree) is confirmed dead, or says ``unknown`` when
    it cannot be confirmed from here; it never assumes.
    """

    async def start(self, spec: WorkerSpec) -> WorkerProcess:
        """Start a process for ``spec``; :class:`WorkerStartFailed` if it cannot."""
        ...

    async def inspect(self, process: ProcessIdentity) -> Seen:
        """What the process is doing now."""
        ...

    async def stop(self, process: ProcessIdentity, *, grace: float) -> Seen:
        """Stop the process and its tree (TERM, ``grace`` seconds, KILL) and inspect it
        again; ``exited`` means confirmed dead."""
        ...

    async def resume(self, spec: WorkerSpec) -> WorkerProcess:
        """Start a process that continues ``spec.resumes`` (a previous session)."""
        ...

    async def send(self, process: ProcessIdentity, line: Mapping[str, Any]) -> None:
        """Write ``line`` (one JSON object) to a live process this host started."""
        ...


def command_of(command: str | Sequence[str]) -> tuple[str, ...]:
    """A command as argv: a sequence of strings, not empty, no NUL (a string is one
    program without arguments)."""
    if isinstance(command, bytes | bytearray | Mapping) or not isinstance(command, str | Sequence):
        raise TypeError(
            f"a worker command is a list of strings (argv), not {type(command).__name__}"
        )
    argv = (command,) if isinstance(command, str) else tuple(command)
    if not argv or not all(isinstance(a, str) and a and "\x00" not in a for a in argv):
        raise ValueError("a worker command is a non-empty list of non-empty strings without NUL")
    return argv


def protocol_report(spec: WorkerSpec, why: str) -> Report:
    """A ``protocol`` report for a line of ``spec``'s process that is not a report; ``data``
    says only why (``not-json``, ``not-object``, ``unknown-type``, ``too-long``): the line
    itself is worker text and is not kept (V1)."""
    return Report(
        type="protocol",
        data={"reason": why},
        generation=spec.generation,
        session=spec.session,
        job=spec.job,
    )


def report_of(said: bytes | Mapping[str, Any], spec: WorkerSpec) -> Report:
    """What one line a worker of ``spec`` wrote (or, for a scripted process, one object it
    said) is: a :class:`Report` of its type, stamped with ``spec``'s generation, session
    and job, or a ``protocol`` report (:func:`protocol_report`)."""
    if isinstance(said, bytes | bytearray | memoryview):
        try:
            said = orjson.loads(said)
        except orjson.JSONDecodeError:
            return protocol_report(spec, "not-json")
    if not isinstance(said, Mapping):
        return protocol_report(spec, "not-object")
    kind = said.get("type")
    if not isinstance(kind, str) or kind not in REPORTED:
        return protocol_report(spec, "unknown-type")
    return Report(
        type=kind,  # type: ignore[arg-type]  # one of REPORTED, checked above
        data=dict(said),
        generation=spec.generation,
        session=spec.session,
        job=spec.job,
    )
