"""Plans: validation (P1), step identity for matching agent tasks (R8), and the fenced brief
of findings handed to a planner (X3)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...actors import MainspringError
from ...storage import Finding, Observation, Plan, PlanStep, redact
from ...storage._seam import encode_value, sha256_hex

__all__ = [
    "InvalidPlan",
    "check_plan",
    "fence",
    "findings_brief",
    "observe",
    "step_input_hash",
    "unrunnable",
]

MAX_BRIEF_FINDINGS = 10
MAX_FENCED_CHARS = 2_000


class InvalidPlan(MainspringError, ValueError):
    """A plan that cannot run: duplicate ids, a cycle, a dangling dependency, an unknown
    tool, skill or agent (P1). Nothing of it ran."""


def check_plan(
    plan: Plan,
    *,
    tools: Mapping[str, Any] | None = None,
    skills: Mapping[str, Any] | None = None,
    agents: Mapping[str, Any] | None = None,
) -> None:
    """Raise :class:`InvalidPlan` unless ``plan`` is a DAG whose steps name known targets (P1)
    and whose inputs can be stored exactly (E10).

    Unique step ids and "exactly one of tool / skill / agent" are already enforced by the
    records themselves; this adds what needs the whole plan and the runtime's registries.
    """
    ids = {step.id for step in plan.steps}
    problems: list[str] = []
    for step in plan.steps:
        try:
            encode_value(step.input)  # E10: stored exactly, or refused before anything runs
        except ValueError as exc:
            problems.append(f"step {step.id}'s input is not storable: {exc}")
        for dependency in step.depends_on:
            if dependency not in ids:
                problems.append(f"step {step.id} depends on unknown step {dependency}")
            elif dependency == step.id:
                problems.append(f"step {step.id} depends on itself")
        registry = {"tool": tools, "skill": skills, "agent": agents}[step.kind]
        if registry is not None and step.target not in registry:
            problems.append(f"step {step.id} names unknown {step.kind} {step.target}")
    if not problems:
        cycle = _find_cycle(plan.steps)
        if cycle:
            problems.append("the plan has a cycle: " + " -> ".join(cycle))
    if problems:
        raise InvalidPlan(f"plan {plan.id} v{plan.version}: " + "; ".join(problems))


def unrunnable(
    plan: Plan | None,
    *,
    tools: Mapping[str, Any],
    skills: Mapping[str, Any],
    agents: Mapping[str, Any],
) -> list[str]:
    """The targets (``"tool gate"``) that unfinished steps of a stored ``plan`` name and this
    runtime does not have (P1 on resume: a runtime with another tool set must not take the
    run up only to crash at the step)."""
    if plan is None:
        return []
    missing: list[str] = []
    for step in plan.steps:
        registry = {"tool": tools, "skill": skills, "agent": agents}[step.kind]
        named = f"{step.kind} {step.target}"
        unfinished = not step.status.finished
        if unfinished and step.target not in registry and named not in missing:
            missing.append(named)
    return missing


def _find_cycle(steps: Iterable[PlanStep]) -> list[str]:
    graph = {step.id: step.depends_on for step in steps}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for start in graph:
        if state.get(start):
            continue
        path: list[str] = []
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, index = stack.pop()
            if index == 0:
                state[node] = 1
                path.append(node)
            deps = graph[node]
            if index < len(deps):
                stack.append((node, index + 1))
                nxt = deps[index]
                if state.get(nxt) == 1:
                    return [*path[path.index(nxt) :], nxt]
                if not state.get(nxt):
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                path.pop()
    return []


def step_input_hash(step: PlanStep) -> str:
    """The identity an agent task is matched by, with its agent id (R8).

    Computed over the redacted input as stored (the typed encoding, E10), so the hash of a
    plan read back on resume equals the hash of the plan as it first ran; a plain JSON input
    hashes as it always did.
    """
    return sha256_hex(encode_value(redact(step.input)))


def fence(text: str, *, label: str = "untrusted", limit: int = MAX_FENCED_CHARS) -> str:
    """Untrusted text made safe to place in a prompt (X3): clamped, and fenced so that it
    cannot close its own fence."""
    clamped = text if len(text) <= limit else text[:limit] + " [truncated]"
    clamped = clamped.replace("<<<", "< < <").replace(">>>", "> > >")
    return f"<<<{label}\n{clamped}\n>>>"


def findings_brief(findings: Iterable[Finding]) -> str:
    """A bounded (10), fenced brief of the active findings, newest first, for a replan (R6)."""
    active = [finding for finding in findings if finding.status == "active"]
    active.sort(key=lambda finding: finding.created_at, reverse=True)
    lines = [
        f"- [{finding.id}] {finding.claim} (confidence {finding.confidence:.2f}"
        + (f", agent {finding.agent_id})" if finding.agent_id else ")")
        for finding in active[:MAX_BRIEF_FINDINGS]
    ]
    if len(active) > MAX_BRIEF_FINDINGS:
        lines.append(f"- ... and {len(active) - MAX_BRIEF_FINDINGS} more")
    return fence("\n".join(lines), label="findings")


def observe(step: PlanStep, **fields: Any) -> Observation:
    """An observation of ``step``, naming its tool, skill or agent."""
    return Observation(
        step_id=step.id, tool=step.tool, skill=step.skill, agent=step.agent, **fields
    )
