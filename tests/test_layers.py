"""The layers, read from the source: no module imports another package's private module, and
dependencies point inward only (actors <- supervision, storage <- executions <- cli)."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "mainspring"

#: Root-level private helpers that belong to no layer: the one id rule (actor names and
#: record ids) and the table of the public surface's tiers.
SHARED = {"_ids", "_public"}

#: What each package may import from mainspring (besides itself and SHARED).
ALLOWED: dict[str, set[str]] = {
    "actors": set(),
    "supervision": {"actors"},
    "storage": {"actors"},
    "executions": {"actors", "supervision", "storage"},
    "cli": {"actors", "supervision", "storage", "executions", "_demos"},
    "_demos": {"actors", "supervision", "storage", "executions"},
}


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """Absolute ``mainspring...`` module names that ``path`` imports, with line numbers."""
    package = path.relative_to(ROOT.parent).with_suffix("").parts[:-1]  # the module's package
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join((*base, node.module)) if node.module else ".".join(base)
            else:
                target = node.module or ""
            names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "mainspring"]


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in ROOT.rglob("*.py") if p.parent != ROOT)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_module_of_another_package_and_dependencies_point_inward(
    path: pathlib.Path,
) -> None:
    own = path.relative_to(ROOT).parts[0]
    for line, name in _imports(path):
        parts = name.split(".")[1:]  # without "mainspring"
        if not parts or parts[0] == own:
            continue
        where = f"{path.relative_to(ROOT)}:{line} imports {name}"
        if parts[0] in SHARED and len(parts) == 1:
            continue
        assert parts[0] in ALLOWED[own], f"{where}: {own} may not depend on {parts[0]}"
        assert not any(p.startswith("_") for p in parts[1:]), f"{where}: a private module"


def test_the_rule_sees_relative_imports() -> None:
    example = ROOT / "executions" / "_facade" / "runtime.py"
    names = {name for _, name in _imports(example)}
    assert any(name.startswith("mainspring.storage") for name in names)
