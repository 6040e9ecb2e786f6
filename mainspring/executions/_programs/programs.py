"""Running programs from tools and agents, bounded, and never leaving processes behind.

:func:`run_program` (a tool as it is: ``tools={"sh": run_program}``) and
:meth:`AgentContext.run <mainspring.executions.AgentContext.run>` start a program in a
session of its own, read its stdout and stderr concurrently up to a cap each, and wait for it
within a timeout. If the program outlives its timeout, or the step running it is cancelled
for any reason (pause, cancel, lease lost, shutdown, a caller's cancel scope), its whole
process tree is stopped (``_proctree``): SIGTERM leaves first, a grace, SIGKILL to survivors.

Built on anyio's process API, so it runs on asyncio and trio. POSIX only: on Windows,
importing works and running raises ``NotImplementedError``.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import attrs

from ...actors import MainspringError, Timeout, cancel_reason
from ...storage import redact
from ...storage._seam import encode, encode_value
from .._rules.limits import MAX_OUTPUT_BYTES
from .proctree import stop_tree

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_TIMEOUT",
    "MAX_OUTPUT_CAP",
    "ProgramFailed",
    "ProgramResult",
    "run_program",
    "run_program_result",
]

#: How long a program may run, in seconds, unless told otherwise: ten minutes.
DEFAULT_TIMEOUT = 600.0
#: How much of stdout, and of stderr, is kept unless told otherwise: 64 KiB each.
DEFAULT_MAX_OUTPUT = 64 * 1024
#: The largest cap on stdout or stderr: 1 MiB (what one stored output may hold, X2).
MAX_OUTPUT_CAP = 1 << 20
#: Seconds between SIGTERM and SIGKILL when a program's tree is stopped.
DEFAULT_GRACE = 0.5
#: The longest grace allowed: stopping must stay bounded.
_MAX_GRACE = 60.0
#: Seconds that stopping a tree may take beyond its grace (finding, SIGKILL, reaping) before
#: it is given up (STYLE 5: cleanup has its own deadline).
_CLEANUP_MARGIN = 5.0
_CHUNK = 65536
#: How much of stderr's end an error message shows, in characters.
_TAIL = 1000
#: How far beyond a message's window of stderr or argv redaction looks, so that a secret
#: cut by the window's edge is still recognised (and the whole 1 MiB is not scanned).
_WINDOW_MARGIN = 4096
#: Room the tool form's stored result leaves below X2's limit, for redaction's masks (which
#: may be longer than what they hide).
_STORED_MARGIN = 64 * 1024
#: Raw output and argv up to this many bytes or characters in all always fit when stored (one
#: is at most six stored bytes, a JSON escape), so the tool form does not measure them.
_SURELY_FITS = (MAX_OUTPUT_BYTES - _STORED_MARGIN) // 8


@attrs.frozen(kw_only=True)
class ProgramResult:
    """How a program ran: what was run, its exit status, what it wrote, what was cut.

    ``stdout`` and ``stderr`` are text, decoded as UTF-8 with ``errors="replace"`` (a
    character cut in two by the cap becomes U+FFFD); ``stdout_truncated`` and
    ``stderr_truncated`` count the bytes dropped past the cap, or cut further by the tool
    form so that its result fits one stored output (0: nothing was cut).
    ``returncode`` is the exit status, negative for a signal (``-9``: SIGKILL), or None if
    the program could not be reaped. ``duration`` is seconds from start to exit.
    ``stopped_by`` is a :class:`~mainspring.Timeout` if the program outlived its timeout and
    its tree was stopped (a cancellation from outside is not a result: it propagates).

    ``to_dict()`` is its stored form (plain JSON values, what the tool form returns) and
    ``ProgramResult.from_dict`` reads it back: equal to the original.
    """

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    stdout_truncated: int = 0
    stderr_truncated: int = 0
    duration: float = 0.0
    stopped_by: Timeout | None = None

    @property
    def ok(self) -> bool:
        """Whether the program exited with status 0 by itself."""
        return self.returncode == 0 and self.stopped_by is None

    def to_dict(self) -> dict[str, Any]:
        """The stored form: a dict of JSON values (``stopped_by`` as its kind and text)."""
        reason = self.stopped_by
        stopped_by = None
        if reason is not None:
            stopped_by = {
                "kind": reason.kind,
                "detail": reason.detail,
                "source": reason.source,
                "at": reason.at,
            }
        return {
            "argv": list(self.argv),
            "returncode": self.returncode,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "duration": self.duration,
            "stopped_by": stopped_by,
        }

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> ProgramResult:
        """Read back what :meth:`to_dict` made; ``ValueError`` naming what is wrong."""
        keys = set(attrs.fields_dict(cls))
        if set(stored) != keys:
            odd = sorted(set(stored) ^ keys)
            raise ValueError(f"not a stored ProgramResult: keys {odd} missing or unknown")
        reason = stored["stopped_by"]
        stopped_by = None
        if reason is not None:
            if not isinstance(reason, Mapping) or reason.get("kind") != Timeout.kind:
                raise ValueError(f"not a stored ProgramResult: stopped_by {reason!r}")
            stopped_by = Timeout(
                detail=_typed(reason, "detail", str, "stopped_by."),
                source=_typed(reason, "source", str, "stopped_by."),
                at=float(_typed(reason, "at", int | float, "stopped_by.")),
            )
        argv = stored["argv"]
        if not isinstance(argv, list | tuple) or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"not a stored ProgramResult: argv {argv!r}")
        return cls(
            argv=tuple(argv),
            returncode=_typed(stored, "returncode", int | None),
            stdout=_typed(stored, "stdout", str),
            stderr=_typed(stored, "stderr", str),
            stdout_truncated=_typed(stored, "stdout_truncated", int),
            stderr_truncated=_typed(stored, "stderr_truncated", int),
            duration=float(_typed(stored, "duration", int | float)),
            stopped_by=stopped_by,
        )


def _typed(stored: Mapping[str, Any], key: str, kind: Any, where: str = "") -> Any:
    """``stored[key]`` if it is of ``kind`` (a bool is not a number), else ``ValueError``."""
    value = stored.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(  # noqa: TRY004 - malformed data, as Malformed
            f"not a stored ProgramResult: {where}{key} is {type(value).__name__}, {value!r}"
        )
    return value


class ProgramFailed(MainspringError):
    """A program exited with a non-zero status, or outlived its timeout and was stopped
    (``result.stopped_by`` is then a ``Timeout``). The program's fault, not mainspring's.

    Raised by :func:`run_program` and ``ctx.run`` unless ``check=False`` (which returns the
    result instead); ``result`` is the :class:`ProgramResult`. The message names the
    program, the exit status (or the timeout) and the end of its stderr, redacted (E5).
    """

    def __init__(self, result: ProgramResult) -> None:
        super().__init__(_failure_text(result))
        self.result = result


def _failure_text(result: ProgramResult) -> str:
    what = f"the program {_shown(result.argv)}"
    if result.stopped_by is not None:
        text = f"{what} was stopped: {result.stopped_by.detail or 'its time ran out'}"
    elif result.returncode is not None and result.returncode < 0:
        text = f"{what} was killed by signal {-result.returncode}"
    else:
        text = f"{what} exited with status {result.returncode}"
    # E5: redacted before the window is cut, so a secret on its edge is not left half shown.
    tail = str(redact(result.stderr.strip()[-(_TAIL + _WINDOW_MARGIN) :]))[-_TAIL:]
    if tail:
        text = f"{text}; its stderr ends with: {tail}"
    return str(redact(text))


def _shown(argv: Sequence[str]) -> str:
    """The start of the command line, redacted before it is cut (E5)."""
    shown = str(redact(" ".join(argv)[: 200 + _WINDOW_MARGIN]))
    return repr(shown if len(shown) <= 200 else shown[:200] + "...")


# -- arguments -----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class _Spec:
    argv: tuple[str, ...]
    cwd: str | None
    env: dict[str, str] | None
    stdin: bytes | None
    timeout: float
    max_output: int
    grace: float
    check: bool
    #: The tool form: the result is cut further to fit one stored output (X2).
    fit_stored: bool = False


def _spec(
    argv: Sequence[str] | str,
    *,
    shell: bool,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str | None] | None,
    stdin: bytes | str | None,
    timeout: float,
    max_output: int,
    grace: float,
    check: bool,
) -> _Spec:
    """The arguments checked, before anything is started: ``ValueError`` (``TypeError`` for
    a wrong type) naming the bad one."""
    flags: tuple[tuple[str, object], ...] = (("shell", shell), ("check", check))
    for flag, given in flags:
        if not isinstance(given, bool):  # "false" from a plan would be true
            raise TypeError(f"{flag} is True or False, not {type(given).__name__} {given!r}")
    if shell:
        if not isinstance(argv, str):
            raise TypeError("shell=True takes the command as one string")
        args: tuple[str, ...] = ("/bin/sh", "-c", argv)
    else:
        if isinstance(argv, str | bytes):
            raise TypeError(
                "argv is a list of strings (no shell is used); pass shell=True to run a "
                "command string through /bin/sh"
            )
        args = tuple(argv)
        if not args:
            raise ValueError("argv is empty: there is no program to run")
    for arg in args:
        if not isinstance(arg, str):
            raise TypeError(f"argv holds {type(arg).__name__} {arg!r}, not a string")
        if "\0" in arg:
            raise ValueError(f"argv holds a NUL character: {arg!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout is a number of seconds, not {type(timeout).__name__}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if isinstance(max_output, bool) or not isinstance(max_output, int):
        raise TypeError(f"max_output is a number of bytes, not {type(max_output).__name__}")
    if not 0 <= max_output <= MAX_OUTPUT_CAP:
        raise ValueError(
            f"max_output must be 0..{MAX_OUTPUT_CAP:,} bytes (1 MiB), not {max_output:,}"
        )
    if isinstance(grace, bool) or not isinstance(grace, int | float):
        raise TypeError(f"grace is a number of seconds, not {type(grace).__name__}")
    if not (math.isfinite(grace) and 0 <= grace <= _MAX_GRACE):
        raise ValueError(f"grace must be 0..{_MAX_GRACE:g} seconds, not {grace!r}")
    if stdin is not None and not isinstance(stdin, bytes | str):
        raise TypeError(f"stdin is bytes or str, not {type(stdin).__name__}")
    full_env = None
    if env is not None:
        full_env = dict(os.environ)
        for key, value in env.items():
            if not isinstance(key, str) or not key or "=" in key or "\0" in key:
                raise ValueError(f"env has a bad variable name: {key!r}")
            if value is None:
                full_env.pop(key, None)
            elif isinstance(value, str) and "\0" not in value:
                full_env[key] = value
            else:
                raise ValueError(f"env[{key!r}] must be a string without NUL, or None")
    if cwd is not None:
        cwd = os.fspath(cwd)
        if not isinstance(cwd, str):
            raise TypeError("cwd is a path given as str")
    return _Spec(
        argv=args,
        cwd=cwd,
        env=full_env,
        stdin=stdin.encode() if isinstance(stdin, str) else stdin,
        timeout=float(timeout),
        max_output=max_output,
        grace=float(grace),
        check=check,
    )


# -- running -------------------------------------------------------------------------------


class _Capture:
    """One pipe read to its end: the first ``cap`` bytes kept, the rest counted and dropped
    (reading goes on, so the program never blocks on a full pipe)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    async def drain(self, stream: anyio.abc.ByteReceiveStream | None) -> None:
        if stream is None:
            return
        while True:
            try:
                chunk = await stream.receive(_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            room = max(0, self.cap - len(self.data))
            self.data += chunk[:room]
            self.dropped += len(chunk) - min(room, len(chunk))


async def _feed(stream: anyio.abc.ByteSendStream, data: bytes, scope: anyio.CancelScope) -> None:
    """Write ``data`` to the program's stdin, then close it (EOF); given up when ``scope``
    is cancelled (the program exited: a background child holding a copy of its stdin is
    not waited for, B2)."""
    with scope:
        try:
            if data:
                await stream.send(data)
            await stream.aclose()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the program closed its stdin or exited: what it did not read is its choice
    if scope.cancelled_caught:
        # Given up with data still buffered: asyncio's pipe transport would keep the pipe
        # open until that data is read, which a background child holding the pipe may never
        # do (a leaked descriptor). Its buffer is dropped and the pipe closed now.
        transport = getattr(getattr(stream, "_stream", None), "transport", None)
        # Not one that is already closed: its pipe is gone (an error closed it, or its
        # buffer drained), and closing it twice would report its loss twice.
        if transport is not None and (
            not transport.is_closing() or transport.get_write_buffer_size()
        ):
            transport.abort()
        with anyio.CancelScope(shield=True):
            await stream.aclose()


def _edge(data: bytearray, keep: int) -> int:
    """Where to cut ``data`` to keep at most ``keep`` bytes: before a secret that the cut
    would split (E5: redaction masks what it sees whole, so half a secret would be stored
    as it is). Redaction looks at the bytes around the cut only (``_WINDOW_MARGIN`` either
    side: ``_Capture`` keeps that much past its cap)."""
    if len(data) <= keep:
        return len(data)
    start = max(0, keep - _WINDOW_MARGIN)
    around = bytes(data[start : keep + _WINDOW_MARGIN]).decode("utf-8", errors="surrogateescape")
    masked = str(redact(around))
    same = 0
    for a, b in zip(around, masked, strict=False):
        if a != b:
            break
        same += 1
    changed_at = start + len(around[:same].encode("utf-8", errors="surrogateescape"))
    return min(keep, changed_at)


@attrs.frozen
class _Result:
    """A finished program's result, before its output is cut to a size."""

    argv: tuple[str, ...]
    returncode: int | None
    out: _Capture
    err: _Capture
    duration: float
    #: At most this many bytes of each output are kept (``max_output``).
    cap: int

    def cut(self, keep: int, stopped_by: Timeout | None) -> ProgramResult:
        """The result keeping at most ``keep`` bytes of each output, the rest counted."""
        out, err = self.out.data, self.err.data
        keep_out, keep_err = _edge(out, keep), _edge(err, keep)
        return ProgramResult(
            argv=self.argv,
            returncode=self.returncode,
            stdout=bytes(out[:keep_out]).decode("utf-8", errors="replace"),
            stderr=bytes(err[:keep_err]).decode("utf-8", errors="replace"),
            stdout_truncated=self.out.dropped + len(out) - keep_out,
            stderr_truncated=self.err.dropped + len(err) - keep_err,
            duration=self.duration,
            stopped_by=stopped_by,
        )

    def fitted(self, stopped_by: Timeout | None) -> ProgramResult:
        """The result cut (both outputs to one common size, the largest that fits) so that
        its stored form stays within one stored output (X2), with room for redaction's
        masks. Blocking: measuring encodes the result (a worker thread runs it)."""
        budget = MAX_OUTPUT_BYTES - _STORED_MARGIN

        def fits(keep: int) -> bool:
            stored = self.cut(keep, stopped_by).to_dict()
            return len(encode(encode_value(stored))) <= budget

        low, high = 0, min(self.cap, max(len(self.out.data), len(self.err.data)))
        if fits(high):
            return self.cut(high, stopped_by)
        while low < high - 1:  # fits(low), not fits(high)
            middle = (low + high) // 2
            if fits(middle):
                low = middle
            else:
                high = middle
        return self.cut(low, stopped_by)


async def _stop(process: anyio.abc.Process, grace: float) -> None:
    """Stop the program's tree, shielded, within its own deadline (STYLE 5)."""
    with anyio.CancelScope(shield=True) as scope:
        scope.deadline = anyio.current_time() + grace + _CLEANUP_MARGIN
        await stop_tree(
            process.pid,
            grace=grace,
            reaped=lambda: process.returncode is not None,
            exited=process.wait,
        )


async def _close(process: anyio.abc.Process, grace: float) -> None:
    """Close the pipes and reap the program, shielded and bounded (on expiry anyio kills
    the program itself)."""
    with anyio.CancelScope(shield=True) as scope:
        scope.deadline = anyio.current_time() + grace + _CLEANUP_MARGIN
        await process.aclose()


async def _run(spec: _Spec) -> ProgramResult:
    if os.name != "posix":  # Windows: no sessions to stop a tree by
        raise NotImplementedError(
            "mainspring runs programs on POSIX systems only: stopping a program's whole "
            "process tree needs process groups and sessions"
        )
    # A checkpoint (as documented): a caller already cancelled starts no program (B1: a
    # step or agent whose timeout fired while its blocking code ran starts nothing more).
    await anyio.lowlevel.checkpoint_if_cancelled()
    started = time.monotonic()
    try:
        # Shielded: a cancellation that landed after the fork but before the process object
        # is ours would leave the program running unseen (asyncio kills the child alone,
        # not its tree). Spawning is bounded by fork and exec; the first checkpoint after it
        # delivers the cancellation, and the tree is stopped below.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                spec.argv,
                stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec.cwd,
                env=spec.env,
                start_new_session=True,  # its own session and group: the tree can be found
            )
    except OSError as exc:
        where = f" in {spec.cwd!r}" if spec.cwd is not None else ""
        raise type(exc)(
            exc.errno, f"cannot start {spec.argv[0]!r}{where}: {exc.strerror or exc}"
        ) from exc
    # A margin past the cap: a secret the cap cuts is seen whole, and cut off (E5).
    out = _Capture(spec.max_output + _WINDOW_MARGIN)
    err = _Capture(spec.max_output + _WINDOW_MARGIN)
    stopped_by: Timeout | None = None
    try:
        with anyio.CancelScope(deadline=anyio.current_time() + spec.timeout) as deadline:
            async with anyio.create_task_group() as tg:
                tg.start_soon(out.drain, process.stdout)
                tg.start_soon(err.drain, process.stderr)
                feeding = anyio.CancelScope()
                if process.stdin is not None:
                    tg.start_soon(_feed, process.stdin, spec.stdin or b"", feeding)
                await process.wait()
                # What the program did not read, nobody will: its stdin is closed below.
                feeding.cancel()
        if deadline.cancelled_caught:  # B1/B2: its own deadline, then its tree
            stopped_by = Timeout(
                detail=f"it ran longer than its timeout of {spec.timeout:g} s",
                source="run_program",
            )
            await _stop(process, spec.grace)
    except BaseException as exc:
        # Invariant B2: cancelled from outside (pause, cancel, lease lost, shutdown...) or
        # failed, the tree goes first (test_subprocess_stops.py), then the exception goes on
        # (STYLE 5: never swallowed).
        await _stop(process, spec.grace)
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            why = cancel_reason()
            note = (
                f"mainspring: the program {_shown(spec.argv)} (pid {process.pid}) and its "
                f"process tree were stopped because "
                f"{why if why is not None else 'its cancel scope was cancelled'}"
            )
            exc.add_note(str(redact(note)))  # E5: as ProgramFailed's message is
        raise
    finally:
        await _close(process, spec.grace)
    duration = time.monotonic() - started
    ran = _Result(spec.argv, process.returncode, out, err, duration, spec.max_output)
    result = ran.cut(spec.max_output, stopped_by)
    raw = len(out.data) + len(err.data) + sum(map(len, spec.argv))
    if spec.fit_stored and raw > _SURELY_FITS:
        result = await anyio.to_thread.run_sync(ran.fitted, stopped_by)
    if spec.check and not result.ok:
        raise ProgramFailed(result)
    return result


async def run_program_result(
    argv: Sequence[str] | str,
    *,
    shell: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str | None] | None = None,
    stdin: bytes | str | None = None,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - bounding the program is the point
    max_output: int = DEFAULT_MAX_OUTPUT,
    grace: float = DEFAULT_GRACE,
    check: bool = True,
) -> ProgramResult:
    """:func:`run_program`, returning the :class:`ProgramResult` itself (``ctx.run``)."""
    spec = _spec(
        argv,
        shell=shell,
        cwd=cwd,
        env=env,
        stdin=stdin,
        timeout=timeout,
        max_output=max_output,
        grace=grace,
        check=check,
    )
    return await _run(spec)


async def run_program(
    argv: Sequence[str] | str,
    *,
    shell: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str | None] | None = None,
    stdin: bytes | str | None = None,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - bounding the program is the point
    max_output: int = DEFAULT_MAX_OUTPUT,
    grace: float = DEFAULT_GRACE,
    check: bool = True,
) -> dict[str, Any]:
    """Run a program and return :meth:`ProgramResult.to_dict` of how it ran; usable as a
    tool as it is (``tools={"sh": run_program}``, a step's input ``{"argv": ["git",
    "status"]}``).

    ``argv`` is the program and its arguments, run without a shell; ``shell=True`` takes
    one command string and runs it with ``/bin/sh -c``. ``cwd`` is where it runs; ``env``
    adds variables to this process's environment (a value of None removes one); ``stdin``
    is written to it, then closed (without it, stdin is ``/dev/null``). It may run for
    ``timeout`` seconds (10 minutes unless told), and ``max_output`` bytes of stdout and of
    stderr are kept each (64 KiB unless told, at most 1 MiB: what is cut is counted in
    ``stdout_truncated`` / ``stderr_truncated``). What it returns always fits in one stored
    output (1 MiB, X2): outputs whose stored form would not (both caps full, or bytes that
    are stored larger: not UTF-8, control characters) are cut further to one common size,
    and the cut is counted the same way. Bad arguments raise ``ValueError`` (or
    ``TypeError``) before anything starts; a program that cannot start raises the
    ``OSError`` naming it (``FileNotFoundError`` for one that does not exist).

    A non-zero exit, or a program that outlived its timeout (its tree is then stopped),
    raises :class:`ProgramFailed` carrying the result, so a tool step fails with the exit
    status and the end of stderr; ``check=False`` returns the result instead.

    A checkpoint. If the caller is cancelled (its step paused, cancelled, out of lease, shut
    down, or any cancel scope around it), the program's whole process tree is stopped —
    SIGTERM leaves first, ``grace`` seconds (0.5 unless told), SIGKILL to the rest — before
    the cancellation goes on; ``cancel_reason()`` says why, and a note on the cancellation
    names the program. The program may have done part of its work: at-least-once.
    """
    spec = _spec(
        argv,
        shell=shell,
        cwd=cwd,
        env=env,
        stdin=stdin,
        timeout=timeout,
        max_output=max_output,
        grace=grace,
        check=check,
    )
    # X2: what the tool returns is its step's stored output; it is cut to fit one.
    result = await _run(attrs.evolve(spec, fit_stored=True))
    return result.to_dict()
