"""Lease owner ids name their process; a gone process of this host is told apart from every
owner that may still be alive (L7: ``storage._owners``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mainspring as ms
from mainspring.storage._owners import owner_process
from mainspring.storage._seam import new_owner_id, owner_gone, owner_here

REPO = Path(ms.__file__).resolve().parent.parent


def exited_owner() -> str:
    """The owner id of a process of this host that has exited (and been reaped)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from mainspring.storage._seam import new_owner_id; print(new_owner_id())",
        ],
        capture_output=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return out.stdout.decode().strip()


def test_l7_an_owner_that_exited_on_this_host_is_gone() -> None:
    owner = exited_owner()
    process = owner_process(owner)
    assert process is not None
    assert process.pid != os.getpid()
    assert owner_gone(owner)
    assert owner_gone(owner + ":ops")  # a helper of that process went with it


def test_l7_a_live_owner_is_not_gone() -> None:
    assert not owner_gone(new_owner_id())


def test_l7_a_reused_pid_with_another_start_time_is_gone() -> None:
    host, pid, token, process = new_owner_id().split(":")
    started, boot, ns = process.split(".")
    assert int(pid) == os.getpid()
    earlier = f"{host}:{pid}:{token}:{int(started) + 1}.{boot}.{ns}"
    assert owner_gone(earlier)  # our pid, but not this process: that one is gone
    # Its start time unknown, a live pid is given the benefit of the doubt.
    assert not owner_gone(f"{host}:{pid}:{token}:0.{boot}.{ns}")


def test_l7_an_owner_of_another_host_or_of_an_older_form_is_never_gone() -> None:
    host, pid, token, process = exited_owner().split(":")
    started, boot, ns = process.split(".")
    assert not owner_gone(f"elsewhere-{host}:{pid}:{token}:{process}")
    other_boot = "0" * 12 if boot != "0" * 12 else "1" * 12
    assert not owner_gone(f"{host}:{pid}:{token}:{started}.{other_boot}.{ns}")
    assert not owner_gone(f"{host}:{pid}:{token}:{started}.{boot}.{int(ns or 0) + 1}")
    assert not owner_gone(f"{host}:{pid}:{token}")  # before owner ids named their process
    assert not owner_gone("")
    assert not owner_gone("gone:1:x")


def test_l7_owner_here_is_this_host_only() -> None:
    mine = new_owner_id()
    assert owner_here(mine)
    assert owner_here(exited_owner())
    host, pid, token, process = mine.split(":")
    assert not owner_here(f"elsewhere-{host}:{pid}:{token}:{process}")
    assert not owner_here(f"{host}:{pid}:{token}")


def test_l7_an_owner_whose_process_cannot_be_looked_at_is_not_gone() -> None:
    """Out of file descriptors (a loaded server at its limit), ``/proc`` cannot be read:
    that says nothing about the owner, which is alive and must not be judged gone."""
    import resource

    mine = new_owner_id()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    opened: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 4, hard))
        try:
            while True:
                opened.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass  # EMFILE: no descriptor left
        assert not owner_gone(mine)
    finally:
        for fd in opened:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not owner_gone(mine)
