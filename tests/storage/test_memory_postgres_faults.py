"""PostgresStore's memory under faults, against the real server: a statement failing at any
point of a batch, a session ended between two writes or while COMMIT's answer was on its
way, COMMIT outcomes the server cannot tell, and sessions terminated again and again while
batches run. Nothing acknowledged is lost, nothing is applied twice, and a batch is applied
wholly or not at all."""

from __future__ import annotations

import collections
import contextlib
import itertools
import random
import secrets
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import mainspring as ms
from mainspring.storage import Fact
from mainspring.storage._backends.postgres.store import (
    CommitUnknown,
    PostgresStore,
    StoreUnavailable,
)
from mainspring.storage._seam import ForgetFact, RememberFact
from tests._postgres import postgres_url, require_server
from tests.storage.test_memory_postgres import _all, _check_chains, _terminate, fact, store
from tests.storage.test_postgres_faults import Terminator, _count_faults

__all__ = ["postgres_url", "store"]  # fixtures


#: How each statement of a memory batch begins (BEGIN, the clock and transaction id, the
#: groups named, a group's lock, the savepoint, a remember, a forget, its release, COMMIT).
STATEMENTS = [
    "BEGIN",
    "WITH locked",
    "SELECT DISTINCT",
    "SELECT pg_advisory",
    "SAVEPOINT",
    "WITH added",
    "WITH gone",
    "RELEASE",
    "COMMIT",
]


@pytest.mark.parametrize("statement", STATEMENTS)
def test_a_statement_the_server_fails_applies_nothing_and_the_store_goes_on(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, statement: str
) -> None:
    store.memory_apply(
        [RememberFact(fact("fact-a", "old", conflict_group="g")), RememberFact(fact("fact-c"))]
    )
    before = _all(store)
    batch = [
        RememberFact(fact("fact-b", "new", conflict_group="g")),
        ForgetFact("fact-c"),
        RememberFact(fact("fact-d", "another")),
    ]
    execute = psycopg.Cursor.execute
    failed = [0]

    def failing(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(query, str) and query.startswith(statement) and not failed[0]:
            failed[0] += 1
            raise psycopg.errors.DiskFull("could not extend file: No space left on device")
        return execute(self, query, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", failing)
        with pytest.raises(ms.storage.StorageError, match="No space left"):
            store.memory_apply(batch)
    assert failed == [1]
    assert _all(store) == before  # nothing of the batch
    answers = store.memory_apply(batch)  # and the same store goes on
    assert [type(a).__name__ for a in answers] == ["Fact", "bool", "Fact"]
    assert set(_all(store)) == {"fact-a", "fact-b", "fact-d"}


# -- lost connections ------------------------------------------------------------------


def test_a_session_ended_between_two_writes_runs_the_batch_again_whole(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    y = fact("fact-y", "to forget", conflict_group="g")
    store.memory_apply([RememberFact(y)])
    x, z = fact("fact-x", "new"), fact("fact-z", "newer", conflict_group="g")
    execute = psycopg.Cursor.execute
    writes: list[str] = []

    def ending(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(query, str) and query.startswith(("WITH added", "WITH gone")):
            writes.append(query)
            if len(writes) == 2:  # the first write done on the server, then the session ends
                self.connection._pipeline.sync()
                _terminate(self.connection.info.backend_pid)
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", ending)
    answers = store.memory_apply([RememberFact(x), ForgetFact("fact-y"), RememberFact(z)])
    monkeypatch.undo()
    assert answers == (x, True, z)  # as one run answers: the first run was rolled back
    assert len(writes) == 5
    assert _all(store) == {"fact-x": x, "fact-z": z}


@contextlib.contextmanager
def _commit_answer_lost(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The next memory batch's COMMIT reaches the server, then its session ends before the
    answer is read (the answer comes with the Sync that leaving the pipeline sends)."""
    leave = psycopg.Pipeline.__exit__
    committing = [False]
    execute = psycopg.Connection.execute

    def noting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query == "COMMIT":
            committing[0] = True
        return execute(self, query, *args, **kwargs)

    def losing(self: Any, *args: Any) -> None:
        leave(self, *args)
        if committing[0]:
            committing[0] = False
            _terminate(store._conn.info.backend_pid)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Connection, "execute", noting)
        patch.setattr(psycopg.Pipeline, "__exit__", losing)
        yield


def test_a_batch_whose_commit_landed_but_whose_answer_was_lost_keeps_its_answers(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    y = fact("fact-y", "to forget")
    store.memory_apply([RememberFact(y)])
    x = fact("fact-x", "new")
    with _commit_answer_lost(store, monkeypatch):
        answers = store.memory_apply([ForgetFact("fact-y"), RememberFact(x)])
    # Settled as committed: never run again, which would answer False for fact-y.
    assert answers == (True, x)
    assert _all(store) == {"fact-x": x}


def test_a_batch_whose_commit_cannot_be_settled_raises_commit_unknown(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    y = fact("fact-y", "to forget")
    store.memory_apply([RememberFact(y)])
    monkeypatch.setattr(store._connections, "settle", lambda *args: None)
    with _commit_answer_lost(store, monkeypatch), pytest.raises(CommitUnknown):
        store.memory_apply([ForgetFact("fact-y"), RememberFact(fact("fact-x", "new"))])
    assert isinstance(CommitUnknown("x"), OSError)  # the writer stops: nothing acknowledged
    assert set(_all(store)) == {"fact-x"}  # it had landed: wholly


@pytest.mark.slow
def test_sessions_terminated_mid_batch_never_lose_or_double_an_acknowledged_write(
    postgres_url: str,
) -> None:
    app = f"mainspring-memfaults-{secrets.token_hex(4)}"
    store = PostgresStore(f"{postgres_url}&application_name={app}", reconnect_timeout=20.0)
    checker = PostgresStore(postgres_url)  # other sessions: never terminated
    model: dict[str, Fact] = {}
    outcomes = collections.Counter[str]()
    rng = random.Random(16)
    terminator = Terminator(require_server(), app)
    terminator.start()
    try:
        lost = _count_faults(store)
        stop_at = time.monotonic() + 60.0
        for n in itertools.count():
            # At least 150 batches and 20 transactions cut short, or as many as fit in 60 s.
            if (n >= 150 and lost[0] >= 20) or (time.monotonic() > stop_at and n >= 60):
                break
            new = [
                fact(f"fact-{n}-{k}", f"note {n} {k}", conflict_group=rng.choice("abc"))
                for k in range(rng.randint(1, 3))
            ]
            gone = rng.sample(sorted(model), min(len(model), rng.randint(0, 2)))
            writes = [RememberFact(f) for f in new] + [ForgetFact(i) for i in gone]
            try:
                answers = store.memory_apply(writes)
            except (StoreUnavailable, CommitUnknown) as exc:
                unknown = isinstance(exc, CommitUnknown)
                outcomes["unknown" if unknown else "unavailable"] += 1
                stored = {i: checker.memory_get(i) for i in [f.id for f in new] + gone}
                applied = all(stored[f.id] is not None for f in new) and not any(
                    stored[i] for i in gone
                )
                untouched = not any(stored[f.id] for f in new) and all(
                    stored[i] is not None for i in gone
                )
                assert applied or untouched, "a batch half applied"
                assert untouched or unknown
                if not applied:
                    continue
            else:
                outcomes["ok"] += 1
                assert answers[: len(new)] == tuple(new)
                assert answers[len(new) :] == (True,) * len(gone)  # each forgotten once
            for f in new:
                model[f.id] = f
                assert checker.memory_get(f.id) is not None  # acknowledged: durable
            for i in gone:
                del model[i]
                assert checker.memory_get(i) is None
    finally:
        terminator.stopping.set()
        terminator.join(timeout=30)
        store.close()
    try:
        assert terminator.error is None, terminator.error
        assert terminator.ended >= 20, terminator.ended
        assert lost[0] >= 10, lost[0]  # the faults hit batches under way
        assert outcomes["ok"] >= 40, outcomes
        facts = _all(checker)
        assert set(facts) == set(model)
        _check_chains(facts)
        assert checker.memory_count() == len(model)
    finally:
        checker.close()
