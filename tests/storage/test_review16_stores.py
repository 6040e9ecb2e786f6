"""Review of issue #16 (agent memory), the stores: bugs found by attacking SqliteStore,
FileStore and PostgresStore directly, each pinned by a test (every backend)."""

from __future__ import annotations

from typing import Any

import pytest

from mainspring.storage import FactFilter, query_terms
from tests.storage._memory_kit import fact, memory_store, remember

__all__ = ["memory_store"]


def _search(store: Any, query: str) -> list[str]:
    hits = store.memory_search(query_terms(query), FactFilter(), limit=10)
    return [hit.fact.id for hit in hits]


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("İstanbul in spring", "İstanbul"),  # lowercased, İ becomes i + a combining dot
        ("हिन्दी भाषा", "हिन्दी"),  # Devanagari: vowel signs and virama are marks
        ("עִבְרִית מְדֻבֶּרֶת", "עִבְרִית"),  # Hebrew with its vowel points
        ("ஒரு தமிழ் சொல்", "தமிழ்"),  # Tamil
    ],
)
def test_a_word_with_combining_marks_finds_the_fact_it_came_from(
    memory_store: Any, text: str, query: str
) -> None:
    # A query's words keep their combining marks: cut at each mark, a word became
    # fragments that no backend's index holds as such (PostgreSQL found nothing).
    remember(memory_store, fact("word", text), fact("other", "something else entirely"))
    assert _search(memory_store, query) == ["word"]
    assert _search(memory_store, text) == ["word"]


def test_query_terms_keep_marks_inside_words_and_drop_lone_ones() -> None:
    assert query_terms("हिन्दी, भाषा!") == ["हिन्दी", "भाषा"]
    assert query_terms("café") == ["café"]
    assert query_terms("cafe\u0301 au lait") == ["cafe\u0301", "au", "lait"]
    assert query_terms("\u0301\u0301 alone") == ["alone"]  # marks with no letter: nothing
    assert query_terms("a-b c_d") == ["a", "b", "c_d"]
