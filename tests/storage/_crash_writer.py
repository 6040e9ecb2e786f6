"""Subprocess for the kill -9 trials: commit forever, ledger every acknowledged version."""

from __future__ import annotations

import os
import sys

import mainspring as ms


def main() -> None:
    backend, path, ledger_path, owner = sys.argv[1:5]
    store = ms.storage.FileStore(path) if backend == "file" else ms.storage.SqliteStore(path)
    ledger = os.open(ledger_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    padding = "x" * 2000  # ~4 KiB records, like the benchmark's
    print("ready", flush=True)
    version = 0
    while True:
        version += 1
        record = ms.storage.Execution(
            id="victim", goal=padding, created_at=1.0, updated_at=float(version),
            calls_used=version,
        )  # fmt: skip
        if store.commit_progress(record, owner).ok:
            os.write(ledger, f"{version}\n".encode())  # survives kill -9: it is in the kernel


if __name__ == "__main__":
    main()
