"""capture_checkpoint / reconcile: what counts as drift (R6), inside the workspace only."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import attrs
import pytest

import mainspring as ms


def plan(*inputs: dict[str, object]) -> ms.Plan:
    steps = tuple(ms.PlanStep(id=f"s{i}", tool="read", input=inp) for i, inp in enumerate(inputs))
    return ms.Plan(id="p", goal="g", version=3, steps=steps)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "data").mkdir(parents=True)
    (root / "notes.md").write_text("first draft")
    (root / "data" / "x.csv").write_text("a,b\n1,2\n")
    (tmp_path / "secret.txt").write_text("outside the workspace")
    return root


def test_R6_capture_hashes_the_files_step_inputs_name_inside_the_root(workspace: Path) -> None:
    p = plan(
        {"path": "notes.md"},
        {"files": ["data/x.csv", "missing.txt"], "note": "not a file"},
        {"path": "../secret.txt"},
    )
    cp = ms.storage._seam.capture_checkpoint(
        workspace, p, {"summarize": "1.2"}, ("s0",), {"read": "h1"}
    )
    assert cp.file_hashes is not None
    assert sorted(cp.file_hashes) == ["data/x.csv", "notes.md"]  # never ../secret.txt
    assert cp.plan_version == 3
    assert cp.completed_steps == ("s0",)
    assert cp.git_head is None  # no repository
    assert (
        ms.storage._seam.reconcile(cp, workspace, p, {"summarize": "1.2"}, {"read": "h1"}).drifted
        is False
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda ws: (ws / "notes.md").write_text("second draft"), "file notes.md changed"),
        (lambda ws: (ws / "notes.md").unlink(), "file notes.md was removed"),
        (lambda ws: (ws / "new.md").write_text("hi"), "file new.md was added"),
    ],
)
def test_R6_a_file_added_changed_or_removed_is_drift(
    workspace: Path, change: object, reason: str
) -> None:
    p = plan({"path": "notes.md"}, {"path": "new.md"})
    cp = ms.storage._seam.capture_checkpoint(workspace, p)
    change(workspace)  # type: ignore[operator]
    result = ms.storage._seam.reconcile(cp, workspace, p)
    assert result.drifted
    assert reason in result.reasons


def test_R6_config_skills_and_tools(workspace: Path) -> None:
    p = plan()
    cp = ms.storage._seam.capture_checkpoint(
        workspace, p, {"a": "1", "b": "2"}, tool_hashes={"search": "h1"}, config={"model": "x"}
    )
    same = ms.storage._seam.reconcile(
        cp, workspace, p, {"a": "1", "b": "2"}, {"search": "h1"}, config={"model": "x"}
    )
    assert not same.drifted
    moved = ms.storage._seam.reconcile(cp, workspace, p, {"a": "2"}, {}, config={"model": "y"})
    assert moved.reasons == (
        "the configuration changed",
        "skill a changed",
        "skill b was removed",
        "tool search vanished",
    )
    changed_tool = ms.storage._seam.reconcile(
        cp, workspace, p, {"a": "1", "b": "2"}, {"search": "h2"}, config={"model": "x"}
    )
    assert changed_tool.reasons == ("tool search changed",)


def test_R6_a_dimension_the_checkpoint_lacks_compares_as_unchanged(workspace: Path) -> None:
    p = plan({"path": "notes.md"})
    # As a checkpoint written before absences were recorded: None means "not recorded".
    cp = attrs.evolve(
        ms.storage._seam.capture_checkpoint(workspace, p), file_hashes=None, absent=()
    )
    (workspace / "notes.md").write_text("changed")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("a" * 40)
    assert not ms.storage._seam.reconcile(
        cp, workspace, p, {"new": "1"}, {"tool": "h"}, config=1
    ).drifted


def test_R6_an_old_format_checkpoint_still_parses_and_compares_unchanged(
    workspace: Path,
) -> None:
    raw = {"at": 1.0, "plan_version": 1, "git_head": None, "file_hashes": {},
           "config_hash": None, "skill_versions": None, "completed_steps": [],
           "tool_hashes": None}  # fmt: skip
    cp = ms.storage._seam.structure(raw, ms.storage._seam.Checkpoint)
    assert cp.absent == ()
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("b" * 40)
    assert not ms.storage._seam.reconcile(cp, workspace, plan(), config={"now": "set"}).drifted


def _git(root: Path, head: str | None) -> None:
    (root / ".git" / "refs" / "heads").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    if head is not None:
        (root / ".git" / "refs" / "heads" / "main").write_text(head + "\n")


def test_R6_a_git_repository_that_appears_is_drift(workspace: Path) -> None:
    cp = ms.storage._seam.capture_checkpoint(workspace, plan())
    assert cp.git_head is None
    assert cp.absent == ("git", "config")
    _git(workspace, None)  # `git init`: a repository, no commit yet
    assert ms.storage._seam.reconcile(cp, workspace, plan()).reasons == (
        "a git repository appeared",
    )
    again = ms.storage._seam.capture_checkpoint(workspace, plan())
    assert again.absent == ("git_head", "config")
    assert not ms.storage._seam.reconcile(again, workspace, plan()).drifted


def test_R6_a_git_head_that_appears_is_drift(workspace: Path) -> None:
    _git(workspace, None)
    cp = ms.storage._seam.capture_checkpoint(workspace, plan())
    _git(workspace, "d" * 40)  # the first commit
    assert ms.storage._seam.reconcile(cp, workspace, plan()).reasons == ("git HEAD appeared",)


def test_R6_a_configuration_that_appears_is_drift(workspace: Path) -> None:
    cp = ms.storage._seam.capture_checkpoint(workspace, plan())
    result = ms.storage._seam.reconcile(cp, workspace, plan(), config={"model": "x"})
    assert result.reasons == ("a configuration appeared",)
    assert not ms.storage._seam.reconcile(cp, workspace, plan()).drifted


def test_R6_a_referenced_file_that_appears_is_drift(workspace: Path) -> None:
    p = plan({"path": "later.md"})
    cp = ms.storage._seam.capture_checkpoint(workspace, p)
    assert cp.file_hashes == {}
    (workspace / "later.md").write_text("now here")
    assert ms.storage._seam.reconcile(cp, workspace, p).reasons == ("file later.md was added",)


def test_R8_extra_paths_are_hashed_and_compared_like_named_files(workspace: Path) -> None:
    cp = ms.storage._seam.capture_checkpoint(workspace, plan(), paths=["data/x.csv", "out.txt"])
    assert cp.file_hashes is not None
    assert sorted(cp.file_hashes) == ["data/x.csv"]
    assert ms.storage._seam.hash_files(workspace, ["data/x.csv"]) == {
        "data/x.csv": cp.file_hashes["data/x.csv"]
    }
    (workspace / "out.txt").write_text("written later")
    result = ms.storage._seam.reconcile(cp, workspace, plan(), paths=["data/x.csv", "out.txt"])
    assert result.reasons == ("file out.txt was added",)


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../x", "a/../../x", "a\0b", "a\\b"])
def test_X1_a_declared_path_must_stay_inside_the_workspace(bad: str) -> None:
    with pytest.raises(ValueError, match="path"):
        ms.storage._seam.check_relative_path(bad)
    assert ms.storage._seam.check_relative_path("data/x.csv") == "data/x.csv"


def test_R6_absent_dimensions_are_validated() -> None:
    with pytest.raises(ValueError, match="absent"):
        ms.storage._seam.Checkpoint(at=0.0, plan_version=1, absent=("git", "git"))  # type: ignore[arg-type]
    with pytest.raises(ms.storage.RecordError):
        ms.storage._seam.structure({"at": 0.0, "plan_version": 1, "absent": ["files"]},
                             ms.storage._seam.Checkpoint)  # fmt: skip


def test_R6_git_head_from_a_ref_or_packed_refs(workspace: Path) -> None:
    git = workspace / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    p = plan()
    cp = ms.storage._seam.capture_checkpoint(workspace, p)
    assert cp.git_head == "a" * 40
    (git / "refs" / "heads" / "main").unlink()
    (git / "packed-refs").write_text("# pack-refs\n" + "b" * 40 + " refs/heads/main\n")
    result = ms.storage._seam.reconcile(cp, workspace, p)
    assert result.reasons == ("git HEAD moved",)
    (git / "HEAD").write_text("c" * 40)  # detached
    assert ms.storage._seam.capture_checkpoint(workspace, p).git_head == "c" * 40


def test_X1_git_head_never_reads_outside_the_workspace(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET=hunter2hunter2")
    git = workspace / ".git"
    git.mkdir()
    p = plan()
    for head in (f"ref: {secret}", "ref: refs/../../../secret.txt", "not an object name"):
        (git / "HEAD").write_text(head)
        assert ms.storage._seam.capture_checkpoint(workspace, p).git_head is None
    (git / "HEAD").unlink()
    (git / "HEAD").symlink_to(secret)
    assert ms.storage._seam.capture_checkpoint(workspace, p).git_head is None
    outside = tmp_path / "other-repo"
    outside.mkdir()
    (outside / "HEAD").write_text("d" * 40)
    (git / "HEAD").unlink()
    git.rmdir()
    git.symlink_to(outside)  # a .git that leads elsewhere is not this workspace's
    assert ms.storage._seam.capture_checkpoint(workspace, p).git_head is None


def test_X1_files_reached_through_symlinks_out_of_the_root_are_not_hashed(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")
    cp = ms.storage._seam.capture_checkpoint(workspace, plan({"path": "link.txt"}))
    assert cp.file_hashes == {}


def test_R6_files_named_in_sets_and_dict_keys_are_checkpointed(workspace: Path) -> None:
    # Sets are storable inputs (E10), and a dict may be keyed by the paths it describes.
    p = plan(
        {"files": {"notes.md", ("data/x.csv",)}, "frozen": frozenset({"missing.txt"})},
        {"by_path": {"data/x.csv": "read", ("notes.md", 1): None}},
    )
    assert sorted(ms.storage._seam.capture_checkpoint(workspace, p).file_hashes or {}) == [
        "data/x.csv",
        "notes.md",
    ]
    only_keys = plan({"by_path": {"notes.md": 1}})
    cp = ms.storage._seam.capture_checkpoint(workspace, only_keys)
    (workspace / "notes.md").write_text("edited")
    assert ms.storage._seam.reconcile(cp, workspace, only_keys).reasons == (
        "file notes.md changed",
    )


# ----------------------------------------------------------------------
# git HEAD in a linked worktree or a submodule, where ``.git`` is a file (R6).

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
