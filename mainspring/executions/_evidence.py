"""Sealed evidence for worker handoffs and finalize, until the store keeps it itself.

A document is sealed as its canonical JSON, named by its sha256, at most 4 MiB, written
once; reading it back validates the name against the content and fails closed. When the
committer offers ``seal_evidence`` / ``read_evidence`` (the journal's own evidence), those
are used; otherwise a directory next to a path-based store holds one 0600 file per document
(in a 0700 directory), and a store without a path keeps them in memory (one process only).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import anyio.to_thread
import orjson

from ..actors import MainspringError
from ..storage import check_digest, encode_value

__all__ = ["MAX_EVIDENCE", "EvidenceError", "EvidenceShelf"]

MAX_EVIDENCE = 4 << 20


class EvidenceError(MainspringError):
    """Sealed evidence is missing, too large, or does not match its digest."""


def _canonical(document: Any) -> bytes:
    data = orjson.dumps(encode_value(document), option=orjson.OPT_SORT_KEYS)
    if len(data) > MAX_EVIDENCE:
        raise EvidenceError(f"evidence is limited to {MAX_EVIDENCE} bytes, not {len(data)}")
    return data


class EvidenceShelf:
    """Seals and reads evidence (see the module docstring)."""

    def __init__(self, committer: Any, store: Any) -> None:
        self._committer = committer
        path = getattr(store, "path", None)
        self._dir: Path | None = None
        if isinstance(path, Path):
            self._dir = path.with_name(path.name + ".evidence")
        self._memory: dict[str, bytes] = {}

    async def seal(self, document: Any) -> str:
        """Seal ``document``; its digest (the same document seals to the same digest)."""
        sealer = getattr(self._committer, "seal_evidence", None)
        if sealer is not None:
            return str(await sealer(document))
        data = _canonical(document)
        digest = hashlib.sha256(data).hexdigest()
        if self._dir is None:
            self._memory.setdefault(digest, data)
        else:
            await anyio.to_thread.run_sync(_write_once, self._dir, digest, data)
        return digest

    async def read(self, digest: str) -> Any:
        """The document sealed as ``digest``; :class:`EvidenceError` if it is not there or
        does not match (fail closed)."""
        check_digest(digest)
        reader = getattr(self._committer, "read_evidence", None)
        if reader is not None:
            return await reader(digest)
        if self._dir is None:
            data = self._memory.get(digest)
        else:
            data = await anyio.to_thread.run_sync(_read, self._dir, digest)
        if data is None:
            raise EvidenceError(f"no evidence {digest}")
        if hashlib.sha256(data).hexdigest() != digest:
            raise EvidenceError(f"evidence {digest} does not match its digest")
        return orjson.loads(data)


def _write_once(directory: Path, digest: str, data: bytes) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / digest
    if target.exists():
        return  # written once: the same digest is the same content
    temp = directory / f".{digest}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, target)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _read(directory: Path, digest: str) -> bytes | None:
    try:
        with open(directory / digest, "rb") as handle:
            data = handle.read(MAX_EVIDENCE + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_EVIDENCE:
        raise EvidenceError(f"evidence {digest} is larger than {MAX_EVIDENCE} bytes")
    return data
