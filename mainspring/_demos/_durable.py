"""``mainspring demo``: a durable multi-agent run that survives ``kill -9``.

The demo process drives worker processes that each open a runtime on the same store. Worker 1
starts a 13-step research run (fake tools, skills, agents and planner: deterministic, no
network) and is SIGKILLed once about half of the steps are durable. Worker 2 resumes it in a
fresh process; an agent then asks a question, so the run waits (durably) and the worker exits.
The demo answers (it asks you on a terminal) and worker 3 resumes with the answer and
finishes. Every tool call and inner step is written to a side-effect ledger, so the summary
can say exactly what ran again: nothing whose completion was durable.

Workers report runtime events as JSON lines (V1: ids, states and counts only).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

import anyio
import attrs

from ..events import (
    ExecutionCancelled,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionPaused,
    ExecutionWaiting,
)
from ..executions import AgentContext, ExecutionBusy, PlannerContext, open_runtime
from ..storage import Execution, Plan, PlanStep, QuestionId, SqliteStore

#: Each run's id starts so; a fresh suffix each time lets one ``--store-dir`` hold many runs.
EXECUTION_PREFIX = "demo-research"
KILL_AT_INNER = 2  # worker 1 is killed once an agent has this many inner steps durable
LEASE_TTL = 1.0
TOPICS = ("solar", "wind", "storage", "grid")
_SETTLED = (ExecutionCompleted, ExecutionFailed, ExecutionWaiting, ExecutionPaused,
            ExecutionCancelled)  # fmt: skip


# -- the fake world (runs in the workers) ----------------------------------------------------


class _Ledger:
    """Side effects, appended with O_APPEND so a kill never leaves a torn line behind."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def note(self, what: str, phase: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{what} {phase}\n".encode())
        finally:
            os.close(fd)


def _world(ledger: _Ledger) -> dict[str, Any]:
    async def effect(what: str, seconds: float) -> None:
        ledger.note(what, "begin")
        await anyio.sleep(seconds)  # the work a real tool would do
        ledger.note(what, "end")

    async def fetch(topic: str) -> str:
        await effect(f"tool:fetch:{topic}", 0.25)
        return f"3 sources on {topic}"

    async def compile_report(**_: Any) -> str:
        await effect("tool:compile", 0.2)
        return "report.md, 4 sections"

    async def publish(**_: Any) -> str:
        await effect("tool:publish", 0.1)
        return "published"

    async def summarize(topic: str = "", text: str = "") -> str:
        await effect(f"skill:summarize:{topic or text[:12]}", 0.15)
        return f"summary of {topic or text}"

    async def analyst(ctx: AgentContext, input: Any) -> str:
        async def inner(name: str) -> str:
            await effect(f"inner:analyst:{name}", 0.15)
            return name

        for name in ("compare", "rank", "chart"):
            await ctx.step(name, inner, name)
        await ctx.call_skill("summarize", text="the ranking")
        ctx.report_finding("wind is cheapest per MWh in 3 of 4 sources", confidence=0.8)
        return "analysis: wind > solar > storage"

    async def critic(ctx: AgentContext, input: Any) -> str:
        async def inner(name: str) -> str:
            await effect(f"inner:critic:{name}", 0.2)
            return name

        for name in ("check-sources", "check-numbers"):
            await ctx.step(name, inner, name)
        return "critique done: 2 numbers corrected"

    async def editor(ctx: AgentContext, input: Any) -> str:
        async def inner(name: str) -> str:
            await effect(f"inner:editor:{name}", 0.1)
            return name

        await ctx.step("tighten", inner, "tighten")
        answer = await ctx.ask("Keep the speculative section on grid storage? (yes/no)")
        await ctx.step("title", inner, "title")
        return f"edited (speculative section kept: {answer})"

    def planner(goal: str, context: PlannerContext) -> Plan:
        fetches = [PlanStep(id=f"fetch-{t}", tool="fetch", input={"topic": t}) for t in TOPICS]
        summaries = [
            PlanStep(
                id=f"sum-{t}", skill="summarize", input={"topic": t}, depends_on=(f"fetch-{t}",)
            )
            for t in TOPICS
        ]
        summed = tuple(s.id for s in summaries)
        return Plan(
            id="research",
            goal=goal,
            steps=(
                *fetches,
                *summaries,
                PlanStep(id="analyse", agent="analyst", depends_on=summed),
                PlanStep(id="critique", agent="critic", depends_on=summed),
                PlanStep(id="compile", tool="compile", depends_on=("analyse", "critique")),
                PlanStep(id="edit", agent="editor", depends_on=("compile",)),
                PlanStep(id="publish", tool="publish", depends_on=("edit",)),
            ),
        )

    return {
        "tools": {"fetch": fetch, "compile": compile_report, "publish": publish},
        "skills": {"summarize": summarize},
        "agents": {"analyst": analyst, "critic": critic, "editor": editor},
        "planner": planner,
    }


def _emit(payload: dict[str, Any]) -> None:
    print(json.dumps(payload, default=str), flush=True)


async def _worker(
    mode: str, store: str, ledger: str, answer: str | None, execution_id: str
) -> None:
    world = _world(_Ledger(Path(ledger)))
    async with open_runtime(
        store=store, max_parallel_steps=4, max_calls=20, lease_ttl=LEASE_TTL, **world
    ) as rt:
        settled = anyio.Event()

        async def relay() -> None:
            async for event in rt.events(buffer=10_000):
                if attrs.has(type(event)):
                    fields = attrs.asdict(event, recurse=False)
                    _emit({"event": type(event).__name__, **fields})
                if isinstance(event, _SETTLED):
                    settled.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(relay)
            await anyio.lowlevel.checkpoint()
            if mode == "start":
                handle = await rt.start(
                    "Write a short report on renewable energy costs", execution_id=execution_id
                )
            else:
                deadline = time.monotonic() + 10 * LEASE_TTL
                while True:
                    try:
                        handle = await rt.resume(execution_id, answer=answer)
                        break
                    except ExecutionBusy:  # the killed worker's lease has not lapsed yet
                        if time.monotonic() > deadline:
                            raise
                        await anyio.sleep(LEASE_TTL / 10)
            result = await handle.wait()
            with anyio.move_on_after(5):  # the relay prints the run's last events first
                await settled.wait()
            tg.cancel_scope.cancel()
        question = result.pending.question if result.pending is not None else None
        _emit({"result": result.status, "question": question, "calls": result.calls_used})


# -- the demo (runs in the user's process) ----------------------------------------------------


@attrs.define
class _Worker:
    number: int
    proc: subprocess.Popen[str]


class _Demo:
    def __init__(self, out: TextIO, store_dir: Path, backend: str, interactive: bool) -> None:
        self.out = out
        self.dir = store_dir
        self.store = store_dir / "mainspring.sqlite3"  # the default name: the CLI finds it
        # A new run each time, beside any earlier ones in the same store (and its own
        # ledger, so that the summary counts only this run's side effects).
        self.execution_id = f"{EXECUTION_PREFIX}-{secrets.token_hex(4)}"
        self.ledger = store_dir / f"{self.execution_id}.side-effects.log"
        self.backend = backend
        self.interactive = interactive
        self.done: set[str] = set()
        self.total = 0

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def spawn(self, number: int, mode: str, answer: str | None = None) -> _Worker:
        args = [sys.executable, "-m", "mainspring._demos", "--worker", mode,
                str(self.store), str(self.ledger), "--backend", self.backend,
                "--execution-id", self.execution_id]  # fmt: skip
        if answer is not None:
            args += ["--answer", answer]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, bufsize=1)
        role = "starts the run" if mode == "start" else "resumes it"
        try:
            self.say(f"  worker {number} (pid {proc.pid}): {role}")
        except BaseException:  # the reader went away (``| head``): the worker goes too
            proc.kill()
            proc.wait(timeout=30)
            assert proc.stdout is not None
            proc.stdout.close()
            raise
        return _Worker(number, proc)

    def follow(self, worker: _Worker, *, kill: bool) -> dict[str, Any]:
        """Render one worker's events; with ``kill``, SIGKILL it mid-agent."""
        proc = worker.proc
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                payload = json.loads(line)
                if "result" in payload:
                    return dict(payload)
                self.render(worker.number, payload)
                if kill and payload.get("inner_done", 0) >= KILL_AT_INNER:
                    proc.kill()  # SIGKILL on POSIX, TerminateProcess on Windows
                    return {"killed": True}
            return {"exited": proc.wait(timeout=30)}
        except BaseException:
            proc.kill()  # interrupted (Ctrl-C, U2): the worker does not outlive the demo
            raise
        finally:
            if proc.poll() is None:
                proc.wait(timeout=30)
            proc.stdout.close()

    def render(self, number: int, event: dict[str, Any]) -> None:
        kind = event["event"]
        text = ""
        if kind == "ExecutionStarted":
            self.total = event["steps"]
            text = "run {execution_id}: plan v{plan_version}, {steps} steps"
        elif kind == "ExecutionResumed":
            text = "resumed: {completed} steps already durable, kept as they are"
        elif kind == "StepFinished":
            self.done.add(event["step_id"])
            text = "{state:<9} {step_id:<14} {done:>2}/{total} steps, calls used: {calls_used}"
        elif kind == "AgentTaskStarted":
            text = "agent task {task_id} for {step_id} (holds {calls_reserved} calls)"
        elif kind == "AgentTaskProgress":
            text = "  {task_id}: {inner_done} inner steps durable"
        elif kind == "AgentTaskWaiting":
            text = "agent task {task_id} asks a question; the run waits"
        if text:
            self.say(f"  [{number}] " + text.format(**event))

    def answer(self, question: str) -> str:
        self.say(f"  question: {question}")
        if self.interactive:
            reply = input("  your answer> ").strip()
            return reply or "yes"
        self.say("  (not a terminal: answering 'yes')")
        return "yes"

    def run(self) -> int:
        self.say(
            f"mainspring demo: a durable multi-agent run that survives kill -9 ({self.backend})"
        )
        self.say(f"  store: {self.store} (run {self.execution_id})")
        first = self.spawn(1, "start")
        outcome = self.follow(first, kill=True)
        if not outcome.get("killed"):
            self.say(f"  worker 1 ended before the kill: {outcome}")
            return 1
        at_kill = _read(self.store, self.execution_id)
        assert at_kill is not None
        durable = set(at_kill.completed_steps)
        inner_durable = {
            f"inner:{task.agent_id}:{name}"
            for task in at_kill.task_records
            for name in task.inner_completed
            if not QuestionId.is_question(name)
        }
        self.say(
            f"  killed worker 1 with SIGKILL: {len(durable)} steps and {len(inner_durable)} agent"
            " inner steps durable; the rest in flight or not started"
        )
        result: dict[str, Any] = {}
        answer: str | None = None
        for number in (2, 3, 4):
            worker = self.spawn(number, "resume", answer)
            result = self.follow(worker, kill=False)
            if result.get("result") != "waiting_for_clarification":
                break
            answer = self.answer(result.get("question") or "")
        status = result.get("result")
        self.summary(status, durable, inner_durable, result.get("calls", 0))
        return 0 if status == "completed" else 1

    def summary(self, status: Any, durable: set[str], inner_durable: set[str], calls: int) -> None:
        begins = Counter(
            line.rsplit(" ", 1)[0]
            for line in self.ledger.read_text().splitlines()
            if line.endswith(" begin")
        )
        step_effect = {
            **{f"fetch-{t}": f"tool:fetch:{t}" for t in TOPICS},
            **{f"sum-{t}": f"skill:summarize:{t}" for t in TOPICS},
            "compile": "tool:compile",
            "publish": "tool:publish",
        }
        durable_effects = {step_effect[s] for s in durable if s in step_effect} | inner_durable
        rerun_durable = sorted(e for e in durable_effects if begins[e] > 1)
        twice = sorted(e for e, n in begins.items() if n > 1 and e not in durable_effects)
        rows = [
            ("final status", str(status)),
            ("steps durable when worker 1 was killed", str(len(durable))),
            ("agent inner steps durable then", str(len(inner_durable))),
            ("durable steps or inner steps run again", str(len(rerun_durable))),
            ("in flight at the kill, so run again", ", ".join(twice) or "none"),
            ("model calls used (accumulated across processes)", str(calls)),
            ("store", str(self.store)),
            ("side-effect ledger", str(self.ledger)),
        ]
        width = max(len(r[0]) for r in rows)
        self.say("")
        self.say(f"  | {'what':<{width}} | value")
        self.say(f"  |{'-' * (width + 2)}|-------")
        for what, value in rows:
            self.say(f"  | {what:<{width}} | {value}")
        self.say("")
        self.say(f"  look inside: MAINSPRING_HOME={self.dir} mainspring show {self.execution_id}")
        if rerun_durable:
            self.say(f"  UNEXPECTED: durable work ran again: {', '.join(rerun_durable)}")


def _read(path: Path, execution_id: str) -> Execution | None:
    store = SqliteStore(path)
    try:
        return store.get(execution_id)
    finally:
        store.close()


def run_demo(out: TextIO, *, backend: str = "asyncio", store_dir: Path | None = None) -> int:
    """Run the durable demo, writing to ``out``; returns 0 if the run completed."""
    directory = store_dir or Path(tempfile.mkdtemp(prefix="mainspring-demo-"))
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    interactive = sys.stdin.isatty() and out is sys.stdout
    return _Demo(out, directory, backend, interactive).run()


def worker_main(argv: list[str]) -> None:
    """A worker process (``python -m mainspring._demos --worker ...``): one runtime, one run."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=["start", "resume"], required=True)
    parser.add_argument("store")
    parser.add_argument("ledger")
    parser.add_argument("--backend", default="asyncio")
    parser.add_argument("--answer")
    parser.add_argument("--execution-id", default=EXECUTION_PREFIX)
    args = parser.parse_args(argv)
    anyio.run(
        _worker,
        args.worker,
        args.store,
        args.ledger,
        args.answer,
        args.execution_id,
        backend=args.backend,
    )
