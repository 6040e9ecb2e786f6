"""Subprocess for the kill -9 trials: commit forever, ledger every acknowledged version.

Each version appends an observation and a completed step (the journal grows, a part at a
time) and FileStore compacts every ~16 KiB, so kills land in appends and in compactions.
"""

from __future__ import annotations

import os
import sys

import mainspring as ms
from mainspring.storage._backends.file import store as _file


def main() -> None:
    backend, path, ledger_path, owner = sys.argv[1:5]
    _file._COMPACT_AT = 16 * 1024  # compactions during the trial, not after hours of it
    store: ms.storage.Store
    if backend == "file":
        store = ms.storage.FileStore(path)
    elif backend == "sqlite":
        store = ms.storage.SqliteStore(path)
    else:  # a store URL: kills land mid-transaction and mid-COMMIT
        store = ms.storage.PostgresStore(path)
    ledger = os.open(ledger_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    padding = "x" * 500
    print("ready", flush=True)
    version = 0
    observations: tuple[ms.storage.Observation, ...] = ()
    done: tuple[str, ...] = ()
    while True:
        version += 1
        observations = (
            *observations,
            ms.storage.Observation(step_id=f"s{version}", tool="t", ok=True, output=padding),
        )
        done = (*done, f"s{version}")
        record = ms.storage.Execution(
            id="victim", goal="g", created_at=1.0, updated_at=float(version),
            calls_used=version, observations=observations, completed_steps=done,
        )  # fmt: skip
        if store.commit_run(record, owner).ok:
            os.write(ledger, f"{version}\n".encode())  # survives kill -9: it is in the kernel


if __name__ == "__main__":
    main()
