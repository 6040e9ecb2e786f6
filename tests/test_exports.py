"""The public surface: one place for every name, no constructors for runtime objects."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest

import mainspring
import mainspring._demos
import mainspring.actors
import mainspring.cli
import mainspring.executions
import mainspring.storage
import mainspring.supervision


def test_every_public_name_is_exported_once_and_resolves() -> None:
    assert sorted(mainspring.__all__) == sorted(set(mainspring.__all__))
    for name in mainspring.__all__:
        assert getattr(mainspring, name) is not None, name
    subpackages = [
        mainspring.actors,
        mainspring.supervision,
        mainspring.storage,
        mainspring.executions,
    ]
    for name in mainspring.__all__:
        owners = [pkg.__name__ for pkg in subpackages if name in pkg.__all__]
        assert len(owners) == 1, (name, owners)
        owner = importlib.import_module(owners[0])
        assert getattr(owner, name) is getattr(mainspring, name)


def test_private_modules_are_underscored() -> None:
    for pkg in (
        mainspring.actors,
        mainspring.supervision,
        mainspring.storage,
        mainspring.executions,
        mainspring.cli,
        mainspring._demos,
    ):
        for module in pkgutil.iter_modules(pkg.__path__):
            assert module.name.startswith("_"), f"{pkg.__name__}.{module.name} looks public"


def test_actors_layer_imports_neither_supervision_nor_storage() -> None:
    import pathlib

    root = pathlib.Path(mainspring.actors.__file__).parent
    for path in root.glob("*.py"):
        for line in path.read_text().splitlines():
            if line.startswith(("import ", "from ")):
                assert "supervision" not in line, (path, line)
                assert "storage" not in line, (path, line)


# What the command still needs from other packages' private modules: each waits for a public
# home, and this list only shrinks.
_CLI_PRIVATE_IMPORTS = {
    "from ..storage._backend import holder",
    "from ..storage._codec import unstructure",
    "from ..storage._ids import check_id",
}


def test_the_command_and_demos_use_other_packages_public_names() -> None:
    import pathlib
    import re

    root = pathlib.Path(mainspring.__file__).parent
    found = set()
    for path in [*(root / "cli").glob("*.py"), *(root / "_demos").glob("*.py")]:
        for line in path.read_text().splitlines():
            if re.match(r"from \.\.\w+\._", line):
                found.add(line.split("  #")[0])
    assert found <= _CLI_PRIVATE_IMPORTS, found - _CLI_PRIVATE_IMPORTS


@pytest.mark.parametrize(
    "cls",
    [mainspring.ActorRef, mainspring.SupervisorRef, mainspring.ActorSystem, mainspring.Timer],
    ids=lambda c: c.__name__,
)
def test_runtime_made_objects_cannot_be_constructed(cls: Any) -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        cls()


@pytest.mark.parametrize(
    "cls",
    [mainspring.ActorRef, mainspring.SupervisorRef, mainspring.ActorSystem, mainspring.Timer],
    ids=lambda c: c.__name__,
)
def test_the_refusal_names_the_public_home_not_a_private_module(cls: Any) -> None:
    with pytest.raises(TypeError) as info:
        cls()
    assert str(info.value).startswith(f"mainspring.{cls.__name__} has no public constructor")


def test_a_class_not_exported_at_the_top_is_named_by_its_public_package() -> None:
    from mainspring.actors._util import public_name

    hidden = type("Hidden", (), {"__module__": "mainspring.supervision._ref"})
    assert public_name(hidden) == "mainspring.supervision.Hidden"


def test_kernel_and_supervision_errors_report_the_top_level_as_their_module() -> None:
    owners = (mainspring.actors, mainspring.supervision)
    errors = [
        getattr(mainspring, name)
        for name in mainspring.__all__
        if any(name in pkg.__all__ for pkg in owners)
        and isinstance(getattr(mainspring, name), type)
        and issubclass(getattr(mainspring, name), Exception)
    ]
    assert len(errors) >= 8
    for error in errors:
        assert error.__module__ == "mainspring", error
        assert repr(error) == f"<class 'mainspring.{error.__name__}'>"


def test_supervision_uses_only_the_kernels_public_namespace() -> None:
    import pathlib

    root = pathlib.Path(mainspring.supervision.__file__).parent
    for path in root.glob("*.py"):
        for line in path.read_text().splitlines():
            if line.startswith(("import ", "from ")):
                assert "actors._" not in line, (path, line)
                assert "mainspring._" not in line, (path, line)


def test_an_actor_outside_a_system_says_so() -> None:
    class Lonely(mainspring.Actor):
        async def receive(self, message: Any) -> Any:
            return message

    with pytest.raises(RuntimeError, match="not running in an actor system"):
        _ = Lonely().ref


def test_every_public_name_has_a_docstring() -> None:
    for name in mainspring.__all__:
        obj = getattr(mainspring, name)
        if isinstance(obj, int | str):
            continue
        assert (obj.__doc__ or "").strip(), name


def test_every_public_method_and_property_of_a_public_class_has_a_docstring() -> None:
    import inspect

    missing = []
    for name in mainspring.__all__:
        obj = getattr(mainspring, name)
        if not inspect.isclass(obj):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_"):
                continue
            if isinstance(member, property):
                function = member.fget
            elif isinstance(member, staticmethod | classmethod):
                function = member.__func__
            elif inspect.isfunction(member):
                function = member
            else:
                continue
            if not (getattr(function, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    assert missing == []
