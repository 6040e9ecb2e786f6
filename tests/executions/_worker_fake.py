"""A scripted worker host for tests (until the ``hosts`` branch's ScriptedHost lands): each
start plays the next script: reports it says at once, then ``exit`` (its stdout closes and
it is dead), ``hang`` (alive until stopped) or ``undying`` (alive; stop cannot kill it)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs

from mainspring.executions._workers.hosts import Report, Seen, WorkerSpec, WorkerStartFailed
from mainspring.storage._seam import ProcessIdentity


@attrs.frozen
class Script:
    reports: Sequence[tuple[str, Mapping[str, Any]]] = ()
    end: str = "hang"  # exit | hang | undying | fail (the start fails)


class _Process:
    def __init__(self, identity: ProcessIdentity, spec: WorkerSpec) -> None:
        self.identity = identity
        self.spec = spec
        self._send, self.reports = anyio.create_memory_object_stream[Report](math.inf)
        self.dead = anyio.Event()

    def say(self, kind: str, data: Mapping[str, Any]) -> None:
        spec = self.spec
        self._send.send_nowait(
            Report(
                type=kind, data=data, generation=spec.generation, session=spec.session, job=spec.job
            )  # type: ignore[arg-type]
        )

    def die(self) -> None:
        self._send.close()
        self.dead.set()

    async def wait(self) -> int:
        await self.dead.wait()
        return 0


class FakeHost:
    """See the module docstring. ``log`` records (event, pid, ...) in order."""

    def __init__(self, scripts: Sequence[Script] = (), name: str = "fake") -> None:
        self.scripts = list(scripts)
        self.name = name
        self.pids = itertools.count(1000)
        self.processes: dict[int, _Process] = {}
        self.undying: set[int] = set()
        self.log: list[tuple[Any, ...]] = []
        self.specs: list[WorkerSpec] = []
        self.sent: list[Mapping[str, Any]] = []
        self.started = anyio.Event()
        self.on_stop: Any = None  # called with the identity before a stop kills

    async def start(self, spec: WorkerSpec) -> _Process:
        self.specs.append(spec)
        script = self.scripts.pop(0) if self.scripts else Script()
        if script.end == "fail":
            self.log.append(("start-failed",))
            raise WorkerStartFailed("no such program")
        pid = next(self.pids)
        process = _Process(ProcessIdentity(host=self.name, pid=pid, group=pid), spec)
        self.processes[pid] = process
        if script.end == "undying":
            self.undying.add(pid)
        self.log.append(("start", pid, spec.generation))
        for kind, data in script.reports:
            process.say(kind, data)
        if script.end == "exit":
            process.die()
        self.started.set()
        self.started = anyio.Event()
        return process

    async def inspect(self, process: ProcessIdentity) -> Seen:
        if process.host != self.name:
            return Seen(state="unknown")
        known = self.processes.get(process.pid)
        if known is None or known.dead.is_set():
            return Seen(state="exited")
        return Seen(state="running")

    async def stop(self, process: ProcessIdentity, *, grace: float) -> Seen:
        if process.host != self.name:
            return Seen(state="unknown")
        if self.on_stop is not None:
            self.on_stop(process)
        self.log.append(("stop", process.pid))
        if process.pid in self.undying:
            return Seen(state="running")
        known = self.processes.get(process.pid)
        if known is not None and not known.dead.is_set():
            known.die()
        return Seen(state="exited", exit_code=-15)

    async def resume(self, spec: WorkerSpec) -> _Process:
        return await self.start(spec)

    async def send(self, process: ProcessIdentity, line: Mapping[str, Any]) -> None:
        self.sent.append(line)
