"""FileStore: storage v3 as one journal file per execution, shared safely by processes.

``<id>.journal`` is a sequence of checksummed frames (``frames``). A commit appends
one frame holding what changed (``storage._journal``) and the history entries it adds, then
fsyncs: a crash leaves at most a torn last frame, which readers ignore and the next writer
cuts off. When the frames since the last snapshot outgrow the snapshot (and 1 MiB), the file
is compacted: the folded execution and its history are written as a new file (temp file,
fsync, rename, directory fsync), so a commit costs what it changed, amortised, however long
the run. Every decide-then-write runs under an exclusive ``flock`` on ``.lock``; history
readers take it shared, so they see whole flushes only (V2). ``.format`` says the layout; a
directory of ``*.json`` files without it is a 0.1 store, refused until migrated.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson

from ..._codec import DEFAULT_MAX_BYTES, canonical_json, dumps_checked
from ..._errors import RecordError, StorageError, TooLarge
from ..._ids import check_id
from ..._journal.fold import Folded, fold
from ..._journal.history import HistoryEvent, check_after, parse_event
from ..._journal.model import Base, Change, diff, snapshot_changes
from ..._platform import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK, require_flock
from ..._records import Execution
from ..compare_and_set import OwnWrites
from ..contract import Clock, Listing, Problem
from ..holding import HoldingStore
from ..sqlite.memory import MemoryOnSqlite, SqliteMemory
from ..sqlite.schema import DEFAULT_MAX_RECORD_BYTES, SCHEMA_VERSION, StoreNeedsMigration
from .evidence import FileEvidence
from .frames import (
    append_frames,
    check_regular_and_bounded,
    encode_frame,
    read_bounded,
    read_journal,
    replace_file,
    scan_frames,
)
from .memory import MEMORY_FILE, MemoryFile

__all__ = ["FileStore"]

_SUFFIX = ".journal"
_FORMAT = ".format"
_COMPACT_AT = 1024 * 1024  # journal bytes since the last snapshot before compaction is due
_CHUNK = 512 * 1024  # a snapshot is written as frames of about this size


@attrs.define
class _Tail:
    """Where a journal ends and how much of it is past its snapshot (for compaction)."""

    length: int
    snapshot: int  # bytes of the snapshot frames at the start
    since: int  # bytes appended after them


_Events = list[HistoryEvent]


@attrs.define
class _Seen:
    """How far a journal's history was read: which file (a compaction makes a new one),
    up to which byte, and the highest sequence in it."""

    identity: tuple[int, int, bytes]
    length: int
    last: int


@attrs.define
class _Read:
    execution: Execution
    seq: int
    window: list[Any]
    tail: _Tail
    events: list[Any]

    def base(self) -> Base:
        """The journal base to diff against (its keys cost O(size): only for writers)."""
        return Base.of(self.execution, self.seq, window=self.window)


def _loads(payload: bytes, kind: str) -> Any:
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise RecordError(kind, [f"journal: a frame is not JSON ({exc})"]) from None
    if type(value) is not dict:
        raise RecordError(kind, ["journal: a frame is not an object"])
    return value


def _replay(
    payloads: tuple[bytes, ...], kind: str, *, with_events: bool
) -> tuple[Folded, int, list[Any]]:
    """Fold frames: a snapshot starts over; commits apply in order. Returns the fold, the
    count of snapshot frames at the start, and the history entries (if asked)."""
    folded = Folded()
    snapshot_frames = 0
    events: list[Any] = []
    for index, payload in enumerate(payloads):
        frame = _loads(payload, kind)
        seq = frame.get("seq")
        if "snapshot" in frame:
            if index != 0 or type(seq) is not int:
                raise RecordError(kind, ["journal: a snapshot must open the journal"])
            folded = Folded(seq=seq)
            snapshot_frames = 1
        elif "more" in frame:
            if snapshot_frames != index:
                raise RecordError(kind, ["journal: a snapshot frame out of place"])
            snapshot_frames += 1
        elif type(seq) is not int or seq != folded.seq + 1:
            raise RecordError(kind, [f"journal: frame {index} is out of sequence"])
        else:
            folded.seq = seq
        changes = frame.get("changes", [])
        if type(changes) is not list:
            raise RecordError(kind, ["journal: changes must be a list"])
        folded.apply(changes, kind=kind)
        if with_events:
            listed = frame.get("events", [])
            if type(listed) is not list:
                raise RecordError(kind, ["journal: events must be a list"])
            events.extend(listed)
    return folded, snapshot_frames, events


class FileStore(HoldingStore):
    """Executions as journal files under ``path`` (created 0700; files 0600, whatever the
    umask). It holds, and delegates its ``memory_*`` and ``*_evidence`` methods to, agent
    memory in its SQLite file ``memory.sqlite3`` (``memory``, on ``sqlite.memory``) and
    sealed evidence as ``evidence/<digest>.json`` (``evidence``)."""

    _batch_keeps_earlier = True  # each file is synced on its own

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        clock: Clock = time.time,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self._clock = clock
        self.read_only = read_only
        self._fcntl = require_flock("FileStore")
        if read_only:  # a reader changes nothing, and takes only what is a store already
            if not self.path.is_dir() or not (
                (self.path / _FORMAT).exists() or any(self.path.glob("*.json"))
            ):
                raise StorageError(f"{self.path} is not a mainspring store")
        else:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._check_format()  # before anything is changed: a store of another layout stays as is
        if not read_only:
            os.chmod(self.path, 0o700)  # also when it existed, or the umask widened its mode
        self._lock_path = self.path / ".lock"
        # flock excludes other processes; threads of this one share the descriptor, so they
        # also take this lock.
        self._thread_lock = threading.Lock()
        # What this store wrote, trusted only while nobody else has written since: every
        # write (by any FileStore, in any process) bumps a generation counter kept in the lock
        # file under the lock.
        self._cache = OwnWrites()
        self._tails: dict[str, _Tail] = {}
        self._seen: dict[str, _Seen] = {}  # history readers' progress, per journal
        # Journals read as finished, by their file's identity then (finished is for good:
        # ``unfinished`` reads them again only once they changed).
        self._finished: dict[str, tuple[int, int, int, int]] = {}
        self._generation = -1  # the counter's value after this store's last write
        self._lock_fd: int | None = None
        # What it holds beside the journals, and delegates its memory_* and *_evidence to.
        self._memory = MemoryFile(self.path / MEMORY_FILE, clock=clock, read_only=read_only)
        self._facts = MemoryOnSqlite(self._memory_of, read_only=read_only, store=self)
        self._evidence = FileEvidence(self.path, read_only=read_only)

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"

    def _memory_of(self, *, write: bool) -> SqliteMemory | None:
        return self._memory.get(write=write)

    def close(self) -> None:
        """Close the memory database if it was opened: a later memory call raises
        ``StorageError`` (as on a closed SqliteStore); the journals need no closing."""
        self._memory.close()

    #: The layout this store reads and writes; a migration's reader of an older one
    #: (``storage._migrate``) says which, and rewrites what it reads (``_upgrade``).
    _layout = SCHEMA_VERSION

    def _upgrade(self, folded: Folded) -> Folded:
        """What is read, as this layout's: unchanged (a migration's reader rewrites it)."""
        return folded

    def _check_format(self) -> None:
        marker = self.path / _FORMAT
        try:
            raw = marker.read_bytes()[:4096]
        except FileNotFoundError:
            with os.scandir(self.path) as entries:  # closed even when any() stops early
                is_v1 = any(entry.name.endswith(".json") for entry in entries)
            if is_v1:
                raise StoreNeedsMigration(
                    f"{self.path} is a mainspring 0.1 store; convert it with "
                    f"`mainspring migrate --store {self.path}` (the old store is kept)"
                ) from None
            if not self.read_only:
                replace_file(marker, canonical_json({"layout": self._layout}))
            return
        try:
            layout = orjson.loads(raw).get("layout")
        except (orjson.JSONDecodeError, AttributeError):
            layout = None
        if layout == self._layout:
            return
        if type(layout) is int and 2 <= layout < self._layout:
            raise StoreNeedsMigration(
                f"{self.path} has storage layout {layout}; convert it to layout "
                f"{self._layout} with `mainspring migrate --store {self.path}` (the old store "
                "is kept)"
            )
        raise StorageError(
            f"{self.path} has storage layout {layout!r}; this mainspring reads layout "
            f"{self._layout}: upgrade mainspring to open it"
        )

    # -- reading ---------------------------------------------------------------------------

    def _file(self, execution_id: str) -> Path:
        return self.path / f"{check_id(execution_id)}{_SUFFIX}"  # X1: checked before any path

    def _read(self, execution_id: str, *, with_events: bool = False) -> _Read | None:
        kind = f"execution {execution_id}"
        scan = read_journal(
            self._file(execution_id),
            kind=kind,
            max_bytes=self.max_record_bytes,
            max_frame=self.max_bytes,
        )
        if scan is None or (not scan.payloads and not scan.torn):
            return None  # no journal, or an empty one: nothing was ever written, not stored
        if not scan.payloads:
            # E7, X2: bytes but no whole entry (a creation cut short, or not a journal) are
            # unreadable, never absent: every reader says so, and create() refuses the id
            # instead of writing over them.
            problem = "journal: it holds no whole entry (a creation cut short, or not a journal)"
            raise RecordError(kind, [problem])
        folded, snapshot_frames, events = _replay(scan.payloads, kind, with_events=with_events)
        execution = fold(self._upgrade(folded), kind=kind)
        sizes = [len(payload) + 16 for payload in scan.payloads]
        snapshot = sum(sizes[:snapshot_frames])
        tail = _Tail(length=scan.valid_length, snapshot=snapshot, since=sum(sizes) - snapshot)
        return _Read(
            execution=execution,
            seq=folded.seq,
            window=folded.checkpoints,
            tail=tail,
            events=events,
        )

    def get(self, execution_id: str) -> Execution | None:
        """The stored execution, or None. Raises RecordError / TooLarge for a bad journal,
        one with bytes but no whole entry included (E7: unreadable, not absent)."""
        read = self._read(execution_id)
        return read.execution if read is not None else None

    def _ids(self) -> list[str]:
        with os.scandir(self.path) as entries:
            return sorted(
                entry.name[: -len(_SUFFIX)]
                for entry in entries
                if entry.name.endswith(_SUFFIX) and not entry.name.startswith(".")
            )

    def list(self) -> Listing:
        """Every execution that reads, and a problem for each journal that does not (E7)."""
        executions: list[Execution] = []
        problems: list[Problem] = []
        for execution_id in self._ids():
            try:
                read = self._read(execution_id)
            except (StorageError, OSError) as exc:
                problems.append(Problem(id=execution_id, error=str(exc)))
                continue
            if read is not None:
                executions.append(read.execution)
        return Listing(executions=tuple(executions), problems=tuple(problems))

    def unfinished(self, skip: Collection[str] = ()) -> Listing:
        """``list`` of the executions that are not finished (``Unfinished``): a journal read
        as finished is not read again until its file changes (L8: recovery's sweeps cost
        what is unfinished, not every journal the store keeps)."""
        executions: list[Execution] = []
        problems: list[Problem] = []
        ids = [i for i in self._ids() if i not in skip]
        with self._thread_lock:
            finished = dict(self._finished)
        seen: dict[str, tuple[int, int, int, int]] = {}
        for execution_id in ids:
            try:
                info = os.stat(self._file(execution_id), follow_symlinks=False)
            except OSError:
                continue  # deleted since the scan
            mark = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            if finished.get(execution_id) == mark:
                seen[execution_id] = mark
                continue
            try:
                read = self._read(execution_id)
            except (StorageError, OSError) as exc:
                problems.append(Problem(id=execution_id, error=str(exc)))
                continue
            if read is None:
                continue
            if read.execution.terminal:  # sticky: read again only if the file changes
                seen[execution_id] = mark
                continue
            executions.append(read.execution)
        with self._thread_lock:
            self._finished = seen
        return Listing(executions=tuple(executions), problems=tuple(problems))

    def history(
        self, execution_id: str | None = None, *, after: int = 0, limit: int = 1_000
    ) -> tuple[HistoryEvent, ...]:
        """Committed history entries after global sequence ``after``, oldest first (V2).

        Read under a shared lock, so a flush is seen whole or not at all. A follower asks
        again and again with the last ``seq`` it saw: only what was appended to a journal
        since the last call is read then (a compacted journal is read again whole).
        """
        after = check_after(after)
        limit = max(1, min(int(limit), 10_000))
        ids = [check_id(execution_id)] if execution_id is not None else self._ids()
        found: list[HistoryEvent] = []
        with self._locked(shared=True):
            for one in ids:
                try:
                    found.extend(self._history_of(one, after))
                except (StorageError, OSError):
                    self._seen.pop(one, None)
                    continue  # listed as a problem by list(); its history cannot be read
        found.sort(key=lambda event: event.seq)
        return tuple(found[:limit])

    def _history_of(self, execution_id: str, after: int) -> _Events:
        kind = f"execution {execution_id}"
        try:
            fd = os.open(
                self._file(execution_id), os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK
            )
        except FileNotFoundError:
            self._seen.pop(execution_id, None)
            return []
        try:
            # Before fdopen, which refuses a directory with an OSError; X2: bounded first.
            check_regular_and_bounded(fd, kind=kind, max_bytes=self.max_record_bytes)
            info = os.fstat(fd)
            handle = os.fdopen(fd, "rb")
        except BaseException:  # any way out: the fd closed, re-raised
            os.close(fd)
            raise
        with handle:
            # The first frame's header too: a compaction's new file may get the old inode.
            identity = (info.st_dev, info.st_ino, os.pread(fd, 16, 0))
            seen = self._seen.get(execution_id)
            start, last = 0, 0
            if (
                seen is not None
                and seen.identity == identity
                and info.st_size >= seen.length
                and seen.last <= after  # then only what was appended since can be newer
            ):
                if info.st_size == seen.length:
                    return []
                start, last = seen.length, seen.last
            handle.seek(start)
            data = read_bounded(handle, info.st_size - start, self.max_record_bytes - start)
        if len(data) > self.max_record_bytes - start:
            raise TooLarge(kind, start + len(data), self.max_record_bytes)
        scan = scan_frames(data, kind=kind, max_frame=self.max_bytes)
        entries: _Events = []
        for payload in scan.payloads:
            listed = _loads(payload, kind).get("events", [])
            if type(listed) is not list:
                raise RecordError(kind, ["journal: events must be a list"])
            for entry in listed:
                if (
                    type(entry) is not list
                    or len(entry) != 3
                    or type(entry[0]) is not int
                    or type(entry[1]) is not int
                ):
                    raise RecordError(kind, ["journal: a bad history entry"])
                last = max(last, entry[0])
                if entry[0] > after:
                    entries.append(parse_event(entry[0], entry[1], entry[2]))
        self._seen[execution_id] = _Seen(identity, start + scan.valid_length, last)
        return entries

    # -- writing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, *, shared: bool = False) -> Iterator[None]:
        with self._thread_lock:
            if shared:
                # A reader creates nothing: no lock file means no writer ever wrote here.
                try:
                    fd = os.open(self._lock_path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    yield
                    return
            else:
                fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                self._fcntl.flock(fd, self._fcntl.LOCK_SH if shared else self._fcntl.LOCK_EX)
                if shared:
                    yield
                    return
                self._lock_fd = fd
                if self._read_counter(0) != self._generation:
                    self._cache.clear()  # someone else wrote since our last write
                    self._tails.clear()
                try:
                    yield
                except BaseException:  # any way out, re-raised
                    self._cache.clear()  # nothing of a failed write is remembered
                    self._tails.clear()
                    raise
            finally:
                self._lock_fd = None
                os.close(fd)  # closing releases the lock

    def _read_counter(self, index: int) -> int:
        assert self._lock_fd is not None
        raw = os.pread(self._lock_fd, 8, index * 8)
        return int.from_bytes(raw, "little") if len(raw) == 8 else 0

    def _write_counter(self, index: int, value: int) -> None:
        assert self._lock_fd is not None
        os.pwrite(self._lock_fd, value.to_bytes(8, "little"), index * 8)

    def _bump_generation(self) -> None:
        # No fsync: the counter only has to be coherent between live processes (one page
        # cache); after a crash no process holds a cache to invalidate.
        value = (self._read_counter(0) + 1) % (1 << 63)
        self._write_counter(0, value)
        self._generation = value

    def _next_seqs(self, count: int) -> int:
        """The first of ``count`` global history sequence numbers (V2). Kept in the lock file
        and never below the clock in microseconds, so numbers only grow, across crashes too
        (the lock file is not synced: after a power cut it may lag, the clock does not)."""
        first = max(self._read_counter(1) + 1, int(time.time() * 1_000_000))
        self._write_counter(1, first + count - 1)
        return first

    def _dumps(self, value: Any, what: str) -> bytes:
        data = dumps_checked(value)
        if len(data) > self.max_bytes:  # never acknowledge what could not be read back (X2)
            raise TooLarge(what, len(data), self.max_bytes)
        return data

    def _store(self, base: Base | None, execution: Execution) -> None:
        execution_id = check_id(execution.id)
        what = f"execution {execution_id}"
        path = self._file(execution_id)
        changes = snapshot_changes(execution) if base is None else diff(base, execution)
        seq = base.seq + 1 if base is not None else 1
        events = self._entries_for(base, execution, changes)
        tail = self._tails.get(execution_id) if base is not None else None
        if base is not None and tail is None:
            read = self._read(execution_id)  # the cache held the base but not where it ends
            if read is None:
                raise StorageError(f"{what}: its journal vanished while locked")
            tail = read.tail
        first = self._next_seqs(len(events)) if events else 0
        listed = [[first + i, seq, event] for i, event in enumerate(events)]
        frame = encode_frame(self._dumps({"seq": seq, "changes": changes, "events": listed}, what))
        if base is None:
            length = append_frames(path, frame, valid_length=0)
            tail = _Tail(length=length, snapshot=0, since=length)
        else:
            assert tail is not None
            if tail.length + len(frame) > self.max_record_bytes:
                # X2: appended, the journal could not be read back. Written as a snapshot of
                # the new version instead (it may fold smaller), or refused, nothing written.
                self._compact(execution_id, (execution, seq, listed))
                return
            length = append_frames(path, frame, valid_length=tail.length)
            tail = _Tail(length=length, snapshot=tail.snapshot, since=tail.since + len(frame))
        self._tails.pop(execution_id, None)
        self._bump_generation()  # before anything else can fail: the file did change
        if base is None:
            base = Base.of(execution, seq, window=base_window(changes))
        else:
            base.advance(execution, changes)
        self._cache.remember(base)
        self._tails[execution_id] = tail
        if tail.since > max(_COMPACT_AT, tail.snapshot):
            try:
                self._compact(execution_id)
            except (OSError, StorageError, ValueError):
                # The commit is durable already and the journal intact (the snapshot replaces
                # it atomically or not at all): acknowledge it, and try again once the
                # journal has doubled, not on every commit.
                tail.snapshot = tail.since

    def _compact(
        self, execution_id: str, instead: tuple[Execution, int, Sequence[Any]] | None = None
    ) -> None:
        """Rewrite the journal as a snapshot of what it folds to, history included; with
        ``instead``, of that version (a commit written as a snapshot) and its entries."""
        read = self._read(execution_id, with_events=True)
        if read is None:
            return
        what = f"execution {execution_id}"
        events = read.events
        if instead is not None:
            execution, seq, listed = instead
            base = Base.of(execution, seq, window=[])
            events = [*events, *listed]
        else:
            base = read.base()
        changes = snapshot_changes(base.execution)
        base.window = base_window(changes)
        frames: list[bytes] = []
        head: dict[str, Any] = {"seq": base.seq, "snapshot": True}
        for chunk in _chunks(changes, events, min(_CHUNK, self.max_bytes // 2)):
            frames.append(encode_frame(self._dumps({**head, **chunk}, what)))
            head = {"more": True}
        data = b"".join(frames)
        if len(data) > self.max_record_bytes:  # X2: never written if it could not be read
            raise TooLarge(what, len(data), self.max_record_bytes)
        replace_file(self._file(execution_id), data)
        self._bump_generation()
        self._tails[execution_id] = _Tail(length=len(data), snapshot=len(data), since=0)
        self._cache.remember(base)

    def delete(self, execution_id: str) -> bool:
        """Delete a finished execution's journal, history included; False if it is not
        stored or not finished (checked under the lock)."""
        with self._atomic():
            base = self._load(execution_id)
            if base is None or not base.execution.terminal:
                return False
            os.unlink(self._file(execution_id))
            self._bump_generation()
            self._cache.pop(execution_id)
            self._tails.pop(execution_id, None)
            dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            return True

    # -- the compare-and-set hooks (see CompareAndSetStore) ---------------------------------

    def _atomic(self) -> contextlib.AbstractContextManager[None]:
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only")
        return self._locked()

    def _load(self, execution_id: str) -> Base | None:
        cached = self._cache.get(check_id(execution_id))
        if cached is not None and execution_id in self._tails:
            return cached
        read = self._read(execution_id)
        if read is None:
            self._cache.pop(execution_id)
            return None
        self._tails[execution_id] = read.tail
        return read.base()


def base_window(changes: list[Change]) -> list[Any]:
    """The checkpoint window a snapshot's changes store."""
    for change in changes:
        if change[0] == "ckpts":
            return list(change[1])
    return []


def _chunks(changes: list[Change], events: list[Any], limit: int) -> Iterator[dict[str, Any]]:
    """A snapshot's changes and history in frames of about ``_CHUNK`` bytes: a part too big
    for one frame continues as puts (positions in order), so no frame outgrows the bound."""
    ops: list[Any] = []
    for change in changes:
        if change[0] == "reset" and len(change[2]) > 1:
            ops.append(["reset", change[1], []])
            ops.extend(
                ["put", change[1], key, pos, value] for pos, (key, value) in enumerate(change[2])
            )
        else:
            ops.append(change)
    size = 0
    batch: list[Any] = []
    for op in ops:
        weight = len(canonical_json(op))
        if batch and size + weight > limit:
            yield {"changes": batch}
            batch, size = [], 0
        batch.append(op)
        size += weight
    yield {"changes": batch}
    batch, size = [], 0
    for entry in events:
        weight = len(canonical_json(entry))
        if batch and size + weight > limit:
            yield {"events": batch}
            batch, size = [], 0
        batch.append(entry)
        size += weight
    if batch:
        yield {"events": batch}
