"""The persistence actor: the only writer, with coalescing and group commit.

Callers hand it commits through a :class:`Committer` and get each one's
:class:`CommitOutcome` back only once the write that covers it is durable. A commit travels as
one message carrying its caller's ticket (a reply event): the caller is woken once, when the
write that covers it is durable, not first for a receipt. While one flush is on disk, newer
commits gather: several for the same execution coalesce (the latest wins, and every waiter gets
the outcome of the write that covered it), and commits for different executions share the next
flush (one SQLite transaction). A failed write answers the commits it covered with the error and
the actor refuses all further work: it never acknowledges after a failed write and never
retries an fsync.

The store is called in a worker thread, unless it declares that its calls never block
(``blocking = False``, see ``Store``): then on the event loop, with no thread hop. When a
commit arrives and nothing else waits in the mailbox, the writer flushes at once; when
others wait, it queues its flush behind them, so that they share it.

Each durable write that may have added history (a flush of commits, a create, an edit, a
lease call) bumps :class:`Durable`, so that a follower of the history (``Runtime.events(after=)``)
reads again at once instead of polling (V2).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import attrs

from ..actors import Actor, ActorDeadError, ActorRef, ActorSystem, CancelReason, MailboxFull
from ._backends.contract import CommitOutcome, Edit, LeaseResult, Store, store_blocks
from ._backends.postgres.store import CommitUnknown
from ._errors import StorageError
from ._evidence import EvidenceStore, load_evidence, seal_into
from ._memory import Fact, MemoryBackend, MemoryWrite
from ._records import Execution, Lease
from ._redact import redact

__all__ = ["Committer", "Durable", "PersistenceActor", "PersistenceFailed", "open_committer"]

#: The storage layer's logger: the writer's failures (ERROR once it stops writing, WARNING
#: for a memory batch refused alone) and, at DEBUG, each flush with its counts and duration.
#: Silent unless the application configures logging (O1).
logger = logging.getLogger("mainspring.storage")

#: How much of a store error's text a log record keeps (its start says most).
_MAX_LOGGED = 2_000


def _said(exc: BaseException) -> str:
    """``Type: text`` of a store's error, redacted (E5: an error may quote what it was
    given), bounded and with characters a terminal acts on shown as escapes."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = f"{type(exc).__name__} (its message could not be read)"
    text = str(redact(text))[:_MAX_LOGGED]
    return (
        text
        if text.isprintable()
        else "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    )


class PersistenceFailed(StorageError):
    """A durable write failed and was not acknowledged. After a failure of the store itself
    (an ``OSError``: the disk, a lost server) the writer has stopped and refuses every later
    write; a memory batch the store refused otherwise (a ``StorageError``, such as a
    read-only store) fails alone, and the writer goes on. The message says which."""


class Durable:
    """How many writes of this process's writer are durable, and a way to wait for the next.

    ``notify`` is the writer's (a counter bump, and setting an event only when someone waits:
    nothing a commit pays for). ``wait_past(count)`` returns once ``count`` was passed or the
    writer is closed; a caller reads ``count`` *before* it reads the store, so a write made
    durable during that read is never waited past (V2).
    """

    __slots__ = ("_event", "closed", "count")

    def __init__(self) -> None:
        self.count = 0
        self.closed = False
        self._event: anyio.Event | None = None

    def notify(self) -> None:
        self.count += 1
        self._wake()

    def close(self) -> None:
        """No more writes will come: every waiter returns, now and from now on."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait_past(self, count: int) -> None:
        """Return once more than ``count`` writes are durable, or once closed. A checkpoint;
        cancelling it changes nothing."""
        while self.count <= count and not self.closed:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        await anyio.lowlevel.checkpoint()


class _Ticket:
    """One caller's wait for the flush that covers its commit."""

    __slots__ = ("done", "error", "outcome")

    def __init__(self, done: anyio.Event | None = None) -> None:
        self.done = done if done is not None else anyio.Event()
        self.outcome: Any = None
        self.error: BaseException | None = None

    def resolve(self, outcome: Any) -> None:
        self.outcome = outcome
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


# A commit, heartbeat or memory write carries its caller's ticket when told (the Committer's
# way: one wake-up, when durable); asked without one, the writer makes one and answers with it.


@attrs.frozen
class _Commit:
    execution: Execution
    owner: str
    ticket: _Ticket | None = attrs.field(default=None, eq=False)


@attrs.frozen
class _Renew:
    execution_id: str
    owner: str
    ttl: float
    epoch: int | None = None  # the lease tenure the heartbeat is made under (L4)
    ticket: _Ticket | None = attrs.field(default=None, eq=False)


@attrs.frozen
class _Memory:
    """Memory writes, applied in order with the others of the same flush."""

    writes: tuple[MemoryWrite, ...]
    ticket: _Ticket | None = attrs.field(default=None, eq=False)


@attrs.frozen
class _Flush:
    pass


@attrs.frozen
class _Drain:
    pass


@attrs.frozen
class _Returned:
    value: Any


@attrs.frozen
class _Raised:
    error: Exception


@attrs.frozen
class _Call:
    """A lease operation or an out-of-band edit, run in order with the flushes."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


@attrs.frozen
class _Stats:
    """Ask the writer for its counters (a message of its own type, not a string)."""


@attrs.frozen
class PersistenceStats:
    """Counters: commits received, writes done (after coalescing), flushes (durable syncs)."""

    commits: int
    writes: int
    flushes: int


class PersistenceActor(Actor):
    """Serializes every commit to ``store``; see the module docstring."""

    def __init__(
        self,
        store: Store,
        durable: Durable | None = None,
        waiting: set[_Ticket] | None = None,
        flushed: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        # Told how many run commits each durable flush wrote (a metric's observer, O1).
        self._flushed = flushed
        self.durable = durable if durable is not None else Durable()
        # Decided once: a store that never blocks is called on the loop (no thread hop).
        self._blocking = store_blocks(store)
        # The tickets of commits told to this writer and not yet answered (the Committer's):
        # those still queued when it stops were dropped with its mailbox, and hear so.
        self._waiting: set[_Ticket] = waiting if waiting is not None else set()
        # (execution id, owner) -> (latest execution, its owner, every ticket it covers).
        # Keyed by owner too: a runner that lost its lease must hear its own refusal, not the
        # new owner's success.
        self._batch: dict[tuple[str, str], tuple[Execution, str, list[_Ticket]]] = {}
        # (execution id, owner) -> (ttl, tickets): heartbeats share one write per flush.
        self._renewals: dict[tuple[str, str, int | None], tuple[float, list[_Ticket]]] = {}
        # Memory writes in arrival order, each caller's with its ticket: one transaction.
        self._memory: list[tuple[tuple[MemoryWrite, ...], _Ticket]] = []
        self._flush_queued = False
        self._broken: BaseException | None = None
        self._commits = 0
        self._writes = 0
        self._flushes = 0

    async def receive(self, message: Any) -> Any:
        if isinstance(message, _Commit):
            ticket = self._accept(message)
            await self._flush_soon()
            return ticket
        if isinstance(message, _Renew):
            ticket = self._accept_renewal(message)
            await self._flush_soon()
            return ticket
        if isinstance(message, _Memory):
            ticket = message.ticket if message.ticket is not None else _Ticket()
            if not self._refuse_if_broken(ticket):
                self._memory.append((message.writes, ticket))
                await self._flush_soon()
            return ticket
        if isinstance(message, _Flush):
            self._flush_queued = False
            await self._flush()
            return None
        if isinstance(message, _Drain):
            await self._flush()
            return self.stats()
        if isinstance(message, _Call):
            if self._broken is not None:
                broken = f"the writer stopped after a failed write: {self._broken}"
                return _Raised(PersistenceFailed(broken))
            try:
                value = await self._call_store(message.fn, *message.args)
                self.durable.notify()  # a create or an edit writes history too (V2)
                return _Returned(value)
            except OSError as exc:  # the disk failed: stop writing for good, like a flush
                self._stop_writing(exc, "write")
                return _Raised(exc)
            except Exception as exc:  # any Store's error: the asker's to raise
                return _Raised(exc)
        if isinstance(message, _Stats):
            return self.stats()
        raise TypeError(f"the persistence actor takes commits, not {type(message).__name__}")

    def stats(self) -> PersistenceStats:
        return PersistenceStats(commits=self._commits, writes=self._writes, flushes=self._flushes)

    def _stop_writing(self, exc: BaseException, what: str) -> None:
        """A write failed so that nothing more may be written (see the module docstring):
        every later write is refused with ``exc``. Logged once, when the writer stops."""
        if self._broken is None and logger.isEnabledFor(logging.ERROR):
            logger.error(
                "the writer stopped after a failed %s; every later write is refused: %s",
                what,
                _said(exc),
                extra={"error_type": type(exc).__name__, "status": "stopped"},
            )
        self._broken = exc

    def _refuse_if_broken(self, ticket: _Ticket) -> bool:
        if self._broken is None:
            return False
        ticket.fail(PersistenceFailed(f"the writer stopped after a failed write: {self._broken}"))
        return True

    async def _call_store(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``: in a worker thread, or on the loop for a store that never blocks."""
        if not self._blocking:
            return fn(*args)  # the store's promise (Store, ``blocking``): nothing to wait on
        with anyio.CancelScope(shield=True):  # a write under way finishes before we stop
            return await anyio.to_thread.run_sync(fn, *args)

    def _accept_renewal(self, renewal: _Renew) -> _Ticket:
        ticket = renewal.ticket if renewal.ticket is not None else _Ticket()
        if self._refuse_if_broken(ticket):
            return ticket
        key = (renewal.execution_id, renewal.owner, renewal.epoch)
        pending = self._renewals.get(key)
        tickets = pending[1] if pending is not None else []
        tickets.append(ticket)
        self._renewals[key] = (renewal.ttl, tickets)
        return ticket

    def _accept(self, commit: _Commit) -> _Ticket:
        ticket = commit.ticket if commit.ticket is not None else _Ticket()
        if self._refuse_if_broken(ticket):
            return ticket
        self._commits += 1
        key = (commit.execution.id, commit.owner)
        pending = self._batch.get(key)
        tickets = pending[2] if pending is not None else []
        tickets.append(ticket)
        self._batch[key] = (commit.execution, commit.owner, tickets)  # the latest wins
        return ticket

    async def _flush_soon(self) -> None:
        """Write what was accepted: at once if nothing else waits in the mailbox (a flush
        queued behind nothing would only cost a message), else behind what waits, so that
        it shares this flush (group commit: commits that arrive while one flush is on disk
        queue up, and the first of them queues the next flush behind the rest)."""
        if self._flush_queued:
            return  # one is queued already, behind everything accepted since
        if not self.messages_waiting():
            await self._flush()
            return
        self._flush_queued = True
        try:
            self.ref.tell_nowait(_Flush())
        except MailboxFull:
            self.send_after(0, _Flush())  # waits for room instead

    async def _flush(self) -> None:
        await self._flush_commits()
        await self._flush_renewals()
        await self._flush_memory()

    async def _flush_memory(self) -> None:
        if not self._memory:
            return
        batch, self._memory = self._memory, []
        if self._broken is not None:
            for _, ticket in batch:
                self._refuse_if_broken(ticket)
            return
        writes = [write for group, _ in batch for write in group]
        apply = self.store.memory_apply  # type: ignore[attr-defined]
        try:
            results = await self._call_store(apply, writes)
        except Exception as exc:  # any Store's error: every writer told
            if isinstance(exc, OSError):
                self._stop_writing(exc, "memory write")
            elif logger.isEnabledFor(logging.WARNING):
                logger.warning(
                    "a memory write of %d changes failed; the writer goes on: %s",
                    len(writes),
                    _said(exc),
                    extra={"error_type": type(exc).__name__, "count": len(writes)},
                )
            # Only a lost COMMIT leaves the outcome open: it may have been applied, and a
            # caller told otherwise would remember its facts a second time.
            what = (
                "its outcome is unknown (it may have been applied)"
                if isinstance(exc, CommitUnknown)
                else "nothing in it was applied"
            )
            after = "the writer has stopped" if isinstance(exc, OSError) else "the writer goes on"
            failure = PersistenceFailed(f"memory write failed, {what}; {after}: {exc}")
            failure.__cause__ = exc
            for _, ticket in batch:
                ticket.fail(failure)
            return
        self._flushes += 1
        start = 0
        for group, ticket in batch:
            ticket.resolve(tuple(results[start : start + len(group)]))
            start += len(group)

    async def _flush_renewals(self) -> None:
        if not self._renewals:
            return
        renewals, self._renewals = self._renewals, {}
        if self._broken is not None:
            for _, tickets in renewals.values():
                for ticket in tickets:
                    self._refuse_if_broken(ticket)
            return
        batch = [(key[0], key[1], ttl, key[2]) for key, (ttl, _) in renewals.items()]
        try:
            results = _one_each(await self._call_store(self.store.renew_many, batch), batch)
        except Exception as exc:  # any Store's error: every renewer told
            if isinstance(exc, OSError):
                self._stop_writing(exc, "heartbeat write")
            failure = PersistenceFailed(f"heartbeat write failed: {exc}")
            failure.__cause__ = exc
            for _, tickets in renewals.values():
                for ticket in tickets:
                    ticket.fail(failure)
            return
        self._flushes += 1
        for (_, tickets), result in zip(renewals.values(), results, strict=True):
            for ticket in tickets:
                if isinstance(result, Exception):
                    ticket.fail(result)
                else:
                    ticket.resolve(result)

    async def _flush_commits(self) -> None:
        if not self._batch:
            return
        batch, self._batch = self._batch, {}
        entries = list(batch.values())
        commits = [(execution, owner) for execution, owner, _ in entries]
        timed = logger.isEnabledFor(logging.DEBUG)
        began = time.perf_counter() if timed else 0.0
        try:
            outcomes = _one_each(
                await self._call_store(self.store.commit_runs, commits),
                commits,
                (CommitOutcome, Exception),
            )
        except Exception as exc:  # any Store's error: nothing acknowledged
            self._stop_writing(exc, "write")
            fatal = PersistenceFailed(f"write failed, nothing in it was acknowledged: {exc}")
            fatal.__cause__ = exc
            for _, _, tickets in entries:
                for ticket in tickets:
                    ticket.fail(fatal)
            for _, _, tickets in self._batch.values():
                for ticket in tickets:
                    ticket.fail(fatal)
            self._batch.clear()
            return
        self._flushes += 1
        self.durable.notify()  # before the acks: a follower woken now reads this flush (V2)
        if self._flushed is not None:
            self._flushed(len(entries))
        if timed:
            took = time.perf_counter() - began
            logger.debug(
                "flushed %d commits of %d executions in %.1f ms",
                sum(len(tickets) for _, _, tickets in entries),
                len(entries),
                took * 1000,
                extra={
                    "commits": sum(len(tickets) for _, _, tickets in entries),
                    "count": len(entries),
                    "duration": took,
                },
            )
        for (_, _, tickets), result in zip(entries, outcomes, strict=True):
            if isinstance(result, CommitOutcome):
                self._writes += result is CommitOutcome.OK
                for ticket in tickets:
                    ticket.resolve(result)
                continue
            failure: BaseException = result  # a record that cannot be written: only this one
            if isinstance(result, OSError):  # the disk failed: stop writing for good
                self._stop_writing(result, "write")
                failure = PersistenceFailed(f"write failed, not acknowledged: {result}")
                failure.__cause__ = result
            for ticket in tickets:
                ticket.fail(failure)

    async def on_stop(self, reason: CancelReason) -> None:
        # Whatever was accepted is flushed (or failed) before the writer goes away.
        try:
            await self._flush()
        finally:
            # What was told but still queued went with the mailbox, unprocessed: its caller
            # hears that the writer is gone, as an asker would, instead of waiting forever.
            # (The writer is never restarted: a queued message has no next life to reach.)
            for ticket in self._waiting:
                if not ticket.done.is_set():
                    ticket.fail(ActorDeadError(self.ref, reason))
            self._waiting.clear()


def _one_each(
    results: Any, asked: Sequence[Any], kinds: tuple[type[Any], ...] = (object,)
) -> list[Any]:
    """``results`` as a list of one result (an instance of ``kinds``) per item ``asked``;
    TypeError otherwise (E2: a custom store answering anything else, such as the ``Store``
    protocol's stub's None, fails the write like any store error, never the writer)."""
    if not isinstance(results, Iterable) or isinstance(results, str | bytes | Mapping):
        raise TypeError(
            f"the store answered {len(asked)} writes with {type(results).__name__}, "
            "not a sequence of one result per write"
        )
    answered = list(results)
    if len(answered) != len(asked):
        raise TypeError(f"the store answered {len(asked)} writes with {len(answered)} results")
    for result in answered:
        if not isinstance(result, kinds):
            raise TypeError(f"the store answered a write with {type(result).__name__}")
    return answered


class Committer:
    """The caller's side: ``await committer.submit(execution, owner)`` returns once durable."""

    def __init__(
        self,
        ref: ActorRef,
        store: Store,
        durable: Durable | None = None,
        *,
        waiting: set[_Ticket] | None = None,
        new_event: Callable[[], anyio.Event] = anyio.Event,
    ) -> None:
        self.ref = ref
        self.store = store
        #: Bumped by the writer after each durable write (see :class:`Durable`).
        self.durable = durable if durable is not None else Durable()
        self._memory_decided: tuple[object, MemoryBackend | None] | None = None
        # Shared with the writer (see PersistenceActor._waiting); a Committer made apart
        # from its writer shares none, and a stopped writer's askers hear of it as before.
        self._waiting: set[_Ticket] = waiting if waiting is not None else set()
        self._new_event = new_event  # the backend's own Event class: no dispatch per ticket

    def memory_backend(self) -> MemoryBackend | None:
        """The store as a :class:`MemoryBackend`, or None if it keeps no memory. Decided
        once per store: ``isinstance`` on a runtime-checkable protocol walks the protocol's
        members on every call (~14 µs), and every memory call asks."""
        decided = self._memory_decided
        if decided is None or decided[0] is not self.store:
            store = self.store
            decided = (store, store if isinstance(store, MemoryBackend) else None)
            self._memory_decided = decided
        return decided[1]

    async def seal_evidence(self, document: Any) -> str:
        """Seal ``document`` in the store (``storage._evidence``): its canonical JSON,
        within ``MAX_EVIDENCE_BYTES``, stored once under its sha256, durable before this
        returns; the digest. Encoded, hashed and written off the event loop, beside the
        writer (a document is written once and named by its content, so it needs no
        ordering with commits: seal first, then commit the record that names the digest).
        ValueError for a document that is not JSON data; :class:`EvidenceError` past the
        bound; ``TypeError`` if the store keeps no evidence."""
        store = self._evidence_store()
        if not store_blocks(store):
            return seal_into(store, document)
        digest: str = await anyio.to_thread.run_sync(seal_into, store, document)
        return digest

    async def read_evidence(self, digest: str) -> Any:
        """The document sealed under ``digest``, checked (bound, hash) and parsed;
        :class:`EvidenceError` if it is missing, bad, or not what was sealed (fail closed)."""
        store = self._evidence_store()
        if not store_blocks(store):
            return load_evidence(store, digest)
        return await anyio.to_thread.run_sync(load_evidence, store, digest)

    def _evidence_store(self) -> EvidenceStore:
        store = self.store
        if not isinstance(store, EvidenceStore):
            raise TypeError(f"{type(store).__name__} keeps no sealed evidence")
        return store

    async def submit(self, execution: Execution, owner: str) -> CommitOutcome:
        """Hand a run's commit to the writer; the outcome of the durable write that covered
        it (E2 rules; the writer calls the store's ``commit_run`` / ``commit_runs``).

        Raises :class:`PersistenceFailed` if that write failed (then nothing is acknowledged).
        If the caller is cancelled while waiting, the commit may still be written.
        """
        ticket = _Ticket(self._new_event())
        outcome: CommitOutcome = await self._hand_over(_Commit(execution, owner, ticket), ticket)
        return outcome

    async def _hand_over(self, message: Any, ticket: _Ticket) -> Any:
        """Tell the writer ``message`` (which carries ``ticket``) and wait for its answer.

        One wake-up per call: the ticket is set once the write that covers it is durable;
        there is no receipt to wait for first, as an ask would have. Backpressure as for any
        message: a full mailbox makes the caller wait for room (cancelled there, nothing was
        delivered). ``ActorDeadError`` if the writer is gone, or goes before taking it.
        """
        waiting = self._waiting
        waiting.add(ticket)
        try:
            try:
                self.ref.tell_nowait(message)
            except MailboxFull:
                await self.ref.tell(message)
            await ticket.done.wait()
        finally:
            waiting.discard(ticket)
        if ticket.error is not None:
            raise ticket.error
        return ticket.outcome

    async def stats(self) -> PersistenceStats:
        result: PersistenceStats = await self.ref.ask(_Stats())
        return result

    async def memory(self, writes: Sequence[MemoryWrite]) -> tuple[Fact | bool | Exception, ...]:
        """Apply memory writes through the writer (in order, one transaction per flush with
        whatever other memory writes share it); each write's answer, as
        ``MemoryBackend.memory_apply`` gives it, once durable. ``TypeError`` if the store
        keeps no memory; :class:`PersistenceFailed` if the write failed."""
        if self.memory_backend() is None:
            raise TypeError(f"{type(self.store).__name__} keeps no memory")
        ticket = _Ticket(self._new_event())
        answers: tuple[Fact | bool | Exception, ...] = await self._hand_over(
            _Memory(tuple(writes), ticket), ticket
        )
        return answers

    async def acquire(
        self, execution_id: str, owner: str, ttl: float, *, gone: Lease | None = None
    ) -> LeaseResult:
        """The store's ``acquire`` (L1; ``gone``: L7), run by the writer in order with its
        flushes."""
        if gone is None:
            return await self._call(self.store.acquire, execution_id, owner, ttl)  # type: ignore[no-any-return]
        take = functools.partial(self.store.acquire, gone=gone)
        return await self._call(take, execution_id, owner, ttl)  # type: ignore[no-any-return]

    async def renew(
        self, execution_id: str, owner: str, ttl: float, *, epoch: int | None = None
    ) -> tuple[CommitOutcome, Execution | None]:
        """The store's ``renew``: a heartbeat that answers like a commit (L2, E2), fenced by
        ``epoch`` when given (L4). Heartbeats that arrive together share one durable write.
        """
        ticket = _Ticket(self._new_event())
        renewed: tuple[CommitOutcome, Execution | None] = await self._hand_over(
            _Renew(execution_id, owner, ttl, epoch, ticket), ticket
        )
        return renewed

    async def release(self, execution_id: str, owner: str) -> bool:
        """The store's ``release`` (L3)."""
        return await self._call(self.store.release, execution_id, owner)  # type: ignore[no-any-return]

    async def edit(self, execution_id: str, change: Edit) -> Execution | None:
        """The store's ``edit``: an out-of-band change, whoever holds the lease."""
        return await self._call(self.store.edit, execution_id, change)  # type: ignore[no-any-return]

    async def delete(self, execution_id: str) -> bool:
        """The store's ``delete``: a finished execution goes, with its history; False if it
        is not stored or not finished (the store decides, atomically)."""
        return await self._call(self.store.delete, execution_id)  # type: ignore[no-any-return]

    async def create(self, execution: Execution, *, lease_ttl: float | None = None) -> bool:
        """The store's ``create`` (with ``lease_ttl``: the lease on the store's clock)."""
        create = functools.partial(self.store.create, lease_ttl=lease_ttl)
        return await self._call(create, execution)  # type: ignore[no-any-return]

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        answer: _Returned | _Raised = await self.ref.ask(_Call(fn, args))
        if isinstance(answer, _Raised):
            raise answer.error
        return answer.value

    async def drain(self) -> PersistenceStats:
        """Flush everything accepted so far; returns the counters."""
        result: PersistenceStats = await self.ref.ask(_Drain())
        return result


async def open_committer(
    system: ActorSystem,
    store: Store,
    *,
    name: str = "persistence",
    flushed: Callable[[int], None] | None = None,
) -> Committer:
    """Start the persistence actor for ``store`` under ``system``. ``flushed(commits)`` is
    called after each durable flush of run commits, with how many it wrote."""
    durable = Durable()
    waiting: set[_Ticket] = set()
    ref = await system.spawn(
        PersistenceActor, store, durable, waiting, flushed, name=name, mailbox_size=100_000
    )
    return Committer(ref, store, durable, waiting=waiting, new_event=system.new_event)
