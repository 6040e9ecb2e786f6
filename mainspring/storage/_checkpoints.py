"""Checkpoints and drift: what the workspace looked like, and whether it changed (E6, R6).

A checkpoint records, for the files a plan's step inputs name (inside the workspace root
only), their sha256; a hash of the configuration; the skills' versions; the git HEAD (read
from ``.git`` without running git); and hashes of the external tools' declarations. On resume,
:func:`reconcile` compares it with the workspace now. What was absent at capture (no
repository, no HEAD yet, no configuration) is recorded as absent, so its appearing is drift;
only a dimension the checkpoint's format did not record yet (None, not listed as absent)
compares as unchanged.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from ._codec import sha256_hex
from ._errors import TooLarge
from ._ids import MAX_PATH
from ._platform import O_BINARY, O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK
from ._records import AbsentDimension, Checkpoint, Plan
from ._vector import Vector

__all__ = [
    "Reconciliation",
    "capture_checkpoint",
    "hash_files",
    "reconcile",
]

_MAX_GIT_FILE = 64 * 1024  # HEAD, a ref or packed-refs: small files, read bounded (X2)


@attrs.frozen(kw_only=True)
class Reconciliation:
    """Whether the workspace drifted from a checkpoint, and a sentence per difference."""

    drifted: bool
    reasons: tuple[str, ...] = ()


def _strings(value: Any) -> Iterator[str]:
    # The strings a step input holds, anywhere: in lists, tuples, sets (sorted: the same
    # order in every process) and dicts, keys included (a key may be the path a step reads).
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, set | frozenset):
        yield from sorted(text for item in value for text in _strings(item))


def _named_files(root: Path, plan: Plan | None, paths: Iterable[str] = ()) -> set[str]:
    """Paths (relative to root) that step inputs name, or ``paths`` lists, and that are
    regular files inside root."""
    texts = [text for step in plan.steps for text in _strings(step.input)] if plan else []
    texts.extend(paths)
    if not texts:
        return set()
    base = root.resolve()
    found: set[str] = set()
    for text in texts:
        if not text or "\0" in text or len(text) > MAX_PATH:
            continue
        candidate = (base / text).resolve()
        if not candidate.is_relative_to(base):  # never outside the workspace
            continue
        if candidate.is_file():
            found.add(candidate.relative_to(base).as_posix())
    return found


def hash_files(root: str | os.PathLike[str], paths: Iterable[str]) -> dict[str, str]:
    """sha256 of each of ``paths`` (relative to ``root``) that is a regular file inside it,
    keyed by its normalised relative path; a path that is missing (or leads out) is left
    out, so its appearing later is drift (R8)."""
    base = Path(root)
    return {name: _file_sha256(base / name) for name in sorted(_named_files(base, None, paths))}


#: Files larger than this are not hashed: capture fails closed with TooLarge (X2).
MAX_HASHED_FILE = 1 << 30


def _open_no_symlink(path: Path) -> int:
    """Open ``path`` for reading, never through a symlink (it could lead out of the
    workspace). Where open() cannot refuse one (no O_NOFOLLOW), it is refused beforehand."""
    if not O_NOFOLLOW and path.is_symlink():
        raise OSError(f"{path} is a symlink")
    return os.open(path, os.O_RDONLY | O_BINARY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    fd = _open_no_symlink(path)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_HASHED_FILE:
            raise TooLarge(f"workspace file {path.name}", size, MAX_HASHED_FILE)
        read = 0
        for chunk in iter(lambda: handle.read(1 << 20), b""):  # streamed: memory stays bounded
            read += len(chunk)
            if read > MAX_HASHED_FILE:
                raise TooLarge(f"workspace file {path.name}", read, MAX_HASHED_FILE)
            digest.update(chunk)
    return digest.hexdigest()


def _read_small(path: Path) -> str | None:
    # Never through a symlink (it could lead out of the workspace), never more than 64 KiB.
    try:
        fd = _open_no_symlink(path)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        data = handle.read(_MAX_GIT_FILE + 1)
    if len(data) > _MAX_GIT_FILE:
        return None
    return data.decode("utf-8", "replace")


_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # sha1 or sha256 object names
_REF = re.compile(r"refs/[A-Za-z0-9._/-]{1,200}")


def _named_dir(base: Path, text: str | None) -> Path | None:
    # A directory a git pointer file names ("gitdir: ..." or a commondir), relative to base.
    where = (text or "").strip()
    if not where or "\0" in where or len(where) > MAX_PATH:
        return None
    named = base / where
    return named if named.is_dir() else None


def _git_dirs(root: Path) -> tuple[Path, Path] | Literal["git", "unknown"]:
    """Where ``root``'s repository keeps HEAD and where it keeps refs (the same directory
    but in a linked worktree); ``git`` when there is no repository (or ``.git`` is a
    symlink); ``unknown`` when a ``.git`` file names a git directory that cannot be found."""
    git = root / ".git"
    if git.is_symlink():
        return "git"
    if git.is_dir():
        return git, git
    if not git.exists():
        return "git"
    # A worktree's or a submodule's .git is a file: "gitdir: <path>", relative to root.
    first = (_read_small(git) or "").split("\n", 1)[0]
    if not first.startswith("gitdir:"):
        return "unknown"
    gitdir = _named_dir(root, first[len("gitdir:") :])
    if gitdir is None:
        return "unknown"
    common = gitdir
    if (gitdir / "commondir").exists():  # a linked worktree: refs live in the main one
        named = _named_dir(gitdir, _read_small(gitdir / "commondir"))
        if named is None:
            return "unknown"
        common = named
    return gitdir, common


def _resolve_head(gitdir: Path, common: Path) -> str | None:
    head = (_read_small(gitdir / "HEAD") or "").strip()
    if not head.startswith("ref: "):
        return head if _COMMIT.fullmatch(head) else None
    ref = head[5:].strip()
    if _REF.fullmatch(ref) is None or ".." in ref.split("/"):
        return None
    for where in dict.fromkeys((gitdir, common)):  # per-worktree refs first, then shared
        value = (_read_small(where / ref) or "").strip()
        if _COMMIT.fullmatch(value):
            return value
    for line in (_read_small(common / "packed-refs") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref and _COMMIT.fullmatch(parts[0]):
            return parts[0]
    return None


def _git_state(root: Path) -> tuple[str | None, AbsentDimension | None]:
    """The commit HEAD points at, or why there is none: ``git`` (no repository),
    ``git_head`` (no commit yet, or not what git writes), None with no commit when the
    repository a ``.git`` file names cannot be resolved (unknown: not compared, R6)."""
    dirs = _git_dirs(root)
    if dirs == "git":
        return None, "git"
    if dirs == "unknown":
        return None, None
    head = _resolve_head(*dirs)
    return head, (None if head is not None else "git_head")


def git_head(root: Path) -> str | None:
    """The commit HEAD points at, read from ``root/.git`` without running git.

    ``.git`` is a directory, or in a linked worktree or a submodule a file naming one
    (``gitdir: <path>``; a worktree's refs are in the directory its ``commondir`` names).
    None without a repository, or if anything there is not what git writes (a symlinked
    ``.git``, a ref outside ``refs/``, a HEAD that is not an object name): what is recorded is
    always an object name, never other file content.
    """
    return _git_state(root)[0]


def capture_checkpoint(
    root: str | os.PathLike[str],
    plan: Plan | None,
    skills: Mapping[str, str] | None = None,
    completed_steps: tuple[str, ...] = (),
    tool_hashes: Mapping[str, str] | None = None,
    *,
    config: Any = None,
    at: float | None = None,
    paths: Iterable[str] = (),
) -> Checkpoint:
    """The workspace as it is now, for the given plan and the extra ``paths`` (relative to
    the root; see the module docstring)."""
    base = Path(root)
    files = {name: _file_sha256(base / name) for name in sorted(_named_files(base, plan, paths))}
    head, missing = _git_state(base)
    absent: list[AbsentDimension] = [missing] if missing is not None else []
    if config is None:
        absent.append("config")
    return Checkpoint(
        at=time.time() if at is None else at,
        plan_version=plan.version if plan is not None else 0,
        git_head=head,
        file_hashes=files,
        config_hash=sha256_hex(config) if config is not None else None,
        skill_versions=dict(skills) if skills is not None else None,
        # A run's completed steps (a Vector) are kept as they are: the checkpoint then
        # refers to the execution's own, stored as a reference (E6), never copied.
        completed_steps=completed_steps
        if isinstance(completed_steps, tuple | Vector)
        else tuple(completed_steps),
        tool_hashes=dict(tool_hashes) if tool_hashes is not None else None,
        absent=tuple(absent),
    )


def _compare(kind: str, before: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    reasons = []
    for name in sorted(before.keys() | now.keys()):
        if name not in now:
            reasons.append(f"{kind} {name} was removed")
        elif name not in before:
            reasons.append(f"{kind} {name} was added")
        elif before[name] != now[name]:
            reasons.append(f"{kind} {name} changed")
    return reasons


def reconcile(
    checkpoint: Checkpoint,
    root: str | os.PathLike[str],
    plan: Plan | None,
    skills: Mapping[str, str] | None = None,
    tool_hashes: Mapping[str, str] | None = None,
    *,
    config: Any = None,
    paths: Iterable[str] = (),
) -> Reconciliation:
    """Compare ``checkpoint`` with the workspace now; drift if anything it recorded changed,
    including something it recorded as absent that is there now. ``paths`` are files
    checked besides those the plan names (the ones a task's inner steps declared)."""
    now = capture_checkpoint(
        root, plan, skills, (), tool_hashes, config=config, at=0.0, paths=paths
    )
    absent = checkpoint.absent
    reasons: list[str] = []
    if checkpoint.file_hashes is not None:
        reasons += _compare("file", checkpoint.file_hashes, now.file_hashes or {})
    if checkpoint.config_hash is not None and checkpoint.config_hash != now.config_hash:
        reasons.append("the configuration changed")
    elif "config" in absent and now.config_hash is not None:
        reasons.append("a configuration appeared")
    if checkpoint.skill_versions is not None:
        reasons += _compare("skill", checkpoint.skill_versions, now.skill_versions or {})
    if checkpoint.git_head is not None and checkpoint.git_head != now.git_head:
        reasons.append("git HEAD moved")
    elif "git" in absent and "git" not in now.absent:
        reasons.append("a git repository appeared")
    elif "git_head" in absent and now.git_head is not None:
        reasons.append("git HEAD appeared")
    if checkpoint.tool_hashes is not None:
        current = now.tool_hashes or {}
        for name, digest in sorted(checkpoint.tool_hashes.items()):
            if name not in current:
                reasons.append(f"tool {name} vanished")
            elif current[name] != digest:
                reasons.append(f"tool {name} changed")
    return Reconciliation(drifted=bool(reasons), reasons=tuple(reasons))
