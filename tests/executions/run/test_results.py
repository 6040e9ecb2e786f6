"""An agent's definition hash sees what the agent binds, and is the same in every process (R8)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Any

from mainspring.executions._run.results import agent_hash

from .._definitions import AGENTS


def _hashes_in_a_process(seed: str) -> str:
    code = (
        "from tests.executions._definitions import AGENTS;"
        "from mainspring.executions._run.results import agent_hash;"
        "print(sorted((k, agent_hash(v)) for k, v in AGENTS.items()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return out.stdout.strip()


def test_R8_bound_values_hash_the_same_in_every_process() -> None:
    # Frozensets of strings iterate in an order that follows the per-process string hash
    # seed: the hash must not.
    here = str(sorted((k, agent_hash(v)) for k, v in AGENTS.items()))
    assert _hashes_in_a_process("1") == _hashes_in_a_process("98765") == here


def _over(value: Any) -> Any:
    async def agent(ctx: Any, input: Any) -> Any:
        return value

    return agent


class _Thing:
    def __init__(self, state: int) -> None:
        self.state = state


def test_R8_closure_cells_by_value_by_definition_or_by_type() -> None:
    assert agent_hash(_over((1, ("a", b"x")))) == agent_hash(_over((1, ("a", b"x"))))
    assert agent_hash(_over((1, ("a", b"x")))) != agent_hash(_over((1, ("a", b"y"))))
    assert agent_hash(_over(frozenset({1, 2}))) != agent_hash(_over(frozenset({1, 3})))
    # A list or a dict is state, not definition: an agent appending to one is the same agent.
    runs: list[str] = []
    before = agent_hash(_over(runs))
    runs.append("ran")
    assert agent_hash(_over(runs)) == before
    assert agent_hash(_over({"a": 1})) == agent_hash(_over({"b": 2}))
    assert agent_hash(_over(1)) != agent_hash(_over(True))  # a bool is not the int 1
    assert agent_hash(_over(1)) != agent_hash(_over(1.0))
    # An object: its type only (its state is what `version` is for).
    assert agent_hash(_over(_Thing(1))) == agent_hash(_over(_Thing(2)))
    assert agent_hash(_over(_Thing(1))) != agent_hash(_over(object()))

    # A function it closes over: by its own definition, recursively.
    def helper_one() -> int:
        return 1

    def helper_two() -> int:
        return 2

    assert agent_hash(_over(helper_one)) != agent_hash(_over(helper_two))
    assert agent_hash(_over(_over("a"))) != agent_hash(_over(_over("b")))


def test_R8_recursive_definitions_and_values_are_hashed_without_looping() -> None:
    def make(model: str) -> Any:
        async def agent(ctx: Any, input: Any) -> Any:
            return await agent(ctx, input) if input else model  # closes over itself

        return agent

    assert agent_hash(make("a")) == agent_hash(make("a"))
    assert agent_hash(make("a")) != agent_hash(make("b"))
    deep: Any = "x"
    for _ in range(1000):
        deep = (deep,)
    agent_hash(_over(deep))  # bounded depth: no RecursionError


def test_R8_a_plain_function_keeps_the_hash_it_had_before_bindings_counted() -> None:
    # Tasks stored by earlier versions compare unchanged for agents that bind nothing.
    import hashlib

    from mainspring.executions._run.results import _code_digest

    async def plain(ctx: Any, input: Any) -> int:
        return 1

    name = plain.__qualname__
    old = hashlib.sha256(f"{name}\ncode:{_code_digest(plain.__code__)}".encode()).hexdigest()
    assert agent_hash(plain) == old


def test_R8_callable_objects_inherited_call_static_class_methods_and_properties() -> None:
    namespace: dict[str, Any] = {}
    source = (
        "class Base:\n"
        "    async def __call__(self, ctx, input):\n"
        "        return self.run(input)\n"
        "class Agent(Base):\n"
        "    limit = {limit}\n"
        "    @staticmethod\n"
        "    def run(input):\n"
        "        return {body}\n"
        "    @property\n"
        "    def name(self):\n"
        "        return {name!r}\n"
    )

    def build(limit: int = 1, body: str = "1", name: str = "a") -> Any:
        exec(source.format(limit=limit, body=body, name=name), namespace)
        return namespace["Agent"]()

    base = agent_hash(build())
    assert agent_hash(build()) == base
    assert agent_hash(build(limit=2)) != base
    assert agent_hash(build(body="2")) != base
    assert agent_hash(build(name="b")) != base
    # A bound method: its function and its object's class.
    assert agent_hash(build().__call__) != agent_hash(build(body="2").__call__)


def test_R8_nested_partials_bind_arguments_at_every_level() -> None:
    async def base(ctx: Any, input: Any, a: int = 0, b: int = 0) -> int:
        return a + b

    one = functools.partial(functools.partial(base, a=1), b=1)
    two = functools.partial(functools.partial(base, a=1), b=2)
    assert agent_hash(one) != agent_hash(two)
    assert agent_hash(functools.partial(base, 1)) != agent_hash(functools.partial(base, 2))
    assert agent_hash(functools.partial(base, 1)) == agent_hash(functools.partial(base, 1))
