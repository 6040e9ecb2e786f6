"""A directory in which this process cannot create anything, for the tests of stores kept
in a read-only place (the file itself readable and writable, its directory not).

Not as root, ``chmod 0o500`` does it. As root, permission bits stop nothing (root may write
anywhere), so the directory is made immutable instead (``chattr +i``: no entry can be
created, removed or renamed in it, even by root, while the files in it stay writable). The
kernel then refuses with EPERM where a user meets EACCES; SQLite names the two differently
(``SQLITE_CANTOPEN``, ``SQLITE_READONLY_DIRECTORY``), and both are handled. Where neither
works (root without the capability to set the flag, a file system without it) the test is
skipped, never run against a directory that is not read-only: a probe checks that a file
really cannot be created before the test goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _as_root() -> bool:
    geteuid = getattr(os, "geteuid", None)
    return geteuid is not None and geteuid() == 0


def _refuses_new_files(directory: Path) -> bool:
    probe = directory / ".probe-read-only"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return True
    os.unlink(probe)
    return False


@contextlib.contextmanager
def read_only_directory(directory: Path) -> Iterator[Path]:
    """``directory`` refusing new entries while the block runs; as it was afterwards."""
    if os.name != "posix":
        pytest.skip("a read-only directory is made with POSIX permissions")
    if not _as_root():
        mode = directory.stat().st_mode & 0o7777
        os.chmod(directory, 0o500)
        try:
            if not _refuses_new_files(directory):
                pytest.skip("chmod 0o500 does not stop this process from creating files")
            yield directory
        finally:
            os.chmod(directory, mode)
        return
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("running as root, where chmod stops nothing, and chattr is not installed")
    done = subprocess.run([chattr, "+i", str(directory)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"running as root, and chattr +i is refused: {done.stderr.decode()!r}")
    try:
        if not _refuses_new_files(directory):
            pytest.skip("chattr +i does not stop this process from creating files")
        yield directory
    finally:
        subprocess.run([chattr, "-i", str(directory)], capture_output=True, check=True)
