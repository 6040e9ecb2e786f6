"""Hypothesis strategies shared by the property tests (STYLE.md, habit 13)."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

import mainspring as ms

# Strings over a fixed alphabet are drawn as text over it, not with st.from_regex: the same
# values at a third of the cost, and the record strategies draw dozens per example (a slow
# example makes shrinking a failure outlast the per-test timeout on a loaded machine).
_LOWER_DIGITS = string.ascii_lowercase + string.digits


def _words(alphabet: str, low: int, high: int) -> st.SearchStrategy[str]:
    """Strings of ``low..high`` characters of ``alphabet`` (the regex ``[alphabet]{low,high}``)."""
    return st.text(alphabet=alphabet, min_size=low, max_size=high)


details = st.text(max_size=40)
paths = st.lists(_words(_LOWER_DIGITS, 1, 6), min_size=1, max_size=4).map(
    lambda names: "/" + "/".join(names)
)

_leaf_reasons = st.one_of(
    st.builds(ms.Stop, detail=details),
    st.builds(ms.Pause, detail=details),
    st.builds(ms.Cancel, detail=details, source=st.sampled_from(["", "user", "system"])),
    st.builds(ms.Shutdown, detail=details),
    st.builds(ms.Timeout, detail=details),
    st.builds(ms.BudgetExhausted, detail=details),
    st.builds(ms.Crash, st.text(min_size=1, max_size=30), detail=details),
    st.builds(ms.LeaseLost, st.text(max_size=30), detail=details),
)

#: A leaf reason wrapped in 0..6 ParentCancel links.
reasons = st.recursive(
    _leaf_reasons,
    lambda inner: st.builds(ms.ParentCancel, inner, source=paths),
    max_leaves=6,
)

#: Per-sender message counts and a mailbox size, for the FIFO property.
sender_plans = st.tuples(
    st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=8),
)

#: Restart types and supervisor strategies, for the supervision model test.
restart_types = st.sampled_from(["permanent", "transient", "temporary"])
strategies = st.sampled_from(["one_for_one", "one_for_all", "rest_for_one"])

# -- storage records ----------------------------------------------------------------------

from mainspring.storage import _seam as rec  # noqa: E402
from mainspring.storage._seam import unstructure  # noqa: E402

ids = _words(string.ascii_letters + string.digits + "._:-", 1, 24).filter(
    lambda s: s not in {".", ".."}
)
#: A sha256 digest as lowercase hex.
digests = _words(string.hexdigits[:16], 64, 64)
counters = st.integers(min_value=0, max_value=1_000_000)
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
units = st.floats(min_value=0, max_value=1, allow_nan=False)
short_text = st.text(max_size=20)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | short_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=6,
)


def holds_tag_key(value: Any) -> bool:
    """Whether a JSON value holds the typed encoding's reserved key ``"$ms"`` (which that
    encoding escapes: such a value is not stored as plain JSON)."""
    if isinstance(value, dict):
        return "$ms" in value or any(holds_tag_key(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_tag_key(item) for item in value)
    return False


json_objects = st.dictionaries(short_text, json_values, max_size=3)
#: Token counts and costs within Usage's bounds (B3); costs with up to 12 decimal places,
#: any exponent (1E+3, 0.10, 5E-12): they must read back exactly as written.
token_counts = st.integers(min_value=0, max_value=10**12)
costs = st.decimals(
    min_value=0, max_value=10**9, allow_nan=False, allow_infinity=False, places=12
) | st.decimals(min_value=0, max_value=10**9, allow_nan=False, allow_infinity=False, places=0)
usages = st.builds(rec.Usage, input_tokens=token_counts, output_tokens=token_counts, cost=costs)
hash_maps = st.none() | st.dictionaries(short_text, short_text, max_size=3)


finite_seconds = st.floats(min_value=0, max_value=86_400, allow_nan=False)


@st.composite
def retry_policies(draw: st.DrawFn) -> ms.storage.RetryPolicy:
    """Any valid RetryPolicy (B1): base_delay never above max_delay."""
    low, high = sorted((draw(finite_seconds), draw(finite_seconds)))
    return ms.storage.RetryPolicy(
        max_attempts=draw(st.integers(min_value=1, max_value=ms.storage._seam.MAX_ATTEMPTS)),
        base_delay=low,
        max_delay=high,
        multiplier=draw(st.floats(min_value=1, max_value=1_000, allow_nan=False)),
        jitter=draw(units),
        retry_on=tuple(draw(st.lists(_words(string.ascii_letters + "_.", 1, 20), max_size=3))),
        retry_timeouts=draw(st.booleans()),
    )


@st.composite
def plan_steps(draw: st.DrawFn) -> rec.PlanStep:
    kind = draw(st.sampled_from(["tool", "skill", "agent"]))
    return rec.PlanStep(
        timeout=draw(st.none() | st.floats(min_value=1e-3, max_value=1e6, allow_nan=False)),
        retry=None if kind == "agent" else draw(st.none() | retry_policies()),
        id=draw(ids),
        description=draw(short_text),
        input=draw(json_objects),
        depends_on=tuple(draw(st.lists(ids, max_size=3))),
        status=draw(
            st.sampled_from(["pending", "running", "succeeded", "failed", "skipped", "stopped"])
        ),
        **{kind: draw(ids)},
    )


@st.composite
def plans(draw: st.DrawFn) -> rec.Plan:
    steps = draw(st.lists(plan_steps(), max_size=4, unique_by=lambda s: s.id))
    return rec.Plan(
        id=draw(ids), goal=draw(short_text), version=draw(counters), steps=tuple(steps),
        reason=draw(short_text),
    )  # fmt: skip


observations = st.builds(
    rec.Observation,
    step_id=ids,
    tool=st.none() | ids,
    agent_task_id=st.none() | ids,
    ok=st.booleans(),
    output=json_values,
    error=st.none() | short_text,
    code=st.none()
    | st.sampled_from(["cancelled", "agent-failed", "agent-timeout", "step-timeout"]),
    data=json_objects,
    finding_ids=st.lists(ids, max_size=3).map(tuple),
    calls_used=counters,
    redacted=st.booleans(),
    error_type=st.none() | short_text,
    traceback=st.none() | st.text(max_size=200),
    started_at=st.none() | times,
    ended_at=st.none() | times,
)
checkpoints = st.builds(
    rec.Checkpoint,
    at=times,
    plan_version=counters,
    git_head=st.none() | short_text,
    file_hashes=hash_maps,
    config_hash=st.none() | short_text,
    skill_versions=hash_maps,
    completed_steps=st.lists(ids, max_size=3).map(tuple),
    tool_hashes=hash_maps,
    absent=st.sets(st.sampled_from(["git", "git_head", "config"])).map(lambda s: tuple(sorted(s))),
)
findings = st.builds(
    rec.Finding,
    id=ids,
    claim=short_text,
    confidence=units,
    coverage=units,
    evidence=st.lists(
        st.builds(
            rec.Evidence,
            kind=st.text(min_size=1, max_size=10),
            ref=short_text,
            detail=short_text,
            step_id=st.none() | ids,
        ),
        max_size=2,
    ).map(tuple),
    source_steps=st.lists(ids, max_size=2).map(tuple),
    provenance=st.none() | st.builds(rec.Provenance, execution_id=ids, plan_version=counters),
    status=st.sampled_from(["active", "superseded", "contradicted"]),
    superseded_by=st.none() | ids,
    created_at=times,
    agent_id=st.none() | ids,
    task_id=st.none() | ids,
)
agent_tasks = st.builds(
    rec.AgentTaskRecord,
    id=ids,
    agent_id=ids,
    step_id=ids,
    state=st.sampled_from(["created", "queued", "running", "completed", "paused"]),
    created_at=times,
    updated_at=times,
    started_at=st.none() | times,
    interruption=st.none()
    | st.builds(
        rec.Interruption, kind=st.sampled_from(["crash", "pause", "parent-cancel"]), at=times
    ),
    execution_id=ids,
    plan_version=counters,
    kept_under_definition=st.just("") | digests,  # R7: left out of the record while unset
    attempt=st.integers(min_value=1, max_value=1_000_000),
    inner_plan=st.none() | plans(),
    inner_completed=st.lists(ids, max_size=3).map(tuple),
    inner_observations=st.lists(observations, max_size=2).map(tuple),
    inner_checkpoint=st.none() | checkpoints,
    touched_paths=st.lists(
        st.lists(_words(_LOWER_DIGITS, 1, 8), min_size=1, max_size=3).map("/".join),
        max_size=3,
        unique=True,
    ).map(tuple),
    pending_question=st.none() | short_text,
    pending_question_at=st.none() | times,
    answered_at=st.none() | times,
    answer_sha256=st.none() | digests,
    calls_reserved=counters,
    calls_used=counters,
    usage=usages,
    findings=st.lists(findings, max_size=3).map(tuple),
    diagnostics=st.lists(short_text, max_size=3).map(tuple),
    failure=st.none()
    | st.builds(
        rec.Failure,
        code=short_text,
        message=short_text,
        error_type=st.none() | short_text,
        traceback=st.none() | st.text(max_size=200),
    ),
)
stop_requests = st.builds(rec.StopRequest, operation_id=ids, task_id=ids, cascade=st.booleans())
# -- entries read one by one (E7, E8): a record, or what was stored if it does not parse ---

_statuses = st.sampled_from(["assigned", "starting", "running", "idle", "stopped", "fenced"])
worker_records = st.builds(
    ms.storage.WorkerRecord,
    id=ids,
    task_id=ids,
    step_id=ids,
    agent_id=ids,
    generation=st.integers(min_value=1, max_value=1_000),
    status=_statuses,
    lease=st.floats(min_value=1.0, max_value=600.0),
    lease_expires_at=st.none() | times,
    session=st.none() | ids,
    repeats=counters,
    delivered_digest=st.none() | digests,
    reason=st.text(max_size=20).filter(lambda text: "\x00" not in text),
    created_at=times,
    updated_at=times,
)
worker_task_records = st.builds(
    ms.storage.WorkerTask,
    id=ids,
    step_id=ids,
    state=st.sampled_from(["ready", "running", "blocked", "awaiting_delivery", "delivered"]),
    worker_id=st.none() | ids,
    attempts=counters,
    delivery_digest=st.none() | digests,
    updated_at=times,
)
trail_records = st.builds(
    ms.storage.TrailEntry,
    seq=st.integers(min_value=1, max_value=1_000_000),
    at=times,
    worker_id=ids,
    generation=st.integers(min_value=1, max_value=1_000),
    event=st.sampled_from(["assigned", "starting", "beat", "stopped"]),
    status=_statuses,
    detail=st.text(max_size=20).filter(lambda text: "\x00" not in text),
)


@st.composite
def unreadable_of(draw: st.DrawFn, records: st.SearchStrategy[Any]) -> dict[str, Any]:
    """What a store may hold that does not parse: a record's stored form with a key no
    version knows, a counter written as text, or a field missing."""
    raw: dict[str, Any] = dict(unstructure(draw(records)))
    how = draw(st.sampled_from(["unknown key", "text counter", "missing"]))
    if how == "unknown key":
        raw[draw(st.sampled_from(["bogus", "x", "v2"]))] = draw(json_values)
    elif how == "text counter":
        name = next(k for k in ("calls_used", "repeats", "attempts", "generation") if k in raw)
        raw[name] = str(raw[name])
    else:
        required = ("created_at", "updated_at", "at", "step_id", "worker_id")
        del raw[draw(st.sampled_from([k for k in required if k in raw]))]
    return raw


#: Items as ``Execution.agent_tasks`` (``workers``, ``worker_tasks``, ``worker_trail``)
#: holds them once read: each a record or an Unreadable, made from stored data.
def entries(records: st.SearchStrategy[Any], max_size: int = 3) -> st.SearchStrategy[Any]:
    return st.lists(records.map(unstructure) | unreadable_of(records), max_size=max_size).map(tuple)


executions = st.builds(
    rec.Execution,
    id=ids,
    goal=short_text,
    status=st.sampled_from(["planned", "running", "paused", "completed", "cancelled"]),
    plan=st.none() | plans(),
    plan_version=counters,
    completed_steps=st.lists(ids, max_size=3).map(tuple),
    observations=st.lists(observations, max_size=2).map(tuple),
    checkpoints=st.lists(checkpoints, max_size=5).map(tuple),
    pending=st.none()
    | st.builds(
        rec.Pending,
        kind=st.sampled_from(["approval", "clarification", "budget"]),
        asked_at=st.none() | times,
        budget=st.none()
        | st.builds(
            rec.BudgetInfo,
            calls_used=counters,
            max_calls=counters,
            needed=counters,
            budget=st.sampled_from(["calls", "tokens", "cost"]),
            usage=usages,
            max_tokens=st.none() | token_counts,
            max_cost=st.none() | costs.map(lambda cost: rec.Usage(cost=cost).cost),
        ),
    ),
    lease=st.none() | st.builds(rec.Lease, owner=short_text, expires_at=times, epoch=counters),
    calls_used=counters,
    usage=usages,
    max_tokens=st.none() | token_counts,
    max_cost=st.none() | costs.map(lambda cost: rec.Usage(cost=cost).cost),
    agent_tasks=entries(agent_tasks, max_size=2),
    workers=entries(worker_records, max_size=2),
    worker_tasks=entries(worker_task_records, max_size=2),
    worker_trail=entries(trail_records, max_size=2),
    agent_tasks_dropped=counters,
    controls=st.lists(
        st.builds(
            rec.Control,
            action=st.sampled_from(["pause", "resume", "answer"]),
            by=short_text,
            at=times,
            answer_sha256=st.none() | digests,
        )
        | st.builds(
            rec.Control, action=st.just("stop-task"), by=short_text, at=times, stop=stop_requests
        ),
        max_size=2,
    ).map(tuple),
    approvals=st.lists(
        st.builds(rec.Approval, plan_version=counters, step_id=st.none() | ids), max_size=2
    ).map(tuple),
    stop_requests=st.lists(stop_requests, max_size=2).map(tuple),
    deadline_at=st.none() | times,
    created_at=times,
    updated_at=times,
)
record_values = st.one_of(
    plan_steps(), plans(), observations, checkpoints, findings, agent_tasks, executions
)


# -- values a step may return (E10: the typed encoding) -------------------------------------

import datetime as _dt  # noqa: E402

from mainspring.storage._seam import redact_flagged  # noqa: E402

_offsets = st.timedeltas(
    min_value=_dt.timedelta(hours=-23, minutes=-59), max_value=_dt.timedelta(hours=23, minutes=59)
)
#: Fixed offsets (some named), IANA zones, and none.
time_zones = st.one_of(
    st.none(),
    st.builds(_dt.timezone, _offsets),
    st.builds(_dt.timezone, _offsets, st.text(min_size=1, max_size=5)),
    st.just(_dt.UTC),
    st.timezones(),
)
_hashable_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**90), max_value=2**90),
    st.floats(),  # NaN and the infinities included
    st.text(max_size=8),
    st.binary(max_size=12),
    st.datetimes(timezones=time_zones),
    st.dates(),
    st.times(timezones=st.none() | st.builds(_dt.timezone, _offsets)),
    st.timedeltas(),
    st.decimals(allow_nan=True, allow_infinity=True).filter(lambda d: not d.is_snan()),
    st.uuids(),
)
#: Values that can be set members and dict keys: leaves, and tuples and frozensets of them.
hashable_values = st.recursive(
    _hashable_leaves,
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=4,
)
_keys = st.text(max_size=6) | st.sampled_from(["$ms", "v"])
#: Every kind of value a step may return, nested, none of which redaction would change.
exact_values = st.recursive(
    hashable_values,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_keys, inner, max_size=4),
        st.dictionaries(hashable_values, inner, max_size=3),
        st.sets(hashable_values, max_size=3),
        st.frozensets(hashable_values, max_size=3),
    ),
    max_leaves=12,
).filter(lambda value: not redact_flagged(value)[1])
