"""capture_checkpoint / reconcile: what counts as drift (R6), inside the workspace only."""

from __future__ import annotations

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
