"""A worker process for the crash trials: appends ``<task> <pid> <generation>`` to the
ledger (argv[1]) every few ms, ``lines`` times, then reports its result. ``stubborn``
(argv[2]) ignores SIGTERM. It gives up after 20 s whatever happens (no orphan outlives a
trial for long)."""

import json
import os
import signal
import sys
import time

ledger, mode = sys.argv[1], sys.argv[2]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
given = json.loads(os.environ["MAINSPRING_WORKER_INPUT"])
task = os.environ["MAINSPRING_WORKER_TASK_ID"]
generation = os.environ["MAINSPRING_WORKER_GENERATION"]
fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
began = time.monotonic()
for _ in range(given["lines"]):
    os.write(fd, f"{task} {os.getpid()} {generation}\n".encode())
    time.sleep(0.004)
    if time.monotonic() - began > 20:
        sys.exit(1)
print(json.dumps({"type": "result", "output": {"step": given["step"]}}), flush=True)
time.sleep(20)  # waits to be stopped (the handoff stops it)
