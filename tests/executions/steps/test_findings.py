"""Findings carry structure (evidence items, agent and task ids, provenance, status), a
pending question its time, an answer its time and digest; all shown by ``mainspring show``
(E5: agent-authored text redacted; E8: old records still parse, others fail closed)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms

from ..._cli_kit import run_cli
from .._kit import Gate, agent, plan_of, runtime, stored, tasks_of, tool

pytestmark = pytest.mark.anyio

SECRET = "ghp_" + "b" * 36


async def test_E5_a_finding_carries_structured_evidence_ids_and_provenance(
    tmp_path: Path,
) -> None:
    async def scout(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("read", lambda: "notes")
        first = ctx.report_finding(
            f"the key {SECRET} is in notes.md",
            evidence=[
                {
                    "kind": "file",
                    "ref": "notes.md",
                    "detail": f"line 3: {SECRET}",
                    "step_id": "read",
                },
                {"kind": "note", "detail": "seen once"},
            ],
            confidence=0.9,
        )
        ctx.report_finding(
            "the key was rotated", status="superseded", superseded_by=first.id, evidence=()
        )
        return "scouted"

    async with runtime(tmp_path, agents={"scout": scout}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "scout")))).wait()
        (task,) = tasks_of(stored(rt, result.execution_id))
    assert result.status == "completed"
    first, second = task.findings
    assert first.agent_id == "scout"
    assert first.task_id == task.id
    assert first.provenance == ms.storage._seam.Provenance(
        execution_id=result.execution_id, plan_version=1
    )
    assert first.evidence == (
        ms.storage.Evidence(
            kind="file", ref="notes.md", detail="line 3: [redacted github-token]", step_id="read"
        ),
        ms.storage.Evidence(kind="note", detail="seen once"),
    )
    assert SECRET not in first.claim  # everything the agent wrote is redacted (E5)
    assert (second.status, second.superseded_by) == ("superseded", first.id)
    assert result.findings == task.findings


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"evidence": ["just a string"]}, TypeError, "not a mapping"),
        ({"evidence": "one string"}, TypeError, "list of"),
        ({"evidence": [{"detail": "no kind"}]}, ValueError, "needs a kind"),
        ({"evidence": [{"kind": "file", "path": "x"}]}, ValueError, "no field path"),
        ({"evidence": [{"kind": "file", "ref": 3}]}, TypeError, "ref must be a string"),
        ({"evidence": [{"kind": "file", "step_id": "../x"}]}, ValueError, ""),
        ({"status": "retracted"}, ValueError, "status"),
        ({"confidence": 1.5}, ValueError, "confidence"),
        ({"subject": 42}, ValueError, "subject"),
        ({"provenance": "me"}, ValueError, "set by the runtime"),
        ({"task_id": "t"}, ValueError, "set by the runtime"),
        ({"colour": "red"}, ValueError, "no field colour"),
    ],
)
async def test_E8_an_invalid_finding_is_refused_when_reported(
    tmp_path: Path, fields: dict[str, Any], error: type[Exception], match: str
) -> None:
    raised: list[BaseException] = []

    async def sloppy(ctx: ms.AgentContext, input: Any) -> str:
        try:
            ctx.report_finding("claim", **fields)
        except Exception as exc:
            raised.append(exc)
        return "ok"

    async with runtime(tmp_path, agents={"sloppy": sloppy}) as rt:
        result = await (await rt.start("g", plan_of(agent("a", "sloppy")))).wait()
        (task,) = tasks_of(stored(rt, result.execution_id))
    assert result.status == "completed"
    (exc,) = raised
    assert isinstance(exc, error)
    assert match in str(exc)
    assert task.findings == ()


def _task_raw(**finding: Any) -> dict[str, Any]:
    return {"v": 1, "id": "ex:t1", "agent_id": "a", "step_id": "s", "execution_id": "ex",
            "created_at": 0.0, "updated_at": 0.0,
            "findings": [{"id": "ex:t1.f1", "claim": "c", **finding}]}  # fmt: skip


def test_E8_findings_stored_in_the_first_format_still_parse() -> None:
    raw = _task_raw(evidence=["line 3", "line 9"], provenance="run one", status="active")
    task = ms.storage._seam.parse_agent_task(raw)
    assert task is not None
    (finding,) = task.findings
    assert finding.evidence == (
        ms.storage.Evidence(kind="note", detail="line 3"),
        ms.storage.Evidence(kind="note", detail="line 9"),
        ms.storage.Evidence(kind="provenance", detail="run one"),
    )
    assert finding.provenance is None
    assert finding.agent_id is None
    empty = ms.storage._seam.parse_agent_task(_task_raw(evidence=[], provenance=""))
    assert empty is not None
    assert empty.findings[0].provenance is None
    assert empty.findings[0].evidence == ()


@pytest.mark.parametrize(
    "finding",
    [
        {"evidence": [3]},
        {"evidence": [{"kind": "note", "extra": 1}]},
        {"evidence": "a string, not a list"},
        {"provenance": 5},
        {"provenance": {"execution_id": "ex"}},
        {"status": "retracted"},
    ],
)
def test_E8_any_other_finding_shape_fails_closed(finding: dict[str, Any]) -> None:
    assert ms.storage._seam.parse_agent_task(_task_raw(**finding)) is None


async def test_R6_the_planners_brief_of_findings_works_with_their_structure(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("v1")
    gate = Gate()
    contexts: list[ms.PlannerContext] = []

    async def scout(ctx: ms.AgentContext, input: Any) -> str:
        ctx.report_finding("notes say v1", evidence=[{"kind": "file", "ref": "notes.txt"}])
        ctx.report_finding("an old claim", status="contradicted")
        return "scouted"

    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        contexts.append(context)
        if context.previous_plan is None:
            return plan_of(agent("scout", "scout", path="notes.txt"),
                           tool("wait", "gate", "scout", path="notes.txt"))  # fmt: skip
        return plan_of(tool("fresh", "inc", x=1))

    options: dict[str, Any] = {"tools": {"gate": gate}, "agents": {"scout": scout},
                               "planner": planner, "workspace": workspace}  # fmt: skip
    async with runtime(tmp_path, **options) as rt:
        handle = await rt.start("g")
        await gate.entered.wait()
        await rt.pause(handle.execution_id)
        (workspace / "notes.txt").write_text("v2")
        result = await (await rt.resume(handle.execution_id)).wait()
    assert result.status == "completed"
    brief = contexts[1].findings
    assert brief is not None
    assert brief.startswith("<<<findings\n")
    assert "notes say v1 (confidence 0.00, agent scout)" in brief
    assert "an old claim" not in brief  # only active findings


async def test_a_question_has_its_time_and_an_answer_its_time_and_digest(
    tmp_path: Path,
) -> None:
    answer = f"yes, use {SECRET}"

    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        return await ctx.ask("may I?")

    async with runtime(tmp_path, agents={"asker": asker}) as rt:
        waiting = await (await rt.start("g", plan_of(agent("q", "asker")))).wait()
        (task,) = tasks_of(stored(rt, waiting.execution_id))
        assert task.pending_question_at is not None
        assert waiting.pending is not None
        assert waiting.pending.asked_at == task.pending_question_at
        done = await (await rt.resume(waiting.execution_id, answer=answer)).wait()
        record = stored(rt, waiting.execution_id)
    assert done.status == "completed"
    (task,) = tasks_of(record)
    digest = hashlib.sha256(answer.encode()).hexdigest()
    assert task.answer_sha256 == digest
    assert task.answered_at is not None
    assert task.answered_at >= waiting.pending.asked_at
    assert task.pending_question_at is None  # the question was answered
    (line,) = [c for c in record.controls if c.action == "answer"]
    assert line.answer_sha256 == digest
    assert line.at == task.answered_at
    assert SECRET not in json.dumps(
        ms.storage._seam.unstructure(record)
    )  # the answer itself is not

    store = str(tmp_path / "store.sqlite3")
    code, out = run_cli("show", record.id, "--store", store)
    assert code == 0
    assert f"sha256 {digest[:16]}" in out
    assert "answers" in out
    assert SECRET not in out
    code, out = run_cli("show", record.id, "--store", store, "--json")
    shown = json.loads(out)
    assert shown["agent_tasks"][0]["answer_sha256"] == digest
    assert [c["answer_sha256"] for c in shown["controls"] if c["action"] == "answer"] == [digest]


async def test_show_says_when_the_pending_question_was_asked_and_lists_findings(
    tmp_path: Path,
) -> None:
    async def asker(ctx: ms.AgentContext, input: Any) -> str:
        ctx.report_finding("it rains", evidence=[{"kind": "url", "ref": "https://x.example"}])
        return await ctx.ask("umbrella?")

    async with runtime(tmp_path, agents={"asker": asker}) as rt:
        waiting = await (await rt.start("g", plan_of(agent("q", "asker")))).wait()
    assert waiting.pending is not None
    assert waiting.pending.asked_at is not None
    store = str(tmp_path / "store.sqlite3")
    code, out = run_cli("show", waiting.execution_id, "--store", store)
    assert code == 0
    assert "pending: clarification (agent task " in out
    assert " since " in out
    assert "findings" in out
    assert "active by asker, 1 evidence: it rains" in out
    code, out = run_cli("show", waiting.execution_id, "--store", store, "--json")
    shown = json.loads(out)
    assert shown["pending"]["asked_at"] == waiting.pending.asked_at
    (finding,) = shown["agent_tasks"][0]["findings"]
    assert finding["evidence"] == [
        {"kind": "url", "ref": "https://x.example", "detail": "", "step_id": None}
    ]
    assert finding["provenance"] == {"execution_id": waiting.execution_id, "plan_version": 1}


async def test_an_outer_answer_is_audited_with_its_digest(tmp_path: Path) -> None:
    def planner(goal: str, context: ms.PlannerContext) -> ms.Plan:
        if "Clarification" not in goal:
            raise ms.ClarificationNeeded("which city?")
        return plan_of(tool("t", "inc"))

    async with runtime(tmp_path, planner=planner) as rt:
        first = await (await rt.start("book a hotel")).wait()
        done = await (await rt.resume(first.execution_id, answer="Lisbon")).wait()
        record = stored(rt, first.execution_id)
    assert done.status == "completed"
    (line,) = [c for c in record.controls if c.action == "answer"]
    assert line.answer_sha256 == hashlib.sha256(b"Lisbon").hexdigest()
