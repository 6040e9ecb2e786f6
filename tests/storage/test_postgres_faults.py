"""PostgresStore under connection faults, against the real server: sessions terminated
mid-commit by ``pg_terminate_backend``, again and again, while the store commits, renews and
edits several executions.

Every call either returns, and then what it acknowledged is in the store (read back at once
by another store on connections the faults never touch), or raises ``StoreUnavailable``
(nothing written) or ``CommitUnknown`` (written wholly or not at all, never twice). Each
acknowledged write adds one to ``calls_used`` and one audit line (one ``control`` history
entry), so a write applied twice would show as a count one too high and a history entry too
many.
"""

from __future__ import annotations

import itertools
import random
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import psycopg
import pytest

import mainspring as ms
from mainspring.storage._backends.postgres.store import (
    CommitUnknown,
    PostgresStore,
    StoreUnavailable,
)
from tests._postgres import drop_schema, fresh_schema, require_server, with_schema

pytestmark = pytest.mark.slow

OWNER = "faults:1:a"
IDS = [f"ex-{n}" for n in range(4)]
#: Calls made while the sessions are being terminated, at least (and as many as fit in CALLS_FOR s:
#: on a loaded machine each reconnection is slower).
CALLS = 150
CALLS_FOR = 60.0


@pytest.fixture
def schema_url() -> Iterator[tuple[str, str]]:
    """(the store URL, the application name its sessions carry): a name of this test's own,
    so the terminator ends only this store's sessions, never another test's."""
    url = require_server()
    schema = fresh_schema()
    app = f"mainspring-faults-{secrets.token_hex(4)}"
    try:
        yield with_schema(url, schema), app
    finally:
        drop_schema(schema)


def _with_app(url: str, app: str) -> str:
    return f"{url}&application_name={app}"


class Terminator(threading.Thread):
    """Ends every session of ``app`` on the server, at random moments 10-200 ms apart."""

    def __init__(self, server: str, app: str) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.app = app
        self.stopping = threading.Event()
        self.ended = 0
        self.rounds = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(14)
        try:
            with psycopg.connect(self.server, autocommit=True) as conn:
                while not self.stopping.wait(rng.uniform(0.01, 0.2)):
                    rows = conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = %s AND datname = current_database() "
                        "AND pid <> pg_backend_pid()",
                        (self.app,),
                    ).fetchall()
                    self.ended += sum(1 for (ok,) in rows if ok)
                    self.rounds += 1
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc


def _execution(execution_id: str) -> ms.storage.Execution:
    return ms.storage.Execution(
        id=execution_id, goal="faults", status="running", created_at=1.0, updated_at=1.0
    )


def _next(execution: ms.storage.Execution, what: str) -> ms.storage.Execution:
    """One more of everything a write is counted by: calls_used and an audit line."""
    line = ms.storage._seam.Control(action="answer", by=OWNER, at=time.time(), reason=what)
    return attrs.evolve(
        execution,
        calls_used=execution.calls_used + 1,
        controls=(*execution.controls, line)[-ms.storage._seam.MAX_CONTROLS :],
        updated_at=time.time(),
    )


def _count_faults(store: PostgresStore) -> list[int]:
    """How many transactions of ``store`` ended with their connection lost."""
    lost = [0]
    settle = store._settle_failure

    def counting(exc: BaseException, *args: Any) -> None:
        lost[0] += 1
        settle(exc, *args)

    store._settle_failure = counting  # type: ignore[method-assign]
    return lost


def test_sessions_terminated_mid_commit_never_lose_or_double_an_acknowledged_write(
    schema_url: tuple[str, str],
) -> None:
    url, app = schema_url
    store = PostgresStore(_with_app(url, app), reconnect_timeout=20.0)
    checker = PostgresStore(url)  # other sessions: never terminated
    try:
        for execution_id in IDS:
            assert store.create(_execution(execution_id))
            assert store.acquire(execution_id, OWNER, ttl=3600).acquired
        # What each execution is known to hold (the last acknowledged version), how many
        # writes were acknowledged, and how many ended unknown but turned out to be written.
        model = {i: store.get(i) for i in IDS}
        acked = dict.fromkeys(IDS, 0)
        landed = dict.fromkeys(IDS, 0)
        outcomes = {"ok": 0, "unavailable": 0, "unknown": 0}
        lost = _count_faults(store)
        rng = random.Random(1414)
        terminator = Terminator(require_server(), app)
        terminator.start()
        stop_at = time.monotonic() + CALLS_FOR
        try:
            for n in itertools.count():
                # CALLS calls and enough real faults (below); a fast, quiet machine makes
                # its calls before many sessions were ended, so it goes on until they were
                # (or CALLS_FOR seconds passed).
                faulted = terminator.ended >= 20 and lost[0] >= 10
                if (n >= CALLS and faulted) or (time.monotonic() > stop_at and n >= 60):
                    break
                op = rng.choice(("commit_runs", "commit_runs", "edit", "renew"))
                chosen = sorted(rng.sample(IDS, rng.randint(1, len(IDS))))
                if op != "commit_runs":
                    chosen = chosen[:1]
                before = {i: model[i] for i in chosen}
                try:
                    if op == "commit_runs":
                        wanted = {i: _next(before[i], f"c{n}") for i in chosen}  # type: ignore[arg-type]
                        results = store.commit_runs([(wanted[i], OWNER) for i in chosen])
                        assert results == (ms.storage._seam.CommitOutcome.OK,) * len(chosen)
                        written = wanted
                    elif op == "edit":
                        edited = store.edit(chosen[0], lambda e, now, n=n: _next(e, f"e{n}"))
                        assert edited is not None
                        written = {chosen[0]: edited}
                    else:
                        outcome, renewed = store.renew(chosen[0], OWNER, 3600, epoch=1)
                        assert outcome is ms.storage._seam.CommitOutcome.OK
                        assert renewed is not None
                        written = {}
                        assert renewed.calls_used == before[chosen[0]].calls_used  # type: ignore[union-attr]
                except StoreUnavailable:
                    outcomes["unavailable"] += 1
                    for i in chosen:  # nothing of it was written
                        stored = checker.get(i)
                        assert stored is not None
                        assert stored.calls_used == before[i].calls_used  # type: ignore[union-attr]
                    continue
                except CommitUnknown:
                    outcomes["unknown"] += 1
                    for i in chosen:  # written wholly or not at all, and once at most
                        stored = checker.get(i)
                        assert stored is not None
                        old = before[i].calls_used  # type: ignore[union-attr]
                        assert stored.calls_used in (old, old + 1)
                        landed[i] += stored.calls_used - old
                        model[i] = stored
                    continue
                outcomes["ok"] += 1
                for i, execution in written.items():
                    acked[i] += 1
                    model[i] = execution
                    # Acknowledged means durable: another store sees it now.
                    stored = checker.get(i)
                    assert stored is not None
                    assert stored.calls_used == execution.calls_used
                    assert stored.controls[-1] == execution.controls[-1]
        finally:
            terminator.stopping.set()
            terminator.join(timeout=30)
        assert terminator.error is None, terminator.error
        # The faults were real: many sessions ended, many transactions lost their connection.
        assert terminator.ended >= 20, terminator.ended
        assert lost[0] >= 10, lost[0]
        assert outcomes["ok"] >= 40, outcomes

        # The store keeps working: one more write of each, acknowledged at once.
        final = {i: _next(model[i], "after") for i in IDS}  # type: ignore[arg-type]
        results = store.commit_runs([(final[i], OWNER) for i in IDS])
        assert results == (ms.storage._seam.CommitOutcome.OK,) * len(IDS)
        for i in IDS:
            acked[i] += 1
    finally:
        store.close()
        checker.close()

    fresh = PostgresStore(url)
    try:
        events = []
        after = 0
        while batch := fresh.history(after=after, limit=10_000):
            events.extend(batch)
            after = batch[-1].seq
        seqs = [event.seq for event in events]
        assert seqs == sorted(set(seqs)), "history sequence not strictly increasing"
        keys = [(event.execution_id, event.execution_seq) for event in events]
        assert len(keys) == len(set(keys)), "one commit's history entry applied twice"
        for i in IDS:
            stored = fresh.get(i)
            assert stored is not None
            # Each write counted once: acknowledged ones all, unknown ones only if written.
            assert stored.calls_used == acked[i] + landed[i]
            assert stored.controls == final[i].controls
            assert stored.lease is not None
            assert (stored.lease.owner, stored.lease.epoch) == (OWNER, 1)
            audit = [e for e in events if e.execution_id == i and e.kind == "control"]
            assert len(audit) == stored.calls_used
            eseqs = [e.execution_seq for e in events if e.execution_id == i]
            assert eseqs == sorted(eseqs)
    finally:
        fresh.close()


def test_a_session_ended_while_a_pipeline_was_busy_counts_as_lost_not_as_a_refusal() -> None:
    # What psycopg raises when the server ends the session during a pipelined COMMIT: the
    # pipeline's exit fails over the server's error, on a connection not yet marked broken.
    from mainspring.storage._backends.postgres.connect import is_lost

    class Live:
        broken = closed = False

    shutdown = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    busy = psycopg.OperationalError("cannot exit pipeline mode while busy")
    busy.__context__ = shutdown
    assert is_lost(busy, Live())
    assert is_lost(shutdown, Live())
    refused = psycopg.errors.UniqueViolation("duplicate key")
    assert not is_lost(refused, Live())
