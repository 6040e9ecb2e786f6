"""A store that keeps everything in memory: the Store contract without a disk."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator

import attrs
import orjson

from ..storage import Execution, HistoryEvent, StorageError
from ..storage._seam import (
    DEFAULT_MAX_BYTES,
    Base,
    CompareAndSetStore,
    Folded,
    Listing,
    TooLarge,
    check_history_after,
    check_id,
    diff,
    dumps_checked,
    fold,
    parse_event,
    snapshot_changes,
)

__all__ = ["MemoryStore"]


class MemoryStore(CompareAndSetStore):
    """A :class:`~mainspring.storage.Store` on a dict, for tests: the same decisions as the
    real backends (leases L1-L4, the commit outcomes E2, history V2), nothing written
    anywhere, so a test measures the runtime, not the disk. Pass it as
    ``open_runtime(store=MemoryStore())``.

    It keeps what was committed, as the real backends do, not the objects it was given:
    every read returns a fresh record (plain tuples, dicts of its own), so changing what
    was given or what was read changes nothing stored.

    What it keeps, it keeps until :meth:`delete` or until the object is gone: it does not
    survive the process (a "crash" test reopens a real store instead). Its calls never block
    (the persistence actor makes them on the event loop) and are safe from any thread.

    Bounded: at most ``max_executions`` executions (``create`` raises
    :class:`~mainspring.storage.StorageError` past it: delete finished ones); every part of
    a commit is encoded as the real backends encode it, so a value they could not store is
    refused here too, and one part over ``max_bytes`` raises
    :class:`~mainspring.storage.TooLarge` (the commit writes nothing); the history keeps the
    newest ``max_history`` entries (older ones are dropped: a follower that fell that far
    behind reads on from the oldest kept). ``clock`` is the lease clock (default
    :func:`time.time`; a :class:`~mainspring.testing.ManualClock` makes leases lapse on
    demand). It keeps no memory facts and no sealed evidence. A test may subclass it to
    count calls or inject faults.
    """

    blocking = False

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        max_executions: int = 10_000,
        max_history: int = 100_000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        for name, value in (
            ("max_executions", max_executions),
            ("max_history", max_history),
            ("max_bytes", max_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive whole number, not {value!r}")
        if not callable(clock):
            raise TypeError(f"clock must be callable, not {type(clock).__name__}")
        self._clock = clock
        self.max_executions = max_executions
        self.max_history = max_history
        self.max_bytes = max_bytes
        self._bases: dict[str, Base] = {}
        # What is stored, as plain data decoded from what a real backend would write: reads
        # are built from it, never from the records callers gave (those may be live).
        self._stored: dict[str, Folded] = {}
        self._history: collections.deque[tuple[int, str, int, bytes]] = collections.deque(
            maxlen=max_history
        )
        self._seq = 0  # the global sequence of history entries
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"<MemoryStore: {len(self._bases)} executions>"

    # -- what CompareAndSetStore builds on -----------------------------------------------

    @contextlib.contextmanager
    def _atomic(self) -> Iterator[None]:
        with self._lock:
            yield

    def _load(self, execution_id: str) -> Base | None:
        return self._bases.get(check_id(execution_id))

    def _store(self, base: Base | None, execution: Execution) -> None:
        execution_id = check_id(execution.id)
        if base is None and len(self._bases) >= self.max_executions:
            raise StorageError(
                f"the memory store holds its max_executions ({self.max_executions}): "
                "delete finished executions first"
            )
        changes = snapshot_changes(execution) if base is None else diff(base, execution)
        what = f"execution {execution_id}"
        # Encoded as a real backend would, and checked, before anything is kept: a part
        # that could not be stored fails this commit only, and writes nothing of it.
        for change in changes:
            for value in change[1:]:
                data = dumps_checked(value)
                if len(data) > self.max_bytes:
                    raise TooLarge(what, len(data), self.max_bytes)
        seq = base.seq + 1 if base is not None else 1
        entries = [dumps_checked(event) for event in self._entries_for(base, execution, changes)]
        stored = Folded(seq=seq) if base is None else self._stored[execution_id]
        stored.apply(orjson.loads(dumps_checked(changes)), kind=what)
        stored.seq = seq
        self._stored[execution_id] = stored
        if base is None:
            window = next((list(c[1]) for c in changes if c[0] == "ckpts"), [])
            self._bases[execution_id] = Base.of(execution, seq, window=window)
        else:
            base.advance(execution, changes)
        for entry in entries:
            self._seq += 1
            self._history.append((self._seq, execution_id, seq, entry))

    # -- reads -------------------------------------------------------------------------------

    def get(self, execution_id: str) -> Execution | None:
        """The execution as last committed, or None."""
        with self._lock:
            stored = self._stored.get(check_id(execution_id))
            return self._read(execution_id, stored) if stored is not None else None

    @staticmethod
    def _read(execution_id: str, stored: Folded) -> Execution:
        """A fresh record of what is stored: its own dicts and lists, plain tuples."""
        copied = Folded(**orjson.loads(orjson.dumps(attrs.asdict(stored, recurse=False))))
        return fold(copied, kind=f"execution {execution_id}")

    def list(self) -> Listing:
        """Every execution, by id (nothing here is ever unreadable)."""
        return self._listing(lambda _: True)

    def unfinished(self, skip: Collection[str] = ()) -> Listing:
        """The executions that are not finished, by id, but those in ``skip``."""
        return self._listing(lambda e: not e.terminal and e.id not in skip)

    def _listing(self, keep: Callable[[Execution], bool]) -> Listing:
        with self._lock:
            kept = [key for key in sorted(self._bases) if keep(self._bases[key].execution)]
            return Listing(executions=tuple(self._read(key, self._stored[key]) for key in kept))

    def history(
        self, execution_id: str | None = None, *, after: int = 0, limit: int = 1_000
    ) -> tuple[HistoryEvent, ...]:
        """Committed history entries after global sequence ``after``, oldest first (V2)."""
        after = check_history_after(after)
        limit = max(1, min(int(limit), 10_000))
        if execution_id is not None:
            execution_id = check_id(execution_id)
        with self._lock:
            rows = list(self._entries(execution_id, after, limit))
        return tuple(parse_event(seq, eseq, _loads(body)) for seq, eseq, body in rows)

    def _entries(
        self, execution_id: str | None, after: int, limit: int
    ) -> Iterable[tuple[int, int, bytes]]:
        for seq, owner, eseq, body in self._history:
            if seq <= after or (execution_id is not None and owner != execution_id):
                continue
            yield seq, eseq, body
            limit -= 1
            if limit == 0:
                return

    # -- writes outside the commit path ------------------------------------------------------

    def delete(self, execution_id: str) -> bool:
        """Remove a finished execution and its history; False if absent or not finished."""
        with self._lock:
            base = self._load(execution_id)
            if base is None or not base.execution.terminal:
                return False
            del self._bases[base.execution.id]
            del self._stored[base.execution.id]
            kept = [row for row in self._history if row[1] != base.execution.id]
            self._history.clear()
            self._history.extend(kept)
            return True


def _loads(body: bytes) -> object:
    import orjson

    return orjson.loads(body)
