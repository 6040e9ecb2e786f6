"""git HEAD in a linked worktree or a submodule, where ``.git`` is a file (R6)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import mainspring as ms

PLAN = ms.Plan(id="p", goal="g", version=1, steps=())


def _capture(root: Path) -> ms.storage._seam.Checkpoint:
    return ms.storage._seam.capture_checkpoint(root, PLAN)


def _reasons(checkpoint: ms.storage._seam.Checkpoint, root: Path) -> tuple[str, ...]:
    return ms.storage._seam.reconcile(checkpoint, root, PLAN).reasons


@pytest.fixture
def worktree(tmp_path: Path) -> tuple[Path, Path]:
    """A main repository and a linked worktree of it, laid out as `git worktree add` does."""
    main = tmp_path / "main" / ".git"
    gitdir = main / "worktrees" / "ws"
    (main / "refs" / "heads").mkdir(parents=True)
    gitdir.mkdir(parents=True)
    (main / "HEAD").write_text("ref: refs/heads/main\n")
    (main / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    (gitdir / "HEAD").write_text("ref: refs/heads/feature\n")
    (gitdir / "commondir").write_text("../..\n")
    (main / "refs" / "heads" / "feature").write_text("b" * 40 + "\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git").write_text("gitdir: ../main/.git/worktrees/ws\n")  # relative, as git may
    return ws, main


def test_R6_a_worktree_head_is_read_through_its_gitdir_and_commondir(
    worktree: tuple[Path, Path],
) -> None:
    ws, main = worktree
    cp = _capture(ws)
    assert cp.git_head == "b" * 40  # the worktree's branch, not the main checkout's
    assert cp.absent == ("config",)
    assert _reasons(cp, ws) == ()
    (main / "refs" / "heads" / "feature").write_text("c" * 40 + "\n")  # a commit there
    assert _reasons(cp, ws) == ("git HEAD moved",)
    (main / "refs" / "heads" / "feature").unlink()  # `git pack-refs`: the same commit
    (main / "packed-refs").write_text(
        "# pack-refs with: peeled\n" + "c" * 40 + " refs/heads/feature\n"
    )
    assert ms.storage._seam.capture_checkpoint(ws, PLAN).git_head == "c" * 40


def test_R6_a_submodule_gitdir_without_commondir_keeps_its_own_refs(tmp_path: Path) -> None:
    modules = tmp_path / "super" / ".git" / "modules" / "sub"
    (modules / "refs" / "heads").mkdir(parents=True)
    (modules / "HEAD").write_text("ref: refs/heads/main\n")
    ws = tmp_path / "sub"
    ws.mkdir()
    (ws / ".git").write_text(f"gitdir: {modules}\n")
    cp = _capture(ws)
    assert (cp.git_head, cp.absent) == (None, ("git_head", "config"))  # no commit yet
    (modules / "refs" / "heads" / "main").write_text("d" * 40)
    assert _reasons(cp, ws) == ("git HEAD appeared",)


@pytest.mark.parametrize(
    "content",
    ["gitdir: ../nowhere\n", "not a pointer\n", "gitdir:\n", "gitdir: a\0b\n", ""],
)
def test_R6_a_gitdir_that_cannot_be_resolved_is_unknown_not_absent(
    tmp_path: Path, content: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git").write_text(content)
    cp = _capture(ws)
    # Unknown: neither "no repository" (whose appearing would be drift) nor a HEAD.
    assert (cp.git_head, cp.absent) == (None, ("config",))
    assert _reasons(cp, ws) == ()


def test_R6_a_worktree_whose_commondir_is_gone_is_unknown(worktree: tuple[Path, Path]) -> None:
    ws, main = worktree
    cp = _capture(ws)
    (main / "worktrees" / "ws" / "commondir").write_text("../../../elsewhere\n")
    now = _capture(ws)
    assert (now.git_head, now.absent) == (None, ("config",))
    assert _reasons(cp, ws) == ("git HEAD moved",)  # a known HEAD that can no longer be read


def test_R6_a_git_file_appearing_where_there_was_no_repository_is_drift(
    worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, _ = worktree
    (ws / ".git").rename(tmp_path / "saved")
    cp = _capture(ws)
    assert cp.absent == ("git", "config")
    (tmp_path / "saved").rename(ws / ".git")
    assert _reasons(cp, ws) == ("a git repository appeared",)


def test_X1_a_worktree_head_records_only_object_names(worktree: tuple[Path, Path]) -> None:
    ws, main = worktree
    gitdir = main / "worktrees" / "ws"
    (tmp := ws.parent / "secret.txt").write_text("AWS_SECRET=hunter2hunter2")
    for head in (f"ref: {tmp}", "ref: refs/../../../../secret.txt", "hunter2"):
        (gitdir / "HEAD").write_text(head)
        assert _capture(ws).git_head is None
    (gitdir / "HEAD").unlink()
    (gitdir / "HEAD").symlink_to(tmp)
    assert _capture(ws).git_head is None
    (ws / ".git").unlink()
    (ws / ".git").symlink_to(tmp)  # a symlinked .git is not this workspace's repository
    assert _capture(ws).absent == ("git", "config")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_R6_a_real_git_worktree_commit_is_drift(tmp_path: Path) -> None:
    def git(*args: str, cwd: Path) -> str:
        env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull,
               "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.environ.get("PATH", "")}  # fmt: skip
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    main = tmp_path / "main"
    main.mkdir()
    git("init", "-q", "-b", "main", cwd=main)
    git("commit", "-q", "--allow-empty", "-m", "one", cwd=main)
    ws = tmp_path / "ws"
    git("worktree", "add", "-q", "-b", "feature", str(ws), cwd=main)
    cp = _capture(ws)
    assert cp.git_head == git("rev-parse", "HEAD", cwd=ws)
    git("commit", "-q", "--allow-empty", "-m", "two", cwd=ws)
    assert _reasons(cp, ws) == ("git HEAD moved",)
    git("pack-refs", "--all", cwd=main)
    assert _capture(ws).git_head == git("rev-parse", "HEAD", cwd=ws)
