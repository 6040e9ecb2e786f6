"""Agents served by external worker processes: :class:`WorkerAgent` and its driver.

A ``WorkerAgent`` is registered like any agent (``agents={"coder": WorkerAgent([...])}``)
and runs in the step's AgentTaskActor, so pause, cancel, stop-task, lease loss and the
deadline reach it as that actor's cancellation, with their reasons. The driver takes every
worker record through ``fleet.py`` (never edited otherwise), puts it on the execution's board
(``_worker_run``) and commits it through the execution's funnel (E2) before the next side
effect: a phase a crash must resume from is durable before the process is started,
signalled or its delivery published. Phases with nothing outside the record between them
share one commit: assigned (or taken over, or exited) with starting; fenced and delivered
with the task's own save of the output (see ``Driver.deliver``).

- start: assigned → starting (committed) → ``host.start`` → running with the process's
  identity (committed); a failed start blocks the worker ``native-start`` and a new worker
  is assigned, up to ``max_starts`` starts, then the step fails ``worker-start-limit``;
- while running: a heartbeat renews the lease every lease/3; ``usage`` is charged to the
  worker's epoch and to the task (B3), and one that reaches the run's token or cost budget
  stops the process (confirmed dead), the task goes back to ready and the run waits for
  budget (past the task's reservation: the step fails ``agent-call-budget``); ``failure``
  feeds the no-progress rule, which stops the process, requires its death and fails the
  step ``no-progress:<class>``; an unexpected exit puts the task back to ready
  (``native-process-exited``) and a takeover (generation + 1) starts it again; idle /
  busy, usage and lines that are not reports are committed together, at most every 0.1 s
  (a worker that floods reports makes few commits);
- ``result``: the output is sealed as evidence, the handoff begins (its delivery digest is
  the evidence's), the process is stopped and confirmed dead, the worker fenced and the
  delivery published: the step succeeds with that output. A delivered task is never run
  again: a resumed run reads its output back from the sealed evidence (E10).

Stopping (any cancellation): the process tree is stopped and inspected; only a process
confirmed dead is recorded stopped (task ready after pause, deadline, shutdown or lease
loss; blocked after cancel or stop-task). One that cannot be confirmed dead is left as it
was recorded, and the trail says ``stop-unconfirmed``.

Resuming a task whose worker is still active (its runtime crashed, R3): its process is
inspected; alive, it is stopped (this run holds the lease now) and must be confirmed dead;
exited, it is taken over at once. A process the host cannot see (``unknown``: another host)
or a start whose process was never recorded cannot be confirmed dead: takeover is refused,
the trail says why, and the step fails ``worker-unknown-host`` / ``worker-unconfirmed``
(``worker-not-dead`` when stopping it did not confirm its death).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...storage._seam import check_lease
from .driver import Driver, sha
from .hosts import WorkerHost, command_of

if TYPE_CHECKING:
    from .._steps.context import AgentContext

__all__ = ["WorkerAgent"]


class WorkerAgent:
    """An agent served by an external process (see the module docstring).

    ``command`` is the argv the host starts (the step's input reaches it as JSON in
    ``MAINSPRING_WORKER_INPUT``); ``host`` starts, inspects and stops it (a
    ``SubprocessHost`` by default); ``lease`` is the worker's lease (1 s .. 10 min,
    renewed every third of it), ``grace`` the seconds between TERM and KILL when it is
    stopped, ``max_starts`` how many processes one task may start in all, ``env`` extra
    environment."""

    def __init__(
        self,
        command: str | Sequence[str],
        *,
        host: WorkerHost | None = None,
        lease: float = 30.0,
        grace: float = 5.0,
        max_starts: int = 3,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.command = command_of(command)
        if host is None:
            host = _default_host()
        if not isinstance(host, WorkerHost):
            raise TypeError("host must be a WorkerHost")
        self.host = host
        self.lease = check_lease(lease)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 600:
            raise ValueError("grace must be 0..600 seconds")
        self.grace = float(grace)
        if isinstance(max_starts, bool) or not isinstance(max_starts, int) or max_starts < 1:
            raise ValueError("max_starts must be a whole number of at least 1")
        self.max_starts = max_starts
        self.env = _env(env)

    @property
    def version(self) -> str:
        """The definition hash (R8): the command and the limits, not the host object."""
        return sha(repr((self.command, self.lease, self.grace, self.max_starts)))

    async def __call__(self, ctx: AgentContext, input: Any) -> Any:
        return await Driver(self, ctx, input).run()


def _env(env: Mapping[str, str] | None) -> dict[str, str]:
    """``env`` checked where the agent is built, not at each start: names and values are
    strings without NUL, names not empty and without ``=`` (what a process can be given)."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"env maps names to strings: a mapping, not {type(env).__name__}")
    checked = dict(env)
    for name, value in checked.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"env maps names to strings, not {name!r}: {type(value).__name__}")
        if not name or "=" in name or "\x00" in name or "\x00" in value:
            raise ValueError(
                f"env name {name!r}: names are not empty, without = or NUL; values without NUL"
            )
    return checked


def _default_host() -> WorkerHost:
    from .subprocess_host import SubprocessHost

    return SubprocessHost()
