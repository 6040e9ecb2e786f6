"""Make storage v2 stores with the code that wrote v2: ``python _v2_writer.py OUT_DIR [URL]``,
run with ``PYTHONPATH`` naming a checkout of that code (commit ff81a04;
``MAINSPRING_V2_ROOT`` says where, and the script refuses to run on other code).

Writes, under ``OUT_DIR``: ``v2.sqlite3`` (a SqliteStore), ``v2-files/`` (a FileStore) and,
with a PostgreSQL ``URL``, ``v2-postgres.json``: every row of every table of a store made in
a fresh schema (bytea as hex), for the test to load into a schema of its own. Each holds the
same executions, written through the store's own calls (``create`` then ``edit``s, so the
history is what a run leaves): one completed with approvals of its plan and of a step, one
running with stop requests (one cascading), their audit lines, an answer request for an
agent's question, external workers (one handing off, with its trail) and a task awaiting
delivery, and one paused with a stopped step. ``v2-view.json`` is every execution as that
code reads it back (``_codec.unstructure``, the same on every backend), and each backend's
history of each, keyed by id.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import attrs
import orjson

import mainspring as ms
from mainspring.executions._rules.scheduler import approval_key
from mainspring.executions._rules.transitions import add_control, stop_request
from mainspring.storage import _codec
from mainspring.storage._records import (
    AgentTaskRecord,
    AnswerRequest,
    Control,
    Execution,
    Lease,
    Observation,
    Pending,
    Plan,
    PlanStep,
)
from mainspring.storage._workers import StopIntent, TrailEntry, WorkerRecord, WorkerTask

T0 = 1_700_000_000.0
FAR = 4_102_444_800.0  # 2100: a lease that is still live when the test reads it
DIGEST = "ab" * 32


def _raw(record: Any) -> dict[str, Any]:
    raw: dict[str, Any] = _codec.unstructure(record)
    return raw


def _done() -> list[Execution]:
    plan = Plan(
        id="p-done",
        goal="a finished run",
        requires_approval=True,
        steps=(
            PlanStep(id="a", tool="echo", input={"x": 1}),
            PlanStep(id="b", tool="echo", depends_on=("a",), requires_approval=True),
        ),
    )
    first = Execution(
        id="ex-done",
        goal="a finished run",
        plan=plan,
        plan_version=1,
        status="waiting_for_approval",
        pending=Pending(kind="approval", question="approve the plan", asked_at=T0),
        created_at=T0,
        updated_at=T0,
    )
    approved = add_control(first, "approve", "alice", T0 + 1)
    approved = attrs.evolve(
        approved,
        status="running",
        pending=None,
        approvals=(approval_key(1, None), approval_key(1, plan.steps[1])),
        updated_at=T0 + 1,
    )
    steps = tuple(attrs.evolve(s, status="succeeded") for s in plan.steps)
    finished = attrs.evolve(
        approved,
        status="completed",
        plan=attrs.evolve(plan, steps=steps),
        completed_steps=("a", "b"),
        observations=(
            Observation(step_id="a", tool="echo", ok=True, output={"x": 1}),
            Observation(step_id="b", tool="echo", ok=True, output=None),
        ),
        updated_at=T0 + 2,
    )
    return [first, approved, finished]


def _stopping() -> list[Execution]:
    plan = Plan(
        id="p-stop",
        goal="a run with workers",
        steps=(
            PlanStep(id="code", agent="coder", status="running"),
            PlanStep(id="ask", agent="asker", status="running"),
            PlanStep(id="after", tool="echo", depends_on=("code",)),
        ),
    )
    task = AgentTaskRecord(
        id="t-code",
        agent_id="coder",
        step_id="code",
        state="running",
        execution_id="ex-stopping",
        created_at=T0,
        updated_at=T0,
        started_at=T0,
    )
    asker = AgentTaskRecord(
        id="t-ask",
        agent_id="asker",
        step_id="ask",
        state="waiting_for_clarification",
        execution_id="ex-stopping",
        created_at=T0,
        updated_at=T0 + 1,
        pending_question="which branch?",
        pending_question_at=T0 + 1,
    )
    first = Execution(
        id="ex-stopping",
        goal="a run with workers",
        plan=plan,
        plan_version=1,
        status="running",
        lease=Lease(owner="host-1", expires_at=FAR, epoch=1),
        agent_tasks=(_raw(task), _raw(asker)),
        pending=Pending(
            kind="clarification", question="which branch?", agent_task_id="t-ask", asked_at=T0
        ),
        created_at=T0,
        updated_at=T0,
    )
    worker = WorkerRecord(
        id="w-1",
        task_id="t-code",
        step_id="code",
        agent_id="coder",
        status="running",
        lease_expires_at=FAR,
        session="s1",
        job="t-code",
        created_at=T0,
        updated_at=T0,
    )
    spare = attrs.evolve(worker, id="w-0", status="stopped", reason="takeover")
    wtask = WorkerTask(
        id="t-code", step_id="code", state="running", worker_id="w-1", attempts=1, updated_at=T0
    )
    trail = [
        TrailEntry(seq=1, at=T0, worker_id="w-1", generation=1, event="start", status="running"),
    ]
    working = attrs.evolve(
        first,
        workers=(_raw(spare), _raw(worker)),
        worker_tasks=(_raw(wtask),),
        worker_trail=tuple(_raw(t) for t in trail),
        updated_at=T0 + 1,
    )
    intent = StopIntent(delivery_digest=DIGEST, contract_digest=DIGEST, expires_at=FAR, at=T0 + 2)
    handing = attrs.evolve(
        worker, status="handing-off", intent=intent, reason="handoff", updated_at=T0 + 2
    )
    waiting = attrs.evolve(wtask, state="awaiting-delivery", updated_at=T0 + 2)
    trail.append(
        TrailEntry(
            seq=2,
            at=T0 + 2,
            worker_id="w-1",
            generation=1,
            event="handoff",
            status="handing-off",
            detail=DIGEST,
        )
    )
    handoff = attrs.evolve(
        working,
        workers=(_raw(spare), _raw(handing)),
        worker_tasks=(_raw(waiting),),
        worker_trail=tuple(_raw(t) for t in trail),
        updated_at=T0 + 2,
    )
    # Two stop requests as Runtime.stop_agent_task writes them, each with its audit line.
    cascade = stop_request("op-1", "t-code", cascade=True)
    plain = stop_request("op-2", "t-ask")
    stopped = add_control(handoff, "stop-task", "bob", T0 + 3, cascade)
    stopped = add_control(stopped, "stop-task", "carol", T0 + 4, plain)
    stopped = attrs.evolve(
        stopped,
        stop_requests=(cascade, plain),
        answer_requests=(
            AnswerRequest(
                task_id="t-ask",
                ask="ask.0",
                answer="main",
                answer_sha256=DIGEST,
                by="dave",
                at=T0 + 5,
            ),
        ),
        controls=(
            *stopped.controls,
            Control(action="answer", by="dave", at=T0 + 5, answer_sha256=DIGEST),
        ),
        updated_at=T0 + 5,
    )
    return [first, working, handoff, stopped]


def _paused() -> list[Execution]:
    plan = Plan(
        id="p-paused",
        goal="a paused run",
        steps=(
            PlanStep(id="a", agent="helper", status="running"),
            PlanStep(id="b", tool="echo"),
        ),
    )
    first = Execution(
        id="ex-paused",
        goal="a paused run",
        plan=plan,
        plan_version=1,
        status="running",
        created_at=T0,
        updated_at=T0,
    )
    steps = (attrs.evolve(plan.steps[0], status="stopped"), plan.steps[1])
    stopped = add_control(
        first, "stop-task", "erin", T0 + 1, stop_request("op-3", "t-a", cascade=False)
    )
    stopped = attrs.evolve(
        stopped,
        plan=attrs.evolve(plan, steps=steps),
        observations=(
            Observation(
                step_id="a",
                agent="helper",
                agent_task_id="t-a",
                ok=False,
                code="stopped",
                error="stopped: the agent task was stopped; done without a result",
            ),
        ),
        updated_at=T0 + 1,
    )
    paused = add_control(stopped, "pause", "erin", T0 + 2, "lunch")
    paused = attrs.evolve(paused, status="paused", updated_at=T0 + 2)
    return [first, stopped, paused]


def _fill(store: Any) -> None:
    for versions in (_done(), _stopping(), _paused()):
        assert store.create(versions[0])
        for version in versions[1:]:
            assert store.edit(version.id, lambda _stored, _now, v=version: v) is not None


def _view(store: Any) -> dict[str, Any]:
    listing = store.list()
    assert not listing.problems, listing.problems
    return {
        ex.id: {
            "execution": _codec.unstructure(ex),
            "history": [_codec.unstructure(e) for e in store.history(ex.id)],
        }
        for ex in listing.executions
    }


def _dump_postgres(url: str, schema: str) -> dict[str, Any]:
    import psycopg

    tables: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "ORDER BY table_name",
                (schema,),
            )
        ]
        for name in names:
            cursor = conn.execute(f'SELECT * FROM "{schema}"."{name}" ORDER BY 1, 2')
            columns = [d.name for d in cursor.description or ()]
            rows = [
                [v.hex() if isinstance(v, bytes | memoryview) else v for v in row]
                for row in cursor.fetchall()
            ]
            tables[name] = {"columns": columns, "rows": rows}
    return tables


def main() -> None:
    root = os.environ["MAINSPRING_V2_ROOT"]
    if not Path(ms.__file__).resolve().is_relative_to(Path(root).resolve()):
        raise SystemExit(f"not the v2 code: mainspring is {ms.__file__}")
    out = Path(sys.argv[1])
    views = {}
    for kind, path in (("sqlite", out / "v2.sqlite3"), ("files", out / "v2-files")):
        store: Any = (
            ms.storage.SqliteStore(path) if kind == "sqlite" else ms.storage.FileStore(path)
        )
        _fill(store)
        views[kind] = _view(store)
        store.close()
    if len(sys.argv) > 2:
        schema = "v2_fixture"
        url = sys.argv[2]
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        store = ms.storage.PostgresStore(url, schema=schema)
        _fill(store)
        views["postgres"] = _view(store)
        store.close()
        (out / "v2-postgres.json").write_bytes(
            orjson.dumps(_dump_postgres(url, schema), option=orjson.OPT_SORT_KEYS)
        )
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    executions = {
        kind: {i: v["execution"] for i, v in view.items()} for kind, view in views.items()
    }
    first = executions["sqlite"]
    assert all(each == first for each in executions.values()), "the backends read differently"
    history = {kind: {i: v["history"] for i, v in view.items()} for kind, view in views.items()}
    (out / "v2-view.json").write_bytes(
        orjson.dumps({"executions": first, "history": history}, option=orjson.OPT_SORT_KEYS)
    )


if __name__ == "__main__":
    main()
