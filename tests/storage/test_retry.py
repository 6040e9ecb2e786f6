"""Deadlines and retries as stored values (B1): a RetryPolicy's backoff stays within its
bounds, and plan steps with a timeout and a retry policy, and a run's deadline, read back
exactly as committed on every backend."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mainspring as ms
from mainspring.storage import Execution, FileStore, Lease, PostgresStore, RetryPolicy, SqliteStore
from tests._examples import SHRINKING, examples
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

from ..strategies import plans, retry_policies


@given(retry_policies(), st.integers(min_value=-5, max_value=10_000), st.randoms())
@settings(max_examples=examples(300))
def test_B1_a_backoff_is_never_negative_capped_and_its_jitter_within_range(
    policy: RetryPolicy, failed: int, rng: random.Random
) -> None:
    delay = policy.delay(failed, rng)
    assert 0 <= delay <= policy.max_delay
    # The policy stops growing the exponent at 1,000 (far past MAX_ATTEMPTS): a subnormal
    # base delay may still be tiny there, where 2.0**9999 would overflow to the cap.
    exponent = min(max(failed, 1) - 1, 1_000)
    try:
        uncapped = policy.base_delay * policy.multiplier**exponent
    except OverflowError:  # no wait at all stays none, however many attempts failed
        uncapped = float("inf") if policy.base_delay else 0.0
    capped = min(policy.max_delay, uncapped)
    # Jitter takes at most its fraction off, never adds: within [(1 - jitter) d, d].
    assert capped * (1 - policy.jitter) - 1e-9 <= delay <= capped + 1e-9


@given(retry_policies())
@settings(max_examples=examples(100))
def test_B1_a_policy_round_trips_through_the_codec(policy: RetryPolicy) -> None:
    raw = ms.storage._seam.encode(policy)
    assert ms.storage._seam.structure(orjson.loads(raw), RetryPolicy) == policy


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"max_attempts": 0}, ValueError, "max_attempts"),
        ({"max_attempts": 1.5}, TypeError, "max_attempts"),
        ({"max_attempts": True}, TypeError, "max_attempts"),
        ({"base_delay": -1}, ValueError, "base_delay"),
        ({"max_delay": float("inf")}, ValueError, "max_delay"),
        ({"base_delay": 5, "max_delay": 1}, ValueError, "must not exceed"),
        ({"multiplier": 0.5}, ValueError, "multiplier"),
        ({"jitter": 2}, ValueError, "jitter"),
        ({"retry_on": "ValueError"}, TypeError, "retry_on"),
        ({"retry_on": ("",)}, ValueError, "retry_on"),
        ({"retry_timeouts": 1}, TypeError, "retry_timeouts"),
    ],
)
def test_B1_a_bad_policy_is_a_clear_error(
    fields: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        RetryPolicy(**fields)


def test_B1_a_stored_policy_with_an_unknown_key_is_refused() -> None:
    raw = {**ms.storage._seam.unstructure(RetryPolicy()), "retries": 3}
    with pytest.raises(ms.storage.RecordError):
        ms.storage._seam.structure(raw, RetryPolicy)


def test_B1_a_step_without_limits_is_stored_as_before() -> None:
    # Records that do not use the new fields are written exactly as before they existed.
    step = ms.PlanStep(id="a", tool="t")
    assert "timeout" not in ms.storage._seam.unstructure(step)
    assert "retry" not in ms.storage._seam.unstructure(step)
    record = Execution(id="x", goal="g", created_at=1.0, updated_at=1.0)
    assert "deadline_at" not in ms.storage._seam.unstructure(record)


@pytest.fixture(params=["file", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    schema = ""
    if request.param == "postgres":
        url = require_server()
        schema = fresh_schema()

    def make() -> Any:
        if request.param == "file":
            return FileStore(tmp_path / "store")
        if request.param == "postgres":
            return PostgresStore(with_schema(url, schema))
        return SqliteStore(tmp_path / "store" / "mainspring.db")

    yield make
    if schema:
        drop_schema(schema)


def _close(store: Any) -> None:
    if isinstance(store, SqliteStore | PostgresStore):
        store.close()


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@given(plan=plans(), deadline=st.none() | st.floats(min_value=0, max_value=4e9), data=st.data())
@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_B1_steps_with_limits_and_a_deadline_read_back_exactly_on_every_backend(
    backend: Any, plan: ms.Plan, deadline: float | None, data: st.DataObject
) -> None:
    execution_id = f"ex-{next(_ids)}"
    record = Execution(
        id=execution_id,
        goal="g",
        plan=plan,
        deadline_at=deadline,
        lease=Lease(owner="me:1:x", expires_at=4e9, epoch=1),
        created_at=1.0,
        updated_at=1.0,
    )
    store = backend()
    try:
        assert store.create(record)
        # A commit that changes the limits of one step (or the deadline) is kept as well.
        if plan.steps:
            index = data.draw(st.integers(min_value=0, max_value=len(plan.steps) - 1))
            step = plan.steps[index]
            changed = attrs.evolve(
                step,
                timeout=data.draw(st.none() | st.floats(min_value=0.5, max_value=10)),
                retry=None if step.kind == "agent" else RetryPolicy(max_attempts=2),
            )
            steps = (*plan.steps[:index], changed, *plan.steps[index + 1 :])
            record = attrs.evolve(record, plan=attrs.evolve(plan, steps=steps))
        record = attrs.evolve(record, deadline_at=None if deadline else 5.0, updated_at=2.0)
        assert store.replace(record, "me:1:x")
    finally:
        _close(store)
    fresh = backend()
    try:
        assert fresh.get(execution_id) == record
    finally:
        _close(fresh)


_ids = itertools.count()
