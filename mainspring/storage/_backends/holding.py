"""What the package's stores hold beside their executions, and the one place their memory
and evidence methods are forwarded to it.

Each store (FileStore, SqliteStore, PostgresStore) makes two collaborators when it opens:
its agent memory (``_facts``: SQLite's :class:`~.sqlite.memory.MemoryOnSqlite` for files
and SQLite, :class:`~.postgres.memory.PostgresMemory`) and its sealed evidence
(``_evidence``: one per backend). :class:`HoldingStore` answers the ``MemoryBackend`` and
``EvidenceStore`` calls by handing each to them, unchanged: the store holds its memory and
evidence, it is not assembled from them. ``mainspring.testing``'s ``MemoryStore`` keeps
neither and stays a plain :class:`~.compare_and_set.CompareAndSetStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .._memory import Fact, FactFilter, MemoryWrite, TextHit
from .compare_and_set import CompareAndSetStore

__all__ = ["HeldEvidence", "HeldMemory", "HoldingStore"]


class HeldMemory(Protocol):
    """The agent memory a store holds: ``MemoryBackend``'s calls without their prefix."""

    @property
    def ranking(self) -> str:
        """What a search ranks with (``bm25``, ``ts_rank``)."""
        ...

    @property
    def dropped(self) -> int:
        """Rows that did not read back as facts since the store opened (E7)."""
        ...

    def apply(self, writes: Sequence[MemoryWrite]) -> tuple[Fact | bool | Exception, ...]:
        """See ``MemoryBackend.memory_apply``."""
        ...

    def get(self, fact_id: str) -> Fact | None:
        """See ``MemoryBackend.memory_get``."""
        ...

    def listing(
        self, where: FactFilter, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[Fact]:
        """See ``MemoryBackend.memory_list``."""
        ...

    def search(self, terms: Sequence[str], where: FactFilter, *, limit: int) -> list[TextHit]:
        """See ``MemoryBackend.memory_search``."""
        ...

    def count(self) -> int:
        """See ``MemoryBackend.memory_count``."""
        ...


class HeldEvidence(Protocol):
    """The sealed evidence a store holds: ``EvidenceStore``'s calls without their suffix."""

    def put(self, digest: str, body: bytes) -> None:
        """See ``EvidenceStore.put_evidence``."""
        ...

    def get(self, digest: str) -> bytes:
        """See ``EvidenceStore.get_evidence``."""
        ...


class HoldingStore(CompareAndSetStore):
    """A compare-and-set store that holds agent memory (``_facts``) and sealed evidence
    (``_evidence``), made by the backend when it opens, and forwards ``MemoryBackend``'s
    ``memory_*`` and ``EvidenceStore``'s ``*_evidence`` calls to them."""

    _facts: HeldMemory
    _evidence: HeldEvidence

    # -- agent memory (``MemoryBackend``) ---------------------------------------------------

    @property
    def memory_ranking(self) -> str:
        """What a search ranks with: SQLite FTS5's ``bm25`` (files, SQLite), PostgreSQL's
        ``ts_rank``."""
        return self._facts.ranking

    @property
    def memory_dropped(self) -> int:
        """Rows that did not read back as facts (skipped, kept where they are stored: E7),
        since this store opened."""
        return self._facts.dropped

    def memory_apply(self, writes: Sequence[MemoryWrite]) -> tuple[Fact | bool | Exception, ...]:
        """See ``MemoryBackend.memory_apply``."""
        return self._facts.apply(writes)

    def memory_get(self, fact_id: str) -> Fact | None:
        """See ``MemoryBackend.memory_get``."""
        return self._facts.get(fact_id)

    def memory_list(
        self, where: FactFilter, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[Fact]:
        """See ``MemoryBackend.memory_list``."""
        return self._facts.listing(where, limit=limit, after=after)

    def memory_search(
        self, terms: Sequence[str], where: FactFilter, *, limit: int
    ) -> list[TextHit]:
        """See ``MemoryBackend.memory_search``."""
        return self._facts.search(terms, where, limit=limit)

    def memory_count(self) -> int:
        """See ``MemoryBackend.memory_count``."""
        return self._facts.count()

    # -- sealed evidence (``EvidenceStore``) --------------------------------------------------

    def put_evidence(self, digest: str, body: bytes) -> None:
        """See ``EvidenceStore.put_evidence``."""
        self._evidence.put(digest, body)

    def get_evidence(self, digest: str) -> bytes:
        """See ``EvidenceStore.get_evidence``."""
        return self._evidence.get(digest)
