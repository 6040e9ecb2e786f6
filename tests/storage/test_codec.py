"""The one converter (storage/_codec.py): its hooks, made on first use under a lock, stay
usable in a process forked while another thread was making them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Run in a fresh process (the test process made its hooks before the first test): a thread
#: is inside ``make_hooks`` (held in a maker of its own, let go as the fork begins) when the
#: main thread forks; the child reads a record, bounded by an alarm. Prints the child's exit.
_CHILD = """
import os, signal, threading
from mainspring.storage import _codec, Plan

inside, go_on = threading.Event(), threading.Event()

def held():
    inside.set()
    go_on.wait()

_codec.on_first_use(held)  # after the records' own maker: the lock is held meanwhile
# Registered after storage's own hooks, so called before them when the fork begins.
os.register_at_fork(before=go_on.set)
maker = threading.Thread(target=_codec.make_hooks)
maker.start()
inside.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a deadlocked child ends, it does not hang the test
    plan = _codec.structure({"id": "p-1", "goal": "g", "steps": []}, Plan)
    os._exit(0 if plan.steps == () else 1)
maker.join()
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_E10_a_process_forked_while_the_hooks_are_made_reads_records() -> None:
    """A fork while another thread is making the converter's hooks (holding their lock)
    left the child with a lock no thread of it would release: its first read of a record
    waited forever. The fork now waits for the hooks to be made; the child reads."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", (done.stdout, done.stderr)
