"""FileStore: one JSON file per execution, written atomically, shared safely by processes.

A write is: a temp file in the same directory (mode 0600), write, fsync, rename over the old
file, fsync the directory. A reader sees the old version or the new one, never a mix, and an
acknowledged write survives a crash or a power cut. Every decide-then-write runs under an
exclusive ``flock`` on ``.lock`` in the store directory, so compare-and-set is atomic across
processes. Corrupt or oversize files are reported by :meth:`FileStore.list` and never deleted.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ._backend import Clock, CompareAndSetStore, Listing, OwnWrites, Problem
from ._codec import DEFAULT_MAX_BYTES, decode, encode
from ._errors import RecordError, StorageError, TooLarge
from ._ids import check_id
from ._platform import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK, require_flock
from ._records import Execution

__all__ = ["FileStore"]

_SUFFIX = ".json"
_TEMP_PREFIX = ".tmp-"


class FileStore(CompareAndSetStore):
    """Executions as files under ``path`` (created 0700; files 0600, whatever the umask)."""

    _batch_keeps_earlier = True  # each file is synced on its own

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Clock = time.time,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._clock = clock
        self.read_only = read_only
        self._fcntl = require_flock("FileStore")
        if read_only:  # a reader changes nothing, and takes only what is a store already
            if not self.path.is_dir() or not (
                (self.path / ".lock").exists() or any(self.path.glob(f"*{_SUFFIX}"))
            ):
                raise StorageError(f"{self.path} is not a mainspring store")
        else:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.path, 0o700)  # also when it existed, or the umask widened its mode
        self._lock_path = self.path / ".lock"
        # flock excludes other processes; threads of this one share the descriptor, so they
        # also take this lock.
        self._thread_lock = threading.Lock()
        # What this store wrote, trusted only while nobody else has written since: every
        # write (by any FileStore, in any process) bumps a generation counter kept in the lock
        # file under the lock. A file's own inode or mtime would not do: inodes are reused and
        # mtimes are coarse.
        self._cache = OwnWrites()
        self._generation = -1  # the counter's value after this store's last write
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"

    # -- reading ---------------------------------------------------------------------------

    def _file(self, execution_id: str) -> Path:
        return self.path / f"{check_id(execution_id)}{_SUFFIX}"  # X1: checked before any path

    def _read(self, execution_id: str) -> Execution | None:
        path = self._file(execution_id)
        if self._lock_fd is not None:  # under the lock, after the generation check in _locked
            cached = self._cache.get(execution_id)
            if cached is not None:
                return cached
        try:
            # O_NONBLOCK: a FIFO planted under the name must not hang the reader.
            fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        except FileNotFoundError:
            self._cache.pop(execution_id, None)
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise RecordError(f"execution {execution_id}", ["(file): not a regular file"])
            if info.st_size > self.max_bytes:  # X2: bounded before reading
                raise TooLarge(f"execution {execution_id}", info.st_size, self.max_bytes)
            data = handle.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            raise TooLarge(f"execution {execution_id}", len(data), self.max_bytes)
        return decode(data, Execution, kind=f"execution {execution_id}", max_bytes=self.max_bytes)

    def get(self, execution_id: str) -> Execution | None:
        """The stored execution, or None. Raises RecordError / TooLarge for a bad file."""
        return self._read(execution_id)

    def list(self) -> Listing:
        """Every execution that reads, and a problem for each file that does not (E7)."""
        executions: list[Execution] = []
        problems: list[Problem] = []
        with os.scandir(self.path) as entries:
            names = sorted(
                entry.name
                for entry in entries
                if entry.name.endswith(_SUFFIX) and not entry.name.startswith(".")
            )
        for name in names:
            execution_id = name[: -len(_SUFFIX)]
            try:
                execution = self._read(execution_id)
            except (StorageError, OSError) as exc:
                problems.append(Problem(id=execution_id, error=str(exc)))
                continue
            if execution is not None:
                executions.append(execution)
        return Listing(executions=tuple(executions), problems=tuple(problems))

    # -- writing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                self._fcntl.flock(fd, self._fcntl.LOCK_EX)
                self._lock_fd = fd
                if self._read_generation() != self._generation:
                    self._cache.clear()  # someone else wrote since our last write
                yield
            finally:
                self._lock_fd = None
                os.close(fd)  # closing releases the lock

    def _read_generation(self) -> int:
        assert self._lock_fd is not None
        raw = os.pread(self._lock_fd, 8, 0)
        return int.from_bytes(raw, "little") if len(raw) == 8 else 0

    def _bump_generation(self) -> None:
        # No fsync: the counter only has to be coherent between live processes (one page
        # cache); after a crash no process holds a cache to invalidate.
        assert self._lock_fd is not None
        value = (self._read_generation() + 1) % (1 << 63)
        os.pwrite(self._lock_fd, value.to_bytes(8, "little"), 0)
        self._generation = value

    def _write(self, execution: Execution) -> None:
        data = encode(execution)
        if len(data) > self.max_bytes:  # never acknowledge what could not be read back (X2)
            raise TooLarge(f"execution {execution.id}", len(data), self.max_bytes)
        final = self._file(execution.id)
        fd, temp = tempfile.mkstemp(dir=self.path, prefix=_TEMP_PREFIX, suffix=_SUFFIX)
        try:
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, final)
        except BaseException:
            self._cache.pop(execution.id, None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        self._cache.pop(execution.id, None)
        self._bump_generation()  # before anything else can fail: the file did change
        dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
        try:
            os.fsync(dir_fd)  # the rename itself is durable only once the directory is
        finally:
            os.close(dir_fd)
        self._cache.remember(execution)  # remembered only once durable

    # -- the compare-and-set hooks (see CompareAndSetStore) ---------------------------------

    def _atomic(self) -> contextlib.AbstractContextManager[None]:
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only")
        return self._locked()

    def _read_for_update(self, execution_id: str) -> Execution | None:
        return self._read(execution_id)
