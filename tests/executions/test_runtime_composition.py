"""Layout: no class is assembled from mixins spread over modules; a large class holds its
collaborators (DESIGN.md, Layout). Read from the imported classes, not from a list."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import mainspring
import mainspring.executions
from mainspring.actors import Actor

#: The folders of executions/ done by job. (The run core's flat modules and ``_workers/``
#: join once their rewrite lands.)
FOLDERS = ("_facade", "_memory", "_programs", "_rules", "_run", "_steps", "_workers")


def _modules() -> list[str]:
    names = []
    for folder in FOLDERS:
        package = importlib.import_module(f"mainspring.executions.{folder}")
        names += [m.name for m in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")]
    # The scripted worker host moved to mainspring.testing: held to the same rule there.
    names.append("mainspring.testing._scripted")
    return sorted(names)


def test_the_runtime_inherits_nothing_and_defines_every_public_method_itself() -> None:
    assert mainspring.Runtime.__bases__ == (object,)
    public = [name for name in dir(mainspring.Runtime) if not name.startswith("_")]
    assert {"events", "close_streams", "workers", "repair_worker", "finalize"} <= set(public)
    for name in public:
        assert name in vars(mainspring.Runtime), f"Runtime.{name} is inherited"


@pytest.mark.parametrize("module", _modules())
def test_no_class_is_stitched_from_classes_of_other_modules(module: str) -> None:
    """A base from another mainspring module is allowed only for the kernel's ``Actor`` (its
    subclassing contract) and for errors (one exception tree, STYLE 7)."""
    loaded = importlib.import_module(module)
    for cls in vars(loaded).values():
        if not inspect.isclass(cls) or cls.__module__ != module:
            continue
        for base in cls.__bases__:
            if not base.__module__.startswith("mainspring.") or base.__module__ == module:
                continue
            if base is Actor or issubclass(base, BaseException):
                continue
            pytest.fail(f"{module}.{cls.__qualname__} inherits {base.__module__}.{base.__name__}")
