"""What model calls spent: tokens in, tokens out, cost (B3).

``cost`` is a :class:`~decimal.Decimal`, not a float: sums of costs must be exact and the
same whatever order steps finish in (float addition is not associative), and a cost read
back from disk must equal the one written. It is stored as its decimal text, so it
round-trips exactly through every backend. A cost given as a float is taken by its shortest
decimal text (``0.1`` is ``Decimal("0.1")``, not the binary fraction), and more than 12
decimal places are rounded half-even to 12: a sum of bounded costs with 12 places never
needs more than 22 digits, well within the default decimal context, so addition is exact.

Every value is bounded: tokens are whole numbers in ``0..MAX_TOKENS``, cost a finite number
in ``0..MAX_COST``. Adding saturates at those bounds (it never wraps and never decreases),
so accumulated usage only ever grows (B3, E9).
"""

from __future__ import annotations

import math
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import attrs

from ._codec import converter

__all__ = [
    "COST_PLACES",
    "MAX_COST",
    "MAX_TOKENS",
    "NO_USAGE",
    "Usage",
    "check_cost",
    "check_tokens",
    "valid_cost",
    "valid_tokens",
]

MAX_TOKENS = 10**12
MAX_COST = Decimal(10**9)
COST_PLACES = 12
_QUANTUM = Decimal(1).scaleb(-COST_PLACES)
_ZERO = Decimal(0)
#: Adds costs whatever context the caller set: 40 digits hold any bounded sum exactly.
_EXACT = Context(prec=40)


def check_cost(value: Any, what: str = "cost") -> Decimal:
    """``value`` (a Decimal, int, float or decimal text) as a cost, or ValueError (TypeError
    for a value that is not a number at all): finite, non-negative, at most ``MAX_COST``,
    rounded to 12 decimal places."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a number, not a bool")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number, not {value!r}")
        value = repr(value)
    if isinstance(value, int | str):
        try:
            value = Decimal(value)
        except InvalidOperation:
            raise ValueError(f"{what} must be a decimal number, not {value!r}") from None
    if not isinstance(value, Decimal):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not value.is_finite():
        raise ValueError(f"{what} must be a finite number, not {value}")
    if value < 0:
        raise ValueError(f"{what} must not be negative, not {value}")
    if value > MAX_COST:
        raise ValueError(f"{what} must be at most {MAX_COST:,}, not {value}")
    if value.as_tuple().exponent < -COST_PLACES:  # type: ignore[operator]
        value = value.quantize(_QUANTUM, context=_EXACT)  # not the caller's context
    return value if value != 0 else _ZERO  # -0 and 0E-5 are plain 0


def check_tokens(value: Any, what: str = "tokens") -> int:
    """``value`` as a token count, or ValueError / TypeError: a whole number in
    ``0..MAX_TOKENS``."""
    if type(value) is not int:
        raise TypeError(f"{what} must be a whole number, not {type(value).__name__}")
    if not 0 <= value <= MAX_TOKENS:
        raise ValueError(f"{what} must be within 0..{MAX_TOKENS:,}, not {value}")
    return value


def valid_tokens(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """attrs validator: a token count (see :func:`check_tokens`)."""
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        check_tokens(value, attribute.name)  # raises, saying why


def valid_cost(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """attrs validator: a Decimal that :func:`check_cost` keeps as it is."""
    if type(value) is not Decimal:
        raise TypeError(f"{attribute.name} must be a Decimal, not {type(value).__name__}")
    if check_cost(value, attribute.name) != value:
        raise ValueError(f"{attribute.name} has more than {COST_PLACES} decimal places")


def _cost(value: Any) -> Decimal:
    if value is _ZERO:  # the default, and every usage that spent nothing: kept as it is
        return value
    return check_cost(value)


@attrs.frozen(kw_only=True)
class Usage:
    """Tokens and cost spent by model calls, validated when built (from code or from disk).

    ``Usage(input_tokens=120, output_tokens=40, cost="0.0031")``; ``a + b`` adds each part,
    saturating at the bounds. ``cost`` is in whatever unit the skills report (USD, say): the
    runtime only adds and compares it.
    """

    input_tokens: int = attrs.field(default=0, validator=valid_tokens)
    output_tokens: int = attrs.field(default=0, validator=valid_tokens)
    cost: Decimal = attrs.field(default=_ZERO, converter=_cost)

    @property
    def tokens(self) -> int:
        """Input and output tokens together (what ``max_tokens`` bounds)."""
        return min(self.input_tokens + self.output_tokens, 2 * MAX_TOKENS)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        if not (other.input_tokens or other.output_tokens or other.cost):
            return self  # nothing added: each part stays as it is (already within bounds)
        return Usage(
            input_tokens=min(self.input_tokens + other.input_tokens, MAX_TOKENS),
            output_tokens=min(self.output_tokens + other.output_tokens, MAX_TOKENS),
            cost=min(_EXACT.add(self.cost, other.cost), MAX_COST),
        )

    def since(self, earlier: Usage) -> Usage:
        """What was spent after ``earlier`` (each part at least 0): the part of this total a
        charge has not counted yet."""
        return Usage(
            input_tokens=max(self.input_tokens - earlier.input_tokens, 0),
            output_tokens=max(self.output_tokens - earlier.output_tokens, 0),
            cost=max(_EXACT.subtract(self.cost, earlier.cost), _ZERO),
        )

    def covers(self, other: Usage) -> bool:
        """Every part at least ``other``'s (usage never goes backwards, B3)."""
        return (
            self.input_tokens >= other.input_tokens
            and self.output_tokens >= other.output_tokens
            and self.cost >= other.cost
        )

    def __bool__(self) -> bool:
        return bool(self.input_tokens or self.output_tokens or self.cost)

    def describe(self) -> str:
        """``"120 in / 40 out tokens, cost 0.0031"``: for people (the CLI, reasons)."""
        return f"{self.input_tokens} in / {self.output_tokens} out tokens, cost {self.cost:f}"


NO_USAGE = Usage()


def _structure_decimal(value: Any, _: Any) -> Decimal:
    # Stored as text only: a JSON number would have gone through a float (E10: exact).
    if type(value) is not str:
        raise ValueError(f"a cost is stored as decimal text, not {type(value).__name__}")
    return check_cost(value)


converter.register_unstructure_hook(Decimal, lambda value: str(value))
converter.register_structure_hook(Decimal, _structure_decimal)
