"""Subprocess for the lease contention test: acquire, commit, release or abandon, forever.

Every line it appends to the shared ledger is one ``os.write`` on an O_APPEND descriptor.
Times are wall-clock seconds taken just before (``tb``) and just after (``ta``) each call, so
the check can bound when the store made its decision.
"""

from __future__ import annotations

import os
import random
import sys
import time

import mainspring as ms

TTL = 0.05


def main() -> None:
    backend, path, ledger_path, owner, seed = sys.argv[1:6]
    rng = random.Random(int(seed))
    store = ms.storage.FileStore(path) if backend == "file" else ms.storage.SqliteStore(path)
    ledger = os.open(ledger_path, os.O_WRONLY | os.O_APPEND)

    def log(*fields: object) -> None:
        os.write(ledger, (" ".join(str(f) for f in fields) + "\n").encode())

    print("ready", flush=True)
    while True:
        tb = time.time()
        result = store.acquire("contended", owner, ttl=TTL)
        ta = time.time()
        if not result.acquired:
            time.sleep(rng.uniform(0, TTL / 5))
            continue
        assert result.lease is not None
        epoch, expires = result.lease.epoch, result.lease.expires_at
        log("acq", owner, epoch, tb, ta, expires)
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.2:
                time.sleep(rng.uniform(0, TTL * 1.5))  # sometimes past the lease: stale
            record = ms.storage.Execution(
                id="contended", goal=owner, created_at=1.0, updated_at=time.time(),
                calls_used=epoch % 1_000_000,
            )  # fmt: skip
            tb = time.time()
            outcome = store.commit_progress(record, owner)
            ta = time.time()
            log("commit", owner, epoch, tb, ta, outcome.value, expires)
        if rng.random() < 0.7:
            # Logged before the call: a kill right after the release must not leave a ledger
            # that believes the tenure lasted until its expiry.
            log("rel", owner, epoch, time.time())
            store.release("contended", owner)


if __name__ == "__main__":
    main()
