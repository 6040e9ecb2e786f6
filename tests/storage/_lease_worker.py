"""Subprocess for the lease contention test: acquire, commit, release or abandon, forever.

Every line it appends to the shared ledger is one ``os.write`` on an O_APPEND descriptor.
Times are wall-clock seconds taken just before (``tb``) and just after (``ta``) each call, so
the check can bound when the store made its decision. ``postgresql`` takes a store URL for
``path``: its lease times are the server's clock, which on the test's machine (the server runs
there) is the same clock as the workers' ``time.time()``.
"""

from __future__ import annotations

import os
import random
import sys
import time

import mainspring as ms


def _held_by_another(store: ms.storage.Store, owner: str) -> bool:
    """Whether another owner's lease looks live, read without locking the row. On PostgreSQL
    every acquire locks it: seven workers asking while it is plainly held would queue the
    holder's commits behind their attempts. Only a filter: the store still decides."""
    seen = store.get("contended")
    lease = seen.lease if seen is not None else None
    return lease is not None and lease.owner not in ("", owner) and lease.expires_at > time.time()


def main() -> None:
    backend, path, ledger_path, owner, seed, ttl, poll, late = sys.argv[1:9]
    TTL, POLL, LATE = float(ttl), float(poll), float(late)
    rng = random.Random(int(seed))
    store: ms.storage.Store
    if backend == "file":
        store = ms.storage.FileStore(path)
    elif backend == "sqlite":
        store = ms.storage.SqliteStore(path)
    else:
        store = ms.storage.PostgresStore(path, pool_size=1)
    ledger = os.open(ledger_path, os.O_WRONLY | os.O_APPEND)

    def log(*fields: object) -> None:
        os.write(ledger, (" ".join(str(f) for f in fields) + "\n").encode())

    parent = os.getppid()
    print("ready", flush=True)
    while os.getppid() == parent:  # a test stopped by its timeout leaves no worker behind
        if backend == "postgresql" and _held_by_another(store, owner):
            time.sleep(rng.uniform(0, POLL))
            continue
        tb = time.time()
        result = store.acquire("contended", owner, ttl=TTL)
        ta = time.time()
        if not result.acquired:
            time.sleep(rng.uniform(0, POLL))
            continue
        assert result.lease is not None
        epoch, expires = result.lease.epoch, result.lease.expires_at
        log("acq", owner, epoch, tb, ta, expires)
        for _ in range(rng.randint(1, 3)):
            if rng.random() < LATE:
                time.sleep(rng.uniform(0, TTL * 1.5))  # sometimes past the lease: stale
            record = ms.storage.Execution(
                id="contended", goal=owner, created_at=1.0, updated_at=time.time(),
                calls_used=epoch % 1_000_000,
            )  # fmt: skip
            tb = time.time()
            outcome = store.commit_run(record, owner)
            ta = time.time()
            log("commit", owner, epoch, tb, ta, outcome.value, expires)
        if rng.random() < 0.7:
            # Logged before the call: a kill right after the release must not leave a ledger
            # that believes the tenure lasted until its expiry.
            log("rel", owner, epoch, time.time())
            store.release("contended", owner)


if __name__ == "__main__":
    main()
