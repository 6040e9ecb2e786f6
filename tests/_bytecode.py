"""Where the run's bytecode goes: a pytest plugin that ``addopts`` loads (``-p
tests._bytecode``) before the plugins installed in the environment.

It has to come first. pytest rewrites the asserts of every module of an installed plugin's
distribution as it imports it: Hypothesis's (about 120 modules) and pytest-trio's, in every
pytest process (the run's, each xdist worker, the inner runs of the loop guard's tests). With
``PYTHONDONTWRITEBYTECODE`` set (as on CI) and no cache directory chosen yet, none of that was
kept, so each process rewrote and compiled them again: about 1.5 s of CPU a process. A
``conftest.py`` loads only after those plugins.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path


def _share_bytecode() -> None:
    """Compile the library, the tests and the test plugins once, not once per process and
    per run.

    The suite starts hundreds of Python processes (the command, crash tests, workers,
    programs), each importing mainspring: from source that costs about 0.25 s of CPU a
    process, and each xdist worker rewrites and compiles every test module (about 9 s of CPU
    apiece). Where the environment forbids writing bytecode beside the sources
    (``PYTHONDONTWRITEBYTECODE``, as on CI), the run keeps it elsewhere: in the project's own
    virtualenv when the tests run from one inside the checkout (``.venv/pycache``: later runs,
    and ``.ci/run``'s later steps, start warm; it goes with the virtualenv), else in a
    directory of the run's own, removed when the run ends. Every process of the run, xdist's
    workers included, reads and writes it; a stale entry is never used (Python and pytest
    check each source's size and time).
    """
    if not sys.dont_write_bytecode or sys.pycache_prefix is not None:
        return
    shared = os.environ.get(_PYCACHE)
    if shared is None:  # the first process of the run: xdist's workers inherit the variable
        venv = Path(sys.prefix).resolve()
        if sys.prefix != sys.base_prefix and venv.is_relative_to(_ROOT):
            shared = str(venv / "pycache")
            os.makedirs(shared, mode=0o700, exist_ok=True)
        else:
            shared = tempfile.mkdtemp(prefix="mainspring-tests-pycache-")
            atexit.register(shutil.rmtree, shared, ignore_errors=True)
        os.environ[_PYCACHE] = shared
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = shared
    sys.pycache_prefix = shared
    sys.dont_write_bytecode = False


_ROOT = Path(__file__).resolve().parent.parent
_PYCACHE = "MAINSPRING_TESTS_PYCACHE"
_share_bytecode()
