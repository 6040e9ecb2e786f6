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
    cp = ms.storage.capture_checkpoint(workspace, p, {"summarize": "1.2"}, ("s0",), {"read": "h1"})
    assert cp.file_hashes is not None
    assert sorted(cp.file_hashes) == ["data/x.csv", "notes.md"]  # never ../secret.txt
    assert cp.plan_version == 3
    assert cp.completed_steps == ("s0",)
    assert cp.git_head is None  # no repository
    assert (
        ms.storage.reconcile(cp, workspace, p, {"summarize": "1.2"}, {"read": "h1"}).drifted
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
    cp = ms.storage.capture_checkpoint(workspace, p)
    change(workspace)  # type: ignore[operator]
    result = ms.storage.reconcile(cp, workspace, p)
    assert result.drifted
    assert reason in result.reasons


def test_R6_config_skills_and_tools(workspace: Path) -> None:
    p = plan()
    cp = ms.storage.capture_checkpoint(
        workspace, p, {"a": "1", "b": "2"}, tool_hashes={"search": "h1"}, config={"model": "x"}
    )
    same = ms.storage.reconcile(
        cp, workspace, p, {"a": "1", "b": "2"}, {"search": "h1"}, config={"model": "x"}
    )
    assert not same.drifted
    moved = ms.storage.reconcile(cp, workspace, p, {"a": "2"}, {}, config={"model": "y"})
    assert moved.reasons == (
        "the configuration changed",
        "skill a changed",
        "skill b was removed",
        "tool search vanished",
    )
    changed_tool = ms.storage.reconcile(
        cp, workspace, p, {"a": "1", "b": "2"}, {"search": "h2"}, config={"model": "x"}
    )
    assert changed_tool.reasons == ("tool search changed",)


def test_R6_a_dimension_the_checkpoint_lacks_compares_as_unchanged(workspace: Path) -> None:
    p = plan({"path": "notes.md"})
    cp = attrs.evolve(ms.storage.capture_checkpoint(workspace, p), file_hashes=None)
    (workspace / "notes.md").write_text("changed")
    assert not ms.storage.reconcile(cp, workspace, p, {"new": "1"}, {"tool": "h"}, config=1).drifted


def test_R6_git_head_from_a_ref_or_packed_refs(workspace: Path) -> None:
    git = workspace / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    p = plan()
    cp = ms.storage.capture_checkpoint(workspace, p)
    assert cp.git_head == "a" * 40
    (git / "refs" / "heads" / "main").unlink()
    (git / "packed-refs").write_text("# pack-refs\n" + "b" * 40 + " refs/heads/main\n")
    result = ms.storage.reconcile(cp, workspace, p)
    assert result.reasons == ("git HEAD moved",)
    (git / "HEAD").write_text("c" * 40)  # detached
    assert ms.storage.capture_checkpoint(workspace, p).git_head == "c" * 40


def test_X1_git_head_never_reads_outside_the_workspace(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET=hunter2hunter2")
    git = workspace / ".git"
    git.mkdir()
    p = plan()
    for head in (f"ref: {secret}", "ref: refs/../../../secret.txt", "not an object name"):
        (git / "HEAD").write_text(head)
        assert ms.storage.capture_checkpoint(workspace, p).git_head is None
    (git / "HEAD").unlink()
    (git / "HEAD").symlink_to(secret)
    assert ms.storage.capture_checkpoint(workspace, p).git_head is None
    outside = tmp_path / "other-repo"
    outside.mkdir()
    (outside / "HEAD").write_text("d" * 40)
    (git / "HEAD").unlink()
    git.rmdir()
    git.symlink_to(outside)  # a .git that leads elsewhere is not this workspace's
    assert ms.storage.capture_checkpoint(workspace, p).git_head is None


def test_X1_files_reached_through_symlinks_out_of_the_root_are_not_hashed(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")
    cp = ms.storage.capture_checkpoint(workspace, plan({"path": "link.txt"}))
    assert cp.file_hashes == {}
