"""mainspring where much more of POSIX is missing (as on Windows): the demo, the runtime on
SQLite, the command and FileStore's refusal.

Each case runs in a fresh interpreter with POSIX-only pieces taken away before mainspring
is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What Windows' os and signal modules lack (of what could plausibly be used), taken away.
_STRIP = """
import os, signal, sys
sys.modules["fcntl"] = None
for name in ("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_DIRECTORY", "pread", "pwrite",
             "fchmod", "getuid", "geteuid", "getgid", "fork", "killpg", "getpgid", "setsid",
             "uname", "getloadavg", "sync", "statvfs", "mkfifo", "chown", "lchown"):
    if hasattr(os, name):
        delattr(os, name)
for name in ("SIGKILL", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGUSR1", "SIGUSR2", "SIGCHLD"):
    if hasattr(signal, name):
        delattr(signal, name)
for name in ("pwd", "grp", "resource", "termios"):
    sys.modules[name] = None
"""


def _run(
    body: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", _STRIP + body, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_the_durable_demo_runs_where_there_is_no_sigkill(tmp_path: Path) -> None:
    """``mainspring demo`` uses the SQLite store only, so it is meant to work without fcntl;
    but it kills worker 1 with ``proc.send_signal(signal.SIGKILL)``, and Windows' signal
    module has no SIGKILL: an AttributeError traceback, exit 1, after worker 1 started.
    Fixed: ``proc.kill()`` (TerminateProcess on Windows, SIGKILL on POSIX). Here, on Linux
    without the constant, ``Popen.kill`` stands in for Windows' TerminateProcess."""
    done = _run(
        "import subprocess\n"
        "subprocess.Popen.kill = lambda self: os.kill(self.pid, 9)\n"
        "from mainspring.cli import main\nsys.exit(main(['demo', '--store-dir', sys.argv[1]]))",
        str(tmp_path / "demo"),
    )
    assert "AttributeError" not in done.stderr, done.stderr[-600:]
    assert done.returncode == 0


def test_import_sqlite_runtime_cli_and_filestore_refusal(tmp_path: Path) -> None:
    body = r"""
import json
import anyio
import mainspring as ms
from mainspring.cli import main
from mainspring.storage import open_store

where = sys.argv[1]
out = {}

async def inc(x=0):
    return x + 1

async def go():
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="inc"),))
    async with ms.open_runtime(tools={"inc": inc}) as rt:  # the default store, in home
        out["default"] = (await (await rt.start("g", plan, execution_id="ex-1")).wait()).status
    try:
        async with ms.open_runtime(store=where + "/files", tools={"inc": inc}):
            out["dir"] = "opened?!"
    except ms.StorageError as exc:
        out["dir"] = type(exc).__name__
    try:
        open_store(where + "/files2")
    except ms.StorageError as exc:
        out["open_store"] = type(exc).__name__

anyio.run(go)
import os
os.makedirs(where + "/fs", exist_ok=True)
out["ls"] = main(["ls", "--json"])
out["show"] = main(["show", "ex-1", "--json"])
out["ls_dir"] = main(["ls", "--store", where + "/fs"])
out["ls_dir_json"] = main(["ls", "--json", "--store", where + "/fs"])
print(json.dumps(out))
"""
    done = _run(body, str(tmp_path), env={"MAINSPRING_HOME": str(tmp_path / "home")})
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out == {
        "default": "completed",
        "dir": "StorageError",
        "open_store": "StorageError",
        "ls": 0,
        "show": 0,
        "ls_dir": 5,
        "ls_dir_json": 5,
    }
    assert "Traceback" not in done.stderr
    assert "FileStore needs POSIX file locks" in done.stderr
    assert not (tmp_path / "files").exists()
    assert not (tmp_path / "files2").exists()
