"""Findings as an agent reports them: checked strictly, redacted, stamped by the runtime."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ...storage import AgentTaskRecord, Evidence, Finding, RecordError, redact
from ...storage._seam import MAX_EVIDENCE, Provenance, check_id, structure, unstructure

__all__ = ["new_finding"]

_RUNTIME_FINDING_FIELDS = frozenset({"id", "created_at", "agent_id", "task_id", "provenance"})
_AGENT_FINDING_FIELDS = frozenset(
    {"type", "subject", "verdict", "confidence", "coverage", "evidence", "source_steps"}
    | {"status", "superseded_by"}
)
_EVIDENCE_KEYS = frozenset({"kind", "ref", "detail", "step_id"})


def _evidence(items: Any) -> tuple[Evidence, ...]:
    """An agent's evidence, checked strictly and redacted (E5): a list of mappings with
    ``kind`` and optionally ``ref``, ``detail``, ``step_id``; never a plain string."""
    if isinstance(items, str | bytes) or not isinstance(items, list | tuple):
        raise TypeError("evidence is a list of {kind, ref, detail, step_id} mappings")
    if len(items) > MAX_EVIDENCE:
        raise ValueError(f"a finding keeps at most {MAX_EVIDENCE} evidence items")
    built = []
    for index, item in enumerate(items):
        if isinstance(item, Evidence):
            item = unstructure(item)
        if not isinstance(item, Mapping):
            raise TypeError(
                f"evidence[{index}] is a {type(item).__name__}, not a mapping: "
                'write {"kind": "note", "detail": text} for a note'
            )
        unknown = set(item) - _EVIDENCE_KEYS
        if unknown:
            raise ValueError(
                f"evidence[{index}] has no field {', '.join(sorted(map(str, unknown)))}"
            )
        for key in ("kind", "ref", "detail"):
            if key in item and type(item[key]) is not str:
                raise TypeError(f"evidence[{index}].{key} must be a string")
        if "kind" not in item:
            raise ValueError(f"evidence[{index}] needs a kind (file, url, note...)")
        step_id = item.get("step_id")
        built.append(
            Evidence(
                kind=redact(item["kind"]),
                ref=redact(item.get("ref", "")),
                detail=redact(item.get("detail", "")),
                step_id=check_id(step_id) if step_id is not None else None,
            )
        )
    return tuple(built)


def new_finding(record: AgentTaskRecord, claim: str, fields: Mapping[str, Any]) -> Finding:
    """The next finding of ``record``'s task, from what the agent gave (see
    ``AgentContext.report_finding``). Raises ValueError or TypeError for anything invalid."""
    theirs = set(fields) & _RUNTIME_FINDING_FIELDS
    if theirs:
        raise ValueError(f"a finding's {', '.join(sorted(theirs))} are set by the runtime")
    unknown = set(fields) - _AGENT_FINDING_FIELDS
    if unknown:
        raise ValueError(f"a finding has no field {', '.join(sorted(unknown))}")
    values = {key: redact(value) for key, value in fields.items() if key != "evidence"}
    finding = Finding(
        id=f"{record.id}.f{len(record.findings) + 1}",
        claim=redact(str(claim)),
        created_at=time.time(),
        evidence=_evidence(fields.get("evidence", ())),
        agent_id=record.agent_id,
        task_id=record.id,
        provenance=Provenance(execution_id=record.execution_id, plan_version=record.plan_version),
        **values,
    )
    try:  # what is kept must read back exactly: wrong types are refused here (E8)
        structure(unstructure(finding), Finding)
    except RecordError as exc:
        raise ValueError(str(exc)) from None
    return finding
