"""Records: strict, versioned, round-trippable; malformed input is refused, never coerced."""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.storage import _records as rec
from mainspring.storage._codec import (
    canonical_json,
    decode,
    encode,
    sha256_hex,
    structure,
    unstructure,
)
from mainspring.storage._errors import RecordError, TooLarge
from tests._examples import SHRINKING, examples

from ..strategies import agent_tasks, executions, json_values, record_values


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@given(record_values)
@settings(max_examples=examples(100), deadline=None)
def test_every_record_kind_round_trips(record: Any) -> None:
    data = encode(record)
    assert decode(data, type(record)) == record
    assert encode(decode(data, type(record))) == data  # canonical: same value, same bytes


@st.composite
def mutated(draw: st.DrawFn) -> tuple[type[Any], dict[str, Any]]:
    record = draw(st.one_of(executions, agent_tasks))
    raw = unstructure(record)
    key = draw(st.sampled_from(sorted(raw)))
    how = draw(st.sampled_from(["replace", "delete", "add"]))
    if how == "replace":
        raw[key] = draw(json_values)
    elif how == "delete":
        del raw[key]
    else:
        raw[draw(st.text(min_size=1, max_size=8)) + "_x"] = draw(json_values)
    return type(record), raw


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@given(mutated())
@settings(max_examples=examples(100), deadline=None)
def test_malformed_input_is_refused_or_taken_exactly_never_coerced(
    case: tuple[type[Any], dict[str, Any]],
) -> None:
    cls, raw = case
    before = copy.deepcopy(raw)
    try:
        record = structure(raw, cls)
    except RecordError as exc:
        problems = exc.problems
        assert problems  # and each names where
        return
    assert raw == before  # parsing never changes its input
    _taken_exactly(raw, record, unstructure(record), cls.__name__)


def _default(field: attrs.Attribute[Any]) -> Any:
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return default.factory()
    assert default is not attrs.NOTHING, f"{field.name} is required, yet was not given"
    return default


def _upgraded(given: dict[str, Any], record: object) -> frozenset[str]:
    """The fields a read upgrades from a format from before they existed (a finding's plain
    string evidence or provenance, an observation without ``redacted`` holding a mask): not
    kept as given, and tested where the upgrades are."""
    if isinstance(record, rec.Finding) and (
        type(given.get("provenance")) is str
        or any(type(item) is str for item in given.get("evidence", ()))
    ):
        return frozenset({"evidence", "provenance"})
    if isinstance(record, rec.Observation) and "redacted" not in given and record.redacted:
        return frozenset({"redacted"})
    return frozenset()


def _taken_exactly(given: Any, record: Any, kept: Any, where: str) -> None:
    """Whatever was given is kept exactly; a field not given holds its default, and a field
    given its default may be left out of the stored form (fields added later, B1)."""
    if type(record) is ms.storage.Unreadable:  # an entry that does not parse: as given (E7)
        assert record.raw is given, where
        assert orjson.loads(canonical_json(kept)) == orjson.loads(canonical_json(given)), where
    elif attrs.has(type(record)):
        assert type(given) is dict, where
        upgraded = _upgraded(given, record)
        for field in attrs.fields(type(record)):
            value = getattr(record, field.name)
            if field.name in upgraded:
                continue
            if field.name in given and field.name in kept:
                _taken_exactly(given[field.name], value, kept[field.name], f"{where}.{field.name}")
            else:
                assert value == _default(field), f"{where}.{field.name}"
    elif type(record) is tuple and any(attrs.has(type(item)) for item in record):
        assert len(given) == len(record) == len(kept), where
        for index, (item, value, stored) in enumerate(zip(given, record, kept, strict=True)):
            _taken_exactly(item, value, stored, f"{where}[{index}]")
    else:
        assert orjson.loads(canonical_json(kept)) == orjson.loads(canonical_json(given)), where


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_arbitrary_bytes_never_crash_the_decoder(data: bytes) -> None:
    with contextlib.suppress(RecordError):
        decode(data, rec.Execution)


def test_errors_name_the_path() -> None:
    raw = unstructure(
        rec.Execution(
            id="ex-1",
            goal="g",
            created_at=1,
            updated_at=1,
            plan=rec.Plan(id="p", goal="g", steps=(rec.PlanStep(id="s", tool="t"),)),
        )
    )
    raw["plan"]["steps"][0]["depends_on"] = ["bad id with spaces"]
    raw["calls_used"] = "5"
    with pytest.raises(RecordError) as info:
        structure(raw, rec.Execution)
    problems = "\n".join(info.value.problems)
    assert "plan.steps[0]" in problems
    assert "calls_used" in problems


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("calls_used", 1_000_001),
        ("calls_used", -1),
        ("calls_used", True),
        ("calls_used", 1.0),
        ("v", 2),
        ("v", True),
        ("state", "exploded"),
        ("attempt", 0),
        ("findings", [{"id": "f", "claim": "c"}] * 201),
        ("diagnostics", ["x"] * 201),
        ("surprise", 1),
        ("v", None),
    ],
)
def test_E8_agent_task_records_fail_closed_per_record(field: str, value: Any) -> None:
    good = unstructure(
        rec.AgentTaskRecord(
            id="t1", agent_id="a", step_id="s", execution_id="ex", created_at=1, updated_at=1
        )
    )
    bad = dict(good, **{field: value}, id="t2")
    if field == "v" and value is None:
        del bad["v"]  # a record that does not say its version
    execution = rec.Execution(
        id="ex", goal="g", created_at=1, updated_at=1, agent_tasks=(good, bad, good)
    )
    tasks, dropped = rec.parse_agent_tasks(execution)
    assert [t.id for t in tasks] == ["t1", "t1"]
    assert dropped == 1
    kept = execution.agent_tasks[1]  # E7: reading never writes or repairs
    assert type(kept) is ms.storage.Unreadable
    assert kept.raw == bad
    assert kept.key == "t2"
    assert unstructure(execution)["agent_tasks"][1] == bad  # written back as it was


def test_plan_steps_name_exactly_one_target_and_plans_have_unique_steps() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        rec.PlanStep(id="s")
    with pytest.raises(ValueError, match="exactly one"):
        rec.PlanStep(id="s", tool="t", skill="k")
    step = rec.PlanStep(id="s", agent="researcher")
    assert (step.kind, step.target) == ("agent", "researcher")
    with pytest.raises(ValueError, match="unique"):
        rec.Plan(id="p", goal="g", steps=(step, step))


def test_bounded_lists_and_ranges() -> None:
    with pytest.raises(ValueError, match="more than 5"):
        rec.Execution(
            id="e",
            goal="g",
            created_at=0,
            updated_at=0,
            checkpoints=tuple(rec.Checkpoint(at=0, plan_version=1) for _ in range(6)),
        )
    with pytest.raises(ValueError, match=r"0\.\.1"):
        rec.Finding(id="f", claim="c", confidence=1.5)
    with pytest.raises(ValueError, match="id"):
        rec.Execution(id="..", goal="g", created_at=0, updated_at=0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        rec.Finding(id="f", claim="c").claim = "other"  # type: ignore[misc]


def test_canonical_json_and_hashes_ignore_key_order() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == b'{"a":[1,{"c":3,"d":2}],"b":1}'
    assert sha256_hex({"x": 1, "y": 2}) == sha256_hex({"y": 2, "x": 1})
    assert len(sha256_hex("anything")) == 64
    with pytest.raises(ValueError, match="JSON"):
        canonical_json({"x": object()})


def test_X2_oversize_input_is_refused_before_parsing() -> None:
    with pytest.raises(TooLarge) as info:
        decode(b" " * 101, rec.Execution, max_bytes=100)
    assert (info.value.size, info.value.limit) == (101, 100)


def test_non_finite_numbers_are_refused_both_ways() -> None:
    record = rec.Execution(id="e", goal="g", created_at=float("nan"), updated_at=1)
    with pytest.raises(ValueError, match="created_at"):
        encode(record)
    raw = unstructure(rec.Execution(id="e", goal="g", created_at=1, updated_at=1))
    raw["observations"] = [{"step_id": "s", "ok": True, "data": {"x": [float("inf")]}}]
    with pytest.raises(ValueError, match=r"observations\[0\]\.data\.x\[0\]"):
        encode(structure(raw, rec.Execution))
    # E10: a step's output is stored in the typed encoding, which keeps them exactly.
    raw["observations"] = [{"step_id": "s", "ok": True, "output": {"x": [float("inf")]}}]
    back = decode(encode(structure(raw, rec.Execution)), rec.Execution)
    assert back.observations[0].output == {"x": [float("inf")]}
    with pytest.raises(RecordError, match="updated_at"):
        structure(dict(raw, observations=[], updated_at=float("nan")), rec.Execution)


def _plant(value: object, bad: float, path: list[int]) -> object:
    """``value`` with ``bad`` put somewhere inside it, chosen by ``path``."""
    if not path:
        return bad
    step, rest = path[0], path[1:]
    if isinstance(value, list):
        if not value:
            return [bad]
        index = step % len(value)
        return [*value[:index], _plant(value[index], bad, rest), *value[index + 1 :]]
    if isinstance(value, dict):
        if not value:
            return {"k": bad}
        key = sorted(value)[step % len(value)]
        return {**value, key: _plant(value[key], bad, rest)}
    return [value, bad]


@given(
    json_values,
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.lists(st.integers(0, 9), max_size=6),
)
def test_encode_refuses_a_non_finite_number_anywhere_and_nothing_else(
    value: object, bad: float, path: list[int]
) -> None:
    encode(value)  # finite: fine
    with pytest.raises(ValueError, match="cannot be stored as JSON"):
        encode(_plant(value, bad, path))


def _task(**fields: object) -> rec.AgentTaskRecord:
    base: dict[str, object] = {
        "id": "ex:t1",
        "agent_id": "a",
        "step_id": "s",
        "execution_id": "ex",
        "created_at": 0.0,
        "updated_at": 0.0,
    }
    return rec.AgentTaskRecord(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "paths", [("../x",), ("/abs",), ("a\\b",), tuple(f"f{i}" for i in range(201))]
)
def test_E8_X1_a_tasks_declared_paths_stay_inside_the_workspace_and_bounded(
    paths: tuple[str, ...],
) -> None:
    with pytest.raises(ValueError, match="path"):
        _task(touched_paths=paths)
    assert _task(touched_paths=("a/b.txt",)).touched_paths == ("a/b.txt",)


def test_E8_an_answer_digest_is_a_sha256_and_a_finding_status_one_of_three() -> None:
    with pytest.raises(ValueError, match="sha256"):
        _task(answer_sha256="not a digest")
    with pytest.raises(ValueError, match="sha256"):
        rec.Control(action="answer", by="me", at=0.0, answer_sha256="A" * 64)
    with pytest.raises(ValueError, match="status"):
        rec.Finding(id="f", claim="c", status="retracted")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        rec.Evidence(kind="")


def test_X1_ids_appended_to_a_checked_tuple_are_still_checked() -> None:
    # Building a record checks only what was appended since the last one (the cost of a
    # commit must not grow with the run); what is appended is checked all the same.
    done = tuple(f"s{n}" for n in range(500))
    ms.storage.Execution(id="e", goal="g", created_at=0, updated_at=0, completed_steps=done)
    with pytest.raises(ValueError, match="completed_steps"):
        ms.storage.Execution(
            id="e", goal="g", created_at=0, updated_at=0, completed_steps=(*done, "bad id")
        )
    with pytest.raises(ValueError, match="completed_steps"):
        ms.storage.Execution(
            id="e", goal="g", created_at=0, updated_at=0, completed_steps=("..", *done)
        )


def test_P1_a_plan_rebuilt_with_one_step_changed_still_refuses_repeated_ids() -> None:
    steps = tuple(ms.PlanStep(id=f"s{n}", tool="t") for n in range(100))
    plan = ms.Plan(id="p", goal="g", steps=steps)
    changed = (*steps[:50], attrs.evolve(steps[50], status="succeeded"), *steps[51:])
    assert attrs.evolve(plan, steps=changed).steps[50].status == "succeeded"
    twin = (*steps[:50], ms.PlanStep(id="s7", tool="t"), *steps[51:])
    with pytest.raises(ValueError, match="unique"):
        attrs.evolve(plan, steps=twin)
