"""Agents whose definitions bind values, hashed in another process by test_definition_hash."""

from __future__ import annotations

import functools
from typing import Any


def _over(value: Any) -> Any:
    async def agent(ctx: Any, input: Any) -> Any:
        return value

    return agent


async def _base(ctx: Any, input: Any, *, labels: Any = frozenset({"x", "y", "z"})) -> Any:
    return labels


class _Base:
    async def __call__(self, ctx: Any, input: Any) -> Any:
        return self.run(input)


class Agent(_Base):
    labels = frozenset({"p", "q", "r"})

    def run(self, input: Any) -> Any:
        return sorted(self.labels)


#: Values whose order follows string hashing (randomised per process), closed over, bound by
#: a partial, as a default, and as a class attribute.
AGENTS: dict[str, Any] = {
    "closure": _over((frozenset({"a", "b", ("c", frozenset({"d", "e"}))}), 1.5, None, b"x")),
    "partial": functools.partial(_base, labels=frozenset({"e", "f", "g"})),
    "default": _base,
    "object": Agent(),
    "huge_int": _over(10**5000),
}
