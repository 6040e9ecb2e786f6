"""A FileStore's sealed evidence: ``evidence/<digest>.json`` under the store (a 0700
directory, 0600 files), each written whole (temp file, fsync, rename, directory fsync) or not
at all. What is shared by every backend (sealing, checking) is ``storage._evidence``'s."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from ..._errors import StorageError
from ..._evidence import (
    MAX_EVIDENCE_BYTES,
    EvidenceError,
    check_evidence,
    checked_digest,
    not_stored,
)
from ..._platform import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK
from .frames import _fsync_directory, read_bounded, replace_file

__all__ = ["FileEvidence"]


class FileEvidence:
    """The evidence of the FileStore at ``path``: ``put`` and ``get`` as the
    ``EvidenceStore`` methods ``put_evidence`` and ``get_evidence`` describe."""

    def __init__(self, path: Path, *, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only

    def _file(self, digest: str) -> Path:
        return self.path / "evidence" / f"{checked_digest(digest)}.json"  # X1: checked first

    def put(self, digest: str, body: bytes) -> None:
        target = self._file(digest)
        check_evidence(digest, body, canonical=True)
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only")
        with contextlib.suppress(EvidenceError):
            self.get(digest)
            return  # written once: left as it is
        if target.exists():  # there, but not what was sealed: never overwritten (fail closed)
            self.get(digest)
        folder = target.parent
        if not folder.is_dir():
            folder.mkdir(mode=0o700, exist_ok=True)
            os.chmod(folder, 0o700)
            _fsync_directory(self.path)
        replace_file(target, body)

    def get(self, digest: str) -> bytes:
        target = self._file(digest)
        try:
            fd = os.open(target, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        except FileNotFoundError:
            raise not_stored(digest) from None
        except OSError as exc:
            raise EvidenceError(f"evidence {digest}: cannot be read ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise EvidenceError(f"evidence {digest}: not a regular file")
            with os.fdopen(os.dup(fd), "rb") as handle:  # X2: never past the bound
                body = read_bounded(
                    handle, min(info.st_size, MAX_EVIDENCE_BYTES), MAX_EVIDENCE_BYTES
                )
        finally:
            os.close(fd)
        return check_evidence(digest, body)
