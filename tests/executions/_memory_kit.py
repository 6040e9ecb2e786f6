"""Shared pieces for the memory API tests: the stores they run on (one fixture, parametrised
by store kind), a way to read what a store holds raw, and deterministic fake embedders."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms

from .._postgres import admin, recycled_store, require_server, with_schema

#: The store kinds every memory test runs on; PostgreSQL is one more entry here.
STORE_KINDS = ["sqlite", "files"]


class StoreSpec:
    """Where a test's store lives: what ``open_runtime(store=...)`` takes, and how to read
    everything it holds as raw bytes (to prove a secret never reached it)."""

    def __init__(self, kind: str, target: str, root: Path | None, schema: str | None) -> None:
        self.kind = kind
        self.target = target
        self._root = root
        self._schema = schema

    def raw_contains(self, needle: str) -> bool:
        """Whether ``needle`` appears anywhere in what the store wrote (every file of a
        file or SQLite store, WAL included; every row of every table of a schema)."""
        if self._root is not None:
            data = needle.encode()
            return any(
                data in path.read_bytes() for path in self._root.rglob("*") if path.is_file()
            )
        with admin() as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (self._schema,),
            ).fetchall()
            for (table,) in tables:
                hit = conn.execute(
                    f'SELECT 1 FROM "{self._schema}"."{table}" t WHERE t::text LIKE %s LIMIT 1',
                    (f"%{needle}%",),
                ).fetchone()
                if hit is not None:
                    return True
        return False


def store_spec(kind: str, tmp_path: Path) -> Iterator[StoreSpec]:
    """A fresh store of ``kind`` (the ``memory_store`` fixture of conftest.py)."""
    if kind == "postgres":
        url = require_server()
        with recycled_store() as schema:  # an empty store, perhaps an earlier test's, emptied
            yield StoreSpec(kind, with_schema(url, schema), None, schema)
        return
    root = tmp_path / "store"
    root.mkdir()
    target = root / "memory.db" if kind == "sqlite" else root / "files"
    yield StoreSpec(kind, str(target), root, None)


def memory_apply_calls(rt: ms.Runtime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count calls of the store's ``memory_apply`` (the backend's only memory writer):
    the list grows by each batch's length."""
    calls: list[int] = []
    store = rt.store
    original = store.memory_apply  # type: ignore[attr-defined]

    def counting(writes: Any) -> Any:
        calls.append(len(writes))
        return original(writes)

    monkeypatch.setattr(store, "memory_apply", counting)
    return calls


VOCABULARY = ("cat", "dog", "fish", "bird", "tea", "coffee")
_WORD = re.compile(r"[a-z]+")


def bag_of_words(text: str) -> list[float]:
    """A deterministic vector: how often each vocabulary word starts a word of ``text``."""
    words = _WORD.findall(text.lower())
    return [float(sum(1 for w in words if w.startswith(v))) for v in VOCABULARY]


class SyncBag:
    """A sync embedder over :func:`bag_of_words`, counting what it embeds. ``vectors``
    overrides the vector of a text; ``fail`` makes every call raise it; ``short`` drops the
    last vector of every answer (the wrong count)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.texts: Counter[str] = Counter()
        self.threads: set[int] = set()
        self.vectors: dict[str, Any] = {}
        self.fail: Exception | None = None
        self.short = False

    def answer(self, texts: list[str]) -> list[Any]:
        self.threads.add(threading.get_ident())
        self.calls.append(list(texts))
        self.texts.update(texts)
        if self.fail is not None:
            raise self.fail
        vectors = [self.vectors.get(text, bag_of_words(text)) for text in texts]
        return vectors[:-1] if self.short else vectors

    def __call__(self, texts: list[str]) -> list[Any]:
        return self.answer(texts)


class AsyncBag(SyncBag):
    """The same, async (awaited on the event loop)."""

    async def __call__(self, texts: list[str]) -> list[Any]:  # type: ignore[override]
        return self.answer(texts)


EMBEDDERS = {"sync": SyncBag, "async": AsyncBag}
