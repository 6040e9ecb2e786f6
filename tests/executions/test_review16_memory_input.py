"""Review of agent memory (#16): what ``Memory`` takes. Every number the API clamps or
bounds is taken whatever its size (a huge int clamps, it does not overflow) and whatever
its kind of number (``Decimal`` too); a domain or conflict group shaped like a secret is
refused instead of being stored in the clear; a wrong argument names its own type."""

from __future__ import annotations

import decimal
import fractions
import sys
from typing import Any

import pytest

import mainspring as ms
from mainspring.storage import Scope

from ._memory_kit import StoreSpec

pytestmark = pytest.mark.anyio

HUGE = 10**400  # finite, but beyond a float's range


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (HUGE, 1.0),
        (-HUGE, 0.0),
        (fractions.Fraction(HUGE, 3), 1.0),
        (decimal.Decimal("0.25"), 0.25),
        (decimal.Decimal("1e500"), 1.0),
        (decimal.Decimal("-1e500"), 0.0),
        (fractions.Fraction(1, 4), 0.25),
    ],
)
async def test_any_finite_number_is_a_confidence_clamped_to_0_1(
    memory_store: StoreSpec, given: Any, stored: float
) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        fact = await rt.memory.remember("a claim", confidence=given)
        assert fact.confidence == stored
        found = await rt.memory.search("claim", min_confidence=given)
        assert [hit.fact.id for hit in found.hits] == [fact.id]


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (decimal.Decimal("NaN"), ValueError),
        (decimal.Decimal("sNaN"), ValueError),
        (decimal.Decimal("Infinity"), ValueError),
        (complex(0.5, 0), TypeError),
    ],
)
async def test_a_decimal_that_is_not_finite_is_refused_like_a_float(
    memory_store: StoreSpec, given: Any, error: type[Exception]
) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        with pytest.raises(error, match="confidence"):
            await rt.memory.remember("a claim", confidence=given)
        with pytest.raises(error, match="valid_until"):
            await rt.memory.remember("a claim", valid_until=given)
        assert await rt.memory.list() == []


async def test_valid_until_of_any_size_is_a_clear_answer(memory_store: StoreSpec) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        forever = await rt.memory.remember("for ever", valid_until=HUGE)
        assert forever.valid_until == sys.float_info.max
        assert [hit.fact.id for hit in (await rt.memory.search("ever")).hits] == [forever.id]
        with pytest.raises(ValueError, match="valid_until"):
            await rt.memory.remember("before the epoch", valid_until=-HUGE)
        later = await rt.memory.remember("later", valid_until=decimal.Decimal("4e9"))
        assert later.valid_until == 4e9
        assert await rt.memory.list(after=(HUGE, forever.id)) == []  # past every fact
        assert await rt.memory.list(after=(decimal.Decimal(0), "a")) != []


@pytest.mark.parametrize("what", ["domain", "conflict_group"])
@pytest.mark.parametrize(
    "secret",
    [
        "sk-" + "A1b2C3d4" * 5,
        "AKIA" + "ABCDEFGHIJKLMNOP",
        "ghp_" + "x1" * 18,
        "xoxb-1234567890-abc",
    ],
)
async def test_a_name_shaped_like_a_secret_is_refused_never_stored(
    memory_store: StoreSpec, what: str, secret: str
) -> None:
    """Before the fix only the text was redacted: a key given as a domain or a conflict
    group (both ids, and many keys are shaped like ids) reached the store in the clear."""
    async with ms.open_runtime(store=memory_store.target) as rt:
        with pytest.raises(ValueError, match=f"{what} looks like a secret"):
            await rt.memory.remember("a claim", **{what: secret})
        assert await rt.memory.list(include_hidden=True) == []
        await rt.memory.remember("a claim", domain="tokens", conflict_group="api-key")
    assert not memory_store.raw_contains(secret)


async def test_a_wrong_scopes_argument_names_its_own_type(memory_store: StoreSpec) -> None:
    async with ms.open_runtime(store=memory_store.target) as rt:
        with pytest.raises(TypeError, match="not bytes"):
            await rt.memory.search("x", scopes=b"user")  # type: ignore[arg-type]
        found = await rt.memory.search("x", scopes=[Scope.USER, " Project "])
        assert found.hits == ()
