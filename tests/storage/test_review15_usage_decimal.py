"""Review of B3: a cost is taken the same whatever decimal context the caller has set."""

from __future__ import annotations

import decimal
from decimal import Decimal

import pytest

from mainspring.storage import Usage


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
