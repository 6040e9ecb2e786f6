"""Where a run's worker deliveries and proofs are sealed: the store's own sealed evidence
(``Committer.seal_evidence`` / ``read_evidence``: canonical JSON named by its sha256, at most
``MAX_EVIDENCE_BYTES``, written once, checked on read, failing closed), or, for a store that
keeps none (a test's store), the same checks on documents kept in this process's memory.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from ...storage._seam import (
    MAX_EVIDENCE_BYTES,
    Committer,
    EvidenceError,
    EvidenceStore,
    canonical_json,
    check_digest,
)

__all__ = ["EvidenceShelf"]


class EvidenceShelf:
    """Seals and reads evidence (see the module docstring)."""

    def __init__(self, committer: Committer, store: Any) -> None:
        self._committer = committer if isinstance(store, EvidenceStore) else None
        self._memory: dict[str, bytes] = {}

    async def seal(self, document: Any) -> str:
        """Seal ``document``; its digest (the same document seals to the same digest)."""
        if self._committer is not None:
            return await self._committer.seal_evidence(document)
        data = canonical_json(document)
        if len(data) > MAX_EVIDENCE_BYTES:
            raise EvidenceError(f"evidence is limited to {MAX_EVIDENCE_BYTES} bytes")
        digest = hashlib.sha256(data).hexdigest()
        self._memory.setdefault(digest, data)
        return digest

    async def read(self, digest: str) -> Any:
        """The document sealed as ``digest``; :class:`EvidenceError` if it is not there or
        does not match, or ``digest`` is not a sha256 at all (fail closed; as the store's
        own shelf says it, so one handler serves both)."""
        try:
            check_digest(digest, "an evidence digest")
        except ValueError as exc:
            raise EvidenceError(str(exc)) from None
        if self._committer is not None:
            return await self._committer.read_evidence(digest)
        data = self._memory.get(digest)
        if data is None or hashlib.sha256(data).hexdigest() != digest:
            raise EvidenceError(f"no evidence {digest}")
        return orjson.loads(data)
