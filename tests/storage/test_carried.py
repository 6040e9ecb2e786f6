"""What the journal stores is what the converter writes: an output carried as the bytes it
was encoded to where it was made (carried beside the observation: ``carry_encoded``) gives
the very bytes encoding it again would (E10), is let go once written (a second write encodes
it again), and is ignored for any other observation (an evolved copy, another output); an
execution's head, taken straight from the record, is its unstructured form without the
parts."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from typing import Any

import attrs
import pytest

from mainspring.storage import Execution, Lease, Observation, Plan, PlanStep
from mainspring.storage._carried import carried, carry_encoded
from mainspring.storage._codec import canonical_json
from mainspring.storage._journal.model import snapshot_changes
from mainspring.storage._record_codec import execution_head, stored_observation
from mainspring.storage._seam import Encoded, encode_value, unstructure

OUTPUTS: list[Any] = [
    None,
    7,
    "text",
    {"b": 1, "a": [1, 2.5, None]},
    (1, "two"),
    {3, 1, 2},
    frozenset({"x"}),
    b"\x00bytes",
    math.nan,
    2**80,
    {1: "int key"},
    dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    decimal.Decimal("1.50"),
    uuid.UUID(int=5),
]


@pytest.mark.parametrize("output", OUTPUTS, ids=repr)
def test_E10_an_output_carried_as_bytes_is_stored_as_encoding_it_again_would(output: Any) -> None:
    encoded = Encoded.made(output, encode_value(output))
    held = carry_encoded(Observation(step_id="s", ok=True, output=output), encoded)
    plain = Observation(step_id="s", ok=True, output=output)
    assert canonical_json(stored_observation(held)) == canonical_json(unstructure(plain))
    assert encoded.data is None  # written once, then let go: the record holds the value only
    assert canonical_json(stored_observation(held)) == canonical_json(unstructure(plain))
    assert unstructure(held) == unstructure(plain)  # never part of the record
    assert held == plain  # nor compared
    assert attrs.asdict(held) == attrs.asdict(plain)  # nor a field a reader sees


def test_E10_bytes_made_for_another_object_are_not_used() -> None:
    first = {"a": 1}
    # Bytes that are not the output's (0, not {"a": 1}): any observation using them shows it.
    held = carry_encoded(Observation(step_id="s", ok=True, output=first), Encoded.made(first, 0))
    moved = attrs.evolve(held, output={"a": 2})
    assert canonical_json(stored_observation(moved)) == canonical_json(unstructure(moved))
    again = attrs.evolve(held)  # the same output, another observation: encoded afresh too
    assert canonical_json(stored_observation(again)) == canonical_json(unstructure(again))


def test_E10_carried_bytes_leave_with_their_observation() -> None:
    # Nothing is kept for an observation that is gone, written or not.
    before = carried()
    held = carry_encoded(Observation(step_id="s", ok=True, output=[1]), Encoded.made([1], [1]))
    assert carried() == before + 1
    del held
    assert carried() == before
    held = carry_encoded(Observation(step_id="s", ok=True, output=[1]), Encoded.made([1], [1]))
    stored_observation(held)
    assert carried() == before


def _old_head(execution: Execution) -> dict[str, Any]:
    # The head as it was made before: a slimmed copy, unstructured, the parts taken out.
    plan = execution.plan
    slim = attrs.evolve(
        execution,
        plan=attrs.evolve(plan, steps=()) if plan is not None else None,
        observations=(),
        completed_steps=(),
        agent_tasks=(),
        checkpoints=(),
        workers=(),
        worker_tasks=(),
        worker_trail=(),
    )
    head: dict[str, Any] = unstructure(slim)
    for name in ("observations", "completed_steps", "agent_tasks", "checkpoints"):
        head.pop(name, None)
    for name in ("workers", "worker_tasks", "worker_trail"):
        head.pop(name, None)
    if head["plan"] is not None:
        del head["plan"]["steps"]
    return head


def _executions() -> list[Execution]:
    plan = Plan(id="p", goal="g", steps=(PlanStep(id="a", tool="t", input={"x": (1,)}),))
    bare = Execution(id="e", goal="g", created_at=1.0, updated_at=2.0)
    return [
        bare,
        attrs.evolve(
            bare,
            status="running",
            plan=plan,
            plan_version=1,
            completed_steps=("a",),
            observations=(Observation(step_id="a", ok=True, output=1),),
            lease=Lease(owner="o", expires_at=3.0, epoch=2),
            deadline_at=9.0,
            workers=({"id": "w"},),
            proof_digest="0" * 64,
        ),
    ]


@pytest.mark.parametrize("execution", _executions(), ids=["bare", "full"])
def test_the_head_is_the_unstructured_record_without_its_parts(execution: Execution) -> None:
    assert execution_head(execution) == _old_head(execution)
    assert snapshot_changes(execution)[0] == ["head", _old_head(execution)]


def test_E10_bytes_carried_on_one_thread_are_taken_on_another() -> None:
    # The loop makes the next observation (carry) while the store's worker thread writes
    # the last ones (take): each gets its own bytes, once, and nothing is left behind.
    import queue
    import threading

    before = carried()
    handed: queue.Queue[Observation | None] = queue.Queue()
    wrong: list[int] = []

    def writer() -> None:
        while (observation := handed.get()) is not None:
            written = canonical_json(stored_observation(observation))
            if written != canonical_json(unstructure(observation)):
                wrong.append(observation.output)  # pragma: no cover - a failure

    thread = threading.Thread(target=writer)
    thread.start()
    outputs = [{"n": n} for n in range(2_000)]
    made = [Encoded.made(output, output) for output in outputs]
    for output, encoded in zip(outputs, made, strict=True):
        handed.put(carry_encoded(Observation(step_id="s", ok=True, output=output), encoded))
    handed.put(None)
    thread.join()
    assert wrong == []
    assert all(encoded.data is None for encoded in made)  # every one written as carried
    assert carried() == before
