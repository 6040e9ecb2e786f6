"""The public surface: tiers, one namespace per name, no constructors for runtime objects.
(The import rules between layers are in test_layers.py.)"""

from __future__ import annotations

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

NAMESPACES = [
    mainspring,
    mainspring.actors,
    mainspring.supervision,
    mainspring.storage,
    mainspring.executions,
]


def test_every_public_name_lives_in_exactly_one_namespace_and_resolves() -> None:
    seen: dict[str, str] = {}
    for namespace in NAMESPACES:
        names = namespace.__all__
        assert sorted(names) == sorted(set(names)), namespace.__name__
        for name in names:
            assert getattr(namespace, name) is not None, (namespace.__name__, name)
            assert name not in seen, f"{name} is public in {seen[name]} and {namespace.__name__}"
            seen[name] = namespace.__name__


def test_the_top_level_is_short_and_holds_what_most_programs_need() -> None:
    assert len(mainspring.__all__) <= 40
    for name in ("open_system", "Actor", "ActorRef", "cancel_reason", "Pause", "ParentCancel",
                 "open_runtime", "Runtime", "Plan", "PlanStep", "AgentContext",
                 "MainspringError", "ExecutionBusy"):  # fmt: skip
        assert name in mainspring.__all__, name
    for name in ("SqliteStore", "Supervisor", "StepFinished", "Execution", "redact"):
        assert name not in mainspring.__all__, name
        assert not hasattr(mainspring, name), name


def test_import_mainspring_loads_neither_the_durable_layer_nor_the_stores() -> None:
    import subprocess
    import sys

    code = (
        "import sys, mainspring as ms\n"
        "heavy = ('mainspring.executions', 'mainspring.storage', 'mainspring.supervision',\n"
        "         'cattrs', 'orjson', 'sqlite3')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "ms.Runtime\n"
        "print('mainspring.executions' in sys.modules, ms.storage.SqliteStore.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["[]", "True SqliteStore"]


_RESTARTS = """
import anyio, sys, mainspring as ms

class Flaky(ms.Actor):
    async def receive(self, message):
        if message == "boom":
            raise RuntimeError("boom")
        return "pong"

async def main():
    async with ms.open_system() as system:  # nothing else of mainspring imported first
        ref = await system.spawn(Flaky, name="f", restart="transient")
        try:
            await ref.ask("boom")
        except ms.ActorFailed:
            pass
        print(await ref.ask("ping", timeout=60))  # ActorDeadError had nobody restarted it

anyio.run(main)
"""


def test_open_system_from_a_bare_import_has_the_root_supervisor() -> None:
    # supervision loads on first use: ms.open_system must still restart by rule
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _RESTARTS], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["pong"]  # restarted after its crash


def test_running_programs_lives_in_executions() -> None:
    for name in ("run_program", "ProgramResult", "ProgramFailed"):
        assert name in mainspring.executions.__all__, name
        assert name not in mainspring.__all__, name
    assert issubclass(mainspring.executions.ProgramFailed, mainspring.MainspringError)


def test_an_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        mainspring.Nope  # noqa: B018
    assert "Runtime" in dir(mainspring)


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


@pytest.mark.parametrize(
    "cls",
    [
        mainspring.ActorRef,
        mainspring.supervision.SupervisorRef,
        mainspring.ActorSystem,
        mainspring.Timer,
    ],
    ids=lambda c: c.__name__,
)
def test_runtime_made_objects_cannot_be_constructed_and_say_where_they_come_from(
    cls: Any,
) -> None:
    with pytest.raises(TypeError) as info:
        cls()
    home = next(ns.__name__ for ns in NAMESPACES if cls.__name__ in ns.__all__)
    assert str(info.value).startswith(f"{home}.{cls.__name__} has no public constructor")


def test_a_class_not_exported_at_the_top_is_named_by_its_public_package() -> None:
    from mainspring.actors._util import public_name

    hidden = type("Hidden", (), {"__module__": "mainspring.supervision._ref"})
    assert public_name(hidden) == "mainspring.supervision.Hidden"


def test_every_public_error_reports_its_public_home_and_other_classes_their_source() -> None:
    import inspect

    errors = 0
    for namespace in NAMESPACES:
        for name in namespace.__all__:
            value = getattr(namespace, name)
            if not isinstance(value, type):
                continue
            if issubclass(value, BaseException):
                errors += 1
                assert value.__module__ == namespace.__name__, (name, value.__module__)
                assert repr(value) == f"<class '{namespace.__name__}.{name}'>"
            elif name in ("ActorRef", "Runtime", "SqliteStore", "Supervisor", "Actor"):
                assert f"class {name}" in inspect.getsource(value)  # IPython's ??, Sphinx
    assert errors >= 15


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
