"""B3: ``Usage`` is a bounded, validated value whose sums are exact and never decrease, and
the usage fields of executions and agent tasks read back exactly from every backend."""

from __future__ import annotations

import decimal
import itertools
import math
from collections.abc import Iterator
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

from mainspring.storage import Execution, FileStore, PostgresStore, RecordError, SqliteStore, Usage
from mainspring.storage._codec import decode
from mainspring.storage._journal.history import parse_event
from mainspring.storage._seam import (
    MAX_COST,
    MAX_TOKENS,
    encode,
    parse_agent_tasks,
    structure,
    unstructure,
)
from tests._examples import SHRINKING, examples
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

from ..strategies import executions, usages


@given(usages, usages, usages)
@settings(max_examples=examples(200), deadline=None)
def test_B3_addition_is_associative_commutative_and_never_decreases(
    a: Usage, b: Usage, c: Usage
) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a
    assert (a + b).covers(a)
    assert (a + b).covers(b)
    assert a + Usage() == a
    assert (a + b).since(a).covers(Usage())
    assert a.covers(a.since(b))


@given(usages, usages)
@settings(max_examples=examples(100), deadline=None)
def test_B3_sums_are_exact_whatever_decimal_context_the_caller_set(a: Usage, b: Usage) -> None:
    want = a + b
    with localcontext() as ctx:
        ctx.prec = 3  # a caller's context must not round the run's accounting
        assert a + b == want
    assert want.cost == min(a.cost + b.cost, MAX_COST)


def test_B3_sums_saturate_at_the_bounds_and_never_wrap() -> None:
    top = Usage(input_tokens=MAX_TOKENS, output_tokens=MAX_TOKENS, cost=MAX_COST)
    assert top + top == top
    assert top + Usage(input_tokens=1) == top


def test_B3_costs_are_taken_exactly_as_written() -> None:
    assert Usage(cost=0.1).cost == Decimal("0.1")  # a float by its shortest text
    assert Usage(cost=0.1) + Usage(cost=0.2) == Usage(cost="0.3")  # not 0.30000000000000004
    assert Usage(cost="1e-13").cost == Decimal(0)  # past 12 places: rounded half-even
    assert Usage(cost="-0").cost == Decimal(0)
    assert Usage(cost=3).cost == Decimal(3)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"input_tokens": -1}, ValueError, "input_tokens must be within"),
        ({"output_tokens": MAX_TOKENS + 1}, ValueError, "output_tokens must be within"),
        ({"input_tokens": True}, TypeError, "must be a whole number"),
        ({"input_tokens": 1.0}, TypeError, "must be a whole number"),
        ({"cost": math.nan}, ValueError, "finite"),
        ({"cost": math.inf}, ValueError, "finite"),
        ({"cost": Decimal("NaN")}, ValueError, "finite"),
        ({"cost": "-0.01"}, ValueError, "must not be negative"),
        ({"cost": MAX_COST + 1}, ValueError, "at most"),
        ({"cost": "ten"}, ValueError, "decimal number"),
        ({"cost": None}, TypeError, "must be a number"),
        ({"cost": False}, TypeError, "must be a number"),
    ],
)
def test_B3_bad_values_are_refused_with_a_clear_error(
    fields: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Usage(**fields)


@given(usages)
@settings(max_examples=examples(100), deadline=None)
def test_B3_a_usage_round_trips_through_the_codec_exactly(usage: Usage) -> None:
    data = encode(usage)
    back = decode(data, Usage)
    assert back == usage
    assert str(back.cost) == str(usage.cost)  # the same digits, not only an equal number
    assert encode(back) == data


@pytest.mark.parametrize(
    "raw",
    [
        {"input_tokens": 1, "output_tokens": 2, "cost": 0.5},  # a number went through a float
        {"input_tokens": 1, "output_tokens": 2, "cost": "-1"},
        {"input_tokens": 1, "output_tokens": 2, "cost": "NaN"},
        {"input_tokens": -1, "output_tokens": 2, "cost": "0"},
        {"input_tokens": 1, "output_tokens": 2, "cost": "0", "dollars": 1},
    ],
)
def test_B3_a_stored_usage_that_is_not_as_written_is_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(RecordError):
        structure(raw, Usage)


def test_E8_a_task_record_with_bad_usage_is_dropped_from_the_view_not_coerced() -> None:
    good = {"v": 1, "id": "t1", "agent_id": "a", "step_id": "s", "execution_id": "ex",
            "created_at": 1.0, "updated_at": 1.0}  # fmt: skip
    bad = {**good, "id": "t2", "usage": {"input_tokens": -5, "output_tokens": 0, "cost": "0"}}
    record = Execution(id="ex", goal="g", created_at=1, updated_at=1, agent_tasks=(good, bad))
    tasks, dropped = parse_agent_tasks(record)
    assert [t.id for t in tasks] == ["t1"]
    assert dropped == 1


def test_V1_history_entries_carry_tokens_and_cost_as_numbers_only() -> None:
    raw = {"kind": "step", "execution_id": "ex", "at": 1.0, "input_tokens": 3,
           "output_tokens": 4, "cost": "0.25"}  # fmt: skip
    event = parse_event(1, 1, raw)
    assert (event.input_tokens, event.output_tokens, event.cost) == (3, 4, "0.25")
    with pytest.raises(RecordError, match="cost"):
        parse_event(2, 2, {**raw, "cost": "a lot"})
    with pytest.raises(RecordError, match="input_tokens"):
        parse_event(3, 3, {**raw, "input_tokens": "3"})


# -- every backend ----------------------------------------------------------------------------


@pytest.fixture(params=["file", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "postgres":
        url = require_server()
        schema = fresh_schema()
        made: Any = PostgresStore(with_schema(url, schema))
    elif request.param == "file":
        made, schema = FileStore(tmp_path / "store"), ""
    else:
        made, schema = SqliteStore(tmp_path / "store" / "mainspring.db"), ""
    try:
        yield made
    finally:
        if isinstance(made, SqliteStore | PostgresStore):
            made.close()
        if schema:
            drop_schema(schema)


_ids = itertools.count()


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@given(executions, usages)
@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_B3_usage_fields_read_back_exactly_from_every_backend(
    store: Any, execution: Execution, more: Usage
) -> None:
    record = attrs.evolve(execution, id=f"ex-{next(_ids)}", status="running", lease=None)
    assert store.create(record)
    assert store.get(record.id) == record
    tasks, _ = parse_agent_tasks(record)
    grown = attrs.evolve(
        record,
        usage=record.usage + more,
        agent_tasks=tuple(unstructure(attrs.evolve(t, usage=t.usage + more)) for t in tasks),
    )
    written = store.edit(record.id, lambda stored, now: grown)
    assert written is not None
    back = store.get(record.id)
    assert back == written
    assert str(back.usage.cost) == str(grown.usage.cost)
    assert back.max_cost == record.max_cost
    assert back.max_tokens == record.max_tokens
    assert [t.usage for t in parse_agent_tasks(back)[0]] == [
        t.usage for t in parse_agent_tasks(grown)[0]
    ]


# ----------------------------------------------------------------------
# B3: a cost is taken the same whatever decimal context the caller has set.


@pytest.mark.parametrize(
    "context",
    [
        decimal.Context(prec=4),
        decimal.Context(prec=6, traps=[decimal.Inexact, decimal.Rounded]),
    ],
)
def test_B3_a_cost_with_many_places_is_rounded_whatever_the_callers_context(
    context: decimal.Context,
) -> None:
    """A skill that prices its call under its own (low-precision or trapping) decimal context
    gets its cost rounded to 12 places, not a ``decimal.InvalidOperation``/``Inexact``."""
    with decimal.localcontext(context):
        usage = Usage(cost="0.00012345678901234567")
        total = usage + Usage(cost="1234.5")
    assert usage.cost == Decimal("0.000123456789")
    assert total.cost == Decimal("1234.500123456789")
