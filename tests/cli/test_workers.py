"""``mainspring workers [ID]`` (issue #17): the external agent workers of executions, read
from SQLite, file and PostgreSQL stores built with the real record classes; and
``stop-task`` on a worker-backed task saying so.

A read opens the store read-only and writes nothing (E7); a worker, worker task or trail
record that does not parse is counted on stderr, never crashes the command (E8); an unknown
execution is exit 3, a malformed id exit 2 before any store is touched (X1); what is
printed is redacted (E5)."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest

import mainspring as ms
from mainspring.cli import EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE
from mainspring.storage import (
    AgentTaskRecord,
    Execution,
    FileStore,
    Plan,
    PlanStep,
    PostgresStore,
    SqliteStore,
    Store,
    TrailEntry,
    Unreadable,
    WorkerRecord,
    WorkerTask,
)
from mainspring.storage._seam import (
    MAX_TRAIL,
    ProcessIdentity,
    UsageEpoch,
    WorkerFailure,
    unstructure,
)

from .._cli_kit import run_cli
from .._postgres import postgres_url

__all__ = ["postgres_url"]

SECRET = "ghp_" + "c" * 36
PROOF = "d" * 64
REPAIR = "b" * 64
FINGERPRINT = "a" * 64
TRAIL = 30


def _worker(n: int, now: float, **changes: Any) -> dict[str, Any]:
    record = WorkerRecord(
        id=f"w{n}",
        task_id=f"ex-w:t{n}",
        step_id=f"s{n}",
        agent_id="coder",
        created_at=now,
        updated_at=now,
        **changes,
    )
    raw: dict[str, Any] = unstructure(record)
    return raw


def _task(n: int, now: float, state: str, reason: str = "") -> dict[str, Any]:
    task = WorkerTask(
        id=f"ex-w:t{n}",
        step_id=f"s{n}",
        state=state,  # type: ignore[arg-type]
        reason=reason,
        worker_id=f"w{n}",
        attempts=n,
        updated_at=now,
    )
    raw: dict[str, Any] = unstructure(task)
    return raw


def _execution(now: float) -> Execution:
    """ex-w: a worker in its second generation, running, with a live lease, a process, a
    failure seen once, a repair and usage; one blocked by the no-progress rule with a lapsed
    lease; one worker record and one trail entry that do not parse; a trail of TRAIL."""
    failure = WorkerFailure(
        failure_class="tests-failed",
        fingerprint=FINGERPRINT,
        check_id="c1",
        phase="verify",
        round=3,
        at=now,
    )
    usage = (
        UsageEpoch(generation=1, session="s1", job="j1", input_tokens=70, total_tokens=80),
        UsageEpoch(
            generation=2,
            session="s2",
            job="j1",
            input_tokens=30,
            output_tokens=10,
            total_tokens=40,
            cost=Decimal("0.25"),
        ),
    )
    workers = (
        _worker(
            1,
            now,
            generation=2,
            status="running",
            lease=45.0,
            lease_expires_at=now + 3_600,
            process=ProcessIdentity(host="box-1", pid=4242, group=4240),
            failure=failure,
            repeats=1,
            repairs=1,
            repair_digest=REPAIR,
            usage=usage,
            reason="takeover",
        ),
        _worker(
            2,
            now,
            status="blocked",
            failure=failure,
            repeats=2,
            lease_expires_at=now - 7_200,
            reason="no-progress:tests-failed",
        ),
        {**_worker(9, now), "bogus": 1},  # does not parse: counted, not shown
    )
    trail = [
        unstructure(
            TrailEntry(
                seq=i,
                at=now,
                worker_id="w1",
                generation=1 if i < TRAIL else 2,
                event="takeover" if i == TRAIL else "heartbeat",
                status="assigned" if i == TRAIL else "running",
                detail=f"sha256 {FINGERPRINT[:8]}" if i == TRAIL else "",
            )
        )
        for i in range(1, TRAIL + 1)
    ]
    trail.insert(3, {"seq": 0, "bogus": True})  # does not parse: counted, not shown
    return Execution(
        id="ex-w",
        goal="g",
        status="running",
        workers=workers,
        worker_tasks=(
            _task(1, now, "running"),
            _task(2, now, "blocked", "no-progress:tests-failed"),
        ),
        worker_trail=tuple(trail),
        proof_digest=PROOF,
        created_at=now,
        updated_at=now,
    )


def _seed(store: Store) -> None:
    now = store.now()
    assert store.create(_execution(now))
    assert store.create(Execution(id="ex-plain", goal="g", created_at=now, updated_at=now))


def _open(kind: str, tmp_path: Path, url: str | None) -> tuple[Store, str]:
    if kind == "sqlite":
        return SqliteStore(tmp_path / "s.sqlite3"), str(tmp_path / "s.sqlite3")
    if kind == "files":
        return FileStore(tmp_path / "files"), str(tmp_path / "files")
    assert url is not None
    return PostgresStore(url), url


@pytest.fixture(params=["sqlite", "files", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    opened, where = _open(request.param, tmp_path, url)
    try:
        _seed(opened)
    finally:
        opened.close()  # type: ignore[attr-defined]
    return where


def _json(*argv: str) -> Any:
    code, out = run_cli(*argv, "--json")
    assert code == EXIT_OK, out
    return json.loads(out)


def test_the_listing_counts_workers_by_status_and_tasks_by_state(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _json("workers", "--store", store)
    assert [row["id"] for row in rows] == ["ex-w"]  # ex-plain has no workers
    row = rows[0]
    assert row["workers"] == {"blocked": 1, "running": 1}
    assert row["active"] == 1
    assert row["worker_tasks"] == {"blocked": 1, "running": 1}
    assert row["workers_dropped"] == 1
    assert row["proof_digest"] == PROOF
    assert "1 worker record could not be read" in capsys.readouterr().err
    code, out = run_cli("workers", "--store", store)
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0].split() == ["EXECUTION", "STATUS", "ACTIVE", "WORKERS", "TASKS", "UPDATED"]
    assert lines[1].startswith("ex-w")
    assert "1 blocked, 1 running" in lines[1]
    assert len(lines) == 2


def test_one_execution_in_detail_as_json(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = _json("workers", "ex-w", "--store", store)
    assert data["id"] == "ex-w"
    assert data["proof_digest"] == PROOF
    workers = {w["id"]: w for w in data["workers"]}
    assert set(workers) == {"w1", "w2"}
    assert data["workers_dropped"] == 1
    first, blocked = workers["w1"], workers["w2"]
    assert (first["generation"], first["status"], first["active"]) == (2, "running", True)
    assert first["lease"] == 45.0
    assert 3_000 < first["lease_expires_in"] <= 3_600
    assert first["process"]["pid"] == 4242
    assert first["failure"]["failure_class"] == "tests-failed"
    assert first["repeats"] == 1
    assert (first["repairs"], first["repair_digest"]) == (1, REPAIR)
    assert first["usage_totals"] == {
        "epochs": 2,
        "input_tokens": 100,
        "output_tokens": 10,
        "total_tokens": 120,
        "cost": "0.25",
    }
    assert (blocked["status"], blocked["active"], blocked["repeats"]) == ("blocked", False, 2)
    assert blocked["reason"] == "no-progress:tests-failed"
    assert blocked["lease_expires_in"] < 0
    tasks = {t["id"]: t for t in data["worker_tasks"]}
    assert tasks["ex-w:t2"]["state"] == "blocked"
    assert tasks["ex-w:t2"]["attempts"] == 2
    assert data["worker_tasks_dropped"] == 0
    # The default trail: the last 20 of the 30 that parse; the one that does not is counted.
    assert [e["seq"] for e in data["trail"]] == list(range(TRAIL - 19, TRAIL + 1))
    assert (data["trail_total"], data["trail_dropped"]) == (TRAIL, 1)
    err = capsys.readouterr().err
    assert "1 worker record could not be read" in err
    assert "1 worker trail record could not be read" in err


@pytest.mark.parametrize(("asked", "expected"), [(0, 0), (1, 1), (5, 5), (MAX_TRAIL, TRAIL)])
def test_the_trail_is_bounded_by_trail(store: str, asked: int, expected: int) -> None:
    data = _json("workers", "ex-w", "--store", store, "--trail", str(asked))
    assert len(data["trail"]) == expected
    assert [e["seq"] for e in data["trail"]] == list(range(TRAIL - expected + 1, TRAIL + 1))
    code, out = run_cli("workers", "ex-w", "--store", store, "--trail", str(asked))
    assert code == EXIT_OK
    trail_lines = [line for line in out.splitlines() if "  #" in line]
    assert len(trail_lines) == expected
    if expected:
        assert f"trail (last {expected} of {TRAIL})" in out
        last = ["#30", "w1", "g2", "takeover", "assigned", "sha256", FINGERPRINT[:8]]
        assert trail_lines[-1].split()[2:] == last
    else:
        assert "trail" not in out


def test_one_execution_in_detail_as_text(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli("workers", "ex-w", "--store", store, "--trail", "2")
    assert code == EXIT_OK
    assert out.startswith("ex-w  running\n")
    assert "workers: 2 (1 blocked, 1 running), 1 active; tasks: 2 (1 blocked, 1 running)" in out
    assert f"proof:   sha256 {PROOF}" in out
    assert "worker w1  generation 2  running" in out
    assert "  task ex-w:t1  step s1  agent coder" in out
    assert "  lease 45s, expires in 59m (" in out or "  lease 45s, expires in 1h (" in out
    assert "  process box-1 pid 4242 (group 4240)" in out
    assert "  last failure tests-failed, 1 in a row (phase verify, round 3, check c1) at" in out
    assert f"  repairs 1 (last sha256 {REPAIR[:16]})" in out
    assert "  usage 120 tokens (100 in, 10 out), cost 0.25 over 2 epoch(s)" in out
    assert "worker w2  generation 1  blocked" in out
    assert "  lease 30s, expired 2h ago (" in out
    assert "  last failure tests-failed, 2 in a row" in out
    assert "  reason no-progress:tests-failed" in out
    table = out.split("worker tasks\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0].split() == [
        "TASK",
        "STEP",
        "STATE",
        "WORKER",
        "ATTEMPTS",
        "REASON",
        "DELIVERY",
    ]
    assert table[2].split() == [
        "ex-w:t2",
        "s2",
        "blocked",
        "w2",
        "2",
        "no-progress:tests-failed",
        "-",
    ]
    assert "w9" not in out  # the record that does not parse is not shown ...
    assert "1 worker record could not be read" in capsys.readouterr().err  # ... but counted


def test_unknown_execution_bad_id_and_an_execution_without_workers(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run_cli("workers", "ex-nope", "--store", store)
    assert code == EXIT_UNKNOWN
    assert "no execution ex-nope" in capsys.readouterr().err
    code, _ = run_cli("workers", "bad id!", "--store", store, "--json")
    assert code == EXIT_USAGE
    assert json.loads(capsys.readouterr().err)["code"] == EXIT_USAGE
    code, out = run_cli("workers", "ex-plain", "--store", store)
    assert (code, out.splitlines()[-1]) == (EXIT_OK, "no workers in this execution")
    data = _json("workers", "ex-plain", "--store", store)
    assert (data["workers"], data["worker_tasks"], data["trail"]) == ([], [], [])


@pytest.mark.parametrize("trail", ["-1", "x", str(MAX_TRAIL + 1)])
def test_a_bad_trail_is_a_usage_error(tmp_path: Path, trail: str) -> None:
    assert run_cli("workers", "ex-w", "--store", str(tmp_path), "--trail", trail)[0] == EXIT_USAGE


def test_a_bad_id_is_refused_before_any_store_is_touched(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.sqlite3"
    assert run_cli("workers", "../etc", "--store", str(missing))[0] == EXIT_USAGE
    assert not missing.exists()


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_an_empty_store_and_no_store_yet(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened, where = _open(kind, tmp_path, None)
    opened.close()  # type: ignore[attr-defined]
    assert _json("workers", "--store", where) == []
    code, out = run_cli("workers", "--store", where)
    assert (code, out) == (EXIT_OK, "no executions with workers\n")
    home = tmp_path / "home"
    monkeypatch.setenv("MAINSPRING_HOME", str(home))
    monkeypatch.delenv("MAINSPRING_STORE", raising=False)
    assert run_cli("workers", "--json") == (EXIT_OK, "[]\n")
    assert run_cli("workers", "ex-w")[0] == EXIT_UNKNOWN
    assert not home.exists()  # nothing created


def test_doctor_reports_worker_records_that_do_not_parse(store: str) -> None:
    code, out = run_cli("doctor", "--store", store, "--json")
    assert code == 1
    findings = [f for f in json.loads(out)["findings"] if f["problem"] == "workers-dropped"]
    assert findings == [
        {
            "id": "ex-w",
            "problem": "workers-dropped",
            "detail": "1 worker or worker task records do not parse",
        }
    ]


def test_reading_writes_nothing(tmp_path: Path) -> None:
    """E7: the raw record that does not parse is still there after the command read it."""
    opened, where = _open("files", tmp_path, None)
    _seed(opened)
    before = opened.get("ex-w")
    opened.close()  # type: ignore[attr-defined]
    assert run_cli("workers", "ex-w", "--store", where)[0] == EXIT_OK
    assert run_cli("workers", "--store", where)[0] == EXIT_OK
    after = FileStore(tmp_path / "files", read_only=True)
    try:
        assert after.get("ex-w") == before
    finally:
        after.close()


def test_what_is_printed_is_redacted(tmp_path: Path) -> None:
    """E5: a record holds ids, classes and digests only; a secret in its free text (the
    reason, a trail detail) is masked all the same."""
    store = SqliteStore(tmp_path / "s.sqlite3")
    now = store.now()
    execution = _execution(now)
    workers = ({**unstructure(execution.workers[0]), "reason": f"token {SECRET}"},)
    trail = ({**unstructure(execution.worker_trail[-1]), "detail": f"token {SECRET}"},)
    store.create(
        Execution(
            id="ex-s",
            goal="g",
            workers=workers,
            worker_trail=trail,
            created_at=now,
            updated_at=now,
        )
    )
    store.close()
    for extra in ((), ("--json",)):
        code, out = run_cli("workers", "ex-s", "--store", str(tmp_path / "s.sqlite3"), *extra)
        assert code == EXIT_OK
        assert SECRET not in out
        assert "token" in out


# -- stop-task on a worker-backed task ---------------------------------------------------------


def test_stop_task_says_a_task_is_worker_backed_and_its_workers_status(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite3")
    now = store.now()
    plan = Plan(
        id="p",
        goal="g",
        steps=(PlanStep(id="s1", agent="coder", status="running"),),
    )
    task = AgentTaskRecord(
        id="ex-w:t1",
        agent_id="coder",
        step_id="s1",
        state="running",
        execution_id="ex-w",
        created_at=now,
        updated_at=now,
    )
    base = _execution(now)
    store.create(
        Execution(
            id="ex-w",
            goal="g",
            status="paused",
            plan=plan,
            plan_version=1,
            agent_tasks=(unstructure(task),),
            workers=base.workers[:1],
            worker_tasks=base.worker_tasks[:1],
            created_at=now,
            updated_at=now,
        )
    )
    store.close()
    code, out = run_cli("stop-task", "ex-w:t1", "--store", str(tmp_path / "s.sqlite3"), "--json")
    # Its worker is active and the command cannot reach its process (no agent is registered
    # here): the stop is refused and nothing is recorded, since a worker is recorded stopped
    # only once its process is confirmed dead.
    assert code != EXIT_OK, out
    answer = json.loads(out)
    assert answer["ok"] is False
    assert "not registered here" in answer["reason"]
    assert answer["worker"] == {
        "task_state": "running",
        "worker_id": "w1",
        "generation": 2,
        "status": "running",
    }
    code, out = run_cli("stop-task", "ex-w:t1", "--store", str(tmp_path / "s.sqlite3"))
    assert "worker-backed: worker w1 generation 2 is running" in out
    reread = SqliteStore(tmp_path / "s.sqlite3")
    try:
        record = reread.get("ex-w")
        assert record is not None
        assert record.agent_tasks[0].state == "running"  # type: ignore[union-attr] # unchanged
    finally:
        reread.close()


def test_stop_task_on_a_task_no_worker_serves_says_nothing_of_workers(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite3")
    now = time.time()
    task = AgentTaskRecord(
        id="ex-p:t1", agent_id="a", step_id="s1", state="running", execution_id="ex-p",
        created_at=now, updated_at=now,
    )  # fmt: skip
    plan = Plan(id="p", goal="g", steps=(PlanStep(id="s1", agent="a", status="running"),))
    store.create(
        Execution(id="ex-p", goal="g", status="paused", plan=plan, plan_version=1,
                  agent_tasks=(unstructure(task),), created_at=now, updated_at=now)
    )  # fmt: skip
    store.close()
    code, out = run_cli("stop-task", "ex-p:t1", "--store", str(tmp_path / "s.sqlite3"), "--json")
    assert code == EXIT_OK, out
    assert "worker" not in json.loads(out)


def test_E8_doctor_reports_a_trail_entry_that_does_not_parse(tmp_path: Path) -> None:
    """E8: a record that does not parse is left out of every view and counted; ``mainspring
    workers`` counts an unreadable trail entry (on stderr), so the read-only check of every
    record must too, instead of saying all is well."""
    where = tmp_path / "s.sqlite3"
    opened = SqliteStore(where)
    entry = {"seq": 1, "at": 1.0, "worker_id": "w1", "generation": 1, "event": "beat"}
    opened.create(
        Execution(
            id="ex-t",
            goal="g",
            status="completed",
            worker_trail=(Unreadable(raw={**entry, "status": 7}, key="1"),),
            created_at=1.0,
            updated_at=1.0,
        )
    )
    opened.close()
    code, out = run_cli("doctor", "--store", str(where), "--json")
    problems = [f for f in json.loads(out)["findings"] if f.get("id") == "ex-t"]
    assert code == 1, out
    assert problems, out


# ----------------------------------------------------------------------
# ``mainspring workers ID`` once printed a worker's process host (free text a host
# reports, up to 256 characters) as it was stored: control characters in it reached the
# reader's terminal. It is now clamped like every other stored text (escapes shown, redacted).


def test_U7_a_process_host_with_control_characters_is_escaped(tmp_path: Path) -> None:
    now = time.time()
    worker = WorkerRecord(
        id="w1",
        task_id="ex-w:t1",
        step_id="s1",
        agent_id="coder",
        status="running",
        process=ProcessIdentity(host=f"box\x1b]0;owned\x07\x1b[2J {SECRET}", pid=42, group=42),
        created_at=now,
        updated_at=now,
    )
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path)
    store.create(
        Execution(
            id="ex-w",
            goal="g",
            status="running",
            workers=(unstructure(worker),),
            created_at=now,
            updated_at=now,
        )
    )
    store.close()
    code, out = run_cli("--store", str(path), "workers", "ex-w")
    assert code == EXIT_OK
    assert "pid 42" in out
    assert "\x1b" not in out  # shown as escapes, not obeyed
    assert "\x07" not in out
    assert "\\x1b" in out
    assert SECRET not in out  # E5


# ----------------------------------------------------------------------
# ``mainspring events`` shows worker transitions (#17): one line each with the worker, its
# step and task, its generation, its status and the reason code; ``--json`` has the fields.


def test_events_prints_worker_moves(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path)
    worker = WorkerRecord(
        id="w1", task_id="t1", step_id="s1", agent_id="coder", created_at=1.0, updated_at=1.0
    )
    raw = ms.storage._seam.unstructure(worker)
    assert store.create(
        ms.storage.Execution(id="ex-1", goal="g", created_at=1.0, updated_at=1.0, workers=(raw,))
    )
    moved = ms.storage._seam.unstructure(attrs.evolve(worker, generation=2, reason="takeover"))
    assert store.edit("ex-1", lambda stored, now: attrs.evolve(stored, workers=(moved,)))
    store.close()
    code, out = run_cli("events", "ex-1", "--store", str(path))
    assert code == 0
    lines = [line for line in out.splitlines() if "  worker " in line]
    assert len(lines) == 2
    # seq, date, time (the timeline's column), execution id, then the entry
    assert lines[0].split()[4:] == [
        "worker", "assigned", "worker", "w1", "step", "s1", "task", "t1", "generation", "1"
    ]  # fmt: skip
    assert lines[1].endswith("generation 2  reason takeover")
    code, out = run_cli("events", "ex-1", "--json", "--store", str(path))
    entries = [json.loads(line) for line in out.splitlines()]
    (last,) = [e for e in entries if e["kind"] == "worker" and e["generation"] == 2]
    assert last["worker_id"] == "w1"
    assert last["status"] == "assigned"
    assert last["reason"] == "takeover"
