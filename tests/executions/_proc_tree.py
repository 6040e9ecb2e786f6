"""A process tree for the subprocess tests: a shell that forks shells that fork again, some
ignoring SIGTERM, and one orphan re-parented away from the tree, each writing its pid to a
file; and how a test knows every one of them is gone."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

#: The tree writes this many pids: the root, two middles, and per middle a plain leaf, a leaf
#: that ignores SIGTERM and an orphan whose parent exits at once.
TREE_SIZE = 9

_ROOT = """\
echo $$ >> "$1"
sh "$2" "$1" plain &
sh "$2" "$1" stubborn &
wait
"""

_MIDDLE = """\
if [ "$2" = stubborn ]; then trap '' TERM; fi
echo $$ >> "$1"
sh -c 'echo $$ >> "$1"; exec sleep 1000' leaf "$1" &
sh -c 'trap "" TERM; echo $$ >> "$1"; exec sleep 1000' stubborn-leaf "$1" &
sh -c 'sh -c "echo \\$\\$ >> \\"\\$1\\"; exec sleep 1000" orphan "$1" &' orphaner "$1"
wait
"""


class Tree:
    """The argv of a tree that records its pids in ``pids``."""

    def __init__(self, where: Path) -> None:
        self.pids_file = where / "pids"
        root, middle = where / "root.sh", where / "middle.sh"
        root.write_text(_ROOT)
        middle.write_text(_MIDDLE)
        self.argv = ["sh", str(root), str(self.pids_file), str(middle)]

    def pids(self) -> list[int]:
        try:
            text = self.pids_file.read_text()
        except FileNotFoundError:
            return []
        return [int(line) for line in text.split()]

    async def started(self) -> list[int]:
        """Every pid of the tree, once all have been written (polled; a hang guard)."""
        with anyio.fail_after(60):
            # Other processes write the file: there is no event to wait for.
            while len(pids := self.pids()) < TREE_SIZE:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        return pids


def alive(pid: int, session: int) -> bool:
    """Whether ``pid`` is a live process of the tree's ``session``: it exists, is not a
    zombie, and is still the tree's (a pid reused by another process is not)."""
    if Path("/proc/self/stat").exists():
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes()
        except FileNotFoundError:
            return False
        fields = raw[raw.rfind(b")") + 2 :].split()
        return fields[0] not in (b"Z", b"X") and int(fields[3]) == session
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def survivors(pids: list[int]) -> list[int]:
    """The pids of a tree (its root first) still alive."""
    return [pid for pid in pids if alive(pid, pids[0])]
