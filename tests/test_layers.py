"""The layers, read from the source: no module imports another package's private module but
its one internal door (``<package>._seam``), and dependencies point inward only
(actors <- supervision, storage <- executions <- events, executions <- ui <- cli)."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "mainspring"

#: Root-level private helpers that belong to no layer: the one id rule (actor names and
#: record ids), the table of the public surface's tiers and redaction's text rule.
SHARED = {"_ids", "_public", "_redaction"}

#: What each package may import from mainspring (besides itself and SHARED).
ALLOWED: dict[str, set[str]] = {
    "actors": set(),
    "supervision": {"actors"},
    "storage": {"actors"},
    "executions": {"actors", "supervision", "storage"},
    # the run events: executions' event classes, through its door, and nothing else
    "events": {"executions"},
    "cli": {"actors", "supervision", "storage", "executions", "events", "_demos", "ui"},
    # the web view: the top layer with cli, which serves it (``mainspring ui``)
    "ui": {"actors", "supervision", "storage", "executions"},
    "_demos": {"actors", "supervision", "storage", "executions", "events"},
    "testing": {"actors", "supervision", "storage", "executions"},
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


#: The one private module of a package that another package may import: its internal door.
DOOR = "_seam"


def _refusal(own: str, name: str) -> str | None:
    """Why package ``own`` may not import module ``name`` (absolute), or None if it may."""
    parts = name.split(".")[1:]  # without "mainspring"
    if not parts or parts[0] == own:
        return None
    if parts[0] in SHARED and len(parts) == 1:
        return None
    if parts[0] not in ALLOWED[own]:
        return f"{own} may not depend on {parts[0]}"
    inner = parts[1:]
    if inner[:1] == [DOOR] and len(inner) == 1:
        return None  # the door, and only the door itself (not a module behind it)
    if any(p.startswith("_") for p in inner):
        return f"a private module (import it from mainspring.{parts[0]}.{DOOR})"
    return None


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_module_of_another_package_but_its_door_and_dependencies_point_inward(
    path: pathlib.Path,
) -> None:
    own = path.relative_to(ROOT).parts[0]
    for line, name in _imports(path):
        refusal = _refusal(own, name)
        assert refusal is None, f"{path.relative_to(ROOT)}:{line} imports {name}: {refusal}"


def test_the_rule_allows_the_door_and_refuses_every_other_private_module() -> None:
    assert _refusal("executions", "mainspring.storage._seam") is None
    assert _refusal("cli", "mainspring.executions._seam") is None
    assert _refusal("executions", "mainspring.storage") is None
    assert _refusal("executions", "mainspring.storage.Execution") is None
    assert _refusal("executions", "mainspring.storage._records") is not None
    assert _refusal("executions", "mainspring.storage._records.Execution") is not None
    assert _refusal("cli", "mainspring.executions._run.events") is not None
    assert _refusal("cli", "mainspring.storage._seam_extra") is not None
    assert _refusal("storage", "mainspring.executions._seam") is not None  # inward only
    assert _refusal("actors", "mainspring.supervision._seam") is not None
    assert _refusal("ui", "mainspring.cli") is not None  # the command serves the view
    assert _refusal("ui", "mainspring.executions._facade.runtime") is not None
    assert _refusal("storage", "mainspring.ui") is not None
    assert _refusal("events", "mainspring.executions._seam") is None
    assert _refusal("events", "mainspring.executions._run.events") is not None
    assert _refusal("events", "mainspring.storage") is not None
    assert _refusal("events", "mainspring.actors._seam") is not None
    assert _refusal("executions", "mainspring.events") is not None  # inward only
    assert _refusal("ui", "mainspring.events") is not None


def test_the_events_namespace_imports_executions_door_and_nothing_else() -> None:
    # mainspring.events re-exports the run event classes: it reaches them through
    # executions' door only (and the shared table of the public surface's tiers).
    modules = sorted((ROOT / "events").rglob("*.py"))
    assert [p.name for p in modules] == ["__init__.py"]
    imported = {name for path in modules for _, name in _imports(path)}
    assert imported == {"mainspring.executions._seam", "mainspring._public"}


def test_upper_packages_reach_storage_and_executions_internals_only_through_the_door() -> None:
    doors = set()
    for path in _modules():
        own = path.relative_to(ROOT).parts[0]
        for _, name in _imports(path):
            parts = name.split(".")
            if len(parts) > 2 and parts[1] != own and parts[2] == DOOR:
                doors.add((own, parts[1]))
    assert {("executions", "storage"), ("cli", "storage"), ("ui", "storage")} <= doors


def test_the_rule_sees_relative_imports() -> None:
    example = ROOT / "executions" / "_facade" / "runtime.py"
    names = {name for _, name in _imports(example)}
    assert any(name.startswith("mainspring.storage") for name in names)


#: Inside executions/, the folders by job and what each may import from its siblings: an
#: acyclic order, pure rules at the bottom, the facade on top. A step reports to its run and
#: the run spawns its steps and holds the worker board, so the run sits above both. Telemetry
#: (spans, metrics) sits low: the steps, the run and the facade report to it.
EXECUTIONS = ROOT / "executions"
FOLDER_ALLOWED: dict[str, set[str]] = {
    "_rules": set(),
    "_programs": {"_rules"},
    "_memory": {"_rules"},
    "_telemetry": {"_rules"},
    "_steps": {"_rules", "_programs", "_memory", "_telemetry"},
    "_workers": {"_rules", "_programs", "_memory", "_telemetry", "_steps"},
    "_run": {"_rules", "_programs", "_memory", "_telemetry", "_steps", "_workers"},
    "_facade": {"_rules", "_programs", "_memory", "_telemetry", "_steps", "_workers", "_run"},
}


def _folder_modules() -> list[pathlib.Path]:
    return sorted(p for p in EXECUTIONS.rglob("*.py") if p.parent != EXECUTIONS)


def test_every_executions_folder_has_a_place_in_the_order() -> None:
    folders = {p.name for p in EXECUTIONS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(FOLDER_ALLOWED)


@pytest.mark.parametrize("path", _folder_modules(), ids=lambda p: str(p.relative_to(EXECUTIONS)))
def test_executions_folders_import_only_the_folders_below_them(path: pathlib.Path) -> None:
    own = path.relative_to(EXECUTIONS).parts[0]
    for line, name in _imports(path):
        parts = name.split(".")
        if parts[:2] != ["mainspring", "executions"] or len(parts) < 3:
            continue
        where = f"executions/{path.relative_to(EXECUTIONS)}:{line} imports {name}"
        target = parts[2]
        if target == own:
            continue
        assert target in FOLDER_ALLOWED, f"{where}: executions' own modules live in a folder"
        assert target in FOLDER_ALLOWED[own], f"{where}: {own} may not depend on {target}"


#: storage/ by job: the journal in one folder, the contract and each backend in another.
STORAGE = ROOT / "storage"
BACKENDS = ("file", "sqlite", "postgres")
#: What each backend folder may import of the other backends: FileStore keeps its memory in
#: a SQLite sidecar (SQLite memory) and shares SQLite's layout version; the others none.
BACKEND_ALLOWED: dict[str, set[str]] = {"file": {"sqlite"}, "sqlite": set(), "postgres": set()}


def test_storage_has_the_journal_and_a_folder_per_backend() -> None:
    assert (STORAGE / "_journal" / "__init__.py").is_file()
    assert (STORAGE / "_backends" / "contract.py").is_file()
    assert (STORAGE / "_backends" / "compare_and_set.py").is_file()
    for backend in BACKENDS:
        folder = STORAGE / "_backends" / backend
        assert (folder / "__init__.py").is_file(), backend
        for job in ("store", "memory", "evidence"):
            assert (folder / f"{job}.py").is_file(), f"{backend}/{job}.py"


def test_no_backend_or_journal_module_is_left_at_the_top_of_storage() -> None:
    top = {p.stem for p in STORAGE.glob("*.py")}
    backend = {"_file", "_frames", "_sqlite", "_postgres", "_backend"}
    backend |= {"_memory_sqlite", "_memory_local"}
    journal = {"_journal", "_journal_keys", "_fold", "_history", "_commit_events"}
    assert not top & (backend | journal)
    assert not [name for name in top if name.startswith("_pg_")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backend_imports_no_other_backend(backend: str) -> None:
    package = f"mainspring.storage._backends.{backend}"
    for path in sorted((STORAGE / "_backends" / backend).rglob("*.py")):
        for line, name in _imports(path):
            parts = name.split(".")
            if parts[:3] != ["mainspring", "storage", "_backends"] or len(parts) < 4:
                continue
            other = parts[3]
            if other in BACKENDS and not name.startswith(package):
                assert other in BACKEND_ALLOWED[backend], f"{path.name}:{line} imports {name}"


def test_the_journal_imports_no_backend() -> None:
    for path in sorted((STORAGE / "_journal").rglob("*.py")):
        for line, name in _imports(path):
            assert not name.startswith("mainspring.storage._backends"), f"{path.name}:{line}"


#: tests/ mirrors mainspring/: a suite is named after the module it tests, never after the
#: review that found its regressions (a regression is named after its invariant instead).
TESTS = ROOT.parent / "tests"


def test_no_test_file_is_named_after_a_review() -> None:
    named_for_a_review = sorted(
        str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if "review" in p.name
    )
    assert named_for_a_review == []


def test_the_executions_and_storage_suites_are_folders_that_mirror_the_code() -> None:
    # tests/executions/<folder>/ for mainspring/executions/_<folder>/, and the storage
    # backends' suites beside their backends.
    for folder in ("facade", "rules", "run", "steps", "workers", "memory", "programs"):
        assert (ROOT / "executions" / f"_{folder}").is_dir(), folder
        assert any((TESTS / "executions" / folder).glob("test_*.py")), folder
    for backend in ("file", "sqlite", "postgres"):
        assert (ROOT / "storage" / "_backends" / backend).is_dir(), backend
        assert any((TESTS / "storage" / "backends" / backend).glob("test_*.py")), backend
    assert not list((TESTS / "executions").glob("test_*.py"))  # no flat suites left


def test_every_property_test_scales_its_examples_with_the_profile() -> None:
    # tests/_examples.py: the default run draws a quarter of what a property test asks for
    # and CI's thorough profile every one; a bare number above the floor of 10 would draw
    # the thorough count in every run.
    bare = []
    for path in sorted(TESTS.rglob("test_*.py")):
        source = path.read_text()
        if "max_examples" not in source:  # parsed only where it can matter: the scan is cheap
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.keyword) and node.arg == "max_examples":
                value = node.value
                if (
                    isinstance(value, ast.Constant)
                    and isinstance(value.value, int)
                    and value.value > 10
                ):
                    bare.append(f"{path.relative_to(TESTS)}:{value.lineno}")
    assert bare == []
