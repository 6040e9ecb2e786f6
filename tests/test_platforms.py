"""mainspring imports and runs where POSIX-only pieces are missing (Windows): only FileStore
needs ``flock``, and it says so; SQLite keeps working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run in a fresh interpreter: ``fcntl`` and the POSIX-only open() flags are taken away before
# mainspring is imported, as they are missing on Windows.
_WITHOUT_POSIX = """
import os, sys
sys.modules["fcntl"] = None  # `import fcntl` now raises ImportError
for flag in ("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC"):
    if hasattr(os, flag):
        delattr(os, flag)

import anyio
import mainspring as ms

where = sys.argv[1]

async def main() -> None:
    async def inc(**input):
        return input["x"] + 1

    plan = ms.Plan(id="p", goal="g", steps=(
        ms.PlanStep(id="a", tool="inc", input={"x": 1}),
        ms.PlanStep(id="b", tool="inc", input={"x": 2}, depends_on=("a",)),
    ))
    async with ms.open_runtime(store=where + "/runs.sqlite3", tools={"inc": inc}) as rt:
        result = await (await rt.start("g", plan)).wait()
    print("sqlite", result.status, result.outputs["b"])

anyio.run(main)
for read_only in (False, True):
    try:
        ms.storage.FileStore(where + "/files", read_only=read_only)
    except ms.StorageError as exc:
        print("filestore", type(exc).__name__, exc)
"""


def test_without_fcntl_sqlite_works_and_filestore_says_why_not(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_POSIX, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "sqlite completed 3"
    for line in lines[1:]:
        assert line.startswith("filestore StorageError FileStore needs POSIX file locks")
        assert f"which {sys.platform} does not have" in line
        assert "use SqliteStore" in line
    assert len(lines) == 3
    assert not (tmp_path / "files").exists()  # refused before anything was made
