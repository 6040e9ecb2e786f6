"""kill -9 of a run at a random moment, then a fresh process resumes it (slow).

Each trial starts ``_crash_worker.py`` on a 30-step plan (27 tools, 3 agents with durable inner
steps, one of which asks a question), SIGKILLs it after a seeded random delay, reads the store
as the kill left it, and runs a fresh ``resume`` process until the execution is completed. The
side-effect ledger the workers keep (one ``<kind> <name> begin|end`` line around every tool
call and inner step) then shows:

- no step or inner step whose completion was durable at the kill ran again (E1, R7, R8);
- only the side effects in flight at the kill (begun by the killed process, not durable) ran
  twice, and nothing ran more than twice;
- the run ends ``completed``, every step succeeded, every side effect ran;
- every record parses, right after the kill and at the end (E7, E8);
- the agent that asked got the answer (R8), exactly once.

The backends: SQLite, the file store and PostgreSQL (a schema of each trial's own on the test
server; the processes are hosts sharing it). Trials per backend: ``--trials N`` (see
conftest.py) or ``MAINSPRING_RUNTIME_CRASH_TRIALS``; the default, 50 each on SQLite and files
and 16 on PostgreSQL (a process there also connects to a server), gives 116 per run.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

from ._crash_worker import ANSWER, ASKER, build_plan

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_crash_worker.py")
REPO = Path(ms.__file__).parent.parent
EXECUTION = "crash-ex"
SEED = 20261201
BACKENDS = ("sqlite", "file", "postgresql")
DEFAULT_TRIALS = {"sqlite": 50, "file": 50, "postgresql": 16}
#: Trials per test item: each stays well inside the per-test timeout.
BATCH = {"sqlite": 25, "file": 25, "postgresql": 8}
#: The kill lands uniformly within this many times an undisturbed run's length after the run
#: started (measured per batch, so a slower machine gets later kills): most kills land
#: mid-run, a few after it finished.
KILL_SPAN = 1.1

PLAN = build_plan()
TOOLS = [step.id for step in PLAN.steps if step.tool is not None]
AGENTS = {step.id: step.input for step in PLAN.steps if step.agent is not None}
INNER = [f"{sid}.i{i}" for sid, spec in AGENTS.items() for i in range(spec["inner"])]


def _trials(config: pytest.Config, backend: str) -> int:
    option = config.getoption("trials", default=None)
    if option is not None:
        return int(option)
    given = os.environ.get("MAINSPRING_RUNTIME_CRASH_TRIALS")
    return int(given) if given else DEFAULT_TRIALS[backend]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "batch" not in metafunc.fixturenames:
        return
    params = []
    for backend in BACKENDS:
        total, size = _trials(metafunc.config, backend), BATCH[backend]
        # A PostgreSQL trial's processes start slower (they connect): a loaded machine gets time.
        marks = [pytest.mark.timeout(300)] if backend == "postgresql" else []
        params += [
            pytest.param(backend, range(start, min(start + size, total)), marks=marks,
                         id=f"{backend}-trials{start}-{min(start + size, total) - 1}")
            for start in range(0, total, size)
        ]  # fmt: skip
    metafunc.parametrize(("backend", "batch"), params)


def _open(backend: str, path: Path | str) -> ms.storage.Store:
    if backend == "postgresql":
        return ms.storage.PostgresStore(str(path), read_only=True)
    return ms.storage.SqliteStore(path) if backend == "sqlite" else ms.storage.FileStore(path)


def _place(backend: str, where: Path, schemas: list[str]) -> Path | str:
    """Where a trial's store lives: a file or directory in ``where``, or a PostgreSQL schema
    of its own (noted in ``schemas``, dropped when the test ends)."""
    if backend == "postgresql":
        schemas.append(fresh_schema())
        return with_schema(require_server(), schemas[-1])
    return where / ("store.sqlite3" if backend == "sqlite" else "store")


def _read(
    backend: str, path: Path | str
) -> tuple[ms.storage.Execution, tuple[ms.storage._seam.Problem, ...]]:
    """The execution and the listing's problems, from a fresh handle (reading never writes)."""
    store = _open(backend, path)
    try:
        execution = store.get(EXECUTION)  # parses, or this raises
        problems = store.list().problems
    finally:
        if isinstance(store, ms.storage.SqliteStore | ms.storage.PostgresStore):
            store.close()
    assert execution is not None
    return execution, problems


def _ledger(path: Path) -> list[tuple[str, str, str]]:
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        kind, name, phase = line.split(" ")
        lines.append((kind, name, phase))
    return lines


def _lease_env(store: Path | str) -> dict[str, str]:
    """PostgreSQL: a 2 s lease. With 1 s a loaded machine (load 8-10, a trial's renewals
    queued behind its durable commits) once let a live run's lease lapse: the run stopped,
    the worker resumed it and re-ran the steps in flight in the process that was then killed,
    which this test counts as a step run twice before the kill."""
    return {"MAINSPRING_CRASH_LEASE_TTL": "2.0"} if isinstance(store, str) else {}


def _spawn(
    mode: str, store: Path | str, where: Path, seed: int, n: int = 0
) -> subprocess.Popen[bytes]:
    with (where / f"{mode}{n}.err").open("wb") as stderr:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, WORKER, mode, str(store), where / "ledger", EXECUTION, str(seed)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(REPO), **_lease_env(store)},
        )


def _stderr(where: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(where.glob("*.err")))


def _wait_ready(child: subprocess.Popen[bytes], where: Path) -> None:
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], 30.0)
    line = child.stdout.readline().strip() if readable else b""
    if line != b"ready":
        child.kill()
        child.communicate(timeout=10)
        pytest.fail(f"the start worker in {where} did not start ({line!r})\n{_stderr(where)}")


def _run_length(tmp_path: Path, backend: str, schemas: list[str]) -> float:
    """How long an undisturbed run takes here, from ``ready`` to completed."""
    where = tmp_path / "undisturbed"
    where.mkdir()
    store = _place(backend, where, schemas)
    child = _spawn("start", store, where, SEED)
    _wait_ready(child, where)
    began = time.monotonic()
    assert child.stdout is not None
    line = b"ready"
    while line.startswith((b"ready", b"resumed")):  # until it ends (b"" at end of file)
        readable, _, _ = select.select([child.stdout], [], [], 30.0)
        line = child.stdout.readline().strip() if readable else b"timed out"
    took = time.monotonic() - began
    out, _ = child.communicate(timeout=30)
    assert line == b"completed", (line, out, _stderr(where))
    assert child.returncode == 0, (out, _stderr(where))
    return took


def _trial(
    tmp_path: Path, backend: str, trial: int, run_length: float, schemas: list[str]
) -> dict[str, Any]:
    rng = random.Random(f"{SEED}:{backend}:{trial}")
    seed = rng.randrange(2**31)
    delay = rng.uniform(0.0, KILL_SPAN * run_length)
    where = tmp_path / f"t{trial}"
    where.mkdir()
    store = _place(backend, where, schemas)
    about = f"trial {trial} ({backend}, seed {seed}, kill after {delay * 1000:.0f} ms) in {where}"

    # 1. Start, and SIGKILL the run at a random moment.
    child = _spawn("start", store, where, seed)
    _wait_ready(child, where)
    time.sleep(delay)
    finished_first = child.poll() is not None
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert child.stdout is not None
    child.stdout.close()

    # 2. What was durable at the kill, and what the killed process had begun.
    at_kill, problems = _read(backend, store)
    assert problems == (), about
    tasks_at_kill, dropped = ms.storage._seam.parse_agent_tasks(at_kill)
    assert dropped == 0, about
    first = _ledger(where / "ledger")
    durable = {("tool", sid) for sid in at_kill.completed_steps if sid in TOOLS}
    durable |= {
        ("inner", f"{task.step_id}.{name}")
        for task in tasks_at_kill
        for name in task.inner_completed
        if not name.startswith("ask.")
    }
    durable_agents = set(at_kill.completed_steps) & set(AGENTS)

    # 3. Fresh processes resume it until it is completed.
    resumes = 0
    final = at_kill
    while final.status != "completed":
        assert resumes < 3, f"{about}: still {final.status} after {resumes} resumes"
        child = _spawn("resume", store, where, seed, resumes)
        try:
            out, _ = child.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            pytest.fail(f"{about}: the resume worker hung\n{_stderr(where)}")
        resumes += 1
        assert child.returncode == 0, f"{about}: resume exited {child.returncode}: {out!r}\n" + (
            _stderr(where)
        )
        final, problems = _read(backend, store)
        assert problems == (), about

    # 4. The ledger against what was durable.
    whole = _ledger(where / "ledger")
    after = whole[len(first) :]
    assert whole[: len(first)] == first, about
    begun_before = Counter((k, n) for k, n, p in first if p == "begin" and k in ("tool", "inner"))
    begun_after = Counter((k, n) for k, n, p in after if p == "begin" and k in ("tool", "inner"))
    ended = Counter((k, n) for k, n, p in whole if p == "end" and k in ("tool", "inner"))
    context = f"{about}\ndurable at kill: {sorted(durable)}\nledger:\n" + "\n".join(
        " ".join(line) for line in whole
    )
    for key in durable:
        # Durable at the kill: it ran exactly once, before the kill, and never again.
        assert (begun_before[key], begun_after[key], ended[key]) == (1, 0, 1), (key, context)
    reran = sorted(key for key in begun_before if begun_after[key])
    for key in {*begun_before, *begun_after}:
        assert begun_before[key] <= 1, (key, "ran twice in the killed process", context)
        assert begun_after[key] <= 1, (key, "ran twice after the resume", context)
    # What runs again is exactly what was in flight at the kill: begun by the killed process
    # and not durable when it died (at least once for those, at most once for the rest).
    assert set(reran) == set(begun_before) - durable, context
    for sid in durable_agents:
        assert ("agent", sid, "begin") not in after, (sid, "a completed agent ran again", context)
    # E1: a completion is durable before anything that depends on it starts. So whatever the
    # killed process began had its dependencies durable at the kill: the steps it depends
    # on, and for an inner step the inner step before it.
    depends = {step.id: step.depends_on for step in PLAN.steps}
    for kind, name, phase in first:
        if phase != "begin" or kind not in ("tool", "agent", "inner"):
            continue
        if kind == "inner":
            sid, _, inner = name.partition(".")
            previous = int(inner[1:]) - 1
            needed = {("inner", f"{sid}.i{previous}")} if previous >= 0 else set()
            assert needed <= durable, (name, "began before the inner step it follows was durable")
        else:
            missing = set(depends[name]) - set(at_kill.completed_steps)
            assert not missing, (name, "began before", missing, "was durable", context)
    every = {("tool", sid) for sid in TOOLS} | {("inner", name) for name in INNER}
    assert {key for key in every if ended[key] >= 1} == every, context

    # 5. The run: completed, every step succeeded, every record parses, the answer arrived.
    assert final.status == "completed", about
    assert final.plan is not None
    assert {step.status for step in final.plan.steps} == {"succeeded"}, about
    assert sorted(final.completed_steps) == sorted(step.id for step in PLAN.steps), about
    assert final.pending is None, about
    tasks, dropped = ms.storage._seam.parse_agent_tasks(final)
    assert dropped == 0, about
    assert sorted(task.step_id for task in tasks) == sorted(AGENTS), (about, "one task a step")
    assert {task.state for task in tasks} == {"completed"}, about
    inner_done = {f"{t.step_id}.{n}" for t in tasks for n in t.inner_completed if "." not in n}
    assert inner_done == set(INNER), about
    asker = next(task for task in tasks if task.step_id == ASKER)
    assert [n for n in asker.inner_completed if n.startswith("ask.")] == ["ask.0"], about
    outputs = {obs.step_id: obs.output for obs in final.observations if obs.ok}
    assert outputs[ASKER]["answer"] == ANSWER, about
    for sid in AGENTS:
        if sid != ASKER:
            assert outputs[sid]["answer"] is None, about
    answers = [(n, p) for k, n, p in whole if k == "answer"]
    assert answers, about
    assert set(answers) == {(ASKER, ANSWER)}, (about, answers)
    lease = final.lease
    if resumes:  # L3: the end of the run released the lease
        assert lease is None or not lease.owner or lease.expires_at <= time.time(), (about, lease)
    # else the killed process wrote ``completed`` but died before releasing: its lease lapses.
    return {
        "backend": backend,
        "killed_mid_run": at_kill.status != "completed" and not finished_first,
        "status_at_kill": at_kill.status
        + (" with the question open" if at_kill.pending and at_kill.status == "running" else ""),
        "durable_at_kill": len(durable),
        "reruns": len(reran),
        "resumes": resumes,
    }


def test_kill_9_then_resume_reruns_only_what_was_in_flight(
    tmp_path: Path, backend: str, batch: range, crash_stats: list[dict[str, object]]
) -> None:
    schemas: list[str] = []
    try:
        run_length = _run_length(tmp_path, backend, schemas)
        for trial in batch:
            crash_stats.append(_trial(tmp_path, backend, trial, run_length, schemas))
    finally:
        for schema in schemas:
            drop_schema(schema)
